// The cpu area: mpstat -P ALL.

package sysstat

import (
	"fmt"
	"math"
	"sort"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/human"
)

// CPUPct is one CPU's time over the window, in percent.
type CPUPct struct {
	CPU                                                   int // -1 for the whole machine
	Usr, Nice, Sys, IOWait, IRQ, Soft, Steal, Guest, Idle float64
}

// Busy is the share of time the CPU ran something.
func (c CPUPct) Busy() float64 { return 100 - c.Idle - c.IOWait }

// cpuPct turns two readings of one cpu line into percentages, with guest
// time taken out of user and nice as mpstat does.
func cpuPct(cpu int, a, b CPUTimes) (CPUPct, bool) {
	total := sub(b.total(), a.total())
	if total == 0 {
		return CPUPct{}, false
	}
	p := func(x float64) float64 { return human.Round(100*x/total, 1) }
	guest := sub(b.Guest, a.Guest)
	guestNice := sub(b.GuestNice, a.GuestNice)
	return CPUPct{
		CPU:    cpu,
		Usr:    p(math.Max(0, sub(b.User, a.User)-guest)),
		Nice:   p(math.Max(0, sub(b.Nice, a.Nice)-guestNice)),
		Sys:    p(sub(b.System, a.System)),
		IOWait: p(sub(b.IOWait, a.IOWait)),
		IRQ:    p(sub(b.IRQ, a.IRQ)),
		Soft:   p(sub(b.SoftIRQ, a.SoftIRQ)),
		Steal:  p(sub(b.Steal, a.Steal)),
		Guest:  p(guest + guestNice),
		Idle:   p(sub(b.Idle, a.Idle)),
	}, true
}

// CPUPercents is the window's per-CPU time: the machine first (CPU -1),
// then each CPU online at both ends, in order.
func CPUPercents(first, last *Stat) []CPUPct {
	if first == nil || last == nil {
		return nil
	}
	var out []CPUPct
	if m, ok := cpuPct(-1, first.Total, last.Total); ok {
		out = append(out, m)
	}
	ids := make([]int, 0, len(last.CPUs))
	for id := range last.CPUs {
		if _, ok := first.CPUs[id]; ok {
			ids = append(ids, id)
		}
	}
	sort.Ints(ids)
	for _, id := range ids {
		if c, ok := cpuPct(id, first.CPUs[id], last.CPUs[id]); ok {
			out = append(out, c)
		}
	}
	return out
}

func (c CPUPct) values() map[string]any {
	v := map[string]any{"usr_pct": c.Usr, "nice_pct": c.Nice, "sys_pct": c.Sys, "iowait_pct": c.IOWait,
		"irq_pct": c.IRQ, "soft_pct": c.Soft, "steal_pct": c.Steal, "guest_pct": c.Guest, "idle_pct": c.Idle}
	if c.CPU >= 0 {
		v["cpu"] = c.CPU
	}
	return v
}

func cpuSubject(c CPUPct, detail string) finding.Subject {
	id := c.CPU
	return finding.Subject{Role: finding.RoleCPU, CPU: &id, Detail: detail}
}

