package softirq

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/hist"
	"github.com/wolf-investigator/wolf/internal/human"
	"github.com/wolf-investigator/wolf/internal/pace"
)

func stallFinding(s *Snapshot, vec int, h hist.Log2, stalls []Stall) finding.Finding {
	f := stallFindingOf(s, vec, h, stalls)
	cov, known := sampleCoverage(s, stalls)
	if known {
		f.Evidence["cpu_sample_coverage_pct"] = human.Round(100*cov, 2)
	}
	switch {
	case onWolf(s, stalls):
		// wolf's own work (verifying, attaching, freeing programs: RCU
		// callbacks, code patching) ran under these softirqs: not the host's.
		f.Severity = finding.Info
		f.Evidence["cause"] = causeWolf
		f.Title = fmt.Sprintf("%s softirq runs of up to %s on CPU %v ran on top of wolf itself, while it loaded and attached its probes", Vectors[vec], human.Duration(maxStall(stalls)), f.Evidence["worst_cpu"])
		f.Summary += " Every one interrupted wolf's own process: loading, attaching and freeing BPF programs is kernel work (verification, code patching, RCU callbacks) that a softirq then finishes; it says nothing about the host."
		f.Remediation = []string{"Nothing to do about the host; a longer --duration makes wolf's start-up a smaller part of the window."}
	case f.Evidence["cause"] == causeUnknown && maxStall(stalls) > pace.Ordinary(maxStall(stalls), s.Slowdown) && pace.Ordinary(maxStall(stalls), s.Slowdown) < s.Threshold:
		// The CPU ran the softirq, slowly: this machine does everything
		// several times more slowly (emulation), and the run is within the
		// threshold once that is taken out. (A run with a known cause, a
		// TCP collapse, keeps it: that work is real at any speed.)
		f.Severity = finding.Info
		f.Evidence["cause"] = causeSlowCPU
		f.Evidence["machine_slowdown"] = human.Round(s.Slowdown, 1)
		f.Title = fmt.Sprintf("%s softirq runs of up to %s on CPU %v, on a machine %.0fx slower than usual: about %s of an ordinary CPU's work", Vectors[vec], human.Duration(maxStall(stalls)), f.Evidence["worst_cpu"], s.Slowdown, human.Duration(time.Duration(float64(maxStall(stalls))/s.Slowdown)))
		f.Summary += fmt.Sprintf(" This machine starts a process %.1f times more slowly than an ordinary one (an emulated CPU, such as QEMU without KVM, runs kernel code that much slower), so the run is within the %s threshold once that is taken out.", s.Slowdown, human.Duration(s.Threshold))
		f.Mechanism = "Emulation runs every instruction several times slower: softirq work that takes an ordinary CPU under a millisecond takes several here. The runs are long in wall time, not in work."
		f.Remediation = []string{"Nothing to do inside the machine; on hardware virtualization (KVM) or bare metal the same work is short."}
	case known && cov < mostlyAbsent && s.StealPct < 1 && s.Virtual != "":
		// An emulator or a hypervisor that accounts no steal: the vCPU
		// stopped executing in the run, and nothing else says so.
		f.Severity = finding.Info
		f.Evidence["cause"] = causeHypervisor
		f.Evidence["virtual"] = s.Virtual
		f.Title = fmt.Sprintf("%s softirq runs of up to %s on CPU %v were mostly time the vCPU did not run (virtual machine: %s)", Vectors[vec], human.Duration(maxStall(stalls)), f.Evidence["worst_cpu"], s.Virtual)
		f.Summary += fmt.Sprintf(" Only %.0f%% of the timer samples expected during those runs landed: the CPU was not executing them. This machine is virtual (%s) and its hypervisor accounts no steal time, so this is the only sign.", 100*cov, s.Virtual)
		f.Mechanism = "The sampling timer fires only while a CPU runs; a virtual CPU that stops executing in the middle of a softirq (descheduled by its hypervisor, or waiting its turn in an emulator such as QEMU's TCG) takes no samples, yet the softirq's clock keeps running, so the run looks long from inside the guest."
		f.Remediation = []string{"Look at the host, not the guest: its load, CPU overcommit, or emulation instead of hardware virtualization (KVM)."}
	case known && cov < mostlyAbsent && s.StealPct >= 1:
		// The stall is real for whatever waited on that CPU, but nothing
		// in the softirq was slow: its vCPU was not running.
		f.Severity = finding.Info
		f.Evidence["cause"] = causeHypervisor
		f.Title = fmt.Sprintf("%s softirq runs of up to %s on CPU %v were mostly time the vCPU did not run (hypervisor steal %.1f%% in the window)", Vectors[vec], human.Duration(maxStall(stalls)), f.Evidence["worst_cpu"], s.StealPct)
		f.Summary += fmt.Sprintf(" Only %.0f%% of the timer samples expected during those runs landed: the CPU was not executing them.", 100*cov)
		f.Mechanism = "The sampling timer fires only while a CPU runs; a virtual CPU descheduled by the hypervisor in the middle of a softirq takes no samples, yet the softirq's clock keeps running, so the run looks long from inside the guest. Packets and tasks on that CPU did wait."
		f.Remediation = []string{"Look at the host, not the guest: CPU overcommit or noisy neighbours (steal time: mpstat -P ALL 1, column %steal); dedicated or pinned vCPUs remove it."}
	case known && cov < mostlyAbsent:
		f.Summary += fmt.Sprintf(" Only %.0f%% of the timer samples expected during those runs landed: interrupts were off for most of them, or the CPU was not running.", 100*cov)
	case s.StealPct >= 5:
		f.Summary += fmt.Sprintf(" The hypervisor took %.0f%% of CPU time (steal) in the window: part of a long run may be time its vCPU did not run at all.", s.StealPct)
	}
	return f
}

