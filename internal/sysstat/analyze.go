package sysstat

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/wolf-investigator/wolf/internal/finding"
)

// Window is everything sampled between Start and Stop.
type Window struct {
	First, Last Snapshot
	Ticks       []Tick // run-queue samples, the first and last snapshots included
	Kernel      KernelLog
}

// Areas are the checklist's areas, in the order they are reported (the
// order of the 60-second checklist: load, CPUs, memory, pressure, disks,
// network, kernel log).
var Areas = []string{"load", "cpu", "memory", "psi", "disk", "network", "kernel log"}

// Thresholds. They are conservative on purpose: an idle or merely busy
// host must not raise a warning; each one marks a state in which latency
// visibly suffers.
const (
	runqPerCPUWarn      = 2.0  // runnable tasks per CPU, beyond the reader itself, on average
	blockedWarn         = 2.0  // tasks in I/O wait on average, with at least one in every sample
	cpuBusyWarnPct      = 90.0 // the whole machine busy (not idle, not iowait)
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

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}

// pct prints a percentage the way a person reads one: 0.3%, 4.2%, 37%.
func pct(x float64) string {
	if x < 10 && x != 0 {
		return fmt.Sprintf("%.1f%%", x)
	}
	return fmt.Sprintf("%.0f%%", x)
}

// num prints a rate or a count with sensible precision.
func num(x float64) string {
	switch {
	case x == 0:
		return "0"
	case math.Abs(x) < 10:
		return fmt.Sprintf("%.1f", x)
	default:
		return fmt.Sprintf("%.0f", x)
	}
}

func mib(kb uint64) string {
	switch {
	case kb >= 10<<20:
		return fmt.Sprintf("%.0f GiB", float64(kb)/(1<<20))
	case kb >= 1<<20:
		return fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
	default:
		return fmt.Sprintf("%d MiB", kb>>10)
	}
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

// ---- load (uptime, vmstat r/b) ----

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
		v["runnable_mean"], v["runnable_max"] = round(run, 2), runMax
		v["blocked_mean"], v["blocked_max"] = round(blk, 2), blkMax
		v["samples"] = n
		summary += fmt.Sprintf(", runnable %s avg %d max, blocked %s", num(run), runMax, num(blk))
		// procs_running counts the reading thread itself.
		if perCPU := (run - 1) / float64(cpus); n >= 2 && perCPU >= runqPerCPUWarn {
			fs = append(fs, finding.Finding{
				ID:       "system.run-queue",
				Severity: finding.Warning,
				Title:    fmt.Sprintf("%s runnable tasks per CPU: tasks queue for CPU time", num(perCPU)),
				Summary: fmt.Sprintf("On average %s tasks were runnable on %d CPUs over %.0f s (at most %d); each waited for the others' time slices.",
					num(run), cpus, a.dt, runMax),
				Mechanism: "procs_running counts the tasks running or waiting on a run queue. Beyond one per CPU the rest wait, so scheduling latency grows with the queue length.",
				Evidence:  map[string]any{"runnable_mean": round(run, 2), "runnable_max": runMax, "cpus": cpus, "load1": l.Load1},
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
				Title:     fmt.Sprintf("%s tasks waiting for I/O throughout the window", num(blk)),
				Summary:   fmt.Sprintf("At least %d task(s) were in I/O wait in every sample (%s on average, %d at most): they add to the load average without using CPU.", blkMin, num(blk), blkMax),
				Mechanism: "procs_blocked counts tasks sleeping uninterruptibly on block I/O. A steady queue of them means storage is slower than the demand, or a task is stuck.",
				Evidence:  map[string]any{"blocked_mean": round(blk, 2), "blocked_min": blkMin, "blocked_max": blkMax},
				Remediation: []string{
					"see the disk area above: which device is busy and how long requests wait",
					"wolf hung --duration 10s: what the blocked tasks wait on",
				},
			})
		}
	}
	a.check("load", summary, v, fs...)
}

