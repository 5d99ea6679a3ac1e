package softirq

import (
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/hist"
	"github.com/wolf-investigator/wolf/internal/human"
)

// CriticalStall is the run time at which a softirq stall is critical: the
// 23 ms net_rx_action run in "The story of one latency spike" turned into 1.8 s ping spikes.
const CriticalStall = 20 * time.Millisecond

// storyRef is the write-up behind this investigator: Cloudflare, "The
// story of one latency spike" (2015).
const storyRef = "https://blog.cloudflare.com/the-story-of-one-latency-spike/"

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
	// Unseen are runs per vector the kernel counted in the window
	// (/proc/softirqs) that the programs were not run for (unseen.go).
	Unseen [NrVectors]uint64
	NAPI   []NAPIStat
	// Tasks are the tasks softirq work ran on top of in the window, most
	// time first (ksoftirqd among them).
	Tasks     []TaskTime
	Softnet   []Softnet // deltas over the window
	Netns     []NetnsDelta
	NetnsNote string            // why TcpExt counters are missing, if they are
	Drops     [2]map[string]int // drop reason → count; [1] inside NET_RX
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
	// vCPUs may stop executing with no steal accounted (virt.Detect).
	Virtual string
	// SelfTGID is wolf's own process: a softirq run on top of it ran
	// while wolf loaded, attached or freed its BPF programs.
	SelfTGID int
	// Slowdown is how many times slower than an ordinary machine this one
	// starts a process (pace.Slowdown; 1 here, 6-8 under QEMU's TCG): an
	// emulated CPU runs the same softirq work that many times longer.
	Slowdown float64
	// CPUs is how many CPUs are online (0: unknown).
	CPUs int
	// SampleCoverage is the share of the sampler's timer samples (every
	// CPU, the whole window) that landed, 0 when unknown: a CPU that is
	// not executing (a descheduled or emulated vCPU) takes none.
	SampleCoverage float64
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

// us and ms are the evidence's units: durations in µs or ms, to 0.01.
func us(d time.Duration) float64 { return human.Round(float64(d)/1e3, 2) }
func ms(d time.Duration) float64 { return human.Round(float64(d)/1e6, 2) }