const (
	causeHypervisor = "hypervisor"
	causeWolf       = "wolf"
	causeSlowCPU    = "slow-cpu"
)

// onWolf: every stall ran on top of wolf's own process, in a vector wolf's
// own start-up drives (RCU callbacks, timers, the scheduler). Network and
// block softirqs on top of wolf ran for I/O its process did, which is
// real work (a lab run inside wolf's own process, in tests).
func onWolf(s *Snapshot, stalls []Stall) bool {
	if s.SelfTGID <= 0 || len(stalls) == 0 {
		return false
	}
	switch stalls[0].Vector {
	case "NET_RX", "NET_TX", "BLOCK", "IRQ_POLL":
		return false
	}
	for _, st := range stalls {
		if st.TGID != s.SelfTGID {
			return false
		}
	}
	return true
}

// mostlyAbsent is the sample coverage under which a CPU was mostly not
// executing a run: fewer than half the samples expected landed. (A CPU
// that runs its softirq with interrupts on takes ~all of them: 18 of 18,
// 20 of 21 in the tests.) It was a quarter once, which left a 7.9 ms TIMER
// run under 19 % steal with 2 of 8 samples a warning.
const mostlyAbsent = 0.5

// sampleCoverage is the share of the perf samples expected during the
// stalls (duration × rate) that landed; known is false without sampling or
// when too few were expected to tell.
func sampleCoverage(s *Snapshot, stalls []Stall) (cov float64, known bool) {
	if s.SampleHz <= 0 {
		return 0, false
	}
	var got, want float64
	for _, st := range stalls {
		got += float64(st.CPUSamples)
		want += st.Duration.Seconds() * float64(s.SampleHz)
	}
	if want < 4 {
		return 0, false
	}
	return min(got/want, 1), true
}

func maxStall(stalls []Stall) time.Duration {
	var m time.Duration
	for _, st := range stalls {
		m = max(m, st.Duration)
	}
	return m
}

