package bpfcost

import (
	"fmt"
	"sort"
	"strings"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/human"
)

// talkRef is the write-up behind this investigator.
const talkRef = `Usama Saqib (Datadog), "Performance and reliability pitfalls of eBPF", FOSDEM 2026`

const refStats = "https://docs.kernel.org/bpf/bpf_design_QA.html (kernel.bpf_stats_enabled, BPF_ENABLE_STATS)"

// Conclude turns a snapshot into findings: the costly programs with the
// reasons "Performance and reliability pitfalls of eBPF" gives, the risks of the probe kinds in use, recursion
// misses, wolf's own programs, and (with Top) a bpftop-like list.
func Conclude(s *Snapshot, th Thresholds) []finding.Finding {
	costs := measure(s, th.TrapNs)
	var out []finding.Finding
	var wolfRun, wolfRuns uint64
	var wolfProgs int
	for i := range costs {
		c := &costs[i]
		if c.Wolf {
			// wolf's own programs are accounted in every report's own
			// cost; flagging them here would only repeat it.
			wolfRun += c.RunNs
			wolfRuns += c.Runs
			wolfProgs++
			continue
		}
		if f, ok := costly(c, th); ok {
			out = append(out, f)
		}
		if f, ok := hotUprobe(c, th); ok {
			out = append(out, f)
		}
		if f, ok := hotKretprobe(c, th); ok {
			out = append(out, f)
		}
		if c.Misses > 0 {
			out = append(out, recursionMisses(c))
		}
	}
	if f, ok := fentryRisk(costs, s.Kernel); ok {
		out = append(out, f)
	}
	out = append(out, uprobeRegisterRisk(costs, s.Kernel, th)...)
	if wolfProgs > 0 {
		ev := map[string]any{"programs": wolfProgs, "run_ns": wolfRun, "runs": wolfRuns,
			"one_cpu_pct": human.Round(float64(wolfRun)/1e9/max(s.Window.Seconds(), 1e-9)*100, 2)}
		if wolfRuns > 0 {
			ev["avg_ns_per_run"] = human.Round(float64(wolfRun)/float64(wolfRuns), 2)
		}
		out = append(out, finding.Finding{
			ID: "bpf.wolf-own", Investigator: "bpf", Severity: finding.Info,
			Title: fmt.Sprintf("wolf's own %d BPF program(s) ran %d times for %.1f ms (%.2f%% of one CPU)",
				wolfProgs, wolfRuns, float64(wolfRun)/1e6, ev["one_cpu_pct"]),
			Summary:  "The programs other wolf investigators attached during this window, measured like everyone else's.",
			Evidence: ev,
		})
	}
	out = append(out, summary(s, costs))
	for i := 0; i < s.Top && i < len(costs); i++ {
		out = append(out, listed(&costs[i]))
	}
	return out
}

func evidence(c *Cost) map[string]any {
	ev := map[string]any{
		"prog_id":          c.ID,
		"type":             c.Type,
		"name":             c.Name,
		"attach":           c.Where(),
		"runs":             c.Runs,
		"runs_per_s":       human.Round(c.RunsPerS, 2),
		"avg_ns_per_run":   human.Round(c.AvgNs, 2),
		"run_ns":           c.RunNs,
		"one_cpu_pct":      human.Round(c.OneCPUPct, 2),
		"cpu_pct":          human.Round(c.CPUPct, 2),
		"recursion_misses": c.Misses,
	}
	if c.TrapPct > 0 {
		ev["trap_one_cpu_pct_estimate"] = human.Round(c.TrapPct, 2)
	}
	if len(c.Owners) > 0 {
		ev["owner_pid"] = c.Owners[0].PID
		ev["owner_comm"] = c.Owners[0].Comm
	}
	return ev
}

func subjects(c *Cost) []finding.Subject {
	var ss []finding.Subject
	for _, o := range c.Owners {
		ss = append(ss, finding.Subject{Role: "owner", PID: o.PID, Comm: o.Comm,
			Detail: fmt.Sprintf("holds BPF program %d (%s)", c.ID, c.Name)})
	}
	return ss
}

func severity(pct float64, th Thresholds) finding.Severity {
	switch {
	case pct >= th.CriticalPct:
		return finding.Critical
	case pct >= th.CostlyPct:
		return finding.Warning
	}
	return finding.Info
}

