// The psi area: pressure stall information.

package sysstat

import (
	"fmt"
	"math"
	"strings"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/human"
)

func (a *analysis) psi() {
	p0, p1 := a.w.First.PSI, a.w.Last.PSI
	if len(p1) == 0 {
		why := a.w.Last.PSIMissing
		if why == "" {
			why = "no pressure file"
		}
		a.check("psi", "not available: "+why, nil)
		return
	}
	v := map[string]any{}
	var parts []string
	var fs []finding.Finding
	for _, res := range []string{"cpu", "memory", "io"} {
		b, ok1 := p1[res]
		f, ok0 := p0[res]
		if !ok1 || !ok0 {
			continue
		}
		window := a.dt * 1e6
		some := math.Min(100, 100*sub(b.SomeTotalUs, f.SomeTotalUs)/window)
		full := math.Min(100, 100*sub(b.FullTotalUs, f.FullTotalUs)/window)
		v[res+"_some_pct"] = human.Round(some, 2)
		v[res+"_some_avg10_pct"] = b.SomeAvg10
		part := fmt.Sprintf("%s %s", res, human.Percent(some))
		// The system-level cpu "full" line is always zero (some task
		// always runs); it is kept out of the summary.
		if b.HasFull && res != "cpu" {
			v[res+"_full_pct"] = human.Round(full, 2)
			v[res+"_full_avg10_pct"] = b.FullAvg10
			part += "/" + human.Percent(full)
		}
		parts = append(parts, part)
		ev := map[string]any{"some_pct": human.Round(some, 2), "full_pct": human.Round(full, 2), "some_avg10_pct": b.SomeAvg10, "window_s": human.Round(a.dt, 2)}
		switch res {
		case "cpu":
			switch {
			case some >= psiCPUSomeWarn && a.cpuSelfTipped():
				ev["wolf_busy_pct"] = human.Round(a.selfPct(), 1)
				fs = append(fs, psiFinding(res, finding.Info, some, "some", ev,
					"Some runnable task waited for a CPU during that share of the window, on CPUs that only wolf's own work made saturated.",
					[]string{"wolf sched --duration 10s: run-queue latency per task"}))
			case some >= psiCPUSomeWarn:
				fs = append(fs, psiFinding(res, finding.Warning, some, "some", ev,
					"Some runnable task waited for a CPU during that share of the window.",
					[]string{"wolf sched --duration 10s: run-queue latency per task", "find the CPU consumers: top, pidstat 1; cap them with cpu.max"}))
			}
		case "memory":
			switch {
			case full >= psiMemFullCrit:
				fs = append(fs, psiFinding(res, finding.Critical, full, "full", ev,
					"Every non-idle task was stalled on memory (reclaim, swap-in, refaults) during that share of the window: the machine did no work then.",
					[]string{"wolf reclaim --duration 10s: which cgroup reclaims and how efficiently", "wolf locks: mmap_lock held across reclaim (as in \"The case of the vanishing CPU\")"}))
			case some >= psiMemSomeWarn:
				fs = append(fs, psiFinding(res, finding.Warning, some, "some", ev,
					"Some task was stalled on memory (reclaim, swap-in, refaults) during that share of the window.",
					[]string{"wolf reclaim --duration 10s: which cgroup reclaims and how efficiently"}))
			}
		case "io":
			switch {
			case full >= psiIOFullWarn:
				fs = append(fs, psiFinding(res, finding.Warning, full, "full", ev,
					"Every non-idle task was waiting for I/O during that share of the window.",
					[]string{"see the disk area: which device is busy and its await", "wolf hung --duration 10s: tasks stuck in D state and what they wait on"}))
			case some >= psiIOSomeWarn:
				fs = append(fs, psiFinding(res, finding.Warning, some, "some", ev,
					"Some task was waiting for I/O during that share of the window.",
					[]string{"see the disk area: which device is busy and its await", "wolf hung --duration 10s"}))
			}
		}
	}
	a.check("psi", "stalled (some/full): "+strings.Join(parts, ", "), v, fs...)
}

var psiNames = map[string]string{"cpu": "CPU", "memory": "Memory", "io": "I/O"}

func psiFinding(res string, sev finding.Severity, share float64, kind string, ev map[string]any, summary string, rem []string) finding.Finding {
	return finding.Finding{
		ID:        "system.psi-" + res,
		Severity:  sev,
		Title:     fmt.Sprintf("%s pressure: tasks stalled on %s %s of the window (%s)", psiNames[res], res, human.Percent(share), kind),
		Summary:   summary,
		Mechanism: "PSI counts the wall-clock time tasks could not run for lack of a resource (\"some\": at least one task; \"full\": all non-idle tasks at once). It measures lost time directly, whatever the cause.",
		Evidence:  ev,
		Remediation: append(rem,
			fmt.Sprintf("per-cgroup: cat /sys/fs/cgroup/*/%s.pressure to find the cgroup that stalls", res)),
		References: []string{"https://docs.kernel.org/accounting/psi.html"},
	}
}
