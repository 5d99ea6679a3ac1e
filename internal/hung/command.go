package hung

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/investigator"
)

// Command implements investigator.Commander: wolf hung.
func (h *Investigator) Command() investigator.Command {
	return investigator.Command{
		// A hang is what alerts want soonest, and concluding a window is
		// a task walk: cheap enough to do every 20 s in wolf watch.
		WatchWindow: 20 * time.Second,
		Short:       "Find tasks hung in D state, what they wait on, and who holds it",
		Long: `hung finds tasks sleeping uninterruptibly (D state) for longer than
--threshold, including those that blocked before wolf started, groups them by
the lock or wait site they share, decodes the lock's owner in the kernel and
follows what the owner itself waits for (a lock, I/O, a FUSE daemon).

It names the offender, not just the victims that the kernel's own hung-task
report lists, and it does so long before khungtaskd's timeout.`,
		Example: `  wolf hung                       # watch 10 s, report tasks blocked >= 5 s
  wolf hung --threshold 1s --duration 3s --format json
  wolf hung --pid 1234            # only victims in process 1234`,
		PID: "only report victims in this process (tgid or tid)",
		Flags: func(f *pflag.FlagSet) {
			f.DurationVar(&h.Threshold, "threshold", DefaultThreshold, "report tasks blocked at least this long")
		},
		Validate: func(context.Context, int) error {
			if h.Threshold <= 0 {
				return fmt.Errorf("--threshold must be positive, got %v", h.Threshold)
			}
			return nil
		},
	}
}

// Metrics implements investigator.Exporter.
func (*Investigator) Metrics() ([]investigator.HistogramMetric, []investigator.GaugeMetric) {
	return nil, []investigator.GaugeMetric{
		{Name: "wolf_hung_tasks", Help: "Tasks blocked in D state past the hung threshold at the end of the last hung window.",
			Values: func(res *investigator.Result) []investigator.GaugeValue {
				n, _ := stillHung(res)
				return []investigator.GaugeValue{{Value: float64(n)}}
			}},
		{Name: "wolf_hung_task_blocked_seconds_max", Help: "Longest time a hung task had been blocked, at the end of the last hung window.",
			Values: func(res *investigator.Result) []investigator.GaugeValue {
				_, longest := stillHung(res)
				return []investigator.GaugeValue{{Value: longest}}
			}},
	}
}

// stillHung counts the distinct tasks still hung at the window's end
// (victims of every finding but the recovered and khungtaskd-history ones)
// and the longest block among them, in seconds.
func stillHung(res *investigator.Result) (tasks int, longest float64) {
	tids := map[int]bool{}
	for _, f := range res.Findings {
		if f.Investigator != "hung" || f.ID == "hung.recovered" || f.ID == "hung.khungtaskd" {
			continue
		}
		for _, s := range f.Subjects {
			if s.Role == finding.RoleVictim {
				id := s.TID
				if id == 0 {
					id = s.PID
				}
				tids[id] = true
			}
		}
		if b, ok := finding.Number(f.Evidence["blocked_s"]); ok {
			longest = max(longest, b)
		}
	}
	return len(tids), longest
}
