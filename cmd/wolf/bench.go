//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/wolf-investigator/wolf/internal/human"
	"github.com/wolf-investigator/wolf/internal/render"
	"github.com/wolf-investigator/wolf/lpm/bpflpm"
	"github.com/wolf-investigator/wolf/lpm/realtable"
)

func newBenchCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "bench",
		Short: "Benchmark wolf's BPF data structures against the kernel's",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErr("bench needs a benchmark: lpm")
		},
	}
	c.AddCommand(newBenchLPMCmd())
	return c
}

func newBenchLPMCmd() *cobra.Command {
	var (
		out             outputFlags
		entries, ops    string
		real, ipv6      bool
		repeat, trials  int
		runs            int
		loops, userOps  int
		probes          int
		dirBits4, dirB6 int
	)
	c := &cobra.Command{
		Use:   "lpm",
		Short: "wolf's LPM structure against the kernel's BPF_MAP_TYPE_LPM_TRIE, side by side",
		Long: `lpm measures wolf's longest-prefix-match structure (lpm/bpflpm) and the
kernel's BPF_MAP_TYPE_LPM_TRIE in the same run, the way the kernel's own
benchmark does (tools/testing/selftests/bpf/benchs/bench_lpm_trie_map.c):
an XDP program run by BPF_PROG_TEST_RUN does --loops operations per run in
bpf_loop, timed in the kernel; the bare loop is measured too and subtracted.

Dense sets hold every /32 in [0, N) - the kernel trie's worst case - and
are looked up at random keys. --real adds the real IPv4 routing table
(~900 K prefixes, from the Go module cache), --ipv6 the real IPv6 table
(~160 K), looked up at addresses drawn from announced space. Every key and
probe is also looked up in both and the disagreements are reported as
mismatches (there should be none).

Every row carries its spread, [lowest-highest]: with one run, over the
lookup trials or over the ten side-by-side chunks of user-space updates
and deletes; with --runs N, over the N whole runs, each a side-by-side
measurement, of which the row then shows the median.

Operations: load (bulk fill: the trie by batch syscall, wolf by Load),
lookup (in BPF), update and delete (the kernel trie in BPF as the selftest
does, and both from user space: syscall against wolf's Go API), free (the
kernel's work to free the whole structure after the last close: the soft
lockup of Cloudflare's "A deep dive into BPF LPM trie performance and
optimization").`,
		Example: `  wolf bench lpm                                # dense sets, 1 to 1 M entries
  wolf bench lpm --real --ipv6 --format json -o lpm.json
  wolf bench lpm --entries 10K,1M --ops lookup --repeat 200
  wolf bench lpm --real --ipv6 --runs 5          # medians of 5 runs, with their range`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := textOrJSON(out.validate())
			if err != nil {
				return err
			}
			o := bpflpm.BenchOptions{Real: real, IPv6: ipv6, Repeat: repeat, Trials: trials, Loops: loops, UserOps: userOps, Probes: probes, DirBits4: dirBits4, DirBits6: dirB6}
			if o.Entries, err = parseEntries(entries); err != nil {
				return usageErr("--entries: %v", err)
			}
			if o.Ops, err = parseOps(ops); err != nil {
				return usageErr("--ops: %v", err)
			}
			if repeat < 1 || trials < 1 || runs < 1 || loops < 1 || loops > 1<<23 || userOps < 0 || probes < 0 {
				return usageErr("--repeat, --trials and --runs must be positive, --loops 1..%d, --probes not negative", 1<<23)
			}
			for _, b := range []int{dirBits4, dirB6} {
				if b != 0 && (b < 8 || b > 24) {
					return usageErr("--dir-bits must be 8..24, got %d", b)
				}
			}
			if err := requireRoot("wolf bench lpm"); err != nil {
				return err
			}
			if real || ipv6 {
				if _, err := realtable.Path(); err != nil {
					return &exitError{code: exitFailed, err: err}
				}
			}
			if isTerminal(os.Stderr) {
				o.Log = func(format string, a ...any) {
					fmt.Fprintf(os.Stderr, "wolf bench lpm: "+format+"\n", a...)
				}
			}
			started := time.Now()
			var reps []*bpflpm.BenchReport
			for i := range runs {
				if runs > 1 && o.Log != nil {
					o.Log("run %d of %d", i+1, runs)
				}
				var rep *bpflpm.BenchReport
				rep, err = bpflpm.Bench(cmd.Context(), o)
				if rep != nil && (err == nil || len(reps) == 0) {
					reps = append(reps, rep)
				}
				if err != nil {
					break
				}
			}
			rep := bpflpm.MergeRuns(reps)
			interrupted := err != nil && cmd.Context().Err() != nil
			if err != nil && !interrupted {
				return wrapFailure(err)
			}
			doc := newBenchDoc(rep, started, interrupted)
			var buf bytes.Buffer
			if f == render.FormatJSON {
				enc := json.NewEncoder(&buf)
				enc.SetIndent("", "  ")
				err = enc.Encode(doc)
			} else {
				err = writeBenchText(&buf, doc)
			}
			if err != nil {
				return wrapFailure(err)
			}
			if err := out.writeBytes(cmd.OutOrStdout(), buf.Bytes(), "bench-lpm", string(f)); err != nil {
				return err
			}
			if interrupted {
				return wrapFailure(errors.New("interrupted; the results are partial"))
			}
			return nil
		},
	}
	out.register(c)
	fl := c.Flags()
	fl.StringVar(&entries, "entries", "1,100,10K,100K,1M", "dense table `sizes`, comma-separated (K and M suffixes allowed; empty for none)")
	fl.StringVar(&ops, "ops", strings.Join(bpflpm.BenchOps, ","), "operations to measure: "+strings.Join(bpflpm.BenchOps, ", "))
	fl.BoolVar(&real, "real", false, "also benchmark the real IPv4 routing table")
	fl.BoolVar(&ipv6, "ipv6", false, "also benchmark the real IPv6 routing table")
	fl.IntVar(&repeat, "repeat", 100, "BPF_PROG_TEST_RUN runs per lookup measurement")
	fl.IntVar(&loops, "loops", 10000, "operations per run, inside bpf_loop")
	fl.IntVar(&trials, "trials", 3, "measurements per lookup; the median is reported")
	fl.IntVar(&runs, "runs", 1, "whole side-by-side runs; each row reports the median over them and their range")
	fl.IntVar(&userOps, "user-ops", 0, "update and delete calls per user-space measurement (default 100 × --repeat)")
	fl.IntVar(&probes, "probes", 0, "addresses the real-table lookups cycle through (default 1 Mi); a few thousand stay cached, so the lookups cost their instructions, not their misses")
	fl.IntVar(&dirBits4, "dir-bits", 0, "wolf's directory bits for IPv4 tables (8..24; default the package's)")
	fl.IntVar(&dirB6, "dir-bits6", 0, "wolf's directory bits for IPv6 tables (8..24; default the package's)")
	return c
}

