package locks

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/pflag"

	"github.com/wolf-investigator/wolf/internal/investigator"
)

// Command implements investigator.Commander: wolf locks.
func (l *Investigator) Command() investigator.Command {
	return investigator.Command{
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
		PID: "only waits and mmap_lock holds of this process (tgid or tid)",
		Flags: func(f *pflag.FlagSet) {
			f.StringVar(&l.Lock, "lock", "", "only this lock: a symbol (rtnl_mutex), a name wolf printed, or a hex address")
			f.StringVar(&l.Types, "type", "", "only these lock types, comma-separated: "+strings.Join(TypeNames(), ", "))
			f.IntVar(&l.Top, "top", DefaultTop, "how many locks and mmap_lock holders to report")
			f.DurationVar(&l.HoldThreshold, "hold-threshold", DefaultHoldThreshold, "report mmap_lock holds at least this long one by one")
			f.IntVar(&l.ProfileHz, "profile-hz", DefaultProfileHz, "sampling rate of the profile under mmap_lock (0: off)")
		},
		Validate: func(context.Context, int) error {
			if _, err := ParseTypes(l.Types); err != nil {
				return fmt.Errorf("--type: %w", err)
			}
			if err := ParseLock(l.Lock); err != nil {
				return err
			}
			if l.Top <= 0 {
				return fmt.Errorf("--top must be positive, got %d", l.Top)
			}
			if l.HoldThreshold <= 0 {
				return fmt.Errorf("--hold-threshold must be positive, got %v", l.HoldThreshold)
			}
			if l.ProfileHz < 0 || l.ProfileHz > 10000 {
				return fmt.Errorf("--profile-hz must be 0 (off) to 10000, got %d", l.ProfileHz)
			}
			return nil
		},
	}
}

// Metrics implements investigator.Exporter.
func (*Investigator) Metrics() ([]investigator.HistogramMetric, []investigator.GaugeMetric) {
	return []investigator.HistogramMetric{
		{Histogram: "lock_wait_us", Name: "wolf_lock_wait_seconds", Help: "Kernel lock contention wait per wait, by lock class and type, top N locks.",
			Labels: []string{"lock", "type"}, TopN: true, MaxName: "wolf_lock_wait_max_seconds"},
	}, nil
}