func stallFindingOf(s *Snapshot, vec int, h hist.Log2, stalls []Stall) finding.Finding {
	sort.Slice(stalls, func(i, j int) bool { return stalls[i].Duration > stalls[j].Duration })
	maxD := time.Duration(h.Max)
	if len(stalls) > 0 && stalls[0].Duration > maxD {
		maxD = stalls[0].Duration
	}
	cpus, worstCPU := stallCPUs(s, vec, stalls)
	ev := stallEvidence(s, vec, h, stalls, maxD, worstCPU)
	f := finding.Finding{
		ID:           "softirq.stall",
		Investigator: "softirq",
		Severity:     finding.Warning,
		References:   []string{storyRef},
	}
	if maxD >= CriticalStall {
		f.Severity = finding.Critical
	}
	where := fmt.Sprintf("CPU %d", worstCPU)
	if len(cpus) > 1 {
		where = fmt.Sprintf("CPUs %s", cpuList(cpus, func(c *cpuAgg) int { return c.cpu }))
	}
	runs := fmt.Sprintf("%s ≥ %s in %s", human.Plural(len(stalls), "run", "runs"), human.Duration(s.Threshold), human.Duration(s.Window))
	if len(stalls) == 0 {
		runs = fmt.Sprintf("runs ≥ %s seen, details lost", human.Duration(s.Threshold))
	}
	f.Summary = fmt.Sprintf("%s ran %d times in %s; %d of them lasted %s or more, up to %s (p99 %s, p50 %s). While a softirq handler runs, that CPU processes no other softirq and runs no task.",
		handlerName(vec), h.Count, human.Duration(s.Window), len(stalls), human.Duration(s.Threshold), human.Duration(maxD), human.Duration(time.Duration(h.Quantile(0.99))), human.Duration(time.Duration(h.Quantile(0.5))))
	f.Evidence = ev
	if vec != vecNetRX {
		f.Title = fmt.Sprintf("%s softirq ran %s on %s (%s)", Vectors[vec], human.Duration(maxD), where, runs)
		f.Mechanism = vectorMechanism(vec)
		f.Remediation = vectorRemedies(vec)
		f.Subjects = cpuSubjects(stalls, nil)
		return f
	}
	netRXStall(s, &f, fmt.Sprintf("NET_RX softirq (net_rx_action) stalled %s for %s (%s)", where, human.Duration(maxD), runs), stalls)
	return f
}

// cpuAgg is the stalls of one CPU.
type cpuAgg struct {
	cpu   int
	n     int
	worst time.Duration
}

// stallCPUs groups the stalls by CPU, worst CPU first, and names the worst
// CPU; from the per-CPU histograms when the stall events were lost.
func stallCPUs(s *Snapshot, vec int, stalls []Stall) (cpus []*cpuAgg, worstCPU int) {
	byCPU := map[int]*cpuAgg{}
	for _, st := range stalls {
		c := byCPU[st.CPU]
		if c == nil {
			c = &cpuAgg{cpu: st.CPU}
			byCPU[st.CPU] = c
		}
		c.n++
		c.worst = max(c.worst, st.Duration)
	}
	for _, c := range byCPU {
		cpus = append(cpus, c)
	}
	sort.Slice(cpus, func(i, j int) bool {
		if cpus[i].worst != cpus[j].worst {
			return cpus[i].worst > cpus[j].worst
		}
		return cpus[i].cpu < cpus[j].cpu
	})
	worstCPU = -1
	if len(cpus) > 0 {
		return cpus, cpus[0].cpu
	}
	var m uint64
	for cpu := range s.Run[vec] {
		if s.Run[vec][cpu].Max > m {
			m, worstCPU = s.Run[vec][cpu].Max, cpu
		}
	}
	return cpus, worstCPU
}

// stallEvidence is what every stall finding says in numbers; NET_RX's
// adds its settings and packets (and, in netRXStall, its attribution).
func stallEvidence(s *Snapshot, vec int, h hist.Log2, stalls []Stall, maxD time.Duration, worstCPU int) map[string]any {
	ev := map[string]any{
		"vector":       Vectors[vec],
		"max_us":       us(maxD),
		"p99_us":       us(time.Duration(h.Quantile(0.99))),
		"p50_us":       us(time.Duration(h.Quantile(0.5))),
		"runs":         h.Count,
		"run_time_ms":  ms(time.Duration(h.Sum)),
		"stalls":       len(stalls),
		"threshold_us": us(s.Threshold),
		"window_s":     s.Window.Seconds(),
		"stalls_per_s": human.Round(float64(len(stalls))/max(s.Window.Seconds(), 0.001), 2),
		"worst_cpu":    worstCPU,
		"cause":        causeUnknown,
		"stalls_lost":  s.StallsLost,
		"stall_list":   stallList(stalls, 10),
		"sample_hz":    s.SampleHz,
	}
	if vec == vecNetRX {
		ev["netdev_budget"] = s.Settings.NetdevBudget
		ev["tcp_rmem_max_bytes"] = s.Settings.TCPRmem[2]
		ev["netdev_budget_usecs"] = s.Settings.NetdevBudgetUsecs
		if len(stalls) > 0 {
			var packets uint64
			for _, st := range stalls {
				packets += st.Packets
			}
			ev["packets_in_stalls"] = packets
		}
	}
	if s.StealPct >= 0 {
		ev["steal_pct"] = human.Round(s.StealPct, 2)
	}
	return ev
}

