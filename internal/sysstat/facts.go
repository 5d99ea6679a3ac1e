package sysstat

import (
	"strings"
	"time"

	"github.com/wolf-investigator/wolf/internal/fact"
	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/human"
)

// facts are the window's measurements for the diagnosis stage: whether
// the host's CPUs were saturated (and by how much), and how busy each
// disk was. Made from the same window as the checklist's findings.
func (a *analysis) facts() *fact.Set {
	s := &fact.Set{Window: time.Duration(a.dt * float64(time.Second))}
	s.Resource(fact.Resource{Kind: fact.HostCPU, Key: fact.HostCPUKey(), Name: "the host's CPUs", CPU: -1})
	ps := CPUPercents(a.w.First.Stat, a.w.Last.Stat)
	if len(ps) > 0 && ps[0].CPU == -1 {
		m := ps[0]
		cpus := len(ps) - 1
		if cpus <= 0 {
			cpus = a.cpuCount()
		}
		busy := m.Busy()
		x := fact.Saturation{On: fact.HostCPUKey(), Level: busy / 100, Limit: float64(cpus), Used: busy / 100 * float64(cpus), Unit: "cpus",
			AtLimit: busy >= cpuBusyWarnPct,
			Numbers: map[string]float64{"cpus": float64(cpus), "busy_pct": human.Round(busy, 1), "usr_pct": m.Usr + m.Nice, "sys_pct": m.Sys, "soft_pct": m.Soft, "steal_pct": m.Steal, "iowait_pct": m.IOWait}}
		if run, ok := a.runnableMean(); ok {
			x.Numbers["runnable_mean"] = human.Round(run, 2)
		}
		if p := a.psiSome("cpu"); p >= 0 {
			x.Numbers["psi_cpu_some_pct"] = human.Round(p, 1)
		}
		if f := a.findingByID("system.cpu-saturated"); f != nil {
			x.Finding, x.FindingTitle = f.ID, f.Title
		}
		s.Saturations = append(s.Saturations, x)
	}
	for _, d := range DiskRates(a.w.First, a.w.Last) {
		if d.Partition {
			continue
		}
		k := fact.DeviceKey(d.Name)
		s.Resource(fact.Resource{Kind: fact.Device, Key: k, Name: d.Name, Device: d.Name, CPU: -1})
		x := fact.Saturation{On: k, Level: d.UtilPct / 100, Used: (d.ReadKBPerS + d.WriteKBPerS) * 1024, Unit: "bytes_per_s",
			// How busy it was, not whether it held anyone back: a device
			// streaming for one task is 100% busy by design.
			Numbers: map[string]float64{"util_pct": human.Round(d.UtilPct, 1), "await_ms": human.Round(d.AwaitMs, 2), "r_kb_per_s": human.Round(d.ReadKBPerS, 1),
				"w_kb_per_s": human.Round(d.WriteKBPerS, 1), "queue_size": human.Round(d.QueueSize, 2)}}
		for _, f := range a.res.Findings {
			if (f.ID == "system.disk-saturated" || f.ID == "system.disk-latency") && strings.Contains(f.Title, d.Name) {
				x.Finding, x.FindingTitle = f.ID, f.Title
			}
		}
		s.Saturations = append(s.Saturations, x)
	}
	return s
}

// runnableMean is the run queue's mean length over the window's samples.
func (a *analysis) runnableMean() (float64, bool) {
	n := len(a.w.Ticks)
	if n == 0 {
		return 0, false
	}
	var run float64
	for _, t := range a.w.Ticks {
		run += float64(t.Running)
	}
	return run / float64(n), true
}

// psiSome is a resource's "some" pressure over the window, percent; -1
// when not measured.
func (a *analysis) psiSome(res string) float64 {
	f, l := a.w.First.PSI[res], a.w.Last.PSI[res]
	if f == nil || l == nil || a.dt <= 0 || l.SomeTotalUs < f.SomeTotalUs {
		return -1
	}
	return 100 * float64(l.SomeTotalUs-f.SomeTotalUs) / (a.dt * 1e6)
}

func (a *analysis) findingByID(id string) *finding.Finding {
	for i := range a.res.Findings {
		if a.res.Findings[i].ID == id {
			return &a.res.Findings[i]
		}
	}
	return nil
}
