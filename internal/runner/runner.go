// Package runner runs a set of investigators over one window and turns
// what they saw into one report: start them side by side, wait, collect
// every one's window, merge, and only then detach.
//
// The order matters on a sick host. Detaching waits for the kernel's RCU
// grace periods (one per link, unbounded when RCU itself is stalled), so
// the report is assembled, and written by the caller, before anything is
// detached; Close then detaches every investigator at once so that those
// waits overlap. Collecting is bounded too: an investigator that has not
// concluded CollectTimeout after the window ends is reported as such and
// left behind, rather than holding the whole report hostage.
package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/wolf-investigator/wolf/internal/diagnose"
	"github.com/wolf-investigator/wolf/internal/fact"
	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/human"
	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/kallsyms"
	"github.com/wolf-investigator/wolf/internal/overhead"
	"github.com/wolf-investigator/wolf/internal/pace"
	"github.com/wolf-investigator/wolf/internal/probekit"
	"github.com/wolf-investigator/wolf/internal/sysstat"
)

// DefaultCollectTimeout bounds the time from the window's end to the
// report, per investigator, on an ordinary machine; it stretches by how
// much slower this one is (pace.Scaled: an emulated CPU reads maps and
// /proc several times more slowly).
const DefaultCollectTimeout = 5 * time.Second

// Config is one run.
type Config struct {
	// Report is the report to fill: its header (version, kernel, host,
	// command, start) is the caller's.
	Report        *finding.Report
	Investigators []investigator.Investigator
	Options       investigator.Options
	Duration      time.Duration
	// Audit runs every Auditor among the investigators (static checks).
	Audit bool
	// Checklist runs doctor's system checklist over the same window.
	Checklist bool
	// Progress, when set, is told the fraction of the window done, now and
	// then. It must not block.
	Progress func(done float64)
	// CollectTimeout bounds each investigator's Collect after the window;
	// 0 means DefaultCollectTimeout.
	CollectTimeout time.Duration
	// MaxCPUPct is the budget of wolf's BPF programs, in percent of one
	// CPU (--max-cpu), shared by every investigator (probekit's Budget);
	// 0 means none.
	MaxCPUPct float64
}

// Run is a finished window: its report, the investigators that failed, and
// the sessions still attached until Close.
type Run struct {
	Report *finding.Report
	Errors []error
	// Facts are every investigator's typed facts of the window, merged:
	// what the report's diagnoses were joined from.
	Facts *fact.Set

	closeOnce sync.Once
	sessions  []*slot
}

// slot is one investigator's session and the state of its last Collect.
type slot struct {
	name    string
	session investigator.Session
	done    chan struct{} // closed when Collect has returned (or never ran)
	// restarted is closed when the session's window has begun again
	// (investigator.Restarter), or at once when it is not restarted.
	restarted chan struct{}
}

