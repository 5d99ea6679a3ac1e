// Package export writes a report's stack aggregations (finding.Profile) in
// the formats other tools read: the folded format of flame graph tools
// (one line per stack, frames outermost first separated by ';', then the
// value) and pprof's protocol buffer, for `go tool pprof` and the many
// viewers that read it.
package export

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/pprof/profile"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/kstack"
)

// Folded writes one profile in the folded format. Frames are shortened to
// their function (kstack.FlameName: offsets and clone suffixes dropped, a
// flame graph merges by function) and the format's separators are kept out
// of names, since a comm or a cgroup path may hold anything. Lines are sorted by value, largest first, so the
// file reads top-down.
func Folded(w io.Writer, p *finding.Profile) error {
	lines := map[string]uint64{}
	for _, s := range p.Stacks {
		frames := make([]string, len(s.Frames))
		for i, f := range s.Frames {
			frames[i] = kstack.FlameName(f)
		}
		if len(frames) == 0 {
			frames = []string{"[no stack]"}
		}
		lines[kstack.FoldedStack(frames)] += s.Value
	}
	keys := slices.Collect(maps.Keys(lines))
	slices.SortFunc(keys, func(a, b string) int {
		if c := cmp.Compare(lines[b], lines[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	for _, k := range keys {
		if _, err := fmt.Fprintf(w, "%s %d\n", k, lines[k]); err != nil {
			return fmt.Errorf("folded %s: %w", p.Name, err)
		}
	}
	return nil
}

// FoldedPath is where the folded file of profile name goes when the user
// asked for base: the profile's name goes before the extension
// ("under.folded" → "under.mmap_lock_profile.folded"), one file per
// profile, because profiles count different things (samples, nanoseconds
// waited, tasks) and one flame graph must not add them up.
func FoldedPath(base, name string) string {
	ext := filepath.Ext(base)
	if ext == "" {
		return base + "." + name + ".folded"
	}
	return strings.TrimSuffix(base, ext) + "." + name + ext
}

// PProf writes every profile into one pprof file. Each profile is a
// sample type of its own (its name and unit: `go tool pprof
// -sample_index=lock_wait_stacks`), its samples carry zero in the other
// types' columns, and its labels become sample labels. Frames are
// functions without addresses: wolf symbolizes kernel stacks itself, and
// pprof then merges by function name as a flame graph does.
func PProf(w io.Writer, profiles []finding.Profile, started time.Time, duration time.Duration) error {
	p := &profile.Profile{
		TimeNanos:     started.UnixNano(),
		DurationNanos: duration.Nanoseconds(),
	}
	for _, pr := range profiles {
		p.SampleType = append(p.SampleType, &profile.ValueType{Type: pr.Name, Unit: pprofUnit(pr.Unit)})
	}
	if len(profiles) > 0 {
		p.DefaultSampleType = profiles[0].Name
	}
	funcs := map[string]*profile.Function{}
	locs := map[string]*profile.Location{}
	location := func(frame string) *profile.Location {
		name := kstack.FlameName(frame)
		if l, ok := locs[name]; ok {
			return l
		}
		fn := &profile.Function{ID: uint64(len(funcs) + 1), Name: name, SystemName: name}
		funcs[name] = fn
		p.Function = append(p.Function, fn)
		l := &profile.Location{ID: uint64(len(locs) + 1), Line: []profile.Line{{Function: fn}}}
		locs[name] = l
		p.Location = append(p.Location, l)
		return l
	}
	for i, pr := range profiles {
		if pr.Unit == "samples" && pr.PeriodNs > 0 && p.PeriodType == nil {
			p.PeriodType = &profile.ValueType{Type: "cpu", Unit: "nanoseconds"}
			p.Period = pr.PeriodNs
		}
		labels := map[string][]string{"profile": {pr.Name}}
		for k, v := range pr.Labels {
			labels[k] = []string{v}
		}
		for _, s := range pr.Stacks {
			values := make([]int64, len(profiles))
			values[i] = int64(s.Value)
			smp := &profile.Sample{Value: values, Label: labels}
			// pprof lists a sample's locations leaf first.
			for j := len(s.Frames) - 1; j >= 0; j-- {
				smp.Location = append(smp.Location, location(s.Frames[j]))
			}
			p.Sample = append(p.Sample, smp)
		}
	}
	if err := p.CheckValid(); err != nil {
		return fmt.Errorf("pprof: %w", err)
	}
	if err := p.Write(w); err != nil {
		return fmt.Errorf("pprof: %w", err)
	}
	return nil
}

// pprofUnit maps wolf's unit names onto pprof's ("nanoseconds", "count"),
// which its tools scale and print.
func pprofUnit(u string) string {
	switch u {
	case "ns":
		return "nanoseconds"
	case "samples", "tasks", "":
		return "count"
	}
	return u
}