// netRXStall completes a NET_RX stall finding titled head: it attributes
// the stall with samples from the stalls (else from all of NET_RX) and
// with the TcpExt counters of the same window, and names the cause: TCP
// receive-queue collapse, packet filtering, or what the samples show.
func netRXStall(s *Snapshot, f *finding.Finding, head string, stalls []Stall) {
	ev := f.Evidence
	att := attribute(s.StallStacks, "stall")
	if att.Samples == 0 {
		att = attribute(s.RxStacks, "net_rx")
	}
	tcp := SumDeltas(s.Netns)
	collapsed := tcp["TCPRcvCollapsed"] + tcp["PruneCalled"] + tcp["OfoPruned"]
	if att.Samples > 0 {
		ev["samples"] = att.Samples
		ev["samples_from"] = att.Source
		ev["collapse_share_pct"] = human.Round(100*att.Collapse, 2)
		ev["top_functions"] = att.selfSummary(5)
		ev["stall_stacks_folded"] = att.Folded
	}
	for _, k := range TCPCounters {
		if v, ok := tcp[k]; ok {
			ev[counterKey(k)] = v
		}
	}
	if len(s.Netns) > 0 && pruneWeight(s.Netns[0].Delta) > 0 {
		ev["netns"] = s.Netns[0].Inode
		ev["netns_pid"] = s.Netns[0].PID
		ev["netns_comm"] = s.Netns[0].Comm
	}
	if len(s.NAPI) > 0 {
		ev["napi_devices"] = napiSummary(s.NAPI)
	}
	if n := sumDrops(s.Drops[1]); n > 0 {
		ev["drops_in_net_rx"] = n
		ev["drop_reasons_in_net_rx"] = topReasons(s.Drops[1], 5)
	}

	collapse := (att.Samples > 0 && att.Collapse >= 0.25) || (att.Samples == 0 && tcp["TCPRcvCollapsed"] > 0)
	switch {
	case collapse:
		ev["cause"] = causeCollapse
		why := ""
		if att.Samples > 0 {
			why = fmt.Sprintf("tcp_collapse/tcp_prune_queue in %s of the stall samples", human.Percent(100*att.Collapse))
		} else {
			why = fmt.Sprintf("TCPRcvCollapsed +%d in the same window", tcp["TCPRcvCollapsed"])
		}
		f.Title = head + ": TCP receive-queue collapse (" + why + ")"
		f.Summary += " " + collapseSummary(s, tcp, att)
		f.Mechanism = collapseMechanism(s.Settings)
		f.Remediation = collapseRemedies(s)
	case att.Samples > 0 && att.Netfilter >= 0.25:
		ev["cause"] = causeNetfilter
		f.Title = head + fmt.Sprintf(": packet filtering (netfilter in %s of the samples)", human.Percent(100*att.Netfilter))
		f.Summary += fmt.Sprintf(" Sampled kernel stacks: %s.", att.selfSummary(3))
		f.Mechanism = "Firewall and conntrack rules run inside NET_RX for every packet: long linear rule sets or conntrack table walks make each packet expensive, and a budget of 300 packets then takes milliseconds."
		f.Remediation = []string{
			"Look at the rule set: nft list ruleset | wc -l; iptables-save | wc -l; move to sets/maps instead of linear rules.",
			"Check conntrack: conntrack -S (search_restart, drop), sysctl net.netfilter.nf_conntrack_buckets.",
		}
	default:
		f.Title = head
		if att.Samples > 0 {
			f.Title += fmt.Sprintf("; time went to %s", att.selfSummary(2))
			f.Summary += fmt.Sprintf(" Sampled kernel stacks in NET_RX: %s.", att.selfSummary(5))
		} else if s.SampleHz == 0 {
			f.Summary += " Stacks were not sampled (no perf events), so the functions are unknown."
		}
		if collapsed > 0 {
			f.Summary += fmt.Sprintf(" TCP also pruned receive queues meanwhile (PruneCalled +%d, TCPRcvCollapsed +%d).", tcp["PruneCalled"], tcp["TCPRcvCollapsed"])
		}
		f.Mechanism = "net_rx_action polls NAPI instances until netdev_budget packets or netdev_budget_usecs have passed, but a single packet's processing (protocol work, socket queueing, filtering) is not preemptible: one slow step holds the CPU for its whole duration."
		f.Remediation = []string{
			"See where the time goes: the folded stacks in --format json (stall_stacks_folded), or perf record -a -g -- sleep 10 during a stall.",
			"Spread receive work across CPUs (RSS queues, RPS: /sys/class/net/DEV/queues/rx-*/rps_cpus) so one CPU's stall delays fewer flows.",
		}
	}
	f.Subjects = cpuSubjects(stalls, att.Top)
}

