//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/lab/bounce"
	"github.com/wolf-investigator/wolf/internal/lab/coredump"
	"github.com/wolf-investigator/wolf/internal/lab/cpuquota"
	"github.com/wolf-investigator/wolf/internal/lab/fusestall"
	"github.com/wolf-investigator/wolf/internal/lab/hotuprobe"
	"github.com/wolf-investigator/wolf/internal/lab/iolab"
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
		hotuprobe.New(), pshang.New(), memchain.New(), cpuquota.New(), iolab.NewThrottle(), iolab.NewDirty(), iolab.NewJournal(), iolab.NewSlow())
}

func newLabCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "lab",
		Short: "Reproduce a kernel pathology on this machine, safely, to see wolf at work",
		Long: `Labs induce real pathologies (tasks hung behind a lock held by a task
waiting on a stalled FUSE daemon, …) inside their own mount, cgroup or
namespace, bounded in time, and undo everything when they end: on success,
on failure and on Ctrl-C. Run a lab in one terminal and wolf in another.

A lab killed with SIGKILL cannot undo what it made; every lab records its
mounts, cgroups, directories and sysctl changes before making them, and
the next lab run, or wolf lab clean, undoes what dead labs left.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErr("lab needs a subcommand: list, run NAME or clean")
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

			if why := lab.WhyRoot(l); why != "" && os.Geteuid() != 0 {
				return privilegeErr("wolf lab run %s needs root: it %s (run it with sudo)", l.Name(), why)
			}
			return runLab(cmd.Context(), cmd, l, duration, victims)
		},
	}
	run.Flags().DurationVarP(&duration, "duration", "d", 60*time.Second, "how long to keep the pathology in place")
	run.Flags().IntVar(&victims, "victims", 0, "how many tasks to block (0: the lab's default)")
	c.AddCommand(run)
	c.AddCommand(newLabCleanCmd())
	return c
}

func newLabCleanCmd() *cobra.Command {
	var format string
	c := &cobra.Command{
		Use:   "clean",
		Short: "Undo what labs killed with SIGKILL left behind",
		Long: `clean undoes what labs that died without cleaning up (kill -9) left:
dead FUSE mounts, memory cgroups, temporary directories, a core_pattern
pointing at a lab's handler. Labs record each such thing in a ledger under
` + lab.DefaultStateDir + ` before making it; clean undoes the ledgers of labs
whose process is dead, and only what is named with that dead pid; a running
lab is left alone. wolf lab run does the same before it starts a lab.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := render.ParseFormat(format)
			if err != nil {
				return usageErr("--format: %v", err)
			}
			if _, err := textOrJSON(f, nil); err != nil {
				return err
			}
			if os.Geteuid() != 0 {
				return privilegeErr("wolf lab clean needs root: it unmounts, removes cgroups and restores sysctls that dead labs left (run it with sudo)")
			}
			done, cerr := lab.Clean(nil)
			type entry struct {
				Lab    string   `json:"lab"`
				PID    int      `json:"pid"`
				Undone []string `json:"undone"`
			}
			entries := []entry{}
			for _, c := range done {
				e := entry{Lab: c.Lab, PID: c.PID, Undone: []string{}}
				for _, it := range c.Undone {
					e.Undone = append(e.Undone, it.String())
				}
				entries = append(entries, e)
			}
			w := cmd.OutOrStdout()
			if f == render.FormatJSON {
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				if err := enc.Encode(entries); err != nil {
					return wrapFailure(err)
				}
			} else {
				if len(entries) == 0 && cerr == nil {
					fmt.Fprintln(w, "nothing left by dead labs")
				}
				for _, e := range entries {
					fmt.Fprintf(w, "lab %s (pid %d, dead):\n", e.Lab, e.PID)
					for _, u := range e.Undone {
						fmt.Fprintf(w, "  undid %s\n", u)
					}
				}
			}
			return wrapFailure(cerr)
		},
	}
	c.Flags().StringVar(&format, "format", "text", "output format: text or json")
	return c
}

func runLab(ctx context.Context, cmd *cobra.Command, l lab.Lab, d time.Duration, victims int) error {
	if os.Geteuid() == 0 {
		// What dead labs left (labs with a ledger do it too; this covers
		// the others). A failure is said, not fatal: the lab may not care.
		if _, err := lab.Clean(func(f string, a ...any) { fmt.Fprintf(cmd.ErrOrStderr(), "lab: "+f+"\n", a...) }); err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "lab: cleaning up after dead labs: %v\n", err)
		}
	}
	// Scaled: on an emulated machine starting a lab's processes takes longer.
	if f := lab.Slowdown(); f > 1.5 {
		fmt.Fprintf(cmd.ErrOrStderr(), "lab: this machine starts processes %.1fx slower than usual: start-up deadlines stretched as much\n", f)
	}
	return runLabEpisodes(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr(), l, d, victims, lab.MaxStall)
}

// runLabEpisodes runs l for d. A lab that keeps tasks in D state runs in
// episodes of at most maxStall, each a fresh instance with fresh tasks
// (the previous one closed first), so that no task stays in D longer.
func runLabEpisodes(ctx context.Context, out, errw io.Writer, l lab.Lab, d time.Duration, victims int, maxStall time.Duration) error {
	logf := func(f string, a ...any) { fmt.Fprintf(errw, "lab: "+f+"\n", a...) }
	episode := d
	if lab.Stalls(l) && d > maxStall {
		episode = maxStall
		fmt.Fprintf(out, "lab %s keeps tasks in D state: it runs in episodes of %v, each with new tasks, so that none stays in D longer\n", l.Name(), maxStall)
	}
	end := time.Now().Add(d)
	for {
		left := time.Until(end)
		if left <= 0 {
			return nil
		}
		interrupted, err := runLabOnce(ctx, out, errw, l, min(left, episode), victims, logf)
		if err != nil || interrupted {
			return err
		}
	}
}

// runLabOnce starts l, keeps it for d (or until ctx ends) and closes it.
func runLabOnce(ctx context.Context, out, errw io.Writer, l lab.Lab, d time.Duration, victims int, logf func(string, ...any)) (interrupted bool, err error) {
	startCtx, cancel := context.WithTimeout(ctx, lab.Scaled(30*time.Second))
	defer cancel()
	inst, err := l.Start(startCtx, lab.Options{Victims: victims, Logf: logf})
	if err != nil {
		return false, wrapFailure(fmt.Errorf("lab %s: %w", l.Name(), err))
	}
	// Close runs however this function ends; Ctrl-C cancels ctx.
	defer func() {
		if err := inst.Close(); err != nil {
			fmt.Fprintf(errw, "lab %s: cleanup: %v\n", l.Name(), err)
		}
	}()
	fmt.Fprintf(out, "lab %s running for %v (Ctrl-C ends it early and cleans up)\n%s\n", l.Name(), d, inst.Describe())
	t := inst.Tasks()
	fmt.Fprintf(out, "offender pid %d, victims %v\n", t.Offender, t.Victims)
	select {
	case <-ctx.Done():
		fmt.Fprintf(out, "interrupted; cleaning up\n")
		return true, nil
	case <-time.After(d):
		fmt.Fprintf(out, "done; cleaning up\n")
		return false, nil
	}
}
