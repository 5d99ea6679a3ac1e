package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/render"
	"github.com/wolf-investigator/wolf/internal/softirq"
)

func newSoftirqCmd() *cobra.Command {
	var (
		out        outputFlags
		duration   time.Duration
		threshold  time.Duration
		sampleHz   int
		perCPU     bool
		histograms bool
		fn         string
		pid        int
	)
	c := &cobra.Command{
		Use:   "softirq",
		Short: "Softirq run and wait times per vector and CPU; long NET_RX stalls and their cause",
		Long: `softirq times every softirq handler on every CPU from the irq:softirq_entry
and softirq_exit tracepoints (NET_RX's run time is net_rx_action's latency,
no kprobe needed), and the wait from softirq_raise to entry. Every run at
least --threshold long is captured with its CPU, vector, duration and time.

For NET_RX it says what the time went to: kernel stacks sampled only while
a CPU is inside NET_RX (tcp_collapse and tcp_prune_queue when TCP is
compacting receive queues, the seed's 23 ms stall), TCP's prune and collapse
counters of every network namespace, packet drop reasons, NAPI work against
budget per device and net_rx_action running out of budget (time_squeeze).

--func times one function from entry to return, like the seed's
histogram-kernel.stp: BINARY:SYMBOL with uprobes, or a kernel function
with kprobes where the kernel has them (wolf says why not where it does not).`,
		Example: `  wolf softirq                           # watch 10 s, report runs >= 5 ms
  wolf softirq --threshold 1ms --format json
  wolf softirq --histograms              # text: log2 histograms, as stap printed them
  wolf softirq --func /usr/sbin/nginx:ngx_http_process_request_line --pid 1234
  wolf softirq --func net_rx_action      # a kernel function: needs kprobes`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			format, err := out.validate()
			if err != nil {
				return err
			}
			if err := checkDuration(duration); err != nil {
				return err
			}
			if threshold <= 0 || threshold > time.Minute {
				return usageErr("--threshold must be between 0 and 1m, got %v", threshold)
			}
			if sampleHz < 0 || sampleHz > 10000 {
				return usageErr("--sample-hz must be 0 (off) to 10000, got %d", sampleHz)
			}
			if err := checkPID(pid); err != nil {
				return err
			}
			var target *softirq.FuncTarget
			if fn != "" {
				t, err := softirq.ParseFuncTarget(fn)
				if err != nil {
					return usageErr("--func: %v", err)
				}
				if pid != 0 && t.Kernel() {
					return usageErr("--pid filters a user-space --func BINARY:SYMBOL; kernel functions are timed for every process")
				}
				if err := softirq.CheckTarget(t); err != nil {
					return usageErr("--func: %v", badTarget(err))
				}
				target = &t
			} else if pid != 0 {
				return usageErr("--pid only applies to --func BINARY:SYMBOL (softirqs belong to CPUs, not processes)")
			}
			if err := requireRoot("wolf softirq"); err != nil {
				return err
			}
			if target != nil {
				if err := softirq.CheckFunc(cmd.Context(), *target); err != nil {
					if errors.Is(err, softirq.ErrBadTarget) {
						return usageErr("--func: %v", badTarget(err))
					}
					return investigationErr(err)
				}
			}
			inv := softirq.New()
			inv.Threshold, inv.SampleHz, inv.PerCPU = threshold, sampleHz, perCPU
			inv.Func, inv.FuncPID = target, pid
			rep, errs := runInvestigators(cmd.Context(), "softirq", []investigator.Investigator{inv}, investigator.Options{Duration: duration}, false, os.Stderr)
			if len(errs) > 0 {
				return investigationErr(errs[0])
			}
			if format != render.FormatText || (!histograms && target == nil) {
				return out.write(cmd.OutOrStdout(), rep)
			}
			// The histograms go with the report, in one atomic write.
			return out.writeWith(cmd.OutOrStdout(), rep, func(w io.Writer) {
				for _, h := range rep.Histograms {
					if histograms || h.Name == "func_latency_us" {
						writeHistogram(w, h)
					}
				}
			})
		},
	}
	out.register(c)
	fl := c.Flags()
	fl.DurationVarP(&duration, "duration", "d", 10*time.Second, "how long to watch")
	fl.DurationVar(&threshold, "threshold", softirq.DefaultThreshold, "a softirq run at least this long is a stall")
	fl.IntVar(&sampleHz, "sample-hz", softirq.DefaultSampleHz, "kernel stack samples per second per CPU, kept only inside NET_RX (0: off)")
	fl.BoolVar(&perCPU, "per-cpu", false, "also report histograms per CPU")
	fl.BoolVar(&histograms, "histograms", false, "text format: print the log2 histograms after the findings")
	fl.StringVar(&fn, "func", "", "also time a function: `BINARY:SYMBOL` (uprobes) or a kernel function name (kprobes)")
	fl.IntVarP(&pid, "pid", "p", 0, "with --func BINARY:SYMBOL: only calls in this process")
	return c
}

// badTarget is err without the sentinel's words at its end.
func badTarget(err error) string {
	return strings.TrimSuffix(err.Error(), ": "+softirq.ErrBadTarget.Error())
}

// writeHistogram prints a log2 histogram the way SystemTap's @hist_log
// does in the seed: one row per power of two, a bar, the count.
func writeHistogram(w io.Writer, h finding.Histogram) {
	var labels []string
	for _, k := range []string{"vector", "cpu", "func"} {
		if v, ok := h.Labels[k]; ok {
			labels = append(labels, k+"="+v)
		}
	}
	fmt.Fprintf(w, "\n%s {%s}: count %d, sum %.0f %s, max %.1f %s\n", h.Name, strings.Join(labels, ","), h.Count, h.Sum, h.Unit, h.Max, h.Unit)
	if len(h.Buckets) == 0 {
		return
	}
	counts := make([]uint64, len(h.Buckets))
	var prev, top uint64
	for i, b := range h.Buckets {
		counts[i] = b.Count - prev
		prev = b.Count
		top = max(top, counts[i])
	}
	const width = 50
	fmt.Fprintf(w, "%14s |%s count\n", "<= "+h.Unit, strings.Repeat("-", width))
	for i, b := range h.Buckets {
		bar := 0
		if top > 0 {
			bar = int((counts[i]*width + top - 1) / top)
		}
		fmt.Fprintf(w, "%14s |%-*s %d\n", fmtBound(b.LE), width, strings.Repeat("@", bar), counts[i])
	}
}

func fmtBound(v float64) string {
	switch {
	case v < 10:
		return fmt.Sprintf("%.3g", v)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}
