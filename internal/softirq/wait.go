package softirq

import (
	"fmt"
	"strings"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/hist"
	"github.com/wolf-investigator/wolf/internal/human"
	"github.com/wolf-investigator/wolf/internal/pace"
)

func waitFinding(s *Snapshot) (finding.Finding, bool) {
	if !s.RaiseTraced {
		return finding.Finding{}, false
	}
	// A wait or two of a few milliseconds happens on any busy or virtual
	// machine; a pattern of them is a finding.
	worst, worstVec, frequent := hist.Log2{}, -1, false
	var worstP99 time.Duration // the longest p99 of the vectors listed
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
		worstP99 = max(worstP99, p99)
		slow = append(slow, fmt.Sprintf("%s max %s p99 %s, %d of %d waits ≥ ~%s", Vectors[vec], human.Duration(time.Duration(h.Max)), human.Duration(p99), n, h.Count, human.Duration(s.Threshold)))
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
		Title:        fmt.Sprintf("%s softirq waited up to %s between being raised and running", name, human.Duration(maxD)),
		Summary:      fmt.Sprintf("Raise-to-run waits at or above %s: %s. Work raised in that time (packets for NET_RX) waited with it.", human.Duration(s.Threshold), strings.Join(slow, "; ")),
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
			"See whether ksoftirqd is starved: ps -eLo pid,comm,psr,pcpu,rtprio | grep ksoftirqd, and the run-queue latency of that CPU (wolf sched; doctor runs it alongside).",
			"Move heavy tasks off the CPUs that take network interrupts (irqbalance, /proc/irq/N/smp_affinity), or give ksoftirqd a higher priority (chrt -f -p 1 PID) where latency matters more than fairness.",
		},
		References: []string{storyRef},
	}
	switch {
	case frequent && pace.Ordinary(worstP99, s.Slowdown) < s.Threshold:
		// The waits are long in wall time, not in work: everything that
		// ran before the softirq ran as many times slower.
		f.Severity = finding.Info
		f.Evidence["machine_slowdown"] = human.Round(s.Slowdown, 1)
		f.Summary += " " + pace.SlowNote("the p99 wait", worstP99, s.Slowdown)
	case s.StealPct >= 1:
		f.Severity = finding.Info
		f.Evidence["steal_pct"] = human.Round(s.StealPct, 2)
		f.Summary += fmt.Sprintf(" The hypervisor took %.1f%% of CPU time (steal) in the window; a vCPU that does not run does not run its softirqs either.", s.StealPct)
	case s.SampleCoverage > 0 && s.SampleCoverage < notExecuting && s.Virtual != "":
		// No steal accounted, but the CPUs took few of their timer samples:
		// they were not executing much of the window (an emulator, or a
		// hypervisor that accounts no steal). Only on a virtual machine:
		// on bare metal a sample is also lost while another BPF program
		// runs on that CPU.
		f.Severity = finding.Info
		f.Evidence["cpu_sample_coverage_pct"] = human.Round(100*s.SampleCoverage, 2)
		f.Summary += fmt.Sprintf(" Only %.0f%% of the timer samples expected on the CPUs over the window landed: they were not executing much of the time (virtual machine: %s), and a CPU that does not run does not run its softirqs either.", 100*s.SampleCoverage, s.Virtual)
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

// notExecuting is the window's sample coverage under which the CPUs were
// not executing a significant part of it: a CPU that runs takes all its
// timer samples (idle or not), so a quarter missing is a CPU that did not
// run a quarter of the time.
const notExecuting = 0.75
