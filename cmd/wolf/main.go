// Command wolf investigates a live Linux kernel: hung tasks, and (as they
// land) lock contention, reclaim, scheduler and softirq pathologies.
// It only wires packages together; the investigations live in internal/.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/wolf-investigator/wolf/internal/buildinfo"
	"github.com/wolf-investigator/wolf/internal/kernelbtf"
)

// Exit codes, as ARCHITECTURE.md#exit-codes fixes them.
const (
	exitOK        = 0
	exitFailed    = 1
	exitUsage     = 2
	exitPrivilege = 3 // missing privilege or kernel feature
)

// version is this build's (internal/buildinfo: set by make release, else
// taken from what the Go toolchain recorded).
var version = buildinfo.Version()

// exitError carries an exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageErr(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

func privilegeErr(format string, args ...any) error {
	return &exitError{code: exitPrivilege, err: fmt.Errorf(format, args...)}
}

func main() {
	// The labs that re-execute this binary run their part in an init
	// function (lab.Child) and never get here.
	os.Exit(run(os.Args[1:]))
}

// run executes one wolf command and returns its exit code. SIGINT and
// SIGTERM cancel the context: investigators stop, detach and still report
// what they saw.
func run(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRootCmd()
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(os.Stderr, "wolf: %v\n", err)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	// cobra's own errors (unknown command, bad flag) are usage errors.
	return exitUsage
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "wolf",
		Short: "wolf investigates a sick Linux kernel, live, in seconds",
		Long: `wolf turns kernel investigations that take experts days into findings:
a verdict, the evidence, the mechanism and what to do.

  wolf doctor           run every investigator and the audit (start here)
  wolf hung             tasks stuck in D state and who holds what they wait for
  wolf locks            contended kernel locks, their owners, mmap_lock holds
  wolf reclaim          memory reclaim per cgroup: stalls, efficiency, the memcg livelock
  wolf sched            tasks bounced between CPUs, who moves them, run-queue latency
  wolf softirq          softirq stalls per CPU (NET_RX: TCP collapse, budget)
  wolf io               block I/O per disk, cgroup, process: who waits, throttles, journals
  wolf watch            always on: findings as JSON lines, Prometheus metrics, incidents
  wolf incidents        the incident bundles watch wrote: list, show, pack
  wolf bpf              what every BPF program on the host costs (like bpftop)
  wolf analyze FILE     hung-task reports in a saved kernel log
  wolf check            what this kernel lets wolf do
  wolf lab list|run     reproduce a pathology here, safely

Exit codes: 0 done (findings or not), 1 wolf failed, 2 bad usage,
3 missing privilege or kernel feature.`,
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// Before any command: values that parse but are mistakes (an empty
	// file name, --pid 0) are refused; --btf, the kernel's types from a
	// file for kernels built without BTF, is read; then wolf's priority
	// (--nice) is set.
	var prio priorityFlag
	prio.register(root)
	var btfFile string
	root.PersistentFlags().StringVar(&btfFile, "btf", "", "the kernel's BTF from `FILE` (for kernels without /sys/kernel/btf/vmlinux; BTFHub has them)")
	root.PersistentPreRunE = func(c *cobra.Command, _ []string) error {
		if err := checkFlagValues(c); err != nil {
			return err
		}
		if btfFile != "" {
			if err := kernelbtf.Use(btfFile); err != nil {
				return usageErr("%v", err)
			}
		}
		return prio.apply(c)
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageErr("%v (see %s --help)", err, c.CommandPath())
	})
	// The commands that watch the live kernel exist on Linux only; built
	// for another system, wolf has them say so (live_other.go).
	addLiveCommands(root)
	root.AddCommand(newAnalyzeCmd(), newVersionCmd(), newIncidentsCmd())
	return root
}

// wrapFailure marks an error from an investigation as exit 1, unless it
// already carries a code.
func wrapFailure(err error) error {
	if err == nil {
		return nil
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return err
	}
	return &exitError{code: exitFailed, err: err}
}
