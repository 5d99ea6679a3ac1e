package bpfcost

import (
	"fmt"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/human"
)

// Sample is every program's statistics at one moment, At seconds into
// the window.
type Sample struct {
	At    float64
	Stats map[uint32]Stat
}

// maxTimelines bounds the runs/s curves in a report.
const maxTimelines = 5

// RateTimelines turns samples taken through the window into a runs/s
// curve for each of the n costliest programs that ran: one event per
// interval, at its end, valued at that interval's rate.
func RateTimelines(s *Snapshot, samples []Sample, n int) []finding.Timeline {
	var out []finding.Timeline
	for _, c := range Measure(s) {
		if len(out) >= n {
			break
		}
		if c.Runs == 0 {
			continue
		}
		tl := finding.Timeline{Name: "bpf_runs_per_s", Unit: "runs/s",
			Labels: map[string]string{"prog_id": fmt.Sprint(c.ID), "name": c.Name, "attach": c.Where()}}
		for i := 1; i < len(samples); i++ {
			a, b := samples[i-1], samples[i]
			dt := b.At - a.At
			if dt <= 0 {
				continue
			}
			prev, next := a.Stats[c.ID], b.Stats[c.ID]
			rate := 0.0
			if next.Runs >= prev.Runs {
				rate = float64(next.Runs-prev.Runs) / dt
			}
			tl.Events = append(tl.Events, finding.TimelineEvent{AtS: human.Round(b.At, 2), Value: human.Round(rate, 2)})
		}
		out = append(out, tl)
	}
	return out
}
