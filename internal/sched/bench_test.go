package sched

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/wolf-investigator/wolf/internal/costbench"
	"github.com/wolf-investigator/wolf/internal/testutil"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkSchedCost is wolf sched's cost on a scheduler-heavy workload,
// perf bench sched messaging (or its Go twin when perf is missing), with
// and without wolf in one run, interleaved. One iteration is one whole
// comparison:
//
//	go test -run '^$' -bench SchedCost -benchtime 1x ./internal/sched
//
// WOLF_BENCH_ROUNDS (default 5), WOLF_BENCH_GROUPS (10), WOLF_BENCH_LOOPS
// (100) and WOLF_BENCH_WORKLOAD (perf or go) change it.
func BenchmarkSchedCost(b *testing.B) {
	testutil.RequireRoot(b)
	testutil.Exclusive(b)
	o := BenchOptions{
		Rounds:   envInt("WOLF_BENCH_ROUNDS", 5),
		Groups:   envInt("WOLF_BENCH_GROUPS", 10),
		Loops:    envInt("WOLF_BENCH_LOOPS", 100),
		Workload: os.Getenv("WOLF_BENCH_WORKLOAD"),
		Log:      b.Logf,
	}
	var rep *BenchReport
	for i := 0; i < b.N; i++ {
		var err error
		if rep, err = Bench(context.Background(), o); err != nil {
			b.Fatal(err)
		}
	}
	c := rep.Cost
	b.ReportMetric(c.SlowdownPct, "slowdown_%")
	b.ReportMetric(c.NoisePct, "noise_%")
	b.ReportMetric(rep.NsPerEvt, "ns/event")
	b.ReportMetric(rep.EventsPS, "events/s")
	b.Logf("workload: %s", rep.Workload)
	b.Logf("%s without wolf: %.0f (median of %v); with wolf sched: %.0f (median of %v)", rep.Unit, costbench.Median(c.Baseline), c.Baseline, costbench.Median(c.With), c.With)
	b.Logf("slowdown %.2f%% (target < %.0f%%), baseline noise %.2f%%", c.SlowdownPct, rep.TargetPct, c.NoisePct)
	for _, p := range rep.Programs {
		b.Logf("  %-15s %10d runs %8.1f ns/event %d recursion misses", p.Name, p.Runs, p.NsPerEvent, p.Missed)
	}
	for _, n := range rep.Notes {
		b.Logf("note: %s", n)
	}
}