// Start attaches every investigator, waits cfg.Duration (or until ctx
// ends), collects and assembles the report. It returns when the report is
// complete; the programs stay attached until Close.
func Start(ctx context.Context, cfg Config) *Run {
	rep := cfg.Report
	started := time.Now()
	cpuStart := overhead.CPUTime()
	timeout := cfg.CollectTimeout
	if timeout <= 0 {
		timeout = pace.Scaled(DefaultCollectTimeout)
	}
	r := &Run{Report: rep, Facts: &fact.Set{Self: os.Getpid()}}
	// One read of the kernel's symbols for every investigator of the run.
	ctx = kallsyms.WithCache(ctx)
	if cfg.MaxCPUPct > 0 {
		if b, err := probekit.NewBudget(cfg.MaxCPUPct); err == nil {
			probekit.SetBudget(b)
			defer probekit.SetBudget(nil)
		}
	}

	// Start side by side: loading and verifying is most of the wait.
	slots := make([]*slot, len(cfg.Investigators))
	startErrs := make([]error, len(cfg.Investigators))
	var wg sync.WaitGroup
	for i, inv := range cfg.Investigators {
		wg.Add(1)
		opts := cfg.Options
		opts.Alongside = slices.Clip(opts.Alongside) // appends copy: no goroutine sees another's
		for _, other := range cfg.Investigators {
			if other != inv {
				opts.Alongside = append(opts.Alongside, other.Name())
			}
		}
		go func() {
			defer wg.Done()
			s, err := inv.Start(ctx, opts)
			if err != nil {
				startErrs[i] = err
				return
			}
			slots[i] = &slot{name: inv.Name(), session: s, done: make(chan struct{}), restarted: make(chan struct{})}
		}()
	}
	var audits []finding.Finding
	if cfg.Audit {
		for _, inv := range cfg.Investigators {
			if a, ok := inv.(investigator.Auditor); ok {
				audits = append(audits, a.Audit(ctx)...)
			}
		}
	}
	wg.Wait()
	for _, s := range slots {
		if s != nil {
			r.sessions = append(r.sessions, s)
		}
	}
	attached, cpuAttached := time.Now(), overhead.CPUTime()

	// The window starts once everything is attached: the sessions that
	// measure waits begin theirs again (side by side with the wait, which
	// they do not lengthen), so that the others' loading is not counted,
	// and the checklist starts here too (on an emulated arm64 machine,
	// loading kept both CPUs busy for half a minute: run-queue and CPU
	// pressure warnings about wolf itself).
	restart(ctx, r.sessions)
	var sys *sysstat.Sampler
	if cfg.Checklist {
		var names []string // the investigators watching the window with it
		for _, s := range r.sessions {
			names = append(names, s.name)
		}
		sys = sysstat.Start(ctx, sysstat.Options{Alongside: names})
	}
	opts := cfg.Options
	opts.Duration, opts.Progress = cfg.Duration, cfg.Progress
	investigator.Wait(ctx, opts, time.Now(), 250*time.Millisecond, nil)

	// Collect side by side, each bounded. The window is over, possibly
	// because ctx was cancelled (Ctrl-C): the reads that complete the
	// report get a context of their own.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	// The checklist ends with the window too, side by side with the
	// Collects: their work (seconds on an emulated machine, at wolf's
	// raised priority) is wolf's, not the host's CPU pressure.
	var checklist *sysstat.Result
	sysDone := make(chan struct{})
	go func() {
		defer close(sysDone)
		if sys != nil {
			res := sys.Stop(cctx)
			checklist = &res
		}
	}()
	results := make([]*investigator.Result, len(slots))
	collectErrs := make([]error, len(slots))
	var mu sync.Mutex
	for i, s := range slots {
		if s == nil {
			continue
		}
		go func() {
			defer close(s.done)
			<-s.restarted
			res, err := s.session.Collect(cctx)
			mu.Lock()
			results[i], collectErrs[i] = res, err
			mu.Unlock()
		}()
	}
	allDone := make(chan struct{})
	go func() {
		for _, s := range slots {
			if s != nil {
				<-s.done
			}
		}
		close(allDone)
	}()
	late := time.NewTimer(timeout)
	select {
	case <-allDone:
	case <-late.C:
	}
	late.Stop()
	<-sysDone

	mu.Lock()
	defer mu.Unlock()
	for i, inv := range cfg.Investigators {
		err := startErrs[i]
		if err == nil {
			err = collectErrs[i]
		}
		if err == nil && results[i] == nil {
			err = fmt.Errorf("did not conclude within %v of the window's end (the kernel or /proc is slow to answer); reported without it", timeout)
		}
		if err != nil {
			r.Errors = append(r.Errors, err)
			rep.Errors = append(rep.Errors, fmt.Sprintf("%s: %v", inv.Name(), err))
			continue
		}
		Merge(rep, inv.Name(), results[i])
		r.Facts.Merge(results[i].Facts)
	}
	rep.Findings = append(rep.Findings, audits...)
	if checklist != nil {
		rep.Checklist = append(rep.Checklist, checklist.Checks...)
		rep.Findings = append(rep.Findings, checklist.Findings...)
		for _, n := range checklist.Notes {
			rep.Notes = append(rep.Notes, "system: "+n)
		}
		r.Facts.Merge(checklist.Facts)
	}
	// Investigators run side by side in this one process, and each one's
	// CPU figure is the process's over its window: summed, they would
	// count the same CPU seconds once per investigator.
	cpuEnd := overhead.CPUTime()
	rep.Overhead.CPUSeconds = (cpuEnd - cpuStart).Seconds()
	window(&rep.Overhead, attached.Sub(started), cpuAttached-cpuStart, time.Since(attached), cpuEnd-cpuAttached, cfg.MaxCPUPct)
	rep.Notes = append(rep.Notes, SamplingNotes(rep.Overhead)...)
	finding.Sort(rep.Findings)
	// Join what the investigators found into root-cause chains.
	diagnose.Apply(rep, r.Facts)
	writeFacts(r.Facts)
	rep.DurationS = float64(time.Since(started).Milliseconds()) / 1000
	return r
}

