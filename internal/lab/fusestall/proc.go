package fusestall

// Reading our children's state from procfs. Only files that never take the
// target's mmap_lock (stat, wchan, stack, comm): the tasks we look at are
// stuck on purpose.

import (
	"context"
	"strings"
	"time"

	"github.com/wolf-investigator/wolf/internal/kstack"
	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/procfs"
)

// waitTimeout bounds every wait in this package.
const waitTimeout = 5 * time.Second

var errTimeout = lab.ErrTimeout

// proc reads /proc with a short timeout per read, so that a stuck task
// never hangs the lab.
var proc = procfs.Reader{Timeout: time.Second}

// taskState is field 3 of /proc/PID/stat ('R', 'S', 'D', 'Z', ...), or 0 if
// the task is gone.
func taskState(pid int) byte {
	st, err := proc.Stat(context.Background(), pid, 0)
	if err != nil {
		return 0
	}
	return st.State
}

// wchan is the wait channel of pid, "0" when it runs, "" when unreadable.
func wchan(pid int) string {
	w, err := proc.Wchan(context.Background(), pid, 0)
	if err != nil {
		return ""
	}
	if w == "" {
		return "0"
	}
	return w
}

func comm(pid int) string {
	c, _ := proc.Comm(context.Background(), pid, 0)
	return c
}

// stack is /proc/PID/stack, one "func+0x1f" frame per line, innermost first.
func stack(pid int) string {
	frames, _ := proc.Stack(context.Background(), pid, 0)
	return strings.Join(frames, "\n")
}

// stackFuncs returns the function names of /proc/PID/stack, innermost first.
func stackFuncs(pid int) []string {
	frames, _ := proc.Stack(context.Background(), pid, 0)
	var out []string
	for _, f := range frames {
		out = append(out, kstack.Func(f))
	}
	return out
}

// waitFrames drops the locking functions at the top of a stack: where a
// task blocks is the caller of the lock. Stack walks leave most of them
// out (they are __sched), but not every kernel's rw-semaphore slow path
// (5.10 shows rwsem_down_write_slowpath < fuse_flush).
func waitFrames(fns []string) []string {
	for len(fns) > 0 && isLockFunc(fns[0]) {
		fns = fns[1:]
	}
	return fns
}

func isLockFunc(fn string) bool {
	for _, p := range []string{"rwsem_down_", "__mutex_lock", "mutex_lock", "down_read", "down_write", "__down", "schedule", "__schedule"} {
		if strings.HasPrefix(fn, p) {
			return true
		}
	}
	return false
}

// mountDev returns the "major:minor" of the mount at dir from
// /proc/self/mountinfo, or "" if dir is not a mount point.
func mountDev(ctx context.Context, dir string) string {
	mounts, _ := proc.Mounts(ctx, 0) // on error, what was read before it
	for _, m := range mounts {
		if m.Point == dir {
			return m.Dev
		}
	}
	return ""
}
