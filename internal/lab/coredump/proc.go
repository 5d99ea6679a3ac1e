package coredump

// Reading the crasher's threads from procfs. Only files that never take the
// target's mmap_lock (stat, wchan, stack, comm): the process is dying on
// purpose and its dumper walks its memory.

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/wolf-investigator/wolf/internal/kstack"
	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/procfs"
)

// Task flags (include/linux/sched.h), as /proc/PID/stat field 9 shows them.
const (
	pfExiting      = 0x00000004 // in do_exit: before 5.16, all a parked thread has
	pfPostCoredump = 0x00000008 // set in the exit path: "coredumps should ignore this task" (5.16+)
	pfDumpCore     = 0x00000200 // set on the thread that dumps
	pfSignaled     = 0x00000400 // killed by a signal
)

// waitTimeout bounds every wait in this package.
const waitTimeout = 10 * time.Second

var errTimeout = lab.ErrTimeout

// proc reads /proc with a short timeout per read, so that a stuck task
// never hangs the lab.
var proc = procfs.Reader{Timeout: time.Second}

// readTaskStat reads thread tid of process pid; ok is false if it is gone.
func readTaskStat(pid, tid int) (st procfs.Stat, ok bool) {
	st, err := proc.Stat(context.Background(), pid, tid)
	return st, err == nil
}

// tids lists the threads of pid, sorted; nil if the process is gone.
func tids(pid int) []int {
	ids, _ := proc.Threads(context.Background(), pid)
	return ids
}

// wchan is the wait channel of a thread, "0" when it runs, "" when unreadable.
func wchan(pid, tid int) string {
	w, err := proc.Wchan(context.Background(), pid, tid)
	if err != nil {
		return ""
	}
	if w == "" {
		return "0"
	}
	return w
}

func comm(pid, tid int) string {
	c, _ := proc.Comm(context.Background(), pid, tid)
	return c
}

// stackFuncs returns the function names of /proc/PID/task/TID/stack,
// innermost first. The kernel leaves out __sched functions (schedule, ...),
// so the innermost frame is the function that went to sleep.
func stackFuncs(pid, tid int) []string {
	frames, _ := proc.Stack(context.Background(), pid, tid)
	return funcNames(frames)
}

// funcNames strips offsets, clone suffixes and module names from procfs
// stack frames ("do_exit+0x86f" -> "do_exit").
func funcNames(frames []string) []string {
	var out []string
	for _, f := range frames {
		out = append(out, kstack.Func(f))
	}
	return out
}

// processStart returns the start time (since boot) of process pid, or ok
// false if there is no such process.
func processStart(pid int) (time.Duration, bool) {
	st, err := proc.Stat(context.Background(), pid, 0)
	return st.StartTime, err == nil
}

// alive says whether pid is still the process that started at start (and not
// a zombie).
func alive(pid int, start time.Duration) bool {
	st, err := proc.Stat(context.Background(), pid, 0)
	return err == nil && st.StartTime == start && st.State != 'Z' && st.State != 'X'
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}