// costly flags a program whose own run time is a noticeable part of a CPU.
func costly(c *Cost, th Thresholds) (finding.Finding, bool) {
	if c.OneCPUPct < th.CostlyPct {
		return finding.Finding{}, false
	}
	return finding.Finding{
		ID: "bpf.costly-program", Investigator: "bpf", Severity: severity(c.OneCPUPct, th),
		Title: fmt.Sprintf("BPF %s costs %.1f%% of a CPU: %.0f runs/s × %.0f ns (%s)",
			c.Label(), c.OneCPUPct, c.RunsPerS, c.AvgNs, c.Where()),
		Summary: fmt.Sprintf("Over %s the kernel counted %d runs and %.1f ms inside this program; held by %s.",
			"the window", c.Runs, float64(c.RunNs)/1e6, c.Who()),
		Mechanism: "A BPF program runs synchronously in the context of the event it is attached to: its run time is added to every hit of that event. " +
			"On a hot event (scheduler switches, syscalls, packets) a few hundred nanoseconds per run add up to whole CPUs.",
		Subjects: subjects(c),
		Evidence: evidence(c),
		Remediation: []string{
			"Move the work out of the hot event: aggregate in per-CPU maps, sample instead of tracing every event, filter early (pid, cgroup) before any map update",
			"Attach to a rarer event that carries the same information (a tracepoint on the slow path rather than every call)",
			fmt.Sprintf("Inspect it: bpftool prog show id %d; bpftool prog dump xlated id %d", c.ID, c.ID),
		},
		References: []string{refStats},
	}, true
}

// hotUprobe flags uprobes on a hot path: the trap each hit takes is not
// in run_time_ns, so the program looks cheap while its hits are not. Hot
// is a rate, or a cost: on a machine whose traps are slow (an emulated
// CPU: ~3.5 µs per run on arm64 under QEMU) fewer hits a second cost as
// much.
func hotUprobe(c *Cost, th Thresholds) (finding.Finding, bool) {
	if !c.has(KindUprobe, KindUretprobe, KindUprobeMulti) || (c.RunsPerS < th.HotRunsPerS && c.TotalOneCPUPct() < th.CostlyPct) {
		return finding.Finding{}, false
	}
	kind := "uprobe"
	if c.has(KindUretprobe) {
		kind = "uretprobe"
	}
	trapNs := th.TrapNs
	if trapNs <= 0 {
		trapNs = UprobeTrapNs
	}
	per := c.Traps * trapNs
	total := c.TotalOneCPUPct()
	sev := severity(total, th)
	if sev == finding.Info {
		sev = finding.Warning // hot by rate: the talk's point is that it hides
	}
	ev := evidence(c)
	ev["trap_ns_per_run_estimate"] = human.Round(per, 2)
	ev["trap_ns"] = human.Round(trapNs, 2)
	source := map[string]string{"reference": "the published 1.7 µs per trap, not measured here",
		"measured": "measured on this machine by a probe wolf attached to itself",
		"":         "as given with --trap-ns"}[th.TrapSource]
	ev["trap_ns_source"] = th.TrapSource
	title := fmt.Sprintf("%s on a hot path: %s fires %.0f times/s; with the traps it costs ~%.0f%% of a CPU (run time alone: %.2f%%)",
		kind, c.Where(), c.RunsPerS, total, c.OneCPUPct)
	sum := fmt.Sprintf("BPF %s, held by %s, runs %.0f ns per hit, but every hit first traps into the kernel: an estimated %.0f ns per hit (%.0f trap(s) × %.0f ns, %s) that the kernel's run statistics do not count (an estimate).",
		c.Label(), c.Who(), c.AvgNs, per, c.Traps, trapNs, source)
	if c.Traps == 0 {
		title = fmt.Sprintf("%s on a hot path: %s fires %.0f times/s; it keeps a breakpoint that traps on every call", kind, c.Where(), c.RunsPerS)
		sum = fmt.Sprintf("BPF %s, held by %s, runs %.0f ns per hit; it adds no trap of its own (the uprobe on the same instruction is charged the entry trap, an estimated %.0f ns, %s, and on this kernel the return goes through the uretprobe syscall), but removing only the uprobe would leave every call trapping.",
			c.Label(), c.Who(), c.AvgNs, trapNs, source)
	}
	return finding.Finding{
		ID: "bpf.hot-uprobe", Investigator: "bpf", Severity: sev,
		Title:   title,
		Summary: sum,
		Mechanism: "A uprobe replaces the probed instruction with a breakpoint: every call traps into the kernel, finds the uprobe, runs the program and single-steps the displaced instruction; a uretprobe also hijacks the return address and, before 6.11 on x86-64, traps again on return. " +
			"That is microseconds per call in the probed process, on its own CPU time, invisible to run_time_ns.",
		Subjects: subjects(c),
		Evidence: ev,
		Remediation: []string{
			"Probe a rarer function, or use a USDT probe or a tracepoint the application already has",
			"Drop the uretprobe if the return value is not needed (it doubles the traps); measure latency from a rarer point",
			"Sample: attach for short windows, or filter the probe to the processes that matter (pid), so other callers do not trap",
			"The trap cost is an estimate: wolf measures it with a probe on itself (trap_ns_source=measured); wolf bpf --trap-ns N sets it",
		},
		References: []string{talkRef + ": uprobes cost ≈ 1.7 µs per hit", refStats},
	}, true
}

