package softirq

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/hist"
)

// CriticalStall is the run time at which a softirq stall is critical: the
// seed's 23 ms net_rx_action run turned into 1.8 s ping spikes.
const CriticalStall = 20 * time.Millisecond

// seedRef is the story behind this investigator.
const seedRef = "https://blog.cloudflare.com/the-story-of-one-latency-spike/"

// Settings are the sysctls the analysis quotes; -1 means unknown.
type Settings struct {
	TCPRmem           [3]int64 // net.ipv4.tcp_rmem: min, default, max (bytes)
	NetdevBudget      int64    // net.core.netdev_budget (packets per NET_RX run)
	NetdevBudgetUsecs int64    // net.core.netdev_budget_usecs
	DevWeight         int64    // net.core.dev_weight (backlog NAPI budget)
	MaxBacklog        int64    // net.core.netdev_max_backlog
}

// UnknownSettings is Settings with nothing read.
func UnknownSettings() Settings {
	return Settings{TCPRmem: [3]int64{-1, -1, -1}, NetdevBudget: -1, NetdevBudgetUsecs: -1, DevWeight: -1, MaxBacklog: -1}
}

// Stack is one sampled kernel stack and how often it was seen.
type Stack struct {
	Frames []string // innermost first, "func+0x1f"
	Count  uint64
}

// Funcs are the frames' function names, innermost first.
func (s Stack) Funcs() []string {
	out := make([]string, len(s.Frames))
	for i, f := range s.Frames {
		out[i] = funcName(f)
	}
	return out
}

// Folded is the stack as flame-graph tools fold it: outermost first, ';'
// between functions, then the count.
func (s Stack) Folded() string {
	f := s.Funcs()
	for i, j := 0, len(f)-1; i < j; i, j = i+1, j-1 {
		f[i], f[j] = f[j], f[i]
	}
	return strings.Join(f, ";") + " " + strconv.FormatUint(s.Count, 10)
}

func funcName(frame string) string {
	name, _, _ := strings.Cut(frame, "+")
	name, _, _ = strings.Cut(name, " ")
	return name
}

// Snapshot is everything one window of observation produced, as the
// analysis needs it: pure data, so Conclude can be tested with fixtures.
type Snapshot struct {
	Window    time.Duration
	Threshold time.Duration
	// Run and Wait are log2 histograms in ns per vector, then per CPU
	// (index = CPU number).
	Run, Wait  [NrVectors][]hist.Log2
	Stalls     []Stall
	StallsLost uint64 // stalls seen but not delivered (ring buffer full, too many)
	NAPI       []NAPIStat
	Softnet    []Softnet // deltas over the window
	Netns      []NetnsDelta
	NetnsNote  string            // why TcpExt counters are missing, if they are
	Drops      [2]map[string]int // drop reason → count; [1] inside NET_RX
	// RxStacks are kernel stacks sampled inside NET_RX; StallStacks those
	// sampled in NET_RX runs that reached the threshold.
	RxStacks, StallStacks []Stack
	SampleHz              int // 0: stacks were not sampled
	Settings              Settings
	RaiseTraced           bool // softirq_raise attached: waits are known
	// StealPct is the share of CPU time the hypervisor took during the
	// window (/proc/stat steal), -1 when unknown. On a VM, a softirq run
	// includes any time its vCPU did not run at all.
	StealPct float64
	// Virtual names the hypervisor or emulator ("" on bare metal): its
	// vCPUs may stop executing with no steal accounted (Virtualized).
	Virtual string
	// SelfTGID is wolf's own process: a softirq run on top of it ran
	// while wolf loaded, attached or freed its BPF programs.
	SelfTGID int
}

// Merged is the vector's histogram over every CPU.
func (s *Snapshot) Merged(run bool, vec int) hist.Log2 {
	var h hist.Log2
	src := s.Wait[vec]
	if run {
		src = s.Run[vec]
	}
	for i := range src {
		h.Merge(&src[i])
	}
	return h
}

