package main

import (
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/wolf-investigator/wolf/internal/bpfcost"
	"github.com/wolf-investigator/wolf/internal/investigator"
)

func newBPFCmd() *cobra.Command {
	var (
		out      outputFlags
		duration time.Duration
		pid      int
		top      int
		trapNs   float64
	)
	c := &cobra.Command{
		Use:   "bpf",
		Short: "What every BPF program on the host costs, and the risky ones",
		Long: `bpf lists every BPF program loaded on the host, not only wolf's, like
bpftop: its type, name, attach point (tracepoint, uprobe file and symbol,
fentry target, cgroup, interface), the processes holding it, and over
--duration its runs per second, nanoseconds per run and share of the CPUs.

The numbers are the kernel's own BPF run statistics, turned on only while
wolf measures (BPF_ENABLE_STATS: reference-counted, off again when wolf
exits or dies; kernel.bpf_stats_enabled is never written).

It flags, with the reasons of Usama Saqib's (Datadog) "Performance and
reliability pitfalls of eBPF" (FOSDEM 2026): programs costing a noticeable share of
a CPU; uprobes and uretprobes on hot paths (each hit traps into the kernel,
a cost the run statistics do not see: estimated from the trap cost, which
wolf measures with a probe on itself, and said so); kretprobes
on hot paths (the return-instance pool); fentry/fexit programs (detach
waits for RCU-tasks); uprobes on widely mapped files (registration
write-locks every mapping process's mmap_lock); recursion misses.`,
		Example: `  wolf bpf                        # measure 5 s, list the 10 costliest programs
  wolf bpf --duration 10s --top 30 --format json
  wolf bpf --pid 1234             # only programs process 1234 holds`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := out.validate(); err != nil {
				return err
			}
			if err := checkDuration(duration); err != nil {
				return err
			}
			if top < 0 || top > 10000 {
				return usageErr("--top must be between 0 and 10000, got %d", top)
			}
			if trapNs < 0 || trapNs > 1e6 {
				return usageErr("--trap-ns must be between 0 and 1000000, got %v", trapNs)
			}
			if err := checkPID(pid); err != nil {
				return err
			}
			if err := requireRoot("wolf bpf"); err != nil {
				return err
			}
			b := bpfcost.New()
			b.Top = top
			if trapNs > 0 {
				b.Thresholds.TrapNs, b.Thresholds.TrapSource, b.Calibrate = trapNs, "", false
			}
			rep, errs := runInvestigators(cmd.Context(), "bpf", []investigator.Investigator{b}, investigator.Options{Duration: duration, PID: pid}, false, os.Stderr)
			if len(errs) > 0 {
				return investigationErr(errs[0])
			}
			return out.write(cmd.OutOrStdout(), rep)
		},
	}
	out.register(c)
	c.Flags().DurationVarP(&duration, "duration", "d", 5*time.Second, "how long to measure")
	c.Flags().IntVarP(&pid, "pid", "p", 0, "only programs this process holds (a file descriptor of the program or its link)")
	c.Flags().IntVar(&top, "top", 10, "list this many programs, costliest first (0: only the flagged ones)")
	c.Flags().Float64Var(&trapNs, "trap-ns", 0, "cost of one uprobe trap for the estimate, in ns (0: measure it here when busy uprobes are found)")
	return c
}