// ---- cpu (mpstat -P ALL) ----

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
	p := func(x float64) float64 { return round(100*x/total, 1) }
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
	summary := fmt.Sprintf("usr %s sys %s iowait %s", pct(m.Usr+m.Nice), pct(m.Sys), pct(m.IOWait))
	if m.IRQ > 0 {
		summary += " irq " + pct(m.IRQ)
	}
	summary += fmt.Sprintf(" soft %s steal %s idle %s", pct(m.Soft), pct(m.Steal), pct(m.Idle))
	if len(per) > 1 && busiest.Busy() >= cpuHotPct && m.Busy() < cpuBusyWarnPct {
		summary += fmt.Sprintf(", cpu%d %s busy", busiest.CPU, pct(busiest.Busy()))
	}
	var fs []finding.Finding
	var subjects func(pred func(CPUPct) bool, detail func(CPUPct) string) []finding.Subject
	subjects = func(pred func(CPUPct) bool, detail func(CPUPct) string) []finding.Subject {
		var out []finding.Subject
		for _, c := range per {
			if pred(c) {
				out = append(out, cpuSubject(c, detail(c)))
			}
		}
		return out
	}
	busyDetail := func(c CPUPct) string {
		return fmt.Sprintf("%s busy: usr %s sys %s soft %s", pct(c.Busy()), pct(c.Usr+c.Nice), pct(c.Sys), pct(c.Soft))
	}
	switch {
	case m.Busy() >= cpuBusyWarnPct:
		fs = append(fs, finding.Finding{
			ID:        "system.cpu-saturated",
			Severity:  finding.Warning,
			Title:     fmt.Sprintf("All %d CPUs saturated: %s busy over %.0f s", len(per), pct(m.Busy()), a.dt),
			Summary:   fmt.Sprintf("The CPUs were idle only %s of the window (usr %s, sys %s, soft %s, steal %s): new work waits for a CPU.", pct(m.Idle+m.IOWait), pct(m.Usr+m.Nice), pct(m.Sys), pct(m.Soft), pct(m.Steal)),
			Mechanism: "With no idle CPU, every wakeup queues behind running tasks. Throughput may hold, but latency grows with the run queue.",
			Subjects:  subjects(func(CPUPct) bool { return true }, busyDetail),
			Evidence:  map[string]any{"busy_pct": round(m.Busy(), 1), "usr_pct": m.Usr + m.Nice, "sys_pct": m.Sys, "soft_pct": m.Soft, "steal_pct": m.Steal, "cpus": len(per)},
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
			Title:     fmt.Sprintf("cpu%d saturated (%s busy) while the machine was %s busy", busiest.CPU, pct(busiest.Busy()), pct(m.Busy())),
			Summary:   "One CPU did most of the work: a single-threaded hot spot, or interrupts all steered to one CPU.",
			Mechanism: "A task or an interrupt bound to one CPU cannot use the idle ones. Work queued there waits although the machine looks idle.",
			Subjects:  []finding.Subject{cpuSubject(busiest, busyDetail(busiest))},
			Evidence:  map[string]any{"busy_pct": round(busiest.Busy(), 1), "machine_busy_pct": round(m.Busy(), 1)},
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
			Title:     fmt.Sprintf("CPUs idle waiting for I/O %s of the time", pct(m.IOWait)),
			Summary:   fmt.Sprintf("iowait was %s machine-wide: tasks are blocked on storage with nothing else to run.", pct(m.IOWait)),
			Mechanism: "iowait is idle time while a task that last ran on the CPU waits for block I/O. High iowait means storage, not CPU, bounds the work.",
			Subjects:  subjects(func(c CPUPct) bool { return c.IOWait >= iowaitWarnPct }, func(c CPUPct) string { return "iowait " + pct(c.IOWait) }),
			Evidence:  map[string]any{"iowait_pct": m.IOWait},
			Remediation: []string{
				"see the disk area: which device, how long requests wait (await) and how busy it is",
				"wolf hung --duration 10s: which tasks are stuck and on what",
			},
		})
	}
	if hot := subjects(func(c CPUPct) bool { return c.Soft >= softirqWarnPct }, func(c CPUPct) string { return "soft " + pct(c.Soft) }); len(hot) > 0 {
		fs = append(fs, finding.Finding{
			ID:        "system.softirq",
			Severity:  finding.Warning,
			Title:     fmt.Sprintf("Softirq processing took %s or more of %d CPU(s)", pct(softirqWarnPct), len(hot)),
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
	if hot := subjects(func(c CPUPct) bool { return c.IRQ >= hardirqWarnPct }, func(c CPUPct) string { return "irq " + pct(c.IRQ) }); len(hot) > 0 {
		fs = append(fs, finding.Finding{
			ID:          "system.hardirq",
			Severity:    finding.Warning,
			Title:       fmt.Sprintf("Hardware interrupts took %s or more of %d CPU(s)", pct(hardirqWarnPct), len(hot)),
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
			Title:       fmt.Sprintf("The hypervisor took %s of this VM's CPU time", pct(m.Steal)),
			Summary:     "Steal time is time this VM's virtual CPUs were ready to run but the host ran something else.",
			Mechanism:   "The host is overcommitted or the VM exceeds its CPU quota. Everything in the guest runs slower and nothing inside it can fix that.",
			Evidence:    map[string]any{"steal_pct": m.Steal},
			Remediation: []string{"move the VM to a less loaded host, or give it dedicated CPUs / a larger CPU quota"},
		})
	}
	a.check("cpu", summary, v, fs...)
}

// ---- memory (free -m, vmstat si/so) ----

func (a *analysis) memory() {
	mem := a.w.Last.Mem
	total := mem["MemTotal"]
	if total == 0 {
		a.unavailable("memory", "/proc/meminfo unreadable")
		return
	}
	avail, ok := mem["MemAvailable"]
	if !ok { // before 3.14
		avail = mem["MemFree"] + mem["Cached"]
	}
	availPct := 100 * float64(avail) / float64(total)
	swapUsed := mem["SwapTotal"] - min(mem["SwapTotal"], mem["SwapFree"])
	vm0, vm1 := a.w.First.VM, a.w.Last.VM
	delta := func(k string) float64 { return sub(vm1[k], vm0[k]) }
	swapIn, swapOut := a.rate(delta("pswpin")), a.rate(delta("pswpout"))
	directScan := a.rate(delta("pgscan_direct"))
	_, hasOOM := vm1["oom_kill"]
	ooms := delta("oom_kill")
	v := map[string]any{
		"total_mib": total >> 10, "available_mib": avail >> 10, "available_pct": round(availPct, 1),
		"used_mib": (total - min(total, avail)) >> 10, "dirty_mib": mem["Dirty"] >> 10, "writeback_mib": mem["Writeback"] >> 10,
		"swap_total_mib": mem["SwapTotal"] >> 10, "swap_used_mib": swapUsed >> 10,
		"swap_in_pages_per_s": round(swapIn, 1), "swap_out_pages_per_s": round(swapOut, 1),
		"direct_scan_pages_per_s": round(directScan, 1),
	}
	summary := fmt.Sprintf("avail %s of %s (%s), dirty %s", mib(avail), mib(total), pct(availPct), mib(mem["Dirty"]))
	if mem["SwapTotal"] > 0 {
		summary += fmt.Sprintf(", swap %s used, si/so %s/%s pages/s", mib(swapUsed), num(swapIn), num(swapOut))
	} else {
		summary += ", no swap"
	}
	if directScan > 0 {
		summary += fmt.Sprintf(", direct reclaim %s pages/s", num(directScan))
	}
	if hasOOM {
		v["oom_kills"] = int64(ooms)
		if ooms > 0 {
			summary += fmt.Sprintf(", OOM kills %d", int64(ooms))
		}
	}
	var fs []finding.Finding
	if availPct < memAvailWarnPct {
		sev := finding.Warning
		if availPct < memAvailCritPct {
			sev = finding.Critical
		}
		fs = append(fs, finding.Finding{
			ID:        "system.memory-low",
			Severity:  sev,
			Title:     fmt.Sprintf("Only %s of memory available (%s of %s)", pct(availPct), mib(avail), mib(total)),
			Summary:   "MemAvailable, the kernel's estimate of what can be allocated without swapping, is low: allocations will reclaim page cache, swap, or end in the OOM killer.",
			Mechanism: "Below the watermarks, allocating tasks reclaim memory themselves (direct reclaim) and stall. The page cache that made I/O fast is evicted first.",
			Evidence:  map[string]any{"available_mib": avail >> 10, "total_mib": total >> 10, "available_pct": round(availPct, 1), "direct_scan_pages_per_s": round(directScan, 1)},
			Remediation: []string{
				"wolf reclaim --duration 10s: who reclaims, how efficiently, and in which cgroup",
				"find the consumers: ps -eo pid,rss,comm --sort=-rss | head, and memory.current of the cgroups",
			},
		})
	}
	if swapIn >= swapInWarnPerS {
		fs = append(fs, finding.Finding{
			ID:          "system.swapping",
			Severity:    finding.Warning,
			Title:       fmt.Sprintf("Swapping in %s pages/s", num(swapIn)),
			Summary:     fmt.Sprintf("%s pages/s came back from swap (%s/s went out): tasks wait for memory they had.", num(swapIn), num(swapOut)),
			Mechanism:   "Swap-in is a major page fault served from the swap device. The faulting task sleeps for the read, so steady swap-in is steady latency.",
			Evidence:    map[string]any{"swap_in_pages_per_s": round(swapIn, 1), "swap_out_pages_per_s": round(swapOut, 1), "swap_used_mib": swapUsed >> 10},
			Remediation: []string{"wolf reclaim --duration 10s", "reduce the working set or add memory; lower vm.swappiness if anonymous memory is swapped while cache is kept"},
		})
	}
	if directScan >= directScanWarnPerS {
		fs = append(fs, finding.Finding{
			ID:          "system.direct-reclaim",
			Severity:    finding.Warning,
			Title:       fmt.Sprintf("Direct reclaim scanning %s pages/s", num(directScan)),
			Summary:     "Allocating tasks reclaimed memory themselves instead of leaving it to kswapd: each of them stalled while it did.",
			Mechanism:   "When free memory falls below the min watermark, or a cgroup reaches its limit, the allocating task scans LRU lists itself. Its latency then includes the scan.",
			Evidence:    map[string]any{"direct_scan_pages_per_s": round(directScan, 1), "available_pct": round(availPct, 1)},
			Remediation: []string{"wolf reclaim --duration 10s: which cgroup and task reclaim and how efficiently", "raise vm.min_free_kbytes / vm.watermark_scale_factor so kswapd starts earlier"},
		})
	}
	if ooms > 0 {
		fs = append(fs, finding.Finding{
			ID:          "system.oom-kill",
			Severity:    finding.Critical,
			Title:       fmt.Sprintf("The OOM killer killed %d task(s) during the window", int64(ooms)),
			Summary:     "Memory ran out (system-wide or in a cgroup) and the kernel killed a task to recover.",
			Mechanism:   "When reclaim cannot free enough memory for an allocation, the OOM killer picks the task with the highest badness score. Its work is lost.",
			Evidence:    map[string]any{"oom_kills": int64(ooms)},
			Remediation: []string{"dmesg | grep -A20 'invoked oom-killer': which task, which cgroup and its limit", "wolf reclaim --duration 10s"},
		})
	}
	a.check("memory", summary, v, fs...)
}

// ---- pressure stall information ----

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
		v[res+"_some_pct"] = round(some, 2)
		v[res+"_some_avg10_pct"] = b.SomeAvg10
		part := fmt.Sprintf("%s %s", res, pct(some))
		// The system-level cpu "full" line is always zero (some task
		// always runs); it is kept out of the summary.
		if b.HasFull && res != "cpu" {
			v[res+"_full_pct"] = round(full, 2)
			v[res+"_full_avg10_pct"] = b.FullAvg10
			part += "/" + pct(full)
		}
		parts = append(parts, part)
		ev := map[string]any{"some_pct": round(some, 2), "full_pct": round(full, 2), "some_avg10_pct": b.SomeAvg10, "window_s": round(a.dt, 2)}
		switch res {
		case "cpu":
			if some >= psiCPUSomeWarn {
				fs = append(fs, psiFinding(res, finding.Warning, some, "some", ev,
					"Some runnable task waited for a CPU during that share of the window.",
					[]string{"wolf sched --duration 10s: run-queue latency per task", "find the CPU consumers: top, pidstat 1; cap them with cpu.max"}))
			}
		case "memory":
			switch {
			case full >= psiMemFullCrit:
				fs = append(fs, psiFinding(res, finding.Critical, full, "full", ev,
					"Every non-idle task was stalled on memory (reclaim, swap-in, refaults) during that share of the window: the machine did no work then.",
					[]string{"wolf reclaim --duration 10s: which cgroup reclaims and how efficiently", "wolf locks: mmap_lock held across reclaim (seed 003)"}))
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
		Title:     fmt.Sprintf("%s pressure: tasks stalled on %s %s of the window (%s)", psiNames[res], res, pct(share), kind),
		Summary:   summary,
		Mechanism: "PSI counts the wall-clock time tasks could not run for lack of a resource (\"some\": at least one task; \"full\": all non-idle tasks at once). It measures lost time directly, whatever the cause.",
		Evidence:  ev,
		Remediation: append(rem,
			fmt.Sprintf("per-cgroup: cat /sys/fs/cgroup/*/%s.pressure to find the cgroup that stalls", res)),
		References: []string{"https://docs.kernel.org/accounting/psi.html"},
	}
}

// ---- disks (iostat -xz) ----

// DiskRate is one device's I/O over the window, as iostat -x prints it.
type DiskRate struct {
	Name                      string
	Partition                 bool
	ReadsPerS, WritesPerS     float64
	ReadKBPerS, WriteKBPerS   float64
	ReadAwaitMs, WriteAwaitMs float64
	AwaitMs                   float64 // reads, writes and discards together
	UtilPct                   float64
	QueueSize                 float64 // aqu-sz: average requests in flight
	IOs                       uint64  // completed in the window
}

// DiskRates computes every device's I/O over the window; devices without
// any I/O in it are left out (iostat -z).
func DiskRates(first, last Snapshot) []DiskRate {
	dt := last.At.Sub(first.At).Seconds()
	if dt <= 0 {
		return nil
	}
	prev := map[string]DiskStat{}
	for _, d := range first.Disks {
		prev[d.Name] = d
	}
	var out []DiskRate
	for _, b := range last.Disks {
		a, ok := prev[b.Name]
		if !ok {
			continue
		}
		reads, writes, discards := sub(b.Reads, a.Reads), sub(b.Writes, a.Writes), sub(b.Discards, a.Discards)
		ioMs := sub(b.IOMs, a.IOMs)
		if reads+writes+discards == 0 && ioMs == 0 {
			continue
		}
		r := DiskRate{
			Name:        b.Name,
			Partition:   last.WholeDisks != nil && !last.WholeDisks[b.Name],
			ReadsPerS:   reads / dt,
			WritesPerS:  writes / dt,
			ReadKBPerS:  sub(b.SectorsRead, a.SectorsRead) / 2 / dt,
			WriteKBPerS: sub(b.SectorsWritten, a.SectorsWritten) / 2 / dt,
			UtilPct:     math.Min(100, 100*ioMs/(dt*1000)),
			QueueSize:   sub(b.WeightedMs, a.WeightedMs) / (dt * 1000),
			IOs:         uint64(reads + writes + discards),
		}
		if reads > 0 {
			r.ReadAwaitMs = sub(b.ReadMs, a.ReadMs) / reads
		}
		if writes > 0 {
			r.WriteAwaitMs = sub(b.WriteMs, a.WriteMs) / writes
		}
		if n := reads + writes + discards; n > 0 {
			r.AwaitMs = (sub(b.ReadMs, a.ReadMs) + sub(b.WriteMs, a.WriteMs) + sub(b.DiscardMs, a.DiscardMs)) / n
		}
		out = append(out, r)
	}
	return out
}

func (d DiskRate) values() map[string]any {
	return map[string]any{"device": d.Name, "partition": d.Partition,
		"r_per_s": round(d.ReadsPerS, 1), "w_per_s": round(d.WritesPerS, 1),
		"r_kb_per_s": round(d.ReadKBPerS, 1), "w_kb_per_s": round(d.WriteKBPerS, 1),
		"r_await_ms": round(d.ReadAwaitMs, 2), "w_await_ms": round(d.WriteAwaitMs, 2), "await_ms": round(d.AwaitMs, 2),
		"util_pct": round(d.UtilPct, 1), "aqu_sz": round(d.QueueSize, 2)}
}

func (d DiskRate) line() string {
	return fmt.Sprintf("%s r %s/s w %s/s %s kB/s await %s ms util %s", d.Name, num(d.ReadsPerS), num(d.WritesPerS),
		num(d.ReadKBPerS+d.WriteKBPerS), num(d.AwaitMs), pct(d.UtilPct))
}

func (a *analysis) disk() {
	if a.w.Last.Disks == nil {
		a.unavailable("disk", "/proc/diskstats unreadable")
		return
	}
	rates := DiskRates(a.w.First, a.w.Last)
	var disks, parts []DiskRate
	for _, r := range rates {
		if r.Partition {
			parts = append(parts, r)
		} else {
			disks = append(disks, r)
		}
	}
	sort.Slice(disks, func(i, j int) bool { return disks[i].UtilPct > disks[j].UtilPct })
	v := map[string]any{}
	dv := make([]map[string]any, 0, len(disks))
	for _, d := range disks {
		dv = append(dv, d.values())
	}
	v["disks"] = dv
	if len(parts) > 0 {
		pv := make([]map[string]any, 0, len(parts))
		for _, p := range parts {
			pv = append(pv, p.values())
		}
		v["partitions"] = pv
	}
	var summary string
	switch len(disks) {
	case 0:
		summary = "no disk I/O in the window"
	case 1:
		summary = disks[0].line()
	default:
		summary = disks[0].line() + fmt.Sprintf(" (+%d more active)", len(disks)-1)
	}
	var fs []finding.Finding
	for _, d := range disks {
		ev := d.values()
		if d.UtilPct >= diskUtilWarnPct {
			fs = append(fs, finding.Finding{
				ID:        "system.disk-saturated",
				Severity:  finding.Warning,
				Title:     fmt.Sprintf("%s busy %s of the time (await %s ms, queue %s)", d.Name, pct(d.UtilPct), num(d.AwaitMs), num(d.QueueSize)),
				Summary:   fmt.Sprintf("%s had I/O in flight %s of the window: %s reads/s, %s writes/s, %s kB/s.", d.Name, pct(d.UtilPct), num(d.ReadsPerS), num(d.WritesPerS), num(d.ReadKBPerS+d.WriteKBPerS)),
				Mechanism: "Utilisation is the share of time at least one request was outstanding. For a single-queue disk near 100% means requests queue; devices that serve requests in parallel (SSD, NVMe, RAID) may still have headroom, so read it with await and the queue size.",
				Evidence:  ev,
				Remediation: []string{
					"iotop or pidstat -d 1: which tasks do the I/O",
					"wolf hung --duration 10s: tasks stuck in D state on this device",
				},
			})
		}
		if d.AwaitMs >= diskAwaitWarnMs && d.IOs >= diskAwaitMinIOs {
			fs = append(fs, finding.Finding{
				ID:        "system.disk-latency",
				Severity:  finding.Warning,
				Title:     fmt.Sprintf("%s requests took %s ms on average", d.Name, num(d.AwaitMs)),
				Summary:   fmt.Sprintf("%d requests completed with an average wait of %s ms (reads %s ms, writes %s ms), queueing included.", d.IOs, num(d.AwaitMs), num(d.ReadAwaitMs), num(d.WriteAwaitMs)),
				Mechanism: "await is the time from a request's submission to its completion, queueing included. Every task that reads or syncs through this device waits that long per request.",
				Evidence:  ev,
				Remediation: []string{
					"iotop or pidstat -d 1: which tasks do the I/O",
					"writes: large dirty bursts (vm.dirty_bytes / dirty_background_bytes) make reads wait behind writeback",
				},
			})
		}
	}
	a.check("disk", summary, v, fs...)
}

// ---- network (sar -n DEV,EDEV,TCP,ETCP) ----

func (a *analysis) network() {
	if a.w.Last.Net == nil && len(a.w.Last.SNMP) == 0 {
		a.unavailable("network", "/proc/net/dev and /proc/net/snmp unreadable")
		return
	}
	prev := map[string]NetDev{}
	for _, d := range a.w.First.Net {
		prev[d.Name] = d
	}
	var rxKB, txKB, errs, drops float64
	var bad []map[string]any
	var badSubjects []string
	for _, b := range a.w.Last.Net {
		f, ok := prev[b.Name]
		if !ok {
			continue
		}
		if b.Name != "lo" {
			rxKB += sub(b.RxBytes, f.RxBytes) / 1024
			txKB += sub(b.TxBytes, f.TxBytes) / 1024
		}
		e := map[string]float64{
			"rx_errs": sub(b.RxErrs, f.RxErrs), "tx_errs": sub(b.TxErrs, f.TxErrs),
			"rx_fifo": sub(b.RxFifo, f.RxFifo), "tx_fifo": sub(b.TxFifo, f.TxFifo),
			"rx_frame": sub(b.RxFrame, f.RxFrame), "tx_carrier": sub(b.TxCarrier, f.TxCarrier), "tx_colls": sub(b.TxColls, f.TxColls),
		}
		d := sub(b.RxDrop, f.RxDrop) + sub(b.TxDrop, f.TxDrop)
		var ne float64
		for _, x := range e {
			ne += x
		}
		errs += ne
		drops += d
		if ne > 0 || d > 0 {
			m := map[string]any{"interface": b.Name, "rx_drop": sub(b.RxDrop, f.RxDrop), "tx_drop": sub(b.TxDrop, f.TxDrop)}
			for k, x := range e {
				m[k] = x
			}
			bad = append(bad, m)
			badSubjects = append(badSubjects, fmt.Sprintf("%s: %d errors, %d drops", b.Name, int64(ne), int64(d)))
		}
	}
	s0, s1 := a.w.First.SNMP, a.w.Last.SNMP
	d := func(k string) float64 {
		x0, ok0 := s0[k]
		x1, ok1 := s1[k]
		if !ok0 || !ok1 || x1 < x0 {
			return 0
		}
		return float64(x1 - x0)
	}
	outSegs, retrans := d("Tcp.OutSegs"), d("Tcp.RetransSegs")
	retransPct := 0.0
	if outSegs > 0 {
		retransPct = 100 * retrans / outSegs
	}
	listen := d("TcpExt.ListenOverflows") + d("TcpExt.ListenDrops")
	backlog := d("TcpExt.TCPBacklogDrop")
	collapsed := d("TcpExt.TCPRcvCollapsed")
	pruned := d("TcpExt.PruneCalled")
	udpRcvbuf := d("Udp.RcvbufErrors") + d("Udp6.RcvbufErrors")
	v := map[string]any{
		"rx_kb_per_s": round(a.rate(rxKB), 1), "tx_kb_per_s": round(a.rate(txKB), 1),
		"if_errors": int64(errs), "if_drops": int64(drops), "interfaces_with_errors": bad,
		"tcp_out_segs_per_s": round(a.rate(outSegs), 1), "tcp_retrans_per_s": round(a.rate(retrans), 2), "tcp_retrans_pct": round(retransPct, 2),
		"listen_overflows_drops": int64(listen), "tcp_backlog_drops": int64(backlog),
		"tcp_rcv_collapsed": int64(collapsed), "tcp_prune_called": int64(pruned), "udp_rcvbuf_errors": int64(udpRcvbuf),
	}
	if bad == nil {
		v["interfaces_with_errors"] = []map[string]any{}
	}
	summary := fmt.Sprintf("rx %s tx %s kB/s, errors %d drops %d, tcp retrans %s/s (%s)",
		num(a.rate(rxKB)), num(a.rate(txKB)), int64(errs), int64(drops), num(a.rate(retrans)), pct(retransPct))
	for _, c := range []struct {
		n    float64
		what string
	}{{listen, "listen drops"}, {backlog, "backlog drops"}, {collapsed + pruned, "rcv collapses"}, {udpRcvbuf, "udp rcvbuf errors"}} {
		if c.n > 0 {
			summary += fmt.Sprintf(", %s %d", c.what, int64(c.n))
		}
	}
	var fs []finding.Finding
	if errs > 0 || a.rate(drops) >= netDropsWarnPerS {
		fs = append(fs, finding.Finding{
			ID:        "system.net-errors",
			Severity:  finding.Warning,
			Title:     fmt.Sprintf("Network interfaces: %d errors, %d drops in %.0f s", int64(errs), int64(drops), a.dt),
			Summary:   strings.Join(badSubjects, "; ") + ".",
			Mechanism: "Interface errors (CRC, frame, FIFO overruns, carrier losses) are lost packets the sender must retransmit; drops are packets the driver or the stack had no room for. Either shows up as latency and retransmits.",
			Evidence:  map[string]any{"if_errors": int64(errs), "if_drops": int64(drops), "drops_per_s": round(a.rate(drops), 1), "interfaces": bad},
			Remediation: []string{
				"ip -s -s link; ethtool -S IFACE: which counter grows",
				"rx fifo/drops: larger rings (ethtool -G), spread receive (RSS/RPS); wolf softirq if NET_RX is slow",
			},
		})
	}
	if a.rate(retrans) >= tcpRetransWarnPerS && retransPct >= tcpRetransWarnPct {
		fs = append(fs, finding.Finding{
			ID:          "system.tcp-retransmits",
			Severity:    finding.Warning,
			Title:       fmt.Sprintf("TCP retransmitting %s segments/s (%s of sent)", num(a.rate(retrans)), pct(retransPct)),
			Summary:     "Segments were lost or acknowledged late: each retransmission costs the flow at least a round trip, and timeouts cost 200 ms or more.",
			Mechanism:   "TCP retransmits when duplicate ACKs or a timeout say a segment was lost. Loss comes from the network, from drops on either host, or from receivers too slow to ACK.",
			Evidence:    map[string]any{"tcp_retrans_per_s": round(a.rate(retrans), 2), "tcp_retrans_pct": round(retransPct, 2), "tcp_out_segs_per_s": round(a.rate(outSegs), 1)},
			Remediation: []string{"ss -ti: which connections retransmit (retrans:, rto:)", "check interface errors and drops on both ends"},
		})
	}
	if listen > 0 {
		fs = append(fs, finding.Finding{
			ID:          "system.tcp-listen-drops",
			Severity:    finding.Warning,
			Title:       fmt.Sprintf("%d connection attempts dropped at a full listen queue", int64(listen)),
			Summary:     "A listening socket's accept queue was full: new connections were dropped and their clients wait for a SYN retransmit (1 s, then 3 s, …).",
			Mechanism:   "Completed connections wait in the accept queue until the application calls accept(). When it is full (backlog, capped by net.core.somaxconn) the kernel drops the handshake.",
			Evidence:    map[string]any{"listen_overflows_drops": int64(listen)},
			Remediation: []string{"ss -ltn: Recv-Q against Send-Q (the backlog) per listener", "accept faster (more acceptor threads) or raise the backlog and net.core.somaxconn"},
		})
	}
	if backlog > 0 {
		fs = append(fs, finding.Finding{
			ID:          "system.tcp-backlog-drops",
			Severity:    finding.Warning,
			Title:       fmt.Sprintf("%d TCP segments dropped at a full socket backlog", int64(backlog)),
			Summary:     "Segments arrived while the application held the socket lock and its backlog was full; they were dropped and will be retransmitted.",
			Mechanism:   "While a task owns a socket, softirq queues incoming segments on its backlog, bounded by the receive and send buffers. A task holding the lock long (or tiny buffers) makes it overflow.",
			Evidence:    map[string]any{"tcp_backlog_drops": int64(backlog)},
			Remediation: []string{"raise net.ipv4.tcp_rmem / the socket's SO_RCVBUF", "wolf softirq --duration 10s"},
		})
	}
	if a.rate(collapsed+pruned) >= tcpCollapseWarnPerS {
		fs = append(fs, finding.Finding{
			ID:          "system.tcp-collapse",
			Severity:    finding.Warning,
			Title:       fmt.Sprintf("TCP receive queues collapsed or pruned %s times/s", num(a.rate(collapsed+pruned))),
			Summary:     "Sockets ran out of receive buffer and the kernel copied their queued data into compact buffers, in softirq context.",
			Mechanism:   "When a socket's queued data overruns its rcvbuf, tcp_prune_queue collapses the queue by copying every skb. On a long queue that copy stalls NET_RX processing for milliseconds (seed 004: 23 ms).",
			Evidence:    map[string]any{"tcp_rcv_collapsed": int64(collapsed), "tcp_prune_called": int64(pruned)},
			Remediation: []string{"wolf softirq --duration 10s: NET_RX stall lengths and their cause", "read faster, or raise tcp_rmem so the queue fits; check tcp_adv_win_scale"},
		})
	}
	if udpRcvbuf > 0 {
		fs = append(fs, finding.Finding{
			ID:          "system.udp-drops",
			Severity:    finding.Warning,
			Title:       fmt.Sprintf("%d UDP datagrams dropped at full receive buffers", int64(udpRcvbuf)),
			Summary:     "A UDP socket's receive buffer was full, so arriving datagrams were dropped: the application reads too slowly for its buffer.",
			Mechanism:   "UDP has no flow control: a datagram that does not fit in the socket's rcvbuf is dropped and counted in RcvbufErrors.",
			Evidence:    map[string]any{"udp_rcvbuf_errors": int64(udpRcvbuf)},
			Remediation: []string{"ss -uamn: which socket's Recv-Q is full (drops in skmem d)", "raise SO_RCVBUF / net.core.rmem_max, or read faster"},
		})
	}
	a.check("network", summary, v, fs...)
}

// ---- kernel log (dmesg | tail) ----

// Patterns that make a record matter whatever its level (a WARN() splat
// is logged at warning level), and the ones that make it critical.
var (
	kernelPatterns = []string{"WARNING:", "BUG:", "Oops", "blocked for more than", "invoked oom-killer",
		"Out of memory", "soft lockup", "hard LOCKUP", "detected stall", "Kernel panic", "general protection fault"}
	criticalPatterns = []string{"BUG:", "Oops", "soft lockup", "hard LOCKUP", "detected stall", "Kernel panic",
		"general protection fault", "blocked for more than", "Out of memory"}
)

// Interesting says whether a kernel log record belongs in the checklist:
// anything at err level or above, and the splats that matter at any
// level.
func Interesting(r KernelRecord) bool {
	if r.Level <= 3 {
		return true
	}
	for _, p := range kernelPatterns {
		if strings.Contains(r.Message, p) {
			return true
		}
	}
	return false
}

var levelNames = []string{"emerg", "alert", "crit", "err", "warning", "notice", "info", "debug"}

func (r KernelRecord) String() string {
	return fmt.Sprintf("[%s] %s", levelNames[r.Level&7], r.Message)
}

func (a *analysis) kernelLog() {
	k := a.w.Kernel
	if k.Unavailable != "" {
		a.check("kernel log", "not read: "+k.Unavailable, nil)
		return
	}
	n := len(k.Errors) + k.Dropped
	v := map[string]any{"records": k.Records, "errors": n, "lost": k.Lost}
	msgs := make([]string, 0, len(k.Errors))
	for _, r := range k.Errors {
		msgs = append(msgs, r.String())
	}
	v["messages"] = msgs
	if n == 0 {
		summary := fmt.Sprintf("no errors in %d new record(s)", k.Records)
		if k.Lost > 0 {
			summary += fmt.Sprintf("; %d lost to a full log buffer", k.Lost)
		}
		a.check("kernel log", summary, v)
		return
	}
	sev := finding.Warning
	pointers := map[string]string{}
	for _, r := range k.Errors {
		for _, p := range criticalPatterns {
			if strings.Contains(r.Message, p) {
				sev = finding.Critical
			}
		}
		switch {
		case strings.Contains(r.Message, "blocked for more than"):
			pointers["hung"] = "wolf hung --duration 10s: the hung tasks, what they wait on, and who holds it"
		case strings.Contains(r.Message, "oom-killer"), strings.Contains(r.Message, "Out of memory"):
			pointers["reclaim"] = "wolf reclaim --duration 10s: memory pressure per cgroup"
		case strings.Contains(r.Message, "soft lockup"), strings.Contains(r.Message, "detected stall"):
			pointers["softirq"] = "wolf softirq --duration 10s: long softirq runs that keep a CPU from scheduling"
		}
	}
	rem := []string{"dmesg -T --level=emerg,alert,crit,err,warn: the records with their context (call traces follow on the next lines)"}
	keys := make([]string, 0, len(pointers))
	for key := range pointers {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		rem = append(rem, pointers[key])
	}
	first := msgs[0]
	summary := fmt.Sprintf("%d error(s) in %d new record(s): %s", n, k.Records, first)
	if k.Lost > 0 {
		summary += fmt.Sprintf("; %d lost", k.Lost)
	}
	a.check("kernel log", summary, v, finding.Finding{
		ID:          "system.kernel-errors",
		Severity:    sev,
		Title:       fmt.Sprintf("The kernel logged %d error(s) during the window: %s", n, first),
		Summary:     "New kernel log records at error level or above, or kernel warnings and splats, appeared while wolf watched.",
		Mechanism:   "The kernel logs what it cannot handle quietly: I/O errors, hung tasks, lockups, OOM kills, WARN() splats. Each record names the subsystem that failed.",
		Evidence:    map[string]any{"errors": n, "records": k.Records, "messages": msgs, "lost": k.Lost},
		Remediation: rem,
	})
}
