package sysstat

import (
	"fmt"
	"sort"
	"strings"

	"github.com/wolf-investigator/wolf/internal/fact"
	"github.com/wolf-investigator/wolf/internal/finding"
)

// Window is everything sampled between Start and Stop.
type Window struct {
	First, Last Snapshot
	Ticks       []Tick // run-queue samples, the first and last snapshots included
	Kernel      KernelLog
	// Alongside names the investigators that watched the same window
	// (doctor runs them all): advice to run them, or top and pidstat for
	// what sched measured, points at their findings instead.
	Alongside []string
}

// Areas are the checklist's areas, in the order they are reported (the
// order of the 60-second checklist: load, CPUs, memory, pressure, disks,
// network, kernel log).
var Areas = []string{"load", "cpu", "memory", "psi", "disk", "network", "kernel log"}

// Thresholds. They are conservative on purpose: an idle or merely busy
// host must not raise a warning; each one marks a state in which latency
// visibly suffers.
// cpuBusyWarnPct: the whole machine busy (not idle, not iowait), the
// host-cpu saturation's mark.
const cpuBusyWarnPct = fact.HostCPUSaturatedPct

const (
	runqPerCPUWarn      = 2.0  // runnable tasks per CPU, beyond the reader itself, on average
	blockedWarn         = 2.0  // tasks in I/O wait on average, with at least one in every sample
	cpuHotPct           = 95.0 // one CPU busy while the others are not
	iowaitWarnPct       = 20.0 // machine-wide iowait
	softirqWarnPct      = 20.0 // on any one CPU
	hardirqWarnPct      = 20.0 // on any one CPU
	stealWarnPct        = 15.0 // machine-wide
	memAvailWarnPct     = 10.0
	memAvailCritPct     = 5.0
	swapInWarnPerS      = 100.0  // pages swapped in per second
	directScanWarnPerS  = 1000.0 // pages scanned by direct reclaim per second
	psiCPUSomeWarn      = 50.0   // % of the window
	psiMemSomeWarn      = 10.0
	psiMemFullCrit      = 10.0
	psiIOSomeWarn       = 30.0
	psiIOFullWarn       = 10.0
	diskUtilWarnPct     = 90.0
	diskAwaitWarnMs     = 100.0
	diskAwaitMinIOs     = 10 // completed I/Os before an average wait means anything
	netDropsWarnPerS    = 10.0
	tcpRetransWarnPerS  = 10.0
	tcpRetransWarnPct   = 1.0
	tcpCollapseWarnPerS = 10.0
)

// Analyze turns a window into the checklist (one Check per area, in
// Areas order) and findings for what crossed a threshold.
func Analyze(w Window) Result {
	a := &analysis{w: w, dt: w.Last.At.Sub(w.First.At).Seconds()}
	a.load()
	a.cpu()
	a.memory()
	a.psi()
	a.disk()
	a.network()
	a.kernelLog()
	a.res.WindowS = a.dt
	a.pointAtAlongside()
	a.res.Facts = a.facts()
	for _, s := range []Snapshot{w.First, w.Last} {
		names := make([]string, 0, len(s.Errors))
		for n := range s.Errors {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			note := fmt.Sprintf("checklist: could not read %s: %s", n, s.Errors[n])
			if !contains(a.res.Notes, note) {
				a.res.Notes = append(a.res.Notes, note)
			}
		}
	}
	return a.res
}

type analysis struct {
	w   Window
	dt  float64 // seconds
	res Result
}

// check adds the area's line; its severity is the worst of the area's
// findings.
// pointAtAlongside rewrites advice to go and measure what an
// investigator that ran alongside has just measured: "wolf sched" when
// sched's findings are in the same report, "top" and "pidstat" for the CPU
// consumers sched named.
func (a *analysis) pointAtAlongside() {
	if len(a.w.Alongside) == 0 {
		return
	}
	ran := map[string]bool{}
	for _, n := range a.w.Alongside {
		ran[n] = true
	}
	for i := range a.res.Findings {
		f := &a.res.Findings[i]
		var out []string
		for _, r := range f.Remediation {
			out = append(out, alongsideAdvice(r, ran))
		}
		f.Remediation = dedupe(out)
	}
}

// alongsideAdvice is one line of advice, rewritten when an investigator
// that ran alongside measured what it asks for.
func alongsideAdvice(r string, ran map[string]bool) string {
	if name, ok := strings.CutPrefix(r, "wolf "); ok {
		name, _, _ = strings.Cut(name, " ")
		if ran[name] {
			return fmt.Sprintf("wolf %s ran in this window: its findings, and the diagnoses above them, say what it measured", name)
		}
	}
	if ran["sched"] && (strings.Contains(r, "top") || strings.Contains(r, "pidstat")) && !strings.Contains(r, "perf top") {
		return "the CPU consumers are measured in this window: sched's findings name them with their share of the CPUs (per process and thread)"
	}
	return r
}

func dedupe(ss []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

func (a *analysis) check(area, summary string, values map[string]any, fs ...finding.Finding) {
	sev := finding.Info
	for i := range fs {
		fs[i].Investigator = "system"
		if fs[i].Severity > sev && fs[i].Severity != finding.Info {
			sev = fs[i].Severity
		}
		a.res.Findings = append(a.res.Findings, fs[i])
	}
	a.res.Checks = append(a.res.Checks, finding.Check{Area: area, Severity: sev, Summary: summary, Values: values})
}

func (a *analysis) unavailable(area, why string) {
	a.check(area, "unavailable: "+why, nil)
}

func (a *analysis) rate(delta float64) float64 {
	if a.dt <= 0 {
		return 0
	}
	return delta / a.dt
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// sub is a counter delta that never goes negative: counters reset when a
// device or interface is re-created, and iowait is known to step back.
func sub(b, a uint64) float64 {
	if b < a {
		return 0
	}
	return float64(b - a)
}

// selfPct is wolf's own CPU time over the window, in percent of all the
// CPUs' time (as /proc/stat's busy share counts it), or 0 when the
// snapshots do not say (a saved window analysed later).
func (a *analysis) selfPct() float64 {
	d := a.w.Last.SelfCPU - a.w.First.SelfCPU
	if a.w.First.SelfCPU <= 0 || d <= 0 || a.dt <= 0 {
		return 0
	}
	return min(100, 100*d.Seconds()/(a.dt*float64(a.cpuCount())))
}

// selfTipped says whether the CPUs were saturated only with wolf's own
// work: busy past the mark, and under it without wolf. Under emulation
// (qemu without KVM) wolf's start-up and window can take most of two
// CPUs; an idle host must not read as a saturated one because of it.
func (a *analysis) selfTipped(busy float64) bool {
	self := a.selfPct()
	return self > 0 && busy >= cpuBusyWarnPct && busy-self < cpuBusyWarnPct
}

func (a *analysis) cpuCount() int {
	if s := a.w.Last.Stat; s != nil && len(s.CPUs) > 0 {
		return len(s.CPUs)
	}
	if s := a.w.First.Stat; s != nil && len(s.CPUs) > 0 {
		return len(s.CPUs)
	}
	return 1
}

// cpuSelfTipped is selfTipped for the window's whole-machine busy share.
func (a *analysis) cpuSelfTipped() bool {
	ps := CPUPercents(a.w.First.Stat, a.w.Last.Stat)
	return len(ps) > 0 && ps[0].CPU == -1 && a.selfTipped(ps[0].Busy())
}
