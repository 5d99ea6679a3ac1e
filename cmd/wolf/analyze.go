package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/wolf-investigator/wolf/internal/hung/hunglog"
	"github.com/wolf-investigator/wolf/internal/hung/hunglog/logline"
)

func newAnalyzeCmd() *cobra.Command {
	var out outputFlags
	maxInput := "256M"
	c := &cobra.Command{
		Use:   "analyze FILE",
		Short: "Find and explain hung-task reports in a saved kernel log",
		Long: `analyze reads a saved kernel log, finds the kernel's hung-task reports and
dumps of blocked tasks, groups the tasks by what they wait on, names the
task holding it when the log does ("likely owned by task", lockdep's "locks
held" by lock address and state), follows that task when it is blocked
itself, and ties the hang to earlier events of the same log (NVMe and SCSI
timeouts, I/O errors, GPU Xid errors, lockups, RCU stalls, OOM kills).

The log may be as people actually have it: dmesg (raw, -T, relative),
journalctl -k or a syslog file (with or without host, facility.level),
/dev/kmsg, pasted into mail or a bug tracker (quoted, indented, wrapped at
72-80 columns, quoted-printable, reflowed), from x86, arm64, ARM, PowerPC
or MIPS kernels from 3.x on. The report's header names the log's kernel
and host, not this machine's.

FILE "-" reads standard input. It needs no privilege. At most --max-input
bytes are read (the report notes when the log was cut there); a line of
more than 1 MiB without a newline ends the input, and binary input (such
as /dev/zero) is refused with exit code 2.`,
		Example: `  dmesg > kernel.log && wolf analyze kernel.log
  journalctl -k -b -1 | wolf analyze - --format json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErr("analyze takes one file (or - for standard input)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := out.validate(); err != nil {
				return err
			}
			limit, err := parseSize(maxInput)
			if err != nil || limit <= 0 {
				return usageErr("--max-input %q: want a size such as 256M, 2G or 500000", maxInput)
			}
			var r io.Reader = cmd.InOrStdin()
			name := "standard input"
			if args[0] != "-" {
				name = args[0]
				f, err := os.Open(args[0])
				if err != nil {
					return usageErr("cannot read %s: %v", args[0], err)
				}
				defer f.Close()
				if st, err := f.Stat(); err == nil && st.IsDir() {
					return usageErr("%s is a directory, not a kernel log", args[0])
				}
				r = f
			}
			started := time.Now()
			a, err := hunglog.AnalyzeLimited(r, logline.Limits{MaxBytes: limit})
			if err != nil {
				return wrapFailure(fmt.Errorf("analyze %s: %w", name, err))
			}
			if a.Binary || (a.Cut != "" && len(a.Reports) == 0 && a.Lines <= 1) {
				return usageErr("%s is not a text kernel log: %s", name, a.Cut)
			}
			rep := newReport("analyze", started)
			// The header describes the log, not the machine reading it.
			rep.Kernel, rep.Host = a.Kernel, a.Host
			rep.Findings = a.Findings
			if a.Cut != "" {
				rep.Notes = append(rep.Notes, "The input was cut: "+a.Cut+". The findings cover what was read.")
				fmt.Fprintf(cmd.ErrOrStderr(), "wolf: note: %s was cut: %s\n", name, a.Cut)
			}
			if a.LongLines > 0 {
				rep.Notes = append(rep.Notes, fmt.Sprintf("%d line(s) longer than %d KiB were cut to that length.", a.LongLines, logline.DefaultMaxLineBytes>>10))
			}
			rep.DurationS = float64(time.Since(started).Milliseconds()) / 1000
			return out.write(cmd.OutOrStdout(), rep)
		},
	}
	out.register(c)
	c.Flags().StringVar(&maxInput, "max-input", maxInput, "read at most this much of the log (K, M, G suffixes)")
	return c
}

// parseSize reads "256M", "2G", "64K" or a number of bytes.
func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "K"), strings.HasSuffix(s, "k"):
		mult, s = 1<<10, s[:len(s)-1]
	case strings.HasSuffix(s, "M"), strings.HasSuffix(s, "m"):
		mult, s = 1<<20, s[:len(s)-1]
	case strings.HasSuffix(s, "G"), strings.HasSuffix(s, "g"):
		mult, s = 1<<30, s[:len(s)-1]
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, err
	}
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("too large")
	}
	return n * mult, nil
}
