//go:build linux

package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/wolf-investigator/wolf/internal/bpfcost"
	"github.com/wolf-investigator/wolf/internal/hung"
	"github.com/wolf-investigator/wolf/internal/investigator"
	wolfio "github.com/wolf-investigator/wolf/internal/io"
	"github.com/wolf-investigator/wolf/internal/kernelbtf"
	"github.com/wolf-investigator/wolf/internal/locks"
	"github.com/wolf-investigator/wolf/internal/reclaim"
	"github.com/wolf-investigator/wolf/internal/render"
	"github.com/wolf-investigator/wolf/internal/runner"
	"github.com/wolf-investigator/wolf/internal/sched"
	"github.com/wolf-investigator/wolf/internal/softirq"
)

// investigators is every live investigator wolf has, with its defaults, in
// the order commands list them. Adding an investigator is one line here:
// its command (from its Command), doctor, watch and its metrics (from its
// Metrics), check (from its Requirements) follow.
func investigators() []investigator.Investigator {
	return []investigator.Investigator{
		hung.New(),
		locks.New(),
		reclaim.New(),
		sched.New(),
		softirq.New(),
		wolfio.New(),
		bpfcost.New(),
	}
}

// newInvestigatorCmd builds an investigator's own command from what it
// declares: the flags every such command has, the investigator's own, its
// checks, one window, the report.
func newInvestigatorCmd(inv investigator.Investigator, spec investigator.Command) *cobra.Command {
	var (
		out      outputFlags
		duration time.Duration
		pid      int
		maxCPU   float64
		wl       workloadFlags
	)
	name := inv.Name()
	c := &cobra.Command{
		Use:     name,
		Short:   spec.Short,
		Long:    spec.Long,
		Example: spec.Example,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			format, err := out.validate()
			if err != nil {
				return err
			}
			if err := checkDuration(duration); err != nil {
				return err
			}
			if err := checkPID(pid); err != nil {
				return err
			}
			if err := checkMaxCPU(maxCPU); err != nil {
				return err
			}
			if err := wl.validate(cmd); err != nil {
				return err
			}
			if spec.Validate != nil {
				if err := spec.Validate(cmd.Context(), pid); err != nil {
					return checkErr(err)
				}
			}
			if err := requireRoot("wolf " + name); err != nil {
				return err
			}
			names, err := wl.prepare(cmd.Context(), duration)
			if err != nil {
				return err
			}
			if spec.Prepare != nil {
				if err := spec.Prepare(cmd.Context()); err != nil {
					return checkErr(err)
				}
			}
			opts := investigator.Options{PID: pid}
			var appendix func(*render.TextOptions)
			if spec.TextHistograms != nil && format == render.FormatText {
				appendix = func(o *render.TextOptions) { o.Histograms = spec.TextHistograms }
			}
			return investigate(cmd, &out, name, []investigator.Investigator{inv}, opts, duration, maxCPU, spec.Audit, true, appendix, names)
		},
	}
	out.register(c)
	d := spec.Duration
	if d == 0 {
		d = 10 * time.Second
	}
	c.Flags().DurationVarP(&duration, "duration", "d", d, "how long to watch")
	maxCPUFlag(c, &maxCPU, defaultMaxCPU)
	if spec.PID != "" {
		c.Flags().IntVarP(&pid, "pid", "p", 0, spec.PID)
		wl.register(c)
	}
	if spec.Flags != nil {
		spec.Flags(c.Flags())
	}
	return c
}

// investigate runs invs for one window of d and writes the report, before
// anything is detached (see internal/runner). With single set, the
// command is one investigator's own, and its failure is the command's.
// text, when set, adjusts the text rendering; names, when set, names the
// report's containers and pods and keeps what --container and --pod ask.
func investigate(cmd *cobra.Command, out *outputFlags, command string, invs []investigator.Investigator, opts investigator.Options, d time.Duration, maxCPU float64, audit, single bool, text func(*render.TextOptions), names *naming) error {
	if opts.BTF == "" {
		opts.BTF = kernelbtf.External() // --btf
	}
	bar := newProgressBar(os.Stderr, d, invs)
	bar.attaching()
	run := runner.Start(cmd.Context(), runner.Config{
		Report:        newReport(command, time.Now()),
		Investigators: invs,
		Options:       opts,
		Duration:      d,
		Audit:         audit,
		Checklist:     command == "doctor",
		Progress:      bar.update,
		MaxCPUPct:     maxCPU,
	})
	bar.stop()
	defer run.Close()
	if single && len(run.Errors) > 0 {
		return investigationErr(run.Errors[0])
	}
	names.apply(cmd.Context(), run.Report)
	out.text = text
	return out.write(cmd.OutOrStdout(), run.Report)
}

// checkErr maps an investigator's check: bad usage, unless the kernel or
// the privileges are what is missing.
func checkErr(err error) error {
	if errors.Is(err, investigator.ErrUnsupported) || errors.Is(err, investigator.ErrPrivilege) {
		return &exitError{code: exitPrivilege, err: err}
	}
	return &exitError{code: exitUsage, err: err}
}

// investigationErr maps an investigator's failure to an exit code: 3 for
// a missing privilege or kernel feature, 1 for anything else.
func investigationErr(err error) error {
	if errors.Is(err, investigator.ErrUnsupported) || errors.Is(err, investigator.ErrPrivilege) {
		return &exitError{code: exitPrivilege, err: err}
	}
	return &exitError{code: exitFailed, err: fmt.Errorf("%w", err)}
}
