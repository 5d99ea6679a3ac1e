package fusestall

// Reading our children's state from procfs. Only files that never take the
// target's mmap_lock (stat, wchan, stack, comm): the tasks we look at are
// stuck on purpose.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
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
func mountDev(dir string) string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw
		f := strings.Fields(sc.Text())
		if len(f) >= 5 && unescapeMountinfo(f[4]) == dir {
			return f[2]
		}
	}
	return ""
}

// unescapeMountinfo undoes the octal escapes (\040 for space...) of mountinfo.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