// parseEntries reads "1,100,10K,1M".
func parseEntries(s string) ([]int, error) {
	out := []int{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		mult := 1
		switch {
		case strings.HasSuffix(f, "K") || strings.HasSuffix(f, "k"):
			mult, f = 1000, f[:len(f)-1]
		case strings.HasSuffix(f, "M") || strings.HasSuffix(f, "m"):
			mult, f = 1_000_000, f[:len(f)-1]
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > bpflpm.MaxBenchEntries/mult {
			return nil, fmt.Errorf("%q is not a size from 1 to %d", f, bpflpm.MaxBenchEntries)
		}
		out = append(out, n*mult)
	}
	return out, nil
}

func parseOps(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		ok := false
		for _, op := range bpflpm.BenchOps {
			ok = ok || op == f
		}
		if !ok {
			return nil, fmt.Errorf("unknown operation %q (want some of %s)", f, strings.Join(bpflpm.BenchOps, ","))
		}
		out = append(out, f)
	}
	return out, nil
}

// benchDoc is the JSON document: the report header every wolf command
// writes, then the benchmark's results.
type benchDoc struct {
	WolfVersion string    `json:"wolf_version"`
	Command     string    `json:"command"`
	Kernel      string    `json:"kernel"`
	Host        string    `json:"host"`
	CPU         string    `json:"cpu"`
	CPUs        int       `json:"cpus"`
	StartedAt   time.Time `json:"started_at"`
	DurationS   float64   `json:"duration_s"`
	Interrupted bool      `json:"interrupted,omitempty"`
	*bpflpm.BenchReport
}

