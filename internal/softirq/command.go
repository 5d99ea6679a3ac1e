package softirq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/wolf-investigator/wolf/internal/investigator"
)

// Command implements investigator.Commander: wolf softirq.
func (inv *Investigator) Command() investigator.Command {
	var fn string
	return investigator.Command{
		Short: "Softirq run and wait times per vector and CPU; long NET_RX stalls and their cause",
		Long: `softirq times every softirq handler on every CPU from the irq:softirq_entry
and softirq_exit tracepoints (NET_RX's run time is net_rx_action's latency,
no kprobe needed), and the wait from softirq_raise to entry. Every run at
least --threshold long is captured with its CPU, vector, duration and time.

For NET_RX it says what the time went to: kernel stacks sampled only while
a CPU is inside NET_RX (tcp_collapse and tcp_prune_queue when TCP is
compacting receive queues, the 23 ms stall of Cloudflare's "The story of one
latency spike"), TCP's prune and collapse counters of every network
namespace, packet drop reasons, NAPI work against budget per device and
net_rx_action running out of budget (time_squeeze).

--func times one function from entry to return, as that story's
histogram-kernel.stp did: BINARY:SYMBOL with uprobes, or a kernel function
with kprobes where the kernel has them (wolf says why not where it does not).`,
		Example: `  wolf softirq                           # watch 10 s, report runs >= 5 ms
  wolf softirq --threshold 1ms --format json
  wolf softirq --histograms              # text: log2 histograms, as stap printed them
  wolf softirq --func /usr/sbin/nginx:ngx_http_process_request_line --pid 1234
  wolf softirq --func net_rx_action      # a kernel function: needs kprobes`,
		PID: "with --func BINARY:SYMBOL: only calls in this process",
		Flags: func(f *pflag.FlagSet) {
			f.DurationVar(&inv.Threshold, "threshold", DefaultThreshold, "a softirq run at least this long is a stall")
			f.IntVar(&inv.SampleHz, "sample-hz", DefaultSampleHz, "kernel stack samples per second per CPU, kept only inside NET_RX (0: off)")
			f.BoolVar(&inv.PerCPU, "per-cpu", false, "also report histograms per CPU")
			f.BoolVar(&inv.PrintHistograms, "histograms", false, "text format: print the log2 histograms after the findings")
			f.StringVar(&fn, "func", "", "also time a function: `BINARY:SYMBOL` (uprobes) or a kernel function name (kprobes)")
		},
		Validate: func(_ context.Context, pid int) error {
			if inv.Threshold <= 0 || inv.Threshold > time.Minute {
				return fmt.Errorf("--threshold must be between 0 and 1m, got %v", inv.Threshold)
			}
			if inv.SampleHz < 0 || inv.SampleHz > 10000 {
				return fmt.Errorf("--sample-hz must be 0 (off) to 10000, got %d", inv.SampleHz)
			}
			if fn == "" {
				if pid != 0 {
					return errors.New("--pid only applies to --func BINARY:SYMBOL (softirqs belong to CPUs, not processes)")
				}
				return nil
			}
			t, err := ParseFuncTarget(fn)
			if err != nil {
				return fmt.Errorf("--func: %w", err)
			}
			if pid != 0 && t.Kernel() {
				return errors.New("--pid filters a user-space --func BINARY:SYMBOL; kernel functions are timed for every process")
			}
			if err := CheckTarget(t); err != nil {
				return fmt.Errorf("--func: %s", badTarget(err))
			}
			inv.Func, inv.FuncPID = &t, pid
			return nil
		},
		Prepare: func(ctx context.Context) error {
			if inv.Func == nil {
				return nil
			}
			err := CheckFunc(ctx, *inv.Func)
			if errors.Is(err, ErrBadTarget) {
				return fmt.Errorf("--func: %s", badTarget(err))
			}
			if err != nil {
				return fmt.Errorf("%w: %w", err, investigator.ErrUnsupported)
			}
			return nil
		},
		TextHistograms: func(name string) bool {
			return inv.PrintHistograms || name == "func_latency_us"
		},
	}
}

// badTarget is err without the sentinel's words at its end.
func badTarget(err error) string {
	return strings.TrimSuffix(err.Error(), ": "+ErrBadTarget.Error())
}

// Metrics implements investigator.Exporter.
func (*Investigator) Metrics() ([]investigator.HistogramMetric, []investigator.GaugeMetric) {
	return []investigator.HistogramMetric{
		{Histogram: "softirq_runtime_us", Name: "wolf_softirq_runtime_seconds", Help: "Softirq handler run time per run, by vector.",
			Labels: []string{"vector"}, MaxName: "wolf_softirq_runtime_max_seconds"},
		{Histogram: "softirq_wait_us", Name: "wolf_softirq_wait_seconds", Help: "Softirq raise-to-run wait, by vector.",
			Labels: []string{"vector"}, MaxName: "wolf_softirq_wait_max_seconds"},
	}, nil
}
