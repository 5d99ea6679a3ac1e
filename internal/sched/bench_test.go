package sched

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

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
// WOLF_BENCH_ROUNDS (default 60: 30 A B B A blocks), WOLF_BENCH_GROUPS (10), WOLF_BENCH_LOOPS
// (100) and WOLF_BENCH_WORKLOAD (perf or go) change it.
func BenchmarkSchedCost(b *testing.B) {
	testutil.RequireRoot(b)
	testutil.Exclusive(b)
	o := BenchOptions{
		Rounds:   envInt("WOLF_BENCH_ROUNDS", 60),
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
	b.ReportMetric(c.MedianBlockPct, "slowdown_%")
	b.ReportMetric(c.CIHighPct, "slowdown_ci_high_%")
	b.ReportMetric(c.NoisePct, "noise_%")
	b.ReportMetric(rep.NsPerEvt, "ns/event")
	b.ReportMetric(rep.EventsPS, "events/s")
	b.ReportMetric(rep.BPFCPUPct, "bpf_cpu_%")
	if rep.CPUCost != nil {
		b.ReportMetric(rep.CPUCost.MedianBlockPct, "cpu_slowdown_%")
		b.ReportMetric(rep.CPUCost.CIHighPct, "cpu_slowdown_ci_high_%")
	}
	b.Logf("workload: %s", rep.Workload)
	b.Logf("%s without wolf: %.0f, with wolf sched: %.0f (medians of %d rounds)", rep.Unit, costbench.Median(c.Baseline), costbench.Median(c.With), c.Rounds)
	b.Logf("wall clock: %v", c)
	if cc := rep.CPUCost; cc != nil {
		b.Logf("messages per CPU-second of the workload: without %.0f, with %.0f: %v",
			costbench.Median(cc.Baseline), costbench.Median(cc.With), cc)
		b.Logf("target < %.0f%%: wall clock shown below it: %v; per CPU-second: %v", rep.TargetPct, c.Below(rep.TargetPct), cc.Below(rep.TargetPct))
	}
	b.Logf("wolf's BPF programs: %.0f events/s, %.1f ns/event, %.2f%% of the machine's CPU time while attached", rep.EventsPS, rep.NsPerEvt, rep.BPFCPUPct)
	for _, p := range rep.Programs {
		b.Logf("  %-15s %10d runs sampled %8.1f ns/event %d recursion misses", p.Name, p.Runs, p.NsPerEvent, p.Missed)
	}
	for _, n := range rep.Notes {
		b.Logf("note: %s", n)
	}
}

// The benchmark's pieces work (no timing is asserted): the Go messaging
// workload delivers every message, and perf's output is read.
func TestBenchPieces(t *testing.T) {
	var cpu time.Duration
	v, err := goWorkload(1, 3, func(d time.Duration) { cpu = d })(context.Background())
	if cpu <= 0 {
		t.Errorf("go messaging reported %v of CPU", cpu)
	}
	if err != nil || v <= 0 {
		t.Fatalf("go messaging: %v messages/s, %v", v, err)
	}
	out := "# Running 'sched/messaging' benchmark:\n# 20 sender and receiver processes per group\n# 10 groups == 400 processes run\n\n     Total time: 0.936 [sec]\n"
	m := messagingTotal.FindStringSubmatch(out)
	if m == nil || m[1] != "0.936" {
		t.Fatalf("perf output not read: %v", m)
	}
	if _, err := Bench(context.Background(), BenchOptions{Rounds: 1, Groups: 1, Loops: 1, Workload: "teleport"}); err == nil {
		t.Error("unknown workload accepted")
	}
}