func newBenchDoc(rep *bpflpm.BenchReport, started time.Time, interrupted bool) *benchDoc {
	h := newReport("bench lpm", started)
	if rep == nil {
		rep = &bpflpm.BenchReport{Results: []bpflpm.BenchResult{}}
	}
	return &benchDoc{
		WolfVersion: h.WolfVersion,
		Command:     h.Command,
		Kernel:      h.Kernel,
		Host:        h.Host,
		CPU:         cpuModel(),
		CPUs:        runtime.NumCPU(),
		StartedAt:   h.StartedAt,
		DurationS:   time.Since(started).Round(time.Millisecond).Seconds(),
		Interrupted: interrupted,
		BenchReport: rep,
	}
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// runsOf is how many whole runs the report merges.
func runsOf(d *benchDoc) int {
	n := 1
	for _, r := range d.Results {
		n = max(n, r.Runs)
	}
	return n
}

// nsCell prints a ns/op cell: ns with a decimal (the column's unit) where
// benchmarks compare tens of ns, a duration from 10 µs up (freeing a
// table).
func nsCell(ns float64) string {
	if ns < 10_000 {
		return strconv.FormatFloat(ns, 'f', 1, 64)
	}
	return human.Duration(time.Duration(ns))
}

// bytesCell prints a memory cell; "-" where nothing was measured.
func bytesCell(b uint64) string {
	if b == 0 {
		return "-"
	}
	return human.Bytes(int64(b))
}

func writeBenchText(w io.Writer, d *benchDoc) error {
	fmt.Fprintf(w, "wolf bench lpm: kernel %s, %d CPUs (%s)\n", d.Kernel, d.CPUs, d.CPU)
	fmt.Fprintf(w, "lookups: median ns/op of %d runs × %d operations, median of %d such measurements; ns/op without the harness\n", d.Repeat, d.Loops, d.Trials)
	if n := runsOf(d); n > 1 {
		fmt.Fprintf(w, "each row: the median of %d whole side-by-side runs, [lowest–highest] of them\n", n)
	} else {
		fmt.Fprintln(w, "[spread]: lowest–highest of the lookup trials, or of ten side-by-side chunks of the user-space operations")
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "set\tentries\top\tvia\timpl\tns/op\t[spread]\tMops/s\tbytes\tB/prefix\tused\tspeedup\t[spread]\t")
	perPrefix := func(b uint64, n int) string {
		if b == 0 || n == 0 {
			return "-"
		}
		return strconv.FormatFloat(float64(b)/float64(n), 'f', 1, 64)
	}
	for _, r := range d.Results {
		mops, speed := "-", ""
		if r.Op != "free" {
			mops = strconv.FormatFloat(r.Mops, 'f', 2, 64)
		}
		nsSpread, speedSpread := "", ""
		if r.Speedup > 0 {
			speed = strconv.FormatFloat(r.Speedup, 'f', 1, 64) + "×"
		}
		if r.NsPerOpMax > 0 {
			nsSpread = "[" + nsCell(r.NsPerOpMin) + "–" + nsCell(r.NsPerOpMax) + "]"
		}
		if r.SpeedupMax > 0 {
			speedSpread = "[" + strconv.FormatFloat(r.SpeedupMin, 'f', 1, 64) + "–" + strconv.FormatFloat(r.SpeedupMax, 'f', 1, 64) + "]"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Set, r.Entries, r.Op, r.Via, r.Impl,
			nsCell(r.NsPerOp), nsSpread, mops, bytesCell(r.Bytes), perPrefix(r.Bytes, r.Entries), perPrefix(r.BytesUsed, r.Entries), speed, speedSpread)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, h := range d.Harness {
		keys := h.Keys
		if h.Probes > 0 {
			keys = fmt.Sprintf("%s (%d)", keys, h.Probes)
		}
		fmt.Fprintf(w, "harness %s %d %s keys: %.1f ns/op (subtracted)\n", h.Set, h.Entries, keys, h.NsPerOp)
	}
	fmt.Fprintf(w, "mismatches: %d of %d probes compared between wolf and the kernel trie\n", d.Mismatches, d.Compared)
	fmt.Fprintln(w, "bytes: memory the kernel holds (trie: slab grown while filling, from 1 K entries, with identical tries filled beside it up to 64 K entries; wolf: its map, with room for a second copy of the nodes and spare)")
	fmt.Fprintln(w, "used: bytes per prefix by the trie's own accounting (bpftool's memlock) and of wolf's live structure")
	fmt.Fprintln(w, "free: time the kernel spends freeing the whole structure after its last close; speedup: kernel trie ns/op over wolf's (bpf vs bpf, syscall vs wolf's Go API)")
	for _, n := range d.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	if d.Interrupted {
		fmt.Fprintln(w, "interrupted: the results are partial")
	}
	return nil
}