func collapseSummary(s *Snapshot, tcp map[string]int64, att attribution) string {
	var parts []string
	if att.Samples > 0 {
		parts = append(parts, fmt.Sprintf("Of %d kernel stacks sampled in those runs, %s were pruning a TCP receive queue (tcp_prune_queue → tcp_collapse); the innermost functions were %s.", att.Samples, human.Percent(100*att.Collapse), att.selfSummary(3)))
	}
	if tcp["PruneCalled"]+tcp["TCPRcvCollapsed"] > 0 {
		where := ""
		if len(s.Netns) > 0 {
			where = fmt.Sprintf(" in network namespace %d (%s, pid %d)", s.Netns[0].Inode, s.Netns[0].Comm, s.Netns[0].PID)
		}
		parts = append(parts, fmt.Sprintf("In the same window TCP pruned receive queues %d times and collapsed %d segments%s.", tcp["PruneCalled"], tcp["TCPRcvCollapsed"], where))
	}
	if d := tcp["RcvPruned"] + tcp["TCPRcvQDrop"] + tcp["OfoPruned"]; d > 0 {
		parts = append(parts, fmt.Sprintf("Collapsing was not enough %d times: packets were dropped (RcvPruned +%d, TCPRcvQDrop +%d, OfoPruned +%d).", d, tcp["RcvPruned"], tcp["TCPRcvQDrop"], tcp["OfoPruned"]))
	}
	return strings.Join(parts, " ")
}

func collapseMechanism(set Settings) string {
	buf := "large receive buffers"
	if set.TCPRmem[2] > 0 {
		buf = fmt.Sprintf("receive buffers of up to %s (net.ipv4.tcp_rmem max)", human.Bytes(set.TCPRmem[2]))
	}
	return fmt.Sprintf("When a socket's queued segments use more memory than its receive buffer allows (buffer accounting counts each sk_buff's overhead, not just payload), TCP prunes the queue in softirq context: tcp_collapse copies every small segment into compact buffers while that CPU processes no other packet. With %s and small segments from a slow reader, one collapse walks tens of thousands of sk_buffs and takes milliseconds: Cloudflare measured 23 ms at 32 MiB and 3 ms at 2 MiB.", buf)
}

func collapseRemedies(s *Snapshot) []string {
	def := int64(131072)
	if s.Settings.TCPRmem[1] > 0 && s.Settings.TCPRmem[1] < 4<<20 {
		def = s.Settings.TCPRmem[1]
	}
	min := int64(4096)
	if s.Settings.TCPRmem[0] > 0 {
		min = s.Settings.TCPRmem[0]
	}
	out := []string{
		fmt.Sprintf("Cap TCP receive buffers: sysctl -w net.ipv4.tcp_rmem='%d %d 4194304' (Cloudflare settled on a 4 MiB max: 2 MiB cut tcp_collapse to 3 ms but costs throughput on long fat paths). The setting is per network namespace; containers need it in theirs.", min, def),
	}
	if len(s.Netns) > 0 && pruneWeight(s.Netns[0].Delta) > 0 {
		out = append(out, fmt.Sprintf("Find the sockets: nsenter -t %d -n ss -tmi — a large skmem r (memory queued) against rb (the buffer) with a modest Recv-Q is a slow reader of many small segments.", s.Netns[0].PID))
	} else {
		out = append(out, "Find the sockets: ss -tmi — a large skmem r (memory queued) against rb (the buffer) with a modest Recv-Q is a slow reader of many small segments.")
	}
	out = append(out, "Fix the pattern: make the receiving application read promptly, and have senders coalesce tiny writes (leave Nagle on, TCP_CORK, or batch in user space): every small segment costs a full sk_buff of buffer.")
	return out
}

func handlerName(vec int) string {
	switch vec {
	case vecNetRX:
		return "net_rx_action"
	case 2:
		return "net_tx_action"
	case 1:
		return "the timer softirq (run_timer_softirq)"
	case 9:
		return "rcu_core"
	case 4:
		return "blk_done_softirq"
	case 6, 0:
		return "the tasklet softirq"
	case 7:
		return "sched_balance_softirq"
	case 8:
		return "hrtimer_run_softirq"
	}
	return Vectors[vec] + " softirq"
}