func (a *analysis) cpu() {
	ps := CPUPercents(a.w.First.Stat, a.w.Last.Stat)
	if len(ps) == 0 || ps[0].CPU != -1 {
		a.unavailable("cpu", "/proc/stat unreadable or no CPU time elapsed")
		return
	}
	m, per := ps[0], ps[1:]
	v := m.values()
	perVals := make([]map[string]any, len(per))
	busiest := m
	for i, c := range per {
		perVals[i] = c.values()
		if i == 0 || c.Busy() > busiest.Busy() {
			busiest = c
		}
	}
	v["per_cpu"] = perVals
	self := a.selfPct()
	if self > 0 {
		v["wolf_busy_pct"] = human.Round(self, 1)
	}
	summary := fmt.Sprintf("usr %s sys %s iowait %s", human.Percent(m.Usr+m.Nice), human.Percent(m.Sys), human.Percent(m.IOWait))
	if m.IRQ > 0 {
		summary += " irq " + human.Percent(m.IRQ)
	}
	summary += fmt.Sprintf(" soft %s steal %s idle %s", human.Percent(m.Soft), human.Percent(m.Steal), human.Percent(m.Idle))
	if len(per) > 1 && busiest.Busy() >= cpuHotPct && m.Busy() < cpuBusyWarnPct {
		summary += fmt.Sprintf(", cpu%d %s busy", busiest.CPU, human.Percent(busiest.Busy()))
	}
	if a.selfTipped(m.Busy()) {
		summary += fmt.Sprintf(", %s of it wolf's own work (the rest %s)", human.Percent(self), human.Percent(m.Busy()-self))
	}
	var fs []finding.Finding
	subjects := func(pred func(CPUPct) bool, detail func(CPUPct) string) []finding.Subject {
		var out []finding.Subject
		for _, c := range per {
			if pred(c) {
				out = append(out, cpuSubject(c, detail(c)))
			}
		}
		return out
	}
	busyDetail := func(c CPUPct) string {
		return fmt.Sprintf("%s busy: usr %s sys %s soft %s", human.Percent(c.Busy()), human.Percent(c.Usr+c.Nice), human.Percent(c.Sys), human.Percent(c.Soft))
	}
	switch {
	case m.Busy() >= cpuBusyWarnPct && !a.selfTipped(m.Busy()):
		fs = append(fs, finding.Finding{
			ID:        "system.cpu-saturated",
			Severity:  finding.Warning,
			Title:     fmt.Sprintf("All %d CPUs saturated: %s busy over %.0f s", len(per), human.Percent(m.Busy()), a.dt),
			Summary:   fmt.Sprintf("The CPUs were idle only %s of the window (usr %s, sys %s, soft %s, steal %s): new work waits for a CPU.", human.Percent(m.Idle+m.IOWait), human.Percent(m.Usr+m.Nice), human.Percent(m.Sys), human.Percent(m.Soft), human.Percent(m.Steal)),
			Mechanism: "With no idle CPU, every wakeup queues behind running tasks. Throughput may hold, but latency grows with the run queue.",
			Subjects:  subjects(func(CPUPct) bool { return true }, busyDetail),
			Evidence:  map[string]any{"busy_pct": human.Round(m.Busy(), 1), "usr_pct": m.Usr + m.Nice, "sys_pct": m.Sys, "soft_pct": m.Soft, "steal_pct": m.Steal, "cpus": len(per)},
			Remediation: []string{
				"find the consumers: top, or pidstat 1",
				"wolf sched --duration 10s: how long tasks wait to run",
				"high sys time: perf top to see where the kernel spends it",
			},
		})
	case len(per) > 1 && busiest.Busy() >= cpuHotPct:
		fs = append(fs, finding.Finding{
			ID:        "system.cpu-hot",
			Severity:  finding.Info,
			Title:     fmt.Sprintf("cpu%d saturated (%s busy) while the machine was %s busy", busiest.CPU, human.Percent(busiest.Busy()), human.Percent(m.Busy())),
			Summary:   "One CPU did most of the work: a single-threaded hot spot, or interrupts all steered to one CPU.",
			Mechanism: "A task or an interrupt bound to one CPU cannot use the idle ones. Work queued there waits although the machine looks idle.",
			Subjects:  []finding.Subject{cpuSubject(busiest, busyDetail(busiest))},
			Evidence:  map[string]any{"busy_pct": human.Round(busiest.Busy(), 1), "machine_busy_pct": human.Round(m.Busy(), 1)},
			Remediation: []string{
				"pidstat 1 / top -H: which thread runs there",
				"high soft or irq time there: cat /proc/interrupts, spread IRQs (irqbalance, RPS), and wolf softirq",
			},
		})
	}
	if m.IOWait >= iowaitWarnPct {
		fs = append(fs, finding.Finding{
			ID:        "system.iowait",
			Severity:  finding.Warning,
			Title:     fmt.Sprintf("CPUs idle waiting for I/O %s of the time", human.Percent(m.IOWait)),
			Summary:   fmt.Sprintf("iowait was %s machine-wide: tasks are blocked on storage with nothing else to run.", human.Percent(m.IOWait)),
			Mechanism: "iowait is idle time while a task that last ran on the CPU waits for block I/O. High iowait means storage, not CPU, bounds the work.",
			Subjects:  subjects(func(c CPUPct) bool { return c.IOWait >= iowaitWarnPct }, func(c CPUPct) string { return "iowait " + human.Percent(c.IOWait) }),
			Evidence:  map[string]any{"iowait_pct": m.IOWait},
			Remediation: []string{
				"see the disk area: which device, how long requests wait (await) and how busy it is",
				"wolf hung --duration 10s: which tasks are stuck and on what",
			},
		})
	}
	if hot := subjects(func(c CPUPct) bool { return c.Soft >= softirqWarnPct }, func(c CPUPct) string { return "soft " + human.Percent(c.Soft) }); len(hot) > 0 {
		fs = append(fs, finding.Finding{
			ID:        "system.softirq",
			Severity:  finding.Warning,
			Title:     fmt.Sprintf("Softirq processing took %s or more of %d CPU(s)", human.Percent(softirqWarnPct), len(hot)),
			Summary:   "Softirqs (network receive, timers, block completions, RCU) ate a large share of some CPUs; tasks there ran late.",
			Mechanism: "Softirqs run before the interrupted task resumes, or in ksoftirqd when they keep coming. Long softirq runs delay everything on that CPU.",
			Subjects:  hot,
			Evidence:  map[string]any{"soft_pct": m.Soft, "cpus_over_threshold": len(hot)},
			Remediation: []string{
				"wolf softirq --duration 10s: which vector, how long each run, and why",
				"network receive: spread it with RSS/RPS; check /proc/net/softnet_stat",
			},
		})
	}
	if hot := subjects(func(c CPUPct) bool { return c.IRQ >= hardirqWarnPct }, func(c CPUPct) string { return "irq " + human.Percent(c.IRQ) }); len(hot) > 0 {
		fs = append(fs, finding.Finding{
			ID:          "system.hardirq",
			Severity:    finding.Warning,
			Title:       fmt.Sprintf("Hardware interrupts took %s or more of %d CPU(s)", human.Percent(hardirqWarnPct), len(hot)),
			Summary:     "Interrupt handlers ate a large share of some CPUs.",
			Mechanism:   "Hard interrupt handlers preempt everything on their CPU. An interrupt storm or one device's interrupts pinned to one CPU starves its tasks.",
			Subjects:    hot,
			Evidence:    map[string]any{"irq_pct": m.IRQ, "cpus_over_threshold": len(hot)},
			Remediation: []string{"watch -d cat /proc/interrupts: which source fires", "spread device interrupts (irqbalance, /proc/irq/N/smp_affinity)"},
		})
	}
	if m.Steal >= stealWarnPct {
		fs = append(fs, finding.Finding{
			ID:          "system.cpu-steal",
			Severity:    finding.Warning,
			Title:       fmt.Sprintf("The hypervisor took %s of this VM's CPU time", human.Percent(m.Steal)),
			Summary:     "Steal time is time this VM's virtual CPUs were ready to run but the host ran something else.",
			Mechanism:   "The host is overcommitted or the VM exceeds its CPU quota. Everything in the guest runs slower and nothing inside it can fix that.",
			Evidence:    map[string]any{"steal_pct": m.Steal},
			Remediation: []string{"move the VM to a less loaded host, or give it dedicated CPUs / a larger CPU quota"},
		})
	}
	a.check("cpu", summary, v, fs...)
}
