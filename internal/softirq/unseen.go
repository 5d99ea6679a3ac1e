package softirq

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/wolf-investigator/wolf/internal/hist"
	"github.com/wolf-investigator/wolf/internal/human"
)

// Runs the kernel counted but wolf's programs never saw.
//
// The kernel counts each handler run in /proc/softirqs as it enters it,
// just before the softirq_entry tracepoint. That tracepoint and
// softirq_exit do not always run their BPF programs: on a 6.18 kernel
// about one NET_RX run in 20,000-100,000 reached perf's own count of the
// tracepoint and /proc/softirqs but none of the BPF programs attached to
// it (raw or classic), with no recursion miss counted; so did about one
// RCU run a second while another process loaded and freed BPF programs.
// Comparing the two counts makes such runs a counted loss instead of a
// silent one.
//
// The comparison is cumulative from just after attach, where the
// programs' count is read before the kernel's: a run that ends between
// the two is counted by the programs only. At each window the kernel's
// is read first: a run in progress then is in the kernel's count
// (entered) but not yet the programs' (which count exits), one per CPU at
// most, since handlers do not nest on a CPU. So what exceeds that is a
// lower bound of the runs missed.

// ParseSoftirqs reads /proc/softirqs: each vector's runs, every CPU's.
func ParseSoftirqs(b []byte) ([NrVectors]uint64, error) {
	var out [NrVectors]uint64
	seen := 0
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || !strings.HasSuffix(f[0], ":") {
			continue // the CPU header, or an empty line
		}
		vec := -1
		for i, name := range Vectors {
			if f[0] == name+":" {
				vec = i
			}
		}
		if vec < 0 {
			continue // a vector this build does not know
		}
		for _, c := range f[1:] {
			n, err := strconv.ParseUint(c, 10, 64)
			if err != nil {
				return out, fmt.Errorf("/proc/softirqs: %s: %w", f[0], err)
			}
			out[vec] += n
		}
		seen++
	}
	if seen == 0 {
		return out, fmt.Errorf("/proc/softirqs: no vector lines")
	}
	return out, nil
}

func readSoftirqs() ([NrVectors]uint64, error) {
	b, err := os.ReadFile("/proc/softirqs")
	if err != nil {
		return [NrVectors]uint64{}, err
	}
	return ParseSoftirqs(b)
}

// runCounts is each vector's runs, every CPU's, out of per-CPU run
// histograms.
func runCounts(runs [][]hist.Log2) [NrVectors]uint64 {
	var out [NrVectors]uint64
	for vec := range min(len(runs), NrVectors) {
		for _, h := range runs[vec] {
			out[vec] += h.Count
		}
	}
	return out
}

// unseenRuns is the window's runs per vector that the kernel counted and
// the programs did not: kernel and seen are the two counts' growth since
// just after attach, cpus how many runs can be in flight, and reported
// what earlier windows reported (updated).
func unseenRuns(kernel, seen [NrVectors]uint64, cpus int, reported *[NrVectors]uint64) [NrVectors]uint64 {
	var out [NrVectors]uint64
	inFlight := uint64(cpus)
	for vec := range NrVectors {
		if kernel[vec] <= seen[vec]+inFlight {
			continue
		}
		if missed := kernel[vec] - seen[vec] - inFlight; missed > reported[vec] {
			out[vec] = missed - reported[vec]
			reported[vec] = missed
		}
	}
	return out
}

// unseenNote says which vectors' runs the programs missed in a window,
// "" when none.
func unseenNote(unseen [NrVectors]uint64) string {
	var total uint64
	var parts []string
	for vec, n := range unseen {
		if n > 0 {
			total += n
			parts = append(parts, fmt.Sprintf("%s %d", Vectors[vec], n))
		}
	}
	if total == 0 {
		return ""
	}
	return fmt.Sprintf("the kernel ran %s (%s) that its tracepoints did not run wolf's programs for (/proc/softirqs counts them): missing from the histograms, counted as dropped events",
		human.Plural(int(total), "softirq run", "softirq runs"), strings.Join(parts, ", "))
}
