package main

import (
	"errors"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/wolf-investigator/wolf/internal/hung"
	"github.com/wolf-investigator/wolf/internal/investigator"
)

func newHungCmd() *cobra.Command {
	var (
		out       outputFlags
		duration  time.Duration
		pid       int
		threshold time.Duration
	)
	c := &cobra.Command{
		Use:   "hung",
		Short: "Find tasks hung in D state, what they wait on, and who holds it",
		Long: `hung finds tasks sleeping uninterruptibly (D state) for longer than
--threshold, including those that blocked before wolf started, groups them by
the lock or wait site they share, decodes the lock's owner in the kernel and
follows what the owner itself waits for (a lock, I/O, a FUSE daemon).

It names the offender, not just the victims that the kernel's own hung-task
report lists, and it does so long before khungtaskd's timeout.`,
		Example: `  wolf hung                       # watch 10 s, report tasks blocked >= 5 s
  wolf hung --threshold 1s --duration 3s --format json
  wolf hung --pid 1234            # only victims in process 1234`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := out.validate(); err != nil {
				return err
			}
			if err := checkDuration(duration); err != nil {
				return err
			}
			if threshold <= 0 {
				return usageErr("--threshold must be positive, got %v", threshold)
			}
			if err := checkPID(pid); err != nil {
				return err
			}
			if err := requireRoot("wolf hung"); err != nil {
				return err
			}
			h := hung.New()
			h.Threshold = threshold
			rep, errs := runInvestigators(cmd.Context(), "hung", []investigator.Investigator{h}, investigator.Options{Duration: duration, PID: pid}, false, os.Stderr)
			if len(errs) > 0 {
				return investigationErr(errs[0])
			}
			return out.write(cmd.OutOrStdout(), rep)
		},
	}
	out.register(c)
	c.Flags().DurationVarP(&duration, "duration", "d", 10*time.Second, "how long to watch")
	c.Flags().IntVarP(&pid, "pid", "p", 0, "only report victims in this process (tgid or tid)")
	c.Flags().DurationVar(&threshold, "threshold", hung.DefaultThreshold, "report tasks blocked at least this long")
	return c
}

// investigationErr maps an investigator's failure to an exit code: 3 for
// a missing privilege or kernel feature, 1 for anything else.
func investigationErr(err error) error {
	if errors.Is(err, investigator.ErrUnsupported) || errors.Is(err, investigator.ErrPrivilege) {
		return &exitError{code: exitPrivilege, err: err}
	}
	return &exitError{code: exitFailed, err: err}
}
