//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/lab/bounce"
	"github.com/wolf-investigator/wolf/internal/lab/coredump"
	"github.com/wolf-investigator/wolf/internal/lab/cpuquota"
	"github.com/wolf-investigator/wolf/internal/lab/fusestall"
	"github.com/wolf-investigator/wolf/internal/lab/hotuprobe"
	"github.com/wolf-investigator/wolf/internal/lab/memcgstress"
	"github.com/wolf-investigator/wolf/internal/lab/memchain"
	"github.com/wolf-investigator/wolf/internal/lab/mmaplock"
	"github.com/wolf-investigator/wolf/internal/lab/pshang"
	"github.com/wolf-investigator/wolf/internal/lab/tcpcollapse"
	"github.com/wolf-investigator/wolf/internal/render"
)

// labs lists every reproducer wolf ships.
func labs() *lab.Registry {
	return lab.NewRegistry(fusestall.NewRWSem(), fusestall.NewMutex(), coredump.New(), mmaplock.New(),
		memcgstress.New(), memcgstress.NewPopulate(), bounce.NewBounce(), bounce.NewAffinity(), bounce.NewPinned(), tcpcollapse.New(),
		hotuprobe.New(), pshang.New(), memchain.New(), cpuquota.New())
}

func newLabCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "lab",
		Short: "Reproduce a kernel pathology on this machine, safely, to see wolf at work",
		Long: `Labs induce real pathologies (tasks hung behind a lock held by a task
waiting on a stalled FUSE daemon, …) inside their own mount, cgroup or
namespace, bounded in time, and undo everything when they end: on success,
on failure and on Ctrl-C. Run a lab in one terminal and wolf in another.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErr("lab needs a subcommand: list or run NAME")
		},
	}
	var listFormat string
	list := &cobra.Command{
		Use:   "list",
		Short: "List the labs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := render.ParseFormat(listFormat)
			if err != nil {
				return usageErr("--format: %v", err)
			}
			if _, err := textOrJSON(f, nil); err != nil {
				return err
			}
			type entry struct {
				Name    string `json:"name"`
				Summary string `json:"summary"`
			}
			var entries []entry
			for _, l := range labs().List() {
				entries = append(entries, entry{l.Name(), l.Summary()})
			}
			if f == render.FormatJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return wrapFailure(enc.Encode(entries))
			}
			for _, e := range entries {
				fmt.Fprintf(cmd.OutOrStdout(), "%-12s %s\n", e.Name, e.Summary)
			}
			return nil
		},
	}
	list.Flags().StringVar(&listFormat, "format", "text", "output format: text or json")
	c.AddCommand(list)
	var (
		duration time.Duration
		victims  int
	)
	run := &cobra.Command{
		Use:     "run NAME",
		Short:   "Run a lab for --duration, then clean up",
		Example: "  wolf lab run fuse-rwsem --duration 60s   # then, elsewhere: wolf hung",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErr("lab run takes one lab name (see `wolf lab list`)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := labs().Get(args[0])
			if err != nil {
				return usageErr("%v", err)
			}
			if err := checkDuration(duration); err != nil {
				return err
			}
			if victims < 0 || victims > 64 {
				return usageErr("--victims must be between 0 and 64, got %d", victims)
			}
			if err := requireRoot("wolf lab run"); err != nil {
				return err
			}
			return runLab(cmd.Context(), cmd, l, duration, victims)
		},
	}
	run.Flags().DurationVarP(&duration, "duration", "d", 60*time.Second, "how long to keep the pathology in place")
	run.Flags().IntVar(&victims, "victims", 0, "how many tasks to block (0: the lab's default)")
	c.AddCommand(run)
	return c
}

func runLab(ctx context.Context, cmd *cobra.Command, l lab.Lab, d time.Duration, victims int) error {
	out := cmd.OutOrStdout()
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	inst, err := l.Start(startCtx, lab.Options{Victims: victims, Logf: func(f string, a ...any) {
		fmt.Fprintf(cmd.ErrOrStderr(), "lab: "+f+"\n", a...)
	}})
	if err != nil {
		return wrapFailure(fmt.Errorf("lab %s: %w", l.Name(), err))
	}
	// Close runs however this function ends; Ctrl-C cancels ctx.
	defer func() {
		if err := inst.Close(); err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "lab %s: cleanup: %v\n", l.Name(), err)
		}
	}()
	fmt.Fprintf(out, "lab %s running for %v (Ctrl-C ends it early and cleans up)\n%s\n", l.Name(), d, inst.Describe())
	t := inst.Tasks()
	fmt.Fprintf(out, "offender pid %d, victims %v\n", t.Offender, t.Victims)
	select {
	case <-ctx.Done():
		fmt.Fprintf(out, "interrupted; cleaning up\n")
	case <-time.After(d):
		fmt.Fprintf(out, "done; cleaning up\n")
	}
	return nil
}
