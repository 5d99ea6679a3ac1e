package fusestall

// Reading our children's state from procfs. Only files that never take the
// target's mmap_lock (stat, wchan, stack, comm): the tasks we look at are
// stuck on purpose.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/wolf-investigator/wolf/internal/procfs"
)

// waitTimeout bounds every wait in this package.
const waitTimeout = 5 * time.Second

func readProc(pid int, file string) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/" + file)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// taskState is field 3 of /proc/PID/stat ('R', 'S', 'D', 'Z', ...), or 0 if
// the task is gone.
func taskState(pid int) byte {
	s := readProc(pid, "stat")
	i := strings.LastIndexByte(s, ')') // comm may contain spaces and parens
	if i < 0 || i+2 >= len(s) {
		return 0
	}
	return s[i+2]
}

func wchan(pid int) string { return readProc(pid, "wchan") }

func comm(pid int) string { return readProc(pid, "comm") }

// stack is /proc/PID/stack: one "[<0>] func+0x1f/0x40" line per frame.
func stack(pid int) string { return readProc(pid, "stack") }

// stackFuncs returns the function names of /proc/PID/stack, innermost first.
func stackFuncs(pid int) []string {
	var out []string
	for _, line := range strings.Split(stack(pid), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		fn, _, _ := strings.Cut(f[1], "+")
		out = append(out, fn)
	}
	return out
}

// waitFor polls cond every few milliseconds until it holds, ctx ends, or
// waitTimeout passes. cond may return an error to give up at once.
func waitFor(ctx context.Context, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(waitTimeout)
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
			return fmt.Errorf("waiting for %s: %w after %s", what, errTimeout, waitTimeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var errTimeout = errors.New("timed out")

// mountDev returns the "major:minor" of the mount at dir from
// /proc/self/mountinfo, or "" if dir is not a mount point.
func mountDev(ctx context.Context, dir string) string {
	mounts, _ := procfs.Reader{}.Mounts(ctx, 0) // on error, what was read before it
	for _, m := range mounts {
		if m.Point == dir {
			return m.Dev
		}
	}
	return ""
}
