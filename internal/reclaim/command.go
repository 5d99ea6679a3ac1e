package reclaim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/pflag"

	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/memcg"
)

// Command implements investigator.Commander: wolf reclaim.
func (iv *Investigator) Command() investigator.Command {
	return investigator.Command{
		Short: "Find cgroups and tasks stalled in memory reclaim, and the memcg reclaim livelock",
		Long: `reclaim watches the kernel's vmscan tracepoints and reports, per memory
cgroup and per task, how often and how long tasks reclaimed memory, how many
pages each reclaim scanned for each one it freed, and what the cgroup looked
like meanwhile: limit, usage, limit hits, OOM kills, LRU sizes, pressure
(PSI), and its processes' %usr/%sys and page-fault rates, as pidstat shows.

Its critical verdict is the memcg reclaim livelock: a cgroup at its limit
whose reclaim calls last seconds and free almost nothing of what they scan,
its tasks all in the kernel, faults crawling, and no OOM kill to end it.`,
		Example: `  wolf reclaim                        # watch 10 s, every cgroup
  wolf reclaim --cgroup /kubepods/pod1 --duration 30s
  wolf reclaim --pid 1234 --format json   # only process 1234 and its cgroup`,
		PID: "only this process and its memory cgroup",
		Flags: func(f *pflag.FlagSet) {
			f.StringVar(&iv.Cgroup, "cgroup", "", "only this memory cgroup and its descendants (path in the memory hierarchy)")
		},
		Validate: func(ctx context.Context, _ int) error {
			if iv.Cgroup == "" {
				return nil
			}
			h, err := memcg.Find(ctx, iv.Proc)
			if err != nil {
				return fmt.Errorf("--cgroup: %v: %w", err, investigator.ErrUnsupported)
			}
			if st, err := os.Stat(h.Dir(iv.Cgroup)); err != nil || !st.IsDir() {
				return fmt.Errorf("--cgroup %s: no such memory cgroup under %s", iv.Cgroup, h.Mount)
			}
			iv.Cgroup = filepath.Clean("/" + iv.Cgroup)
			return nil
		},
	}
}

// Metrics implements investigator.Exporter.
func (*Investigator) Metrics() ([]investigator.HistogramMetric, []investigator.GaugeMetric) {
	return []investigator.HistogramMetric{
		{Histogram: "reclaim_duration_us", Name: "wolf_reclaim_duration_seconds", Help: "Time tasks spent in memory reclaim, per call, by cgroup and kind (memcg, direct, softlimit), top N cgroups.",
			Labels: []string{"cgroup", "kind"}, TopN: true, MaxName: "wolf_reclaim_duration_max_seconds"},
		{Histogram: "kswapd_awake_us", Name: "wolf_kswapd_awake_seconds", Help: "How long kswapd stayed awake per wake-up.",
			MaxName: "wolf_kswapd_awake_max_seconds"},
		{Histogram: "reclaim_scanned_pages", Name: "wolf_reclaim_scanned_pages", Help: "Pages scanned per reclaim call, by cgroup, top N cgroups.",
			Labels: []string{"cgroup"}, TopN: true, MaxName: "wolf_reclaim_scanned_max_pages"},
	}, nil
}
