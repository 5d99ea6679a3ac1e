// Package testslock is the machine-wide lock of the tests that change or
// assert on machine-wide state (testutil.Exclusive takes it), and the
// check that labs started from a test binary run under it.
//
// `go test ./...` runs packages side by side, and several people test on
// one machine: a lab running outside the lock is another test's
// unexpected finding ("a healthy host has no finding" sees its cgroup at
// its memory limit). Labs cannot tell a test from a user's `wolf lab
// run`, so the test side turns the check on: testutil sets Enforce in
// every test binary that imports it.
package testslock

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Path is the lock's file, shared by every test binary and script on the
// machine (flock(2); `flock /tmp/wolf-tests.lock CMD` from a shell).
const Path = "/tmp/wolf-tests.lock"

// Enforce turns Check on; testutil sets it, so only test binaries check.
var Enforce bool

// Check says why this process may not change machine-wide state: Enforce
// is set and neither it nor any of its ancestors (a lab's child, a script
// under flock(1)) holds the lock. what names what is being started.
func Check(what string) error {
	if !Enforce {
		return nil
	}
	held, err := HeldByLineage(Path)
	if err != nil {
		return fmt.Errorf("%s: checking for %s: %w", what, Path, err)
	}
	if !held {
		return fmt.Errorf("%s started by a test that does not hold %s: call testutil.Exclusive(t) before starting it", what, Path)
	}
	return nil
}

// HeldByLineage says whether this process or one of its ancestors holds an
// exclusive flock on the file at path, from /proc/locks.
func HeldByLineage(path string) (bool, error) {
	holders, _, err := Queue(path)
	if err != nil || len(holders) == 0 {
		return false, err
	}
	for pid := os.Getpid(); pid > 1; {
		if holders[pid] {
			return true, nil
		}
		if pid = parent(pid); pid <= 0 {
			break
		}
	}
	return holders[1], nil
}

// Queue reads /proc/locks for the file at path: the pids holding an
// exclusive flock on it, and how many flock requests wait for it. A holder's
// line: "1: FLOCK  ADVISORY  WRITE 1234 00:1f:5678 0 EOF" (the device's
// major and minor in hex); a waiter's: "1: -> FLOCK  ADVISORY  WRITE 99 …".
func Queue(path string) (holders map[int]bool, waiting int, err error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		if os.IsNotExist(err) {
			return nil, 0, nil
		}
		return nil, 0, err
	}
	f, err := os.Open("/proc/locks")
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	want := fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	holders = map[int]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		waiter := len(fs) > 1 && fs[1] == "->"
		if waiter {
			fs = fs[1:]
		}
		if len(fs) < 6 || fs[1] != "FLOCK" || fs[3] != "WRITE" || fs[5] != want {
			continue
		}
		if waiter {
			waiting++
		} else if pid, err := strconv.Atoi(fs[4]); err == nil {
			holders[pid] = true
		}
	}
	return holders, waiting, sc.Err()
}

// parent is pid's parent, or 0 when it cannot be read.
func parent(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	fs := strings.Fields(s[i+1:])
	if len(fs) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fs[1])
	return ppid
}
