package bpfcost

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/wolf-investigator/wolf/internal/investigator"
)

// Command implements investigator.Commander: wolf bpf.
func (b *Investigator) Command() investigator.Command {
	var trapNs float64
	return investigator.Command{
		Short: "What every BPF program on the host costs, and the risky ones",
		Long: `bpf lists every BPF program loaded on the host, not only wolf's, like
bpftop: its type, name, attach point (tracepoint, uprobe file and symbol,
fentry target, cgroup, interface), the processes holding it, and over
--duration its runs per second, nanoseconds per run and share of the CPUs.

The numbers are the kernel's own BPF run statistics, turned on only while
wolf measures (BPF_ENABLE_STATS: reference-counted, off again when wolf
exits or dies; kernel.bpf_stats_enabled is never written).

It flags, for the reasons Usama Saqib gives in "Performance and reliability
pitfalls of eBPF" (FOSDEM 2026): programs costing a noticeable share of a
CPU; uprobes and uretprobes on hot paths (each hit traps into the kernel, a
cost the run statistics do not see: estimated from the trap cost, which wolf
measures with a probe on itself, and said so); kretprobes on hot paths (the
return-instance pool); fentry/fexit programs (detach waits for RCU-tasks);
uprobes on widely mapped files (registration write-locks every mapping
process's mmap_lock); recursion misses.`,
		Example: `  wolf bpf                        # measure 5 s, list the 10 costliest programs
  wolf bpf --duration 10s --top 30 --format json
  wolf bpf --pid 1234             # only programs process 1234 holds`,
		Duration: 5 * time.Second,
		PID:      "only programs this process holds (a file descriptor of the program or its link)",
		Flags: func(f *pflag.FlagSet) {
			f.IntVar(&b.Top, "top", 10, "list this many programs, costliest first (0: only the flagged ones)")
			f.Float64Var(&trapNs, "trap-ns", 0, "cost of one uprobe trap for the estimate, in ns (0: measure it here when busy uprobes are found)")
		},
		Validate: func(context.Context, int) error {
			if b.Top < 0 || b.Top > 10000 {
				return fmt.Errorf("--top must be between 0 and 10000, got %d", b.Top)
			}
			if trapNs < 0 || trapNs > 1e6 {
				return fmt.Errorf("--trap-ns must be between 0 and 1000000, got %v", trapNs)
			}
			if trapNs > 0 {
				b.Thresholds.TrapNs, b.Thresholds.TrapSource, b.Calibrate = trapNs, "", false
			}
			return nil
		},
	}
}