// Conclude turns a snapshot into findings.
func Conclude(s *Snapshot) []finding.Finding {
	var out []finding.Finding
	stalled := map[string][]Stall{}
	var longest Stall
	for _, st := range s.Stalls {
		stalled[st.Vector] = append(stalled[st.Vector], st)
		if st.Duration > longest.Duration {
			longest = st
		}
	}
	collapseExplained := false
	stallAt := map[string]int{} // vector → index in out
	for vec := 0; vec < NrVectors; vec++ {
		name := Vectors[vec]
		h := s.Merged(true, vec)
		if len(stalled[name]) == 0 && (h.Max < uint64(s.Threshold) || h.Count == 0) {
			continue
		}
		f := stallFinding(s, vec, h, stalled[name])
		if f.Evidence["cause"] == causeCollapse {
			collapseExplained = true
		}
		stallAt[name] = len(out)
		out = append(out, f)
	}
	if f, ok := waitFinding(s); ok {
		maxWait, _ := f.Evidence["max_us"].(float64)
		if i, ok := stallAt[longest.Vector]; ok && maxWait <= 1.5*us(longest.Duration) {
			// Softirqs raised during a stall wait for it: a consequence,
			// told with the stall rather than as a finding of its own.
			out[i].Evidence["other_softirqs_waited_max_us"] = maxWait
			out[i].Summary += " Softirqs raised meanwhile waited for it: " + f.Evidence["waits_summary"].(string) + "."
		} else {
			out = append(out, f)
		}
	}
	if f, ok := pruneFinding(s, collapseExplained); ok {
		out = append(out, f)
	}
	if f, ok := budgetFinding(s); ok {
		out = append(out, f)
	}
	if f, ok := dropFinding(s); ok {
		out = append(out, f)
	}
	finding.Sort(out)
	return out
}

const (
	causeCollapse  = "tcp-collapse"
	causeNetfilter = "netfilter"
	causeUnknown   = "unknown"
)

// collapseFuncs are the functions TCP prunes a receive queue in.
var collapseFuncs = map[string]bool{
	"tcp_collapse": true, "tcp_collapse_ofo_queue": true, "tcp_prune_queue": true,
	"tcp_prune_ofo_queue": true, "tcp_collapse_one": true,
}

var netfilterFuncs = map[string]bool{
	"nf_hook_slow": true, "nft_do_chain": true, "ipt_do_table": true, "ip6t_do_table": true,
	"nf_conntrack_in": true,
}

// attribution says where sampled NET_RX time went.
type attribution struct {
	Source  string // "stall" (samples in runs over the threshold) or "net_rx"
	Samples uint64
	// Share of samples with a collapse or netfilter function on the stack.
	Collapse, Netfilter float64
	Self                []funcShare // innermost functions, most sampled first
	Top                 *Stack
	Folded              []string
}

type funcShare struct {
	Func  string
	Share float64
}

func attribute(stacks []Stack, source string) attribution {
	a := attribution{Source: source}
	var collapse, netfilter uint64
	self := map[string]uint64{}
	for i := range stacks {
		st := &stacks[i]
		a.Samples += st.Count
		fs := st.Funcs()
		if len(fs) > 0 {
			self[fs[0]] += st.Count
		}
		hasC, hasN := false, false
		for _, f := range fs {
			hasC = hasC || collapseFuncs[f]
			hasN = hasN || netfilterFuncs[f]
		}
		if hasC {
			collapse += st.Count
		}
		if hasN {
			netfilter += st.Count
		}
		if a.Top == nil || st.Count > a.Top.Count {
			a.Top = st
		}
	}
	if a.Samples == 0 {
		return a
	}
	a.Collapse = float64(collapse) / float64(a.Samples)
	a.Netfilter = float64(netfilter) / float64(a.Samples)
	for f, n := range self {
		a.Self = append(a.Self, funcShare{f, float64(n) / float64(a.Samples)})
	}
	sort.Slice(a.Self, func(i, j int) bool {
		if a.Self[i].Share != a.Self[j].Share {
			return a.Self[i].Share > a.Self[j].Share
		}
		return a.Self[i].Func < a.Self[j].Func
	})
	sorted := append([]Stack(nil), stacks...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Count > sorted[j].Count })
	for i := 0; i < len(sorted) && i < 5; i++ {
		a.Folded = append(a.Folded, sorted[i].Folded())
	}
	return a
}

func (a attribution) selfSummary(n int) string {
	var parts []string
	for i := 0; i < len(a.Self) && i < n; i++ {
		parts = append(parts, fmt.Sprintf("%s %s", a.Self[i].Func, pct(a.Self[i].Share)))
	}
	return strings.Join(parts, ", ")
}

