package softirq

import (
	"strconv"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
)

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