// hotKretprobe flags kretprobes on a hot path (the Datadog talk's first story).
func hotKretprobe(c *Cost, th Thresholds) (finding.Finding, bool) {
	if !c.has(KindKretprobe, KindKretMulti) || c.RunsPerS < th.HotRunsPerS {
		return finding.Finding{}, false
	}
	var missed uint64
	for _, a := range c.Attach {
		missed += a.Missed
	}
	ev := evidence(c)
	ev["kprobe_missed"] = missed
	sev := finding.Warning
	if severity(c.OneCPUPct, th) == finding.Critical {
		sev = finding.Critical
	}
	return finding.Finding{
		ID: "bpf.hot-kretprobe", Investigator: "bpf", Severity: sev,
		Title: fmt.Sprintf("kretprobe on a hot path: %s fires %.0f times/s (%s)", c.Where(), c.RunsPerS, c.Label()),
		Summary: fmt.Sprintf("Every call of the probed kernel function takes a return instance from a shared pool; held by %s; %d hits missed for want of an instance.",
			c.Who(), missed),
		Mechanism: "A kretprobe saves each call's return address in a kretprobe_instance taken from a pool shared by all CPUs: a spinlock before 5.10, a lock-free freelist (cache-line bouncing) until the per-CPU objpool/rethook. " +
			"On many CPUs a hot function's callers serialise there: the Datadog talk measured network throughput falling from 4.2 M to 119 K.",
		Subjects: subjects(c),
		Evidence: ev,
		Remediation: []string{
			"Use fexit (BPF trampoline, no instance pool) where the kernel allows it, or a tracepoint at the function's end",
			"Probe a rarer function, or drop the return probe if the return value is not needed",
			"On old kernels raise maxactive only to stop misses: it does not remove the lock",
		},
		References: []string{talkRef + ": kretprobe scaling pains (4.14 spinlock, 6.6 freelist, objpool)"},
	}, true
}

func recursionMisses(c *Cost) finding.Finding {
	return finding.Finding{
		ID: "bpf.recursion-misses", Investigator: "bpf", Severity: finding.Warning,
		Title: fmt.Sprintf("BPF %s was skipped %d times: another BPF program was already running on that CPU", c.Label(), c.Misses),
		Summary: fmt.Sprintf("The kernel did not run it %d times in the window (%s); whatever it counts is short by that much.",
			c.Misses, c.Where()),
		Mechanism: "The kernel allows one tracing BPF program per CPU at a time (bpf_prog_active / per-program recursion guard): an event firing while another program runs, e.g. a probe on a function that a BPF program itself calls, is skipped and counted as a recursion miss. " +
			"Tools that rely on seeing every event silently lose them.",
		Subjects: subjects(c),
		Evidence: evidence(c),
		Remediation: []string{
			"Do not probe functions that BPF programs themselves call (map operations, ring buffer, helpers)",
			"Prefer tp_btf/raw tracepoints and fentry over kprobes on hot shared paths; report misses alongside results",
		},
		References: []string{refStats},
	}
}