func vectorMechanism(vec int) string {
	switch Vectors[vec] {
	case "RCU":
		return "The RCU softirq invokes callbacks queued by call_rcu and kfree_rcu; a burst of frees (a large unmount, a flood of closing sockets) runs them back to back on one CPU."
	case "TIMER", "HRTIMER":
		return "Expired timers run their callbacks in this softirq; thousands of timers expiring together, or one slow callback, hold the CPU."
	case "BLOCK":
		return "Block I/O completions run here; a storage device completing a large batch at once makes one long run."
	case "TASKLET", "HI":
		return "Drivers defer interrupt work to tasklets; a slow driver tasklet holds the CPU for its whole run."
	case "NET_TX":
		return "net_tx_action frees transmitted packets and restarts stopped queues; large completion batches or qdisc work make it long."
	case "SCHED":
		return "The scheduler rebalances load between CPUs here; very large machines or many runnable tasks make a balancing pass long."
	}
	return "Softirq handlers run with preemption off: while one runs, the CPU runs nothing else."
}

func vectorRemedies(vec int) []string {
	switch Vectors[vec] {
	case "RCU":
		return []string{"Offload RCU callbacks from latency-sensitive CPUs: boot with rcu_nocbs=CPUS (and rcutree.use_softirq=0 to run them in rcuc kthreads)."}
	case "BLOCK":
		return []string{"Spread completions: check /sys/block/DEV/queue/rq_affinity and the device's interrupt affinity."}
	}
	return []string{"Trace the vector's handlers during a stall: perf record -a -g -e irq:softirq_entry,irq:softirq_exit -- sleep 10."}
}

// cpuSubjects names the CPUs that stalled, worst first, with the task each
// worst run interrupted; top, if set, is the stack to show under the first.
func cpuSubjects(stalls []Stall, top *Stack) []finding.Subject {
	worst := map[int]Stall{}
	count := map[int]int{}
	for _, st := range stalls {
		count[st.CPU]++
		if w, ok := worst[st.CPU]; !ok || st.Duration > w.Duration {
			worst[st.CPU] = st
		}
	}
	var cpus []int
	for c := range worst {
		cpus = append(cpus, c)
	}
	sort.Slice(cpus, func(i, j int) bool {
		if worst[cpus[i]].Duration != worst[cpus[j]].Duration {
			return worst[cpus[i]].Duration > worst[cpus[j]].Duration
		}
		return cpus[i] < cpus[j]
	})
	var out []finding.Subject
	for i, c := range cpus {
		if i == 8 {
			break
		}
		w := worst[c]
		cpu := c
		detail := fmt.Sprintf("%s ≥ threshold, worst %s at %s", human.Plural(count[c], "run", "runs"), human.Duration(w.Duration), w.At.Format("15:04:05.000"))
		if w.Vector == "NET_RX" && w.Polls > 0 {
			detail += fmt.Sprintf(", %d packets in %d NAPI polls", w.Packets, w.Polls)
		}
		if w.Comm != "" {
			detail += fmt.Sprintf(", on top of %s (pid %d)", w.Comm, w.TGID)
		}
		sub := finding.Subject{Role: finding.RoleCPU, CPU: &cpu, Detail: detail}
		if i == 0 && top != nil {
			sub.Stack = top.Frames
		}
		out = append(out, sub)
	}
	return out
}

func stallList(stalls []Stall, n int) []string {
	var out []string
	for i := 0; i < len(stalls) && i < n; i++ {
		st := stalls[i]
		out = append(out, fmt.Sprintf("%s cpu %d %s %s on %s/%d, %d packets", st.At.Format("15:04:05.000000"), st.CPU, st.Vector, human.Duration(st.Duration), st.Comm, st.PID, st.Packets))
	}
	return out
}

// waitFinding: softirqs raised but not run for a long time (ksoftirqd
// starved, or bottom halves disabled for long).

func cpuList[T any](xs []T, cpu func(T) int) string {
	var parts []string
	for i, x := range xs {
		if i == 6 {
			parts = append(parts, "…")
			break
		}
		parts = append(parts, strconv.Itoa(cpu(x)))
	}
	return strings.Join(parts, ", ")
}