// window fills the report's cost of the window apart from start-up:
// start-up took startup and startupCPU, the window (attach to report) took
// length and windowCPU; budget is --max-cpu.
func window(o *finding.Overhead, startup, startupCPU, length, windowCPU time.Duration, budget float64) {
	o.StartupS = round3(startup.Seconds())
	o.StartupCPUS = round3(startupCPU.Seconds())
	o.WindowCPUS = round3(windowCPU.Seconds())
	if length > 0 {
		o.CPUPct = round3(100 * windowCPU.Seconds() / length.Seconds())
		o.BPFPct = round3(100 * float64(o.BPFRunNs) / float64(length.Nanoseconds()))
	}
	o.BudgetPct = budget
	o.BudgetBit = len(o.Sampled) > 0 || len(o.Shed) > 0
	o.OverBudget = budget > 0 && o.BPFPct > budget
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

// SamplingNotes says, one line per investigator that sampled, that the
// budget made it sample its detail and at what rate, and one per program
// the budget detached, for how long and what was not seen meanwhile.
func SamplingNotes(o finding.Overhead) []string {
	var out []string
	budget := ""
	if o.BudgetPct > 0 {
		budget = fmt.Sprintf(" (%s of one CPU)", human.Percent(o.BudgetPct))
	}
	estimated := map[string][]string{} // investigator: what it timed one in N of
	for _, s := range o.Sampled {
		if s.Estimated {
			estimated[s.Investigator] = append(estimated[s.Investigator], s.What)
		}
	}
	for _, s := range o.Sampled {
		if s.Estimated {
			out = append(out, fmt.Sprintf("%s: over the BPF budget%s with its detail sampled, %s of %s %s were measured, 1 in %s: their counts, sums and histograms are estimates, each measured one standing for those its CPU skipped before it",
				s.Investigator, budget, human.Count(s.Detailed), human.Count(s.Events), s.What, human.Count(uint64(math.Round(1/max(s.Rate, 1e-9))))))
			continue
		}
		exact := "counts, sums and histograms are exact"
		if e := estimated[s.Investigator]; len(e) > 0 {
			exact += " (but for " + strings.Join(e, ", ") + ": estimates)"
		}
		out = append(out, fmt.Sprintf("%s: under the BPF budget%s, %s of %s events got their detail (%s), 1 in %s: %s, the detail is a sample",
			s.Investigator, budget, human.Count(s.Detailed), human.Count(s.Events), s.What, human.Count(uint64(math.Round(1/max(s.Rate, 1e-9)))), exact))
	}
	// Programs detached together (a begin and its end) make one line.
	for i := 0; i < len(o.Shed); {
		s := o.Shed[i]
		targets, whys := []string{s.Target}, []string{s.Why}
		j := i + 1
		for ; j < len(o.Shed) && o.Shed[j].Investigator == s.Investigator && o.Shed[j].DetachedS == s.DetachedS && o.Shed[j].Ongoing == s.Ongoing && o.Shed[j].DutyPct == s.DutyPct; j++ {
			targets, whys = append(targets, o.Shed[j].Target), append(whys, o.Shed[j].Why)
		}
		i = j
		still := ""
		if s.Ongoing {
			still = ", still at the window's end"
		}
		if s.DutyPct > 0 {
			out = append(out, fmt.Sprintf("%s: over the BPF budget%s with its events sampled as far as they go, its programs on %s ran %s of each second (detached %s in all%s): their counts and sums are estimates, each event seen standing for %s",
				s.Investigator, budget, strings.Join(targets, ", "), human.Percent(s.DutyPct), human.Duration(time.Duration(s.DetachedS*float64(time.Second))), still,
				human.Count(uint64(math.Round(100/s.DutyPct)))))
			continue
		}
		out = append(out, fmt.Sprintf("%s: over the BPF budget%s with its detail sampled, its programs on %s were detached for %s%s: %s not seen meanwhile",
			s.Investigator, budget, strings.Join(targets, ", "), human.Duration(time.Duration(s.DetachedS*float64(time.Second))), still, strings.Join(whys, "; ")))
	}
	return out
}

// restart begins the window again of every session that can
// (investigator.Restarter), when more than one investigator was started:
// one investigator alone loads nothing after its own programs are
// attached. A restart that fails leaves that session's window where it
// began, at its own attach.
func restart(ctx context.Context, slots []*slot) {
	for _, s := range slots {
		rs, ok := s.session.(investigator.Restarter)
		if !ok || len(slots) < 2 {
			close(s.restarted)
			continue
		}
		go func() {
			defer close(s.restarted)
			_ = rs.Restart(ctx)
		}()
	}
}

// Merge adds one investigator's result to a report.
func Merge(rep *finding.Report, name string, res *investigator.Result) {
	rep.Findings = append(rep.Findings, res.Findings...)
	rep.Histograms = append(rep.Histograms, res.Histograms...)
	rep.Profiles = append(rep.Profiles, res.Profiles...)
	rep.Timelines = append(rep.Timelines, res.Timelines...)
	if rep.Capabilities == nil {
		rep.Capabilities = map[string]bool{}
	}
	for k, v := range res.Capabilities {
		rep.Capabilities[k] = rep.Capabilities[k] || v
	}
	rep.Overhead.Add(res.Overhead)
	for _, n := range res.Notes {
		rep.Notes = append(rep.Notes, name+": "+n)
	}
}

// Close detaches every investigator, all at once, after waiting for the
// Collects still running. Call it after the report is written.
func (r *Run) Close() {
	r.closeOnce.Do(func() {
		var wg sync.WaitGroup
		for _, s := range r.sessions {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-s.done
				_ = s.session.Close()
			}()
		}
		wg.Wait()
	})
}

// writeFacts writes the window's facts as JSON to $WOLF_FACTS_OUT, when
// set: what the diagnosis stage joined, for whoever asks why a diagnosis
// is (or is not) there. Not part of the JSON contract: the facts' shape
// follows internal/fact.
func writeFacts(s *fact.Set) {
	out := os.Getenv("WOLF_FACTS_OUT")
	if out == "" || s == nil {
		return
	}
	b, err := json.MarshalIndent(s, "", " ")
	if err == nil {
		err = os.WriteFile(out, b, 0o644)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "wolf: WOLF_FACTS_OUT: %v\n", err)
	}
}