// kernelAtLeast compares a release string ("6.8.0-45-generic") with a
// major.minor version; unknown releases count as new.
func kernelAtLeast(release string, major, minor int) bool {
	var a, b int
	if n, _ := fmt.Sscanf(release, "%d.%d", &a, &b); n != 2 {
		return true
	}
	return a > major || (a == major && b >= minor)
}

// fentryRisk notes tracing programs (fentry/fexit/fmod_ret): detaching them
// waits for an RCU-tasks grace period, the talk's container-stop hang.
func fentryRisk(costs []Cost, kernel string) (finding.Finding, bool) {
	var progs []string
	var ids []uint32
	var ss []finding.Subject
	for i := range costs {
		c := &costs[i]
		if c.Wolf || !c.has(KindFentry, KindFexit, KindFmodRet) {
			continue
		}
		progs = append(progs, fmt.Sprintf("%d %s (%s)", c.ID, c.Name, c.Where()))
		ids = append(ids, c.ID)
		ss = append(ss, subjects(c)...)
	}
	if len(progs) == 0 {
		return finding.Finding{}, false
	}
	sev := finding.Info
	fixed := "this kernel has the fix (6.9+), the risk is slow detach, not deadlock"
	if !kernelAtLeast(kernel, 6, 9) {
		sev = finding.Warning
		fixed = "this kernel predates the 2024 rcu-tasks fix (6.9): detaching can deadlock against an exiting pid namespace"
	}
	return finding.Finding{
		ID: "bpf.fentry-detach", Investigator: "bpf", Severity: sev,
		Title:   fmt.Sprintf("%d fentry/fexit program(s) attached: detaching waits for an RCU-tasks grace period", len(progs)),
		Summary: "Programs: " + strings.Join(progs, "; ") + ". " + fixed + ".",
		Mechanism: "Detaching a trampoline program rebuilds the BPF trampoline and waits in synchronize_rcu_tasks() until every task has voluntarily context-switched; tasks late in do_exit are waited for through an SRCU section. " +
			"In the Datadog talk, a container's pid-1 zapping its namespace held that SRCU section while waiting for the agent, the agent waited in synchronize_rcu_tasks, and docker stop hung.",
		Subjects: ss,
		Evidence: map[string]any{"programs": len(progs), "prog_ids": ids, "kernel": kernel},
		Remediation: []string{
			"Detach (close the links) before the agent's pid namespace is torn down, not from its exit path",
			"On kernels before 6.9 backport 'rcu-tasks: Maintain lists to eliminate RCU-tasks/do_exit() deadlocks', or use raw tracepoints",
		},
		References: []string{talkRef + ": a deadlock in fentry (RCU tasks)"},
	}, true
}

