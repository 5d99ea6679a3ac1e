package coredump

// Reading the crasher's threads from procfs. Only files that never take the
// target's mmap_lock (stat, wchan, stack, comm): the process is dying on
// purpose and its dumper walks its memory.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Task flags (include/linux/sched.h), as /proc/PID/stat field 9 shows them.
const (
	pfPostCoredump = 0x00000008 // set in the exit path: "coredumps should ignore this task"
	pfDumpCore     = 0x00000200 // set on the thread that dumps
	pfSignaled     = 0x00000400 // killed by a signal
)

// waitTimeout bounds every wait in this package.
const waitTimeout = 10 * time.Second

var errTimeout = errors.New("timed out")

// taskStat is what we use of /proc/PID/task/TID/stat.
type taskStat struct {
	State     byte   // field 3: 'R', 'S', 'D', 'I', 'Z', ...
	Flags     uint64 // field 9: task->flags
	StartTime uint64 // field 22: clock ticks after boot, to tell a reused pid
}

// parseStat parses a stat line. comm (field 2) may hold spaces and
// parentheses, so fields are counted from the last ')'.
func parseStat(s string) (taskStat, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return taskStat{}, fmt.Errorf("stat %q: no ')'", s)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state), so field n is f[n-3].
	if len(f) < 22-3+1 || len(f[0]) != 1 {
		return taskStat{}, fmt.Errorf("stat %q: too few fields", s)
	}
	flags, err := strconv.ParseUint(f[9-3], 10, 64)
	if err != nil {
		return taskStat{}, fmt.Errorf("stat flags %q: %w", f[9-3], err)
	}
	start, err := strconv.ParseUint(f[22-3], 10, 64)
	if err != nil {
		return taskStat{}, fmt.Errorf("stat starttime %q: %w", f[22-3], err)
	}
	return taskStat{State: f[0][0], Flags: flags, StartTime: start}, nil
}

func taskPath(pid, tid int, file string) string {
	return "/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(tid) + "/" + file
}

func readFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// readTaskStat reads thread tid of process pid; ok is false if it is gone.
func readTaskStat(pid, tid int) (st taskStat, ok bool) {
	st, err := parseStat(readFile(taskPath(pid, tid, "stat")))
	return st, err == nil
}

// tids lists the threads of pid, sorted; nil if the process is gone.
func tids(pid int) []int {
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, tid)
		}
	}
	slices.Sort(out)
	return out
}

func wchan(pid, tid int) string { return readFile(taskPath(pid, tid, "wchan")) }

func comm(pid, tid int) string { return readFile(taskPath(pid, tid, "comm")) }

// stackFuncs returns the function names of /proc/PID/task/TID/stack
// ("[<0>] do_exit+0x86f/0xab0" lines), innermost first. The kernel leaves
// out __sched functions (schedule, ...), so the innermost frame is the
// function that went to sleep.
func stackFuncs(pid, tid int) []string {
	var out []string
	for _, line := range strings.Split(readFile(taskPath(pid, tid, "stack")), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		fn, _, _ := strings.Cut(f[1], "+")
		out = append(out, fn)
	}
	return out
}

// processStart returns the start time of process pid, or ok false if there
// is no such process.
func processStart(pid int) (uint64, bool) {
	st, err := parseStat(readFile("/proc/" + strconv.Itoa(pid) + "/stat"))
	return st.StartTime, err == nil
}

// alive says whether pid is still the process that started at start (and not
// a zombie).
func alive(pid int, start uint64) bool {
	st, err := parseStat(readFile("/proc/" + strconv.Itoa(pid) + "/stat"))
	return err == nil && st.StartTime == start && st.State != 'Z' && st.State != 'X'
}

// waitFor polls cond every few milliseconds until it holds, ctx ends, or
// timeout passes. cond may return an error to give up at once.
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waiting for %s: %w after %s", what, errTimeout, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}
