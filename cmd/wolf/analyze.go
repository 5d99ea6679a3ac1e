package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/wolf-investigator/wolf/internal/hung/hunglog"
)

func newAnalyzeCmd() *cobra.Command {
	var out outputFlags
	c := &cobra.Command{
		Use:   "analyze FILE",
		Short: "Find and explain hung-task reports in a saved kernel log",
		Long: `analyze reads a kernel log saved from dmesg (raw or -T), journalctl -k or
/dev/kmsg, finds the kernel's hung-task reports (and sysrq-w dumps of
blocked tasks), groups them by what the tasks wait on, and names the
offender when the log does ("likely owned by task", lockdep's locks held).
FILE "-" reads standard input. It needs no privilege.`,
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
			var r io.Reader = cmd.InOrStdin()
			if args[0] != "-" {
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
			a, err := hunglog.Analyze(r)
			if err != nil {
				return wrapFailure(fmt.Errorf("analyze %s: %w", args[0], err))
			}
			rep := newReport("analyze", started)
			rep.Findings = a.Findings
			rep.DurationS = float64(time.Since(started).Milliseconds()) / 1000
			return out.write(cmd.OutOrStdout(), rep)
		},
	}
	out.register(c)
	return c
}