func stallFinding(s *Snapshot, vec int, h hist.Log2, stalls []Stall) finding.Finding {
	f := stallFindingOf(s, vec, h, stalls)
	cov, known := sampleCoverage(s, stalls)
	if known {
		f.Evidence["cpu_sample_coverage_pct"] = round2(100 * cov)
	}
	switch {
	case onWolf(s, stalls):
		// wolf's own work (verifying, attaching, freeing programs: RCU
		// callbacks, code patching) ran under these softirqs: not the host's.
		f.Severity = finding.Info
		f.Evidence["cause"] = causeWolf
		f.Title = fmt.Sprintf("%s softirq runs of up to %s on CPU %v ran on top of wolf itself, while it loaded and attached its probes", Vectors[vec], fmtDur(maxStall(stalls)), f.Evidence["worst_cpu"])
		f.Summary += " Every one interrupted wolf's own process: loading, attaching and freeing BPF programs is kernel work (verification, code patching, RCU callbacks) that a softirq then finishes; it says nothing about the host."
		f.Remediation = []string{"Nothing to do about the host; a longer --duration makes wolf's start-up a smaller part of the window."}
	case known && cov < mostlyAbsent && s.StealPct < 1 && s.Virtual != "":
		// An emulator or a hypervisor that accounts no steal: the vCPU
		// stopped executing in the run, and nothing else says so.
		f.Severity = finding.Info
		f.Evidence["cause"] = causeHypervisor
		f.Evidence["virtual"] = s.Virtual
		f.Title = fmt.Sprintf("%s softirq runs of up to %s on CPU %v were mostly time the vCPU did not run (virtual machine: %s)", Vectors[vec], fmtDur(maxStall(stalls)), f.Evidence["worst_cpu"], s.Virtual)
		f.Summary += fmt.Sprintf(" Only %.0f%% of the timer samples expected during those runs landed: the CPU was not executing them. This machine is virtual (%s) and its hypervisor accounts no steal time, so this is the only sign.", 100*cov, s.Virtual)
		f.Mechanism = "The sampling timer fires only while a CPU runs; a virtual CPU that stops executing in the middle of a softirq (descheduled by its hypervisor, or waiting its turn in an emulator such as QEMU's TCG) takes no samples, yet the softirq's clock keeps running, so the run looks long from inside the guest."
		f.Remediation = []string{"Look at the host, not the guest: its load, CPU overcommit, or emulation instead of hardware virtualization (KVM)."}
	case known && cov < mostlyAbsent && s.StealPct >= 1:
		// The stall is real for whatever waited on that CPU, but nothing
		// in the softirq was slow: its vCPU was not running.
		f.Severity = finding.Info
		f.Evidence["cause"] = causeHypervisor
		f.Title = fmt.Sprintf("%s softirq runs of up to %s on CPU %v were mostly time the vCPU did not run (hypervisor steal %.1f%% in the window)", Vectors[vec], fmtDur(maxStall(stalls)), f.Evidence["worst_cpu"], s.StealPct)
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
)

// onWolf: every stall ran on top of wolf's own process.
func onWolf(s *Snapshot, stalls []Stall) bool {
	if s.SelfTGID <= 0 || len(stalls) == 0 {
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
	name := Vectors[vec]
	sort.Slice(stalls, func(i, j int) bool { return stalls[i].Duration > stalls[j].Duration })
	maxD := time.Duration(h.Max)
	if len(stalls) > 0 && stalls[0].Duration > maxD {
		maxD = stalls[0].Duration
	}
	// Stalls per CPU, worst CPU first.
	type cpuAgg struct {
		cpu   int
		n     int
		worst time.Duration
	}
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
	var cpus []*cpuAgg
	for _, c := range byCPU {
		cpus = append(cpus, c)
	}
	sort.Slice(cpus, func(i, j int) bool {
		if cpus[i].worst != cpus[j].worst {
			return cpus[i].worst > cpus[j].worst
		}
		return cpus[i].cpu < cpus[j].cpu
	})
	worstCPU := -1
	if len(cpus) > 0 {
		worstCPU = cpus[0].cpu
	} else {
		// Stall events lost: name the CPU from the per-CPU histograms.
		var m uint64
		for cpu := range s.Run[vec] {
			if s.Run[vec][cpu].Max > m {
				m, worstCPU = s.Run[vec][cpu].Max, cpu
			}
		}
	}

	ev := map[string]any{
		"vector":              name,
		"max_us":              us(maxD),
		"p99_us":              us(time.Duration(h.Quantile(0.99))),
		"p50_us":              us(time.Duration(h.Quantile(0.5))),
		"runs":                h.Count,
		"run_time_ms":         ms(time.Duration(h.Sum)),
		"stalls":              len(stalls),
		"threshold_us":        us(s.Threshold),
		"window_s":            s.Window.Seconds(),
		"stalls_per_s":        round2(float64(len(stalls)) / max(s.Window.Seconds(), 0.001)),
		"worst_cpu":           worstCPU,
		"cause":               causeUnknown,
		"stalls_lost":         s.StallsLost,
		"stall_list":          stallList(stalls, 10),
		"sample_hz":           s.SampleHz,
		"netdev_budget":       s.Settings.NetdevBudget,
		"tcp_rmem_max_bytes":  s.Settings.TCPRmem[2],
		"netdev_budget_usecs": s.Settings.NetdevBudgetUsecs,
	}
	if vec != vecNetRX {
		for _, k := range []string{"netdev_budget", "tcp_rmem_max_bytes", "netdev_budget_usecs"} {
			delete(ev, k)
		}
	}
	var packets uint64
	for _, st := range stalls {
		packets += st.Packets
	}
	if vec == vecNetRX && len(stalls) > 0 {
		ev["packets_in_stalls"] = packets
	}

	if s.StealPct >= 0 {
		ev["steal_pct"] = round2(s.StealPct)
	}
	f := finding.Finding{
		ID:           "softirq.stall",
		Investigator: "softirq",
		Severity:     finding.Warning,
		References:   []string{seedRef},
	}

	if maxD >= CriticalStall {
		f.Severity = finding.Critical
	}
	where := fmt.Sprintf("CPU %d", worstCPU)
	if len(cpus) > 1 {
		where = fmt.Sprintf("CPUs %s", cpuList(cpus, func(c *cpuAgg) int { return c.cpu }))
	}
	runs := fmt.Sprintf("%d run%s ≥ %s in %s", len(stalls), plural(len(stalls)), fmtDur(s.Threshold), fmtDur(s.Window))
	if len(stalls) == 0 {
		runs = fmt.Sprintf("runs ≥ %s seen, details lost", fmtDur(s.Threshold))
	}
	head := fmt.Sprintf("%s softirq ran %s on %s (%s)", name, fmtDur(maxD), where, runs)
	if vec == vecNetRX {
		head = fmt.Sprintf("NET_RX softirq (net_rx_action) stalled %s for %s (%s)", where, fmtDur(maxD), runs)
	}
	f.Summary = fmt.Sprintf("%s ran %d times in %s; %d of them lasted %s or more, up to %s (p99 %s, p50 %s). While a softirq handler runs, that CPU processes no other softirq and runs no task.",
		handlerName(vec), h.Count, fmtDur(s.Window), len(stalls), fmtDur(s.Threshold), fmtDur(maxD), fmtDur(time.Duration(h.Quantile(0.99))), fmtDur(time.Duration(h.Quantile(0.5))))

	if vec != vecNetRX {
		f.Title = head
		f.Mechanism = vectorMechanism(vec)
		f.Remediation = vectorRemedies(vec)
		f.Subjects = cpuSubjects(stalls, nil)
		f.Evidence = ev
		return f
	}

	// NET_RX: attribute with samples from the stalls, else from all of
	// NET_RX, and with the TcpExt counters of the same window.
	att := attribute(s.StallStacks, "stall")
	if att.Samples == 0 {
		att = attribute(s.RxStacks, "net_rx")
	}
	tcp := SumDeltas(s.Netns)
	collapsed := tcp["TCPRcvCollapsed"] + tcp["PruneCalled"] + tcp["OfoPruned"]
	if att.Samples > 0 {
		ev["samples"] = att.Samples
		ev["samples_from"] = att.Source
		ev["collapse_share_pct"] = round2(100 * att.Collapse)
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
	var top *Stack
	if att.Top != nil {
		top = att.Top
	}
	switch {
	case collapse:
		ev["cause"] = causeCollapse
		why := ""
		if att.Samples > 0 {
			why = fmt.Sprintf("tcp_collapse/tcp_prune_queue in %s of the stall samples", pct(att.Collapse))
		} else {
			why = fmt.Sprintf("TCPRcvCollapsed +%d in the same window", tcp["TCPRcvCollapsed"])
		}
		f.Title = head + ": TCP receive-queue collapse (" + why + ")"
		f.Summary += " " + collapseSummary(s, tcp, att)
		f.Mechanism = collapseMechanism(s.Settings)
		f.Remediation = collapseRemedies(s)
	case att.Samples > 0 && att.Netfilter >= 0.25:
		ev["cause"] = causeNetfilter
		f.Title = head + fmt.Sprintf(": packet filtering (netfilter in %s of the samples)", pct(att.Netfilter))
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
	f.Subjects = cpuSubjects(stalls, top)
	f.Evidence = ev
	return f
}

func collapseSummary(s *Snapshot, tcp map[string]int64, att attribution) string {
	var parts []string
	if att.Samples > 0 {
		parts = append(parts, fmt.Sprintf("Of %d kernel stacks sampled in those runs, %s were pruning a TCP receive queue (tcp_prune_queue → tcp_collapse); the innermost functions were %s.", att.Samples, pct(att.Collapse), att.selfSummary(3)))
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
		buf = fmt.Sprintf("receive buffers of up to %s (net.ipv4.tcp_rmem max)", fmtBytes(set.TCPRmem[2]))
	}
	return fmt.Sprintf("When a socket's queued segments use more memory than its receive buffer allows (buffer accounting counts each sk_buff's overhead, not just payload), TCP prunes the queue in softirq context: tcp_collapse copies every small segment into compact buffers while that CPU processes no other packet. With %s and small segments from a slow reader, one collapse walks tens of thousands of sk_buffs and takes milliseconds: the seed measured 23 ms at 32 MiB and 3 ms at 2 MiB.", buf)
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
		detail := fmt.Sprintf("%d run%s ≥ threshold, worst %s at %s", count[c], plural(count[c]), fmtDur(w.Duration), w.At.Format("15:04:05.000"))
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
		out = append(out, fmt.Sprintf("%s cpu %d %s %s on %s/%d, %d packets", st.At.Format("15:04:05.000000"), st.CPU, st.Vector, fmtDur(st.Duration), st.Comm, st.PID, st.Packets))
	}
	return out
}

// waitFinding: softirqs raised but not run for a long time (ksoftirqd
// starved, or bottom halves disabled for long).
func waitFinding(s *Snapshot) (finding.Finding, bool) {
	if !s.RaiseTraced {
		return finding.Finding{}, false
	}
	// A wait or two of a few milliseconds happens on any busy or virtual
	// machine; a pattern of them is a finding.
	worst, worstVec, frequent := hist.Log2{}, -1, false
	var slow []string
	var long uint64
	for vec := 0; vec < NrVectors; vec++ {
		h := s.Merged(false, vec)
		n := longWaits(&h, s.Threshold)
		if h.Max < uint64(s.Threshold) || n < minLongWaits {
			continue
		}
		long += n
		p99 := time.Duration(h.Quantile(0.99))
		frequent = frequent || p99 >= s.Threshold
		slow = append(slow, fmt.Sprintf("%s max %s p99 %s, %d of %d waits ≥ ~%s", Vectors[vec], fmtDur(time.Duration(h.Max)), fmtDur(p99), n, h.Count, fmtDur(s.Threshold)))
		if worstVec < 0 || h.Max > worst.Max {
			worst, worstVec = h, vec
		}
	}
	if worstVec < 0 {
		return finding.Finding{}, false
	}
	name := Vectors[worstVec]
	maxD := time.Duration(worst.Max)
	sev := finding.Info
	if frequent {
		sev = finding.Warning
	}
	f := finding.Finding{
		ID:           "softirq.wait",
		Investigator: "softirq",
		Severity:     sev,
		Title:        fmt.Sprintf("%s softirq waited up to %s between being raised and running", name, fmtDur(maxD)),
		Summary:      fmt.Sprintf("Raise-to-run waits at or above %s: %s. Work raised in that time (packets for NET_RX) waited with it.", fmtDur(s.Threshold), strings.Join(slow, "; ")),
		Mechanism:    "A raised softirq runs at the next interrupt exit or bottom-half enable, unless softirqs have already run too long (about 2 ms or 10 restarts): then ksoftirqd, an ordinary SCHED_OTHER thread, takes over and waits its turn behind the CPU's other tasks. Long waits mean a busy ksoftirqd CPU, or code that disables bottom halves for long.",
		Evidence: map[string]any{
			"vector":        name,
			"max_us":        us(maxD),
			"p99_us":        us(time.Duration(worst.Quantile(0.99))),
			"waits":         worst.Count,
			"long_waits":    long,
			"threshold_us":  us(s.Threshold),
			"waits_summary": strings.Join(slow, "; "),
		},
		Remediation: []string{
			"See whether ksoftirqd is starved: ps -eLo pid,comm,psr,pcpu,rtprio | grep ksoftirqd, and wolf sched for run-queue latency on that CPU.",
			"Move heavy tasks off the CPUs that take network interrupts (irqbalance, /proc/irq/N/smp_affinity), or give ksoftirqd a higher priority (chrt -f -p 1 PID) where latency matters more than fairness.",
		},
		References: []string{seedRef},
	}
	if s.StealPct >= 1 {
		f.Severity = finding.Info
		f.Evidence["steal_pct"] = round2(s.StealPct)
		f.Summary += fmt.Sprintf(" The hypervisor took %.1f%% of CPU time (steal) in the window; a vCPU that does not run does not run its softirqs either.", s.StealPct)
	}
	return f, true
}

// minLongWaits is how many waits of about the threshold or more make a
// wait finding.
const minLongWaits = 3

// longWaits counts the waits in log2 slots reaching the threshold: from
// about half of it up, the precision a log2 histogram has.
func longWaits(h *hist.Log2, threshold time.Duration) uint64 {
	var n uint64
	for i, c := range h.Slots {
		if hist.UpperBound(i) >= uint64(threshold) {
			n += c
		}
	}
	return n
}

// pruneFinding reports TCP pruning when no NET_RX stall already explained
// it: collapses that stayed short are a note; dropped packets a warning.
func pruneFinding(s *Snapshot, explained bool) (finding.Finding, bool) {
	if explained {
		return finding.Finding{}, false
	}
	tcp := SumDeltas(s.Netns)
	prunes := tcp["PruneCalled"] + tcp["TCPRcvCollapsed"]
	dropped := tcp["RcvPruned"] + tcp["OfoPruned"] + tcp["TCPRcvQDrop"]
	if prunes+dropped == 0 {
		return finding.Finding{}, false
	}
	ev := map[string]any{"window_s": s.Window.Seconds()}
	for _, k := range TCPCounters {
		if v, ok := tcp[k]; ok {
			ev[counterKey(k)] = v
		}
	}
	h := s.Merged(true, vecNetRX)
	ev["net_rx_max_us"] = us(time.Duration(h.Max))
	ev["net_rx_p99_us"] = us(time.Duration(h.Quantile(0.99)))
	if s.Settings.TCPRmem[2] > 0 {
		ev["tcp_rmem_max_bytes"] = s.Settings.TCPRmem[2]
	}
	where := ""
	if len(s.Netns) > 0 {
		n := s.Netns[0]
		ev["netns"], ev["netns_pid"], ev["netns_comm"] = n.Inode, n.PID, n.Comm
		where = fmt.Sprintf(" in network namespace %d (%s, pid %d)", n.Inode, n.Comm, n.PID)
	}
	f := finding.Finding{
		ID:           "softirq.tcp-prune",
		Investigator: "softirq",
		Severity:     finding.Info,
		Title:        fmt.Sprintf("TCP pruned receive queues %d times%s; NET_RX stayed under %s (max %s)", tcp["PruneCalled"], where, fmtDur(s.Threshold), fmtDur(time.Duration(h.Max))),
		Summary:      fmt.Sprintf("TcpExt counters moved in %s: PruneCalled +%d, TCPRcvCollapsed +%d. Sockets outgrew their receive buffers and TCP compacted their queues; with larger buffers each collapse takes longer.", fmtDur(s.Window), tcp["PruneCalled"], tcp["TCPRcvCollapsed"]),
		Mechanism:    collapseMechanism(s.Settings),
		Evidence:     ev,
		Remediation:  collapseRemedies(s)[1:],
		References:   []string{seedRef},
	}
	if dropped > 0 {
		f.Severity = finding.Warning
		f.Title = fmt.Sprintf("TCP dropped received packets because receive buffers were full%s (RcvPruned +%d, OfoPruned +%d, TCPRcvQDrop +%d)", where, tcp["RcvPruned"], tcp["OfoPruned"], tcp["TCPRcvQDrop"])
		f.Summary += " Collapsing did not free enough memory, so packets were dropped and the senders must retransmit them."
	}
	return f, true
}

// budgetFinding: net_rx_action ran out of budget (time_squeeze).
func budgetFinding(s *Snapshot) (finding.Finding, bool) {
	var squeeze, dropped uint64
	var cpus []string
	for _, c := range s.Softnet {
		squeeze += c.TimeSqueeze
		dropped += c.Dropped
		if c.TimeSqueeze > 0 || c.Dropped > 0 {
			cpus = append(cpus, fmt.Sprintf("cpu%d: squeezed %d, dropped %d", c.CPU, c.TimeSqueeze, c.Dropped))
		}
	}
	if squeeze == 0 && dropped == 0 {
		return finding.Finding{}, false
	}
	perS := float64(squeeze) / max(s.Window.Seconds(), 0.001)
	ev := map[string]any{
		"time_squeeze":          squeeze,
		"time_squeeze_per_s":    round2(perS),
		"backlog_drops":         dropped,
		"per_cpu":               cpus,
		"netdev_budget":         s.Settings.NetdevBudget,
		"netdev_budget_usecs":   s.Settings.NetdevBudgetUsecs,
		"netdev_max_backlog":    s.Settings.MaxBacklog,
		"window_s":              s.Window.Seconds(),
		"devices_full_polls":    napiSummary(s.NAPI),
		"net_rx_max_us":         us(time.Duration(s.Merged(true, vecNetRX).Max)),
		"full_budget_polls_pct": round2(fullShare(s.NAPI)),
	}
	f := finding.Finding{
		ID:           "softirq.net-rx-budget",
		Investigator: "softirq",
		Severity:     finding.Info,
		Title:        fmt.Sprintf("NET_RX ran out of budget %d times (%.0f/s; netdev_budget=%d, netdev_budget_usecs=%d)", squeeze, perS, s.Settings.NetdevBudget, s.Settings.NetdevBudgetUsecs),
		Summary:      fmt.Sprintf("net_rx_action stopped with packets left %d times in %s (/proc/net/softnet_stat time_squeeze) and handed the rest to ksoftirqd.", squeeze, fmtDur(s.Window)),
		Mechanism:    "net_rx_action polls NAPI instances until it has handled net.core.netdev_budget packets or net.core.netdev_budget_usecs have passed, then re-raises itself; the rest waits, in ksoftirqd when this repeats. Frequent squeezes mean a CPU receives more than one softirq run can handle.",
		Evidence:     ev,
		Remediation: []string{
			"Spread receive work: more RSS queues (ethtool -L DEV combined N) or RPS (/sys/class/net/DEV/queues/rx-*/rps_cpus).",
			"If the CPU has room, let each run do more: sysctl -w net.core.netdev_budget=600 net.core.netdev_budget_usecs=4000 (longer runs delay everything else on that CPU).",
		},
		References: []string{"https://www.kernel.org/doc/html/latest/admin-guide/sysctl/net.html"},
	}
	if dropped > 0 {
		f.Severity = finding.Warning
		f.Title = fmt.Sprintf("Packets dropped at the CPU backlog (%d) while NET_RX ran out of budget %d times", dropped, squeeze)
		f.Summary += fmt.Sprintf(" %d packets were dropped because a CPU's input backlog was full (net.core.netdev_max_backlog=%d).", dropped, s.Settings.MaxBacklog)
		f.Remediation = append(f.Remediation, "Raise the backlog: sysctl -w net.core.netdev_max_backlog=10000, and spread RPS so one CPU's backlog fills less.")
	}
	return f, true
}

// overloadReasons are drop reasons that mean the receive path was too slow
// or too full, as opposed to packets nobody wanted.
var overloadReasons = map[string]bool{
	"CPU_BACKLOG": true, "SOCKET_RCVBUFF": true, "PROTO_MEM": true, "TCP_OFO_QUEUE_PRUNE": true,
	"TCP_OFO_DROP": true, "FULL_RING": true, "NOMEM": true, "SOCKET_BACKLOG": true, "TCP_ZEROWINDOW": true,
	"QDISC_DROP": true,
}

// dropFinding reports overload drops seen by skb:kfree_skb.
func dropFinding(s *Snapshot) (finding.Finding, bool) {
	all := map[string]int{}
	for _, m := range s.Drops {
		for r, n := range m {
			all[r] += n
		}
	}
	overload := map[string]int{}
	total := 0
	for r, n := range all {
		if overloadReasons[r] {
			overload[r] = n
			total += n
		}
	}
	if total == 0 {
		return finding.Finding{}, false
	}
	sev := finding.Info
	if total >= 100 {
		sev = finding.Warning
	}
	return finding.Finding{
		ID:           "softirq.drops",
		Investigator: "softirq",
		Severity:     sev,
		Title:        fmt.Sprintf("%d packets dropped because the receive path was full (%s)", total, topReasons(overload, 3)),
		Summary:      fmt.Sprintf("skb:kfree_skb counted %d drops for overload reasons in %s; all drops by reason: %s.", total, fmtDur(s.Window), topReasons(all, 6)),
		Mechanism:    "These reasons mean memory or queue limits on the receive path: a socket's receive buffer (SOCKET_RCVBUFF, TCP_ZEROWINDOW, TCP_OFO_*), TCP's global memory (PROTO_MEM), a CPU's input backlog (CPU_BACKLOG) or a device ring (FULL_RING).",
		Evidence: map[string]any{
			"overload_drops":     total,
			"reasons":            topReasons(all, 10),
			"drops_in_net_rx":    sumDrops(s.Drops[1]),
			"window_s":           s.Window.Seconds(),
			"tcp_rmem_max_bytes": s.Settings.TCPRmem[2],
			"netdev_max_backlog": s.Settings.MaxBacklog,
		},
		Remediation: []string{
			"See where each drop happens: perf record -e skb:kfree_skb -a -g, or dropwatch; for socket buffers, ss -tmi.",
		},
	}, true
}

func napiSummary(ns []NAPIStat) []string {
	type agg struct {
		polls, work, full uint64
	}
	by := map[string]*agg{}
	for _, n := range ns {
		a := by[n.Device]
		if a == nil {
			a = &agg{}
			by[n.Device] = a
		}
		a.polls += n.Polls
		a.work += n.Work
		a.full += n.Full
	}
	var names []string
	for d := range by {
		names = append(names, d)
	}
	sort.Slice(names, func(i, j int) bool { return by[names[i]].work > by[names[j]].work })
	var out []string
	for _, d := range names {
		a := by[d]
		out = append(out, fmt.Sprintf("%s: %d polls, %d packets, %d used the full budget", d, a.polls, a.work, a.full))
	}
	return out
}

func fullShare(ns []NAPIStat) float64 {
	var polls, full uint64
	for _, n := range ns {
		polls += n.Polls
		full += n.Full
	}
	if polls == 0 {
		return 0
	}
	return 100 * float64(full) / float64(polls)
}

func sumDrops(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func topReasons(m map[string]int, n int) string {
	type kv struct {
		k string
		v int
	}
	var all []kv
	for k, v := range m {
		all = append(all, kv{k, v})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].v != all[j].v {
			return all[i].v > all[j].v
		}
		return all[i].k < all[j].k
	})
	var parts []string
	for i := 0; i < len(all) && i < n; i++ {
		parts = append(parts, fmt.Sprintf("%s %d", all[i].k, all[i].v))
	}
	return strings.Join(parts, ", ")
}

// counterKey turns a TcpExt name into an evidence key: "TCPRcvCollapsed"
// → "tcpext_TCPRcvCollapsed" (a count over the window).
func counterKey(name string) string { return "tcpext_" + name }

// Histograms turns the snapshot's histograms into the report's, in µs:
// softirq_runtime_us and softirq_wait_us per vector, and per CPU too when
// perCPU is set.
func Histograms(s *Snapshot, perCPU bool) []finding.Histogram {
	var out []finding.Histogram
	for _, kind := range []struct {
		name string
		run  bool
	}{{"softirq_runtime_us", true}, {"softirq_wait_us", false}} {
		for vec := 0; vec < NrVectors; vec++ {
			h := s.Merged(kind.run, vec)
			if h.Count == 0 {
				continue
			}
			out = append(out, h.Report(kind.name, "us", map[string]string{"vector": Vectors[vec]}, 1000))
			if !perCPU {
				continue
			}
			src := s.Wait[vec]
			if kind.run {
				src = s.Run[vec]
			}
			for cpu := range src {
				if src[cpu].Count == 0 {
					continue
				}
				out = append(out, src[cpu].Report(kind.name, "us", map[string]string{"vector": Vectors[vec], "cpu": strconv.Itoa(cpu)}, 1000))
			}
		}
	}
	return out
}

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

func us(d time.Duration) float64 { return round2(float64(d) / 1e3) }
func ms(d time.Duration) float64 { return round2(float64(d) / 1e6) }

func round2(x float64) float64 {
	return float64(int64(x*100+0.5)) / 100
}

func pct(x float64) string { return fmt.Sprintf("%.0f%%", 100*x) }

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// fmtDur prints durations the way the seed does: 23 ms, 1.3 ms, 850 µs.
func fmtDur(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.0f s", d.Seconds())
	case d >= time.Second && d%time.Second == 0:
		return fmt.Sprintf("%d s", d/time.Second)
	case d >= time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.0f ms", float64(d)/1e6)
	case d >= time.Millisecond && d%time.Millisecond == 0:
		return fmt.Sprintf("%d ms", d/time.Millisecond)
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	case d >= time.Microsecond:
		return fmt.Sprintf("%.0f µs", float64(d)/1e3)
	}
	return fmt.Sprintf("%d ns", d.Nanoseconds())
}

func fmtBytes(b int64) string {
	switch {
	case b >= 1<<20 && b%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", b>>20)
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%d KiB", b>>10)
	}
	return fmt.Sprintf("%d B", b)
}

// Profiles are the kernel stacks sampled inside NET_RX (net_rx_stacks) and
// those of the runs that turned out to be stalls (net_rx_stall_stacks), for
// flame graphs and exports; empty when stacks were not sampled.
func Profiles(s *Snapshot) []finding.Profile {
	var out []finding.Profile
	for _, src := range []struct {
		name   string
		stacks []Stack
	}{{"net_rx_stacks", s.RxStacks}, {"net_rx_stall_stacks", s.StallStacks}} {
		p := finding.Profile{Name: src.name, Unit: "samples", Labels: map[string]string{"vector": "NET_RX"}}
		if s.SampleHz > 0 {
			p.PeriodNs = int64(time.Second) / int64(s.SampleHz)
		}
		for _, st := range src.stacks {
			frames := make([]string, len(st.Frames))
			for i, f := range st.Frames {
				frames[len(st.Frames)-1-i] = f
			}
			p.Stacks = append(p.Stacks, finding.StackCount{Frames: frames, Value: st.Count})
		}
		if len(p.Stacks) > 0 {
			out = append(out, p)
		}
	}
	return out
}
