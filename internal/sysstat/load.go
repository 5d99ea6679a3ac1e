// The load area: uptime, vmstat r/b.

package sysstat

import (
	"fmt"
	"math"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/human"
)

func (a *analysis) load() {
	l := a.w.Last.Load
	if l == nil {
		a.unavailable("load", "/proc/loadavg unreadable")
		return
	}
	cpus := a.cpuCount()
	v := map[string]any{"load1": l.Load1, "load5": l.Load5, "load15": l.Load15, "cpus": cpus}
	summary := fmt.Sprintf("%.2f %.2f %.2f (%d CPUs)", l.Load1, l.Load5, l.Load15, cpus)
	var fs []finding.Finding
	if n := len(a.w.Ticks); n > 0 {
		var run, blk float64
		runMax, blkMax, blkMin := 0, 0, math.MaxInt
		for _, t := range a.w.Ticks {
			run += float64(t.Running)
			blk += float64(t.Blocked)
			runMax, blkMax, blkMin = max(runMax, t.Running), max(blkMax, t.Blocked), min(blkMin, t.Blocked)
		}
		run /= float64(n)
		blk /= float64(n)
		v["runnable_mean"], v["runnable_max"] = human.Round(run, 2), runMax
		v["blocked_mean"], v["blocked_max"] = human.Round(blk, 2), blkMax
		v["samples"] = n
		summary += fmt.Sprintf(", runnable %s avg %d max, blocked %s", human.Number(run), runMax, human.Number(blk))
		// procs_running counts the reading thread itself, and wolf's
		// threads at least as often as they used a CPU.
		selfCPUs := a.selfPct() / 100 * float64(cpus)
		if selfCPUs > 0 {
			v["wolf_cpus"] = human.Round(selfCPUs, 2)
		}
		if perCPU := (run - 1 - selfCPUs) / float64(cpus); n >= 2 && perCPU >= runqPerCPUWarn {
			fs = append(fs, finding.Finding{
				ID:       "system.run-queue",
				Severity: finding.Warning,
				Title:    fmt.Sprintf("%s runnable tasks per CPU: tasks queue for CPU time", human.Number(perCPU)),
				Summary: fmt.Sprintf("On average %s tasks were runnable on %d CPUs over %.0f s (at most %d); each waited for the others' time slices.",
					human.Number(run), cpus, a.dt, runMax),
				Mechanism: "procs_running counts the tasks running or waiting on a run queue. Beyond one per CPU the rest wait, so scheduling latency grows with the queue length.",
				Evidence:  map[string]any{"runnable_mean": human.Round(run, 2), "runnable_max": runMax, "cpus": cpus, "load1": l.Load1},
				Remediation: []string{
					"wolf sched --duration 10s: run-queue latency per task and migrations",
					"find the CPU consumers: top, or pidstat 1",
					"reduce the work or add CPUs; cap batch jobs with cpu.max in their cgroup",
				},
			})
		}
		if n >= 3 && blk >= blockedWarn && blkMin >= 1 {
			fs = append(fs, finding.Finding{
				ID:        "system.io-blocked",
				Severity:  finding.Warning,
				Title:     fmt.Sprintf("%s tasks waiting for I/O throughout the window", human.Number(blk)),
				Summary:   fmt.Sprintf("At least %d task(s) were in I/O wait in every sample (%s on average, %d at most): they add to the load average without using CPU.", blkMin, human.Number(blk), blkMax),
				Mechanism: "procs_blocked counts tasks sleeping uninterruptibly on block I/O. A steady queue of them means storage is slower than the demand, or a task is stuck.",
				Evidence:  map[string]any{"blocked_mean": human.Round(blk, 2), "blocked_min": blkMin, "blocked_max": blkMax},
				Remediation: []string{
					"see the disk area above: which device is busy and how long requests wait",
					"wolf hung --duration 10s: what the blocked tasks wait on",
				},
			})
		}
	}
	a.check("load", summary, v, fs...)
}