// uprobeRegisterRisk notes uprobes on files that many processes map:
// registering and removing them write-locks every such process's mmap_lock.
func uprobeRegisterRisk(costs []Cost, kernel string, th Thresholds) []finding.Finding {
	type target struct {
		file   string
		shared int
		ids    []uint32
		ss     []finding.Subject
		hot    float64
	}
	byFile := map[string]*target{}
	var files []string
	for i := range costs {
		c := &costs[i]
		if c.Wolf {
			continue
		}
		for _, a := range c.Attach {
			if a.Kind != KindUprobe && a.Kind != KindUretprobe && a.Kind != KindUprobeMulti {
				continue
			}
			if a.SharedBy >= 0 && a.SharedBy < th.SharedProcs {
				continue
			}
			t := byFile[a.File]
			if t == nil {
				t = &target{file: a.File, shared: a.SharedBy}
				byFile[a.File] = t
				files = append(files, a.File)
			}
			t.ids = append(t.ids, c.ID)
			t.ss = append(t.ss, subjects(c)...)
			t.hot += c.RunsPerS
		}
	}
	sort.Strings(files)
	var out []finding.Finding
	for _, f := range files {
		t := byFile[f]
		who := fmt.Sprintf("%d processes run it", t.shared)
		if t.shared < 0 {
			who = "a shared library: every process that links it maps it"
		}
		sev := finding.Info
		note := "this kernel resolves uprobe hits without mmap_lock in the common case (6.14+), so the risk is at register and unregister"
		if !kernelAtLeast(kernel, 6, 14) {
			note = "before 6.14 every hit also takes mmap_lock for reading (find_active_uprobe), so hits queue behind that writer"
			if t.hot >= th.HotRunsPerS {
				sev = finding.Warning
			}
		}
		out = append(out, finding.Finding{
			ID: "bpf.uprobe-shared-file", Investigator: "bpf", Severity: sev,
			Title:   fmt.Sprintf("uprobes on %s (%s): attaching or detaching write-locks each of those processes' mmap_lock", f, who),
			Summary: fmt.Sprintf("Programs %v probe this file; %s.", t.ids, note),
			Mechanism: "uprobe_register walks every mm that maps the file and takes its mmap_lock for writing to insert the breakpoint; rw-semaphores queue readers behind a waiting writer. " +
				"In the Datadog talk, with a deep mmap_lock queue a blocked registration stalled page faults and uprobe hits in every process mapping the file, until khungtaskd fired.",
			Subjects: t.ss,
			Evidence: map[string]any{"file": f, "shared_by_processes": t.shared, "prog_ids": t.ids, "runs_per_s": human.Round(t.hot, 2)},
			Remediation: []string{
				"Attach uprobes once at agent start, not repeatedly; filter by pid so only target processes get breakpoints",
				"Prefer USDT or application-level hooks in widely shared libraries; watch mmap_lock contention (wolf locks) while attaching",
			},
			References: []string{talkRef + ": a production incident due to uprobe (uprobe_register vs mmap_lock); kernel commit 'uprobes: add speculative lockless VMA-to-inode-to-uprobe resolution'"},
		})
	}
	return out
}

// summary is one info finding with the totals.
func summary(s *Snapshot, costs []Cost) finding.Finding {
	var run, runs uint64
	var third, attached int
	for i := range costs {
		run += costs[i].RunNs
		runs += costs[i].Runs
		if !costs[i].Wolf {
			third++
		}
		if len(costs[i].Attach) > 0 {
			attached++
		}
	}
	secs := max(s.Window.Seconds(), 1e-9)
	one := float64(run) / 1e9 / secs * 100
	title := fmt.Sprintf("%d BPF programs loaded (%d through links); together %.0f runs/s, %.2f%% of one CPU over %.1f s",
		len(costs), attached, float64(runs)/secs, one, s.Window.Seconds())
	sum := "Measured with the kernel's BPF run statistics, enabled only for the window."
	if s.StatsOff {
		sum = "The kernel would not enable BPF run statistics (BPF_ENABLE_STATS, 5.8+): run counts and times are unknown."
	}
	if s.PID != 0 {
		title = fmt.Sprintf("pid %d: ", s.PID) + title
	}
	if len(costs) > 0 {
		top := &costs[0]
		sum += fmt.Sprintf(" Most costly: %s, %s, %.2f%% of one CPU.", top.Label(), top.Where(), top.TotalOneCPUPct())
	}
	return finding.Finding{
		ID: "bpf.summary", Investigator: "bpf", Severity: finding.Info,
		Title:   title,
		Summary: sum,
		Evidence: map[string]any{"programs": len(costs), "third_party_programs": third, "runs_per_s": human.Round(float64(runs)/secs, 2),
			"run_ns": run, "one_cpu_pct": human.Round(one, 2), "cpus": s.NumCPU, "window_s": human.Round(secs, 2)},
	}
}

// listed is one line of the bpftop-like list.
func listed(c *Cost) finding.Finding {
	title := fmt.Sprintf("%s: %.0f runs/s, %.0f ns/run, %.2f%% CPU (%.2f%% of one) — %s", c.Label(), c.RunsPerS, c.AvgNs, c.CPUPct, c.OneCPUPct, c.Where())
	if c.TrapPct > 0 {
		title += fmt.Sprintf(" + ~%.1f%% of one CPU in traps (estimate)", c.TrapPct)
	}
	return finding.Finding{
		ID: "bpf.program", Investigator: "bpf", Severity: finding.Info,
		Title:    title,
		Summary:  "Held by " + c.Who() + ".",
		Subjects: subjects(c),
		Evidence: evidence(c),
	}
}
