package softirq

import (
	"fmt"
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
