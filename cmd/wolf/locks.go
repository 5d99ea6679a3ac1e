package main

import (
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/locks"
)

func newLocksCmd() *cobra.Command {
	var (
		out       outputFlags
		duration  time.Duration
		pid       int
		lock      string
		types     string
		top       int
		threshold time.Duration
		hz        int
	)
	c := &cobra.Command{
		Use:   "locks",
		Short: "Kernel lock contention with owners, and mmap_lock holds",
		Long: `locks watches every kernel lock wait (lock:contention_begin/end) and
aggregates it in the kernel per lock, type and waiter stack, decodes the owner
of mutexes and writer-owned rw-semaphores when a wait begins and charges the
waiting time to it (with its stack), models rw-semaphore wait queues (readers
stuck behind a waiting writer), and times every mmap_lock hold per thread,
sampling what the holder runs while it holds the lock.

Locks are named, not numbered: a process's mmap_lock as "mmap_lock of comm
(pid N)", kernel globals by symbol or by their waiters' wrapper (rtnl_mutex),
other locks by type and the function their waiters called from.`,
		Example: `  wolf locks                          # 10 s, the 5 most contended locks
  wolf locks --pid 1234 --folded l.folded   # mmap_lock holds of one process; stacks for flame graphs
  wolf locks --lock rtnl_mutex --duration 30s
  wolf locks --type rwsem,mutex --format json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := out.validate(); err != nil {
				return err
			}
			if err := checkDuration(duration); err != nil {
				return err
			}
			if err := checkPID(pid); err != nil {
				return err
			}
			if _, err := locks.ParseTypes(types); err != nil {
				return usageErr("--type: %v", err)
			}
			if err := locks.ParseLock(lock); err != nil {
				return usageErr("%v", err)
			}
			if top <= 0 {
				return usageErr("--top must be positive, got %d", top)
			}
			if threshold <= 0 {
				return usageErr("--hold-threshold must be positive, got %v", threshold)
			}
			if hz < 0 || hz > 10000 {
				return usageErr("--profile-hz must be 0 (off) to 10000, got %d", hz)
			}
			if err := requireRoot("wolf locks"); err != nil {
				return err
			}
			l := locks.New()
			l.Lock, l.Types, l.Top, l.HoldThreshold, l.ProfileHz = lock, types, top, threshold, hz
			rep, errs := runInvestigators(cmd.Context(), "locks", []investigator.Investigator{l}, investigator.Options{Duration: duration, PID: pid}, false, os.Stderr)
			if len(errs) > 0 {
				return investigationErr(errs[0])
			}
			return out.write(cmd.OutOrStdout(), rep)
		},
	}
	out.register(c)
	f := c.Flags()
	f.DurationVarP(&duration, "duration", "d", 10*time.Second, "how long to watch")
	f.IntVarP(&pid, "pid", "p", 0, "only waits and mmap_lock holds of this process (tgid or tid)")
	f.StringVar(&lock, "lock", "", "only this lock: a symbol (rtnl_mutex), a name wolf printed, or a hex address")
	f.StringVar(&types, "type", "", "only these lock types, comma-separated: "+strings.Join(locks.TypeNames(), ", "))
	f.IntVar(&top, "top", locks.DefaultTop, "how many locks and mmap_lock holders to report")
	f.DurationVar(&threshold, "hold-threshold", locks.DefaultHoldThreshold, "report mmap_lock holds at least this long one by one")
	f.IntVar(&hz, "profile-hz", locks.DefaultProfileHz, "sampling rate of the profile under mmap_lock (0: off)")
	return c
}
