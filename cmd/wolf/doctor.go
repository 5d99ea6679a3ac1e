package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/wolf-investigator/wolf/internal/bpfcost"
	"github.com/wolf-investigator/wolf/internal/diagnose"
	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/hung"
	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/locks"
	"github.com/wolf-investigator/wolf/internal/overhead"
	"github.com/wolf-investigator/wolf/internal/reclaim"
	"github.com/wolf-investigator/wolf/internal/sched"
	"github.com/wolf-investigator/wolf/internal/softirq"
)

// investigators lists every live investigator wolf has; doctor runs them
// all. New investigators are added here.
func investigators() []investigator.Investigator {
	return []investigator.Investigator{hung.New(), locks.New(), reclaim.New(), sched.New(), softirq.New(), bpfcost.New()}
}

func newDoctorCmd() *cobra.Command {
	var (
		out      outputFlags
		duration time.Duration
	)
	c := &cobra.Command{
		Use:   "doctor",
		Short: "Run every investigator and the static audit; print ranked findings",
		Long: `doctor is the main job: it runs every investigator concurrently for
--duration, audits the kernel settings they care about, and prints the
findings ranked by severity, or a one-line healthy verdict.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := out.validate(); err != nil {
				return err
			}
			if err := checkDuration(duration); err != nil {
				return err
			}
			if err := requireRoot("wolf doctor"); err != nil {
				return err
			}
			rep, _ := runInvestigators(cmd.Context(), "doctor", investigators(), investigator.Options{Duration: duration}, true, os.Stderr)
			return out.write(cmd.OutOrStdout(), rep)
		},
	}
	out.register(c)
	c.Flags().DurationVarP(&duration, "duration", "d", 10*time.Second, "how long to watch")
	return c
}

// runInvestigators runs invs concurrently and, when audit is set, every
// Auditor among them; one failing investigator is reported, the others
// still count. Progress goes to progress when it is a terminal.
func runInvestigators(ctx context.Context, command string, invs []investigator.Investigator, opts investigator.Options, audit bool, progress *os.File) (*finding.Report, []error) {
	started := time.Now()
	cpuStart := overhead.CPUTime()
	rep := newReport(command, started)
	bar := newProgressBar(progress, opts.Duration, invs)
	defer bar.stop()

	type outcome struct {
		name string
		res  *investigator.Result
		err  error
	}
	results := make([]outcome, len(invs))
	sys := startChecklist(ctx, command)
	var wg sync.WaitGroup
	for i, inv := range invs {
		wg.Add(1)
		go func(i int, inv investigator.Investigator) {
			defer wg.Done()
			o := opts
			o.Progress = bar.update(inv.Name())
			res, err := inv.Run(ctx, o)
			results[i] = outcome{inv.Name(), res, err}
		}(i, inv)
	}
	if audit {
		for _, inv := range invs {
			if a, ok := inv.(investigator.Auditor); ok {
				rep.Findings = append(rep.Findings, a.Audit(ctx)...)
			}
		}
	}
	wg.Wait()
	finishChecklist(ctx, sys, rep)
	bar.stop()
	var errs []error
	for _, o := range results {
		if o.err != nil {
			errs = append(errs, o.err)
			rep.Errors = append(rep.Errors, fmt.Sprintf("%s: %v", o.name, o.err))
			continue
		}
		rep.Findings = append(rep.Findings, o.res.Findings...)
		rep.Histograms = append(rep.Histograms, o.res.Histograms...)
		rep.Profiles = append(rep.Profiles, o.res.Profiles...)
		rep.Timelines = append(rep.Timelines, o.res.Timelines...)
		for k, v := range o.res.Capabilities {
			rep.Capabilities[k] = v
		}
		rep.Overhead.Add(o.res.Overhead)
		for _, n := range o.res.Notes {
			rep.Notes = append(rep.Notes, o.name+": "+n)
		}
	}
	// Investigators run side by side in this one process, and each one's
	// CPU figure is the process's over its window: summed, they would
	// count the same CPU seconds once per investigator.
	rep.Overhead.CPUSeconds = (overhead.CPUTime() - cpuStart).Seconds()
	finding.Sort(rep.Findings)
	// Join what the investigators found into root-cause chains.
	diagnose.Apply(rep)
	rep.DurationS = float64(time.Since(started).Milliseconds()) / 1000
	return rep, errs
}

// progressBar draws one line on a terminal and nothing on a pipe.
type progressBar struct {
	w        io.Writer
	mu       sync.Mutex
	done     map[string]float64
	total    time.Duration
	stopOnce sync.Once
}

func newProgressBar(f *os.File, total time.Duration, invs []investigator.Investigator) *progressBar {
	b := &progressBar{total: total, done: map[string]float64{}}
	if f != nil && isTerminal(f) {
		b.w = f
	}
	for _, inv := range invs {
		b.done[inv.Name()] = 0
	}
	return b
}

func (b *progressBar) update(name string) func(float64) {
	return func(frac float64) {
		if b.w == nil {
			return
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		b.done[name] = frac
		lowest := 1.0
		var names []string
		for n, d := range b.done {
			lowest = min(lowest, d)
			if d < 1 {
				names = append(names, n)
			}
		}
		sort.Strings(names)
		const width = 30
		filled := int(lowest * width)
		fmt.Fprintf(b.w, "\r[%s%s] %3.0f%% of %v  %s\x1b[K", strings.Repeat("#", filled), strings.Repeat(".", width-filled), lowest*100, b.total, strings.Join(names, " "))
	}
}

func (b *progressBar) stop() {
	b.stopOnce.Do(func() {
		if b.w != nil {
			fmt.Fprint(b.w, "\r\x1b[K")
		}
	})
}
