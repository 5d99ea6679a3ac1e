// Package priority sets the scheduling priority (nice value) of every
// thread of this process.
//
// Why wolf raises its own: on a host whose CPUs are saturated, wolf's short
// work (loading and verifying its BPF programs, reading its maps, writing
// the report) queues behind every runnable task. With 32 busy threads per
// CPU, `wolf doctor --duration 5s` ended 24 s after its duration, almost
// all of it waiting for a CPU (scripts/exitlatency: run-queue wait, not
// uninterruptible sleep); at nice -20 it ended 1.4 s after, at nice -10
// 3.2 s. wolf's CPU time is the same either way: it is only served first.
// SCHED_FIFO did better still (0.5 s) but is not used: a real-time thread
// in the BPF verifier for hundreds of milliseconds would hold off every
// ordinary task on its CPU, the kernel's own threads (ksoftirqd, RCU's)
// included, on exactly the sick host wolf is there to examine.
//
// Linux keeps a nice value per thread, and a new thread takes its
// creator's: Set changes every thread there is, pass after pass until one
// finds nothing to change, so that a thread created meanwhile by a thread
// not yet changed is caught.
package priority

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Nice returns the nice value of the calling thread.
func Nice() (int, error) {
	// The raw system call returns 20 - nice, so that it is never negative.
	raw, err := unix.Getpriority(unix.PRIO_PROCESS, 0)
	if err != nil {
		return 0, fmt.Errorf("getpriority: %w", err)
	}
	return 20 - raw, nil
}

// Set gives every thread of this process the nice value nice (-20 to 19).
// Lowering it below the current value needs CAP_SYS_NICE (or an
// RLIMIT_NICE that allows it).
func Set(nice int) error {
	if nice < -20 || nice > 19 {
		return fmt.Errorf("nice %d: want -20 to 19", nice)
	}
	// Passes until one finds every thread at nice already: a thread made
	// during a pass by a thread not yet changed is caught by the next.
	for range maxPasses {
		changed, err := setPass(nice)
		if err != nil {
			return fmt.Errorf("set nice %d: %w", nice, err)
		}
		if !changed {
			return nil
		}
	}
	return fmt.Errorf("set nice %d: threads still being made after %d passes", nice, maxPasses)
}

// maxPasses bounds Set: the Go runtime makes a handful of threads at most
// while a pass runs.
const maxPasses = 10

// setPass sets nice on every thread not at it and says whether it set any.
func setPass(nice int) (changed bool, err error) {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return false, fmt.Errorf("list threads: %w", err)
	}
	var errs []error
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
		if err == nil && 20-raw == nice {
			continue
		}
		changed = true
		err = unix.Setpriority(unix.PRIO_PROCESS, tid, nice)
		if err != nil && !errors.Is(err, unix.ESRCH) { // ESRCH: it exited meanwhile
			errs = append(errs, fmt.Errorf("thread %d: %w", tid, err))
		}
	}
	return changed, errors.Join(errs...)
}
