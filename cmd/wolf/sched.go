package main

import (
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/sched"
)

func newSchedCmd() *cobra.Command {
	var (
		out          outputFlags
		duration     time.Duration
		pid          int
		bounceWindow time.Duration
		minRate      float64
	)
	c := &cobra.Command{
		Use:   "sched",
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
after boot: the story of Eric's Place, "The Network Is Slow: An Adventure
in the Linux Kernel".`,
		Example: `  wolf sched                          # watch 10 s, the whole host
  wolf sched --pid 1234 --duration 30s # one process
  wolf sched --bounce-window 10ms --format json -o sched.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := out.validate(); err != nil {
				return err
			}
			if err := checkDuration(duration); err != nil {
				return err
			}
			if bounceWindow <= 0 || bounceWindow > 10*time.Second {
				return usageErr("--bounce-window must be between 0 and 10s, got %v", bounceWindow)
			}
			if minRate <= 0 {
				return usageErr("--min-rate must be positive, got %v", minRate)
			}
			if err := checkPID(pid); err != nil {
				return err
			}
			if err := requireRoot("wolf sched"); err != nil {
				return err
			}
			s := sched.New()
			s.BounceWindow = bounceWindow
			s.Thresholds.MigrationsPerSec = minRate
			rep, errs := runInvestigators(cmd.Context(), "sched", []investigator.Investigator{s}, investigator.Options{Duration: duration, PID: pid}, true, os.Stderr)
			if len(errs) > 0 {
				return investigationErr(errs[0])
			}
			return out.write(cmd.OutOrStdout(), rep)
		},
	}
	out.register(c)
	c.Flags().DurationVarP(&duration, "duration", "d", 10*time.Second, "how long to watch")
	c.Flags().IntVarP(&pid, "pid", "p", 0, "only this process (tgid, or a thread's tid for its process)")
	c.Flags().DurationVar(&bounceWindow, "bounce-window", sched.DefaultBounceWindow, "a move back within this long after a move away is a bounce")
	c.Flags().Float64Var(&minRate, "min-rate", sched.DefaultThresholds.MigrationsPerSec, "report tasks moved at least this many times per second")
	return c
}
