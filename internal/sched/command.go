package sched

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/investigator"
)

// Command implements investigator.Commander: wolf sched.
func (s *Investigator) Command() investigator.Command {
	return investigator.Command{
		Short: "Find tasks the scheduler bounces between CPUs, who moves them, and run-queue latency",
		Long: `sched watches every migration (sched_migrate_task, on the CPU that makes
it) and names the tasks moved most: how often per second, how many moves
were undone within --bounce-window (A->B->A), and who initiated them: the
wake-up path (on the waker's CPU), the periodic load balancer (softirq or
ksoftirqd, possibly on behalf of another CPU), a CPU going idle, the
migration stopper (migration/N), or an affinity or cpuset change (and who
called sched_setaffinity).

It also measures run-queue latency (from becoming runnable to running) per
task, cgroup and CPU, reads the scheduler's own idea of which CPUs share a
last-level cache (sd_llc_size) and compares it with the hardware's, and
audits CONFIG_SCHED_MC and, on 32-bit kernels, the jiffies wrap 5 minutes
after boot (Eric's Place, "The Network Is Slow: An Adventure in the Linux
Kernel").`,
		Example: `  wolf sched                          # watch 10 s, the whole host
  wolf sched --pid 1234 --duration 30s # one process
  wolf sched --bounce-window 10ms --format json -o sched.json`,
		PID:   "only this process (tgid, or a thread's tid for its process)",
		Audit: true,
		Flags: func(f *pflag.FlagSet) {
			f.DurationVar(&s.BounceWindow, "bounce-window", DefaultBounceWindow, "a move back within this long after a move away is a bounce")
			f.Float64Var(&s.Thresholds.MigrationsPerSec, "min-rate", DefaultThresholds.MigrationsPerSec, "report tasks moved at least this many times per second")
		},
		Validate: func(context.Context, int) error {
			if s.BounceWindow <= 0 || s.BounceWindow > 10*time.Second {
				return fmt.Errorf("--bounce-window must be between 0 and 10s, got %v", s.BounceWindow)
			}
			if s.Thresholds.MigrationsPerSec <= 0 {
				return fmt.Errorf("--min-rate must be positive, got %v", s.Thresholds.MigrationsPerSec)
			}
			return nil
		},
	}
}

// Metrics implements investigator.Exporter.
func (*Investigator) Metrics() ([]investigator.HistogramMetric, []investigator.GaugeMetric) {
	return []investigator.HistogramMetric{
			{Histogram: "runq_latency_us", Name: "wolf_runqueue_latency_seconds", Help: "Run-queue latency (wakeup to running), by CPU.",
				Labels: []string{"cpu"}, MaxName: "wolf_runqueue_latency_max_seconds"},
			{Histogram: "runq_latency_us", Name: "wolf_cgroup_runqueue_latency_seconds", Help: "Run-queue latency by cgroup, top N cgroups.",
				Labels: []string{"cgroup"}, TopN: true, MaxName: "wolf_cgroup_runqueue_latency_max_seconds"},
			{Histogram: "runq_latency_us", Name: "wolf_task_runqueue_latency_seconds", Help: "Run-queue latency of the tasks with the worst tail, top N tasks.",
				Labels: []string{"comm", "pid", "tid"}, TopN: true, MaxName: "wolf_task_runqueue_latency_max_seconds"},
		}, []investigator.GaugeMetric{
			{Name: "wolf_task_migrations_per_second", Help: "Migrations per second of tasks the sched investigator found bouncing between CPUs, last window, top N.",
				Labels: []string{"pid", "comm"}, TopN: true, Values: bouncingTasks},
		}
}

// bouncingTasks are the tasks of the window's sched.bounce findings, by
// rate. Two bouncing threads of one process share pid and comm: the
// faster one stands for them, so that label sets stay unique.
func bouncingTasks(res *investigator.Result) []investigator.GaugeValue {
	var out []investigator.GaugeValue
	seen := map[[2]string]bool{}
	for _, f := range res.Findings {
		if f.ID != "sched.bounce" {
			continue
		}
		r, ok := finding.Number(f.Evidence["migrations_per_s"])
		if !ok {
			continue
		}
		for _, s := range f.Subjects {
			if s.Role == finding.RoleTask {
				out = append(out, investigator.GaugeValue{Labels: []string{strconv.Itoa(s.PID), s.Comm}, Value: r})
				break
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Value > out[j].Value })
	uniq := out[:0]
	for _, v := range out {
		k := [2]string{v.Labels[0], v.Labels[1]}
		if !seen[k] {
			seen[k] = true
			uniq = append(uniq, v)
		}
	}
	return uniq
}
