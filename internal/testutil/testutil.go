// Package testutil holds the one gate every test that needs root, BPF or a
// lab passes through, so that CI (WOLF_REQUIRE_BPF=1) can turn "skipped
// because this machine cannot" into a failure.
package testutil

import (
	"os"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/testslock"
)

// A lab started by a test of this binary must run under Exclusive's lock:
// the labs check (internal/testslock), and fail to start without it.
func init() { testslock.Enforce = true }

// RequireEnv is the variable that turns capability skips into failures.
const RequireEnv = "WOLF_REQUIRE_BPF"

// Require skips t with reason when ok is false, or fails it when the
// environment says this machine must be able to run it.
//
// Under `go test -short` it skips t whatever ok is: the short tier runs
// only what needs no root, BPF, lab or outside tool, so that it is fast
// and leaves the machine alone even when run as root.
func Require(t testing.TB, ok bool, reason string) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: this test needs root, BPF, a lab or an outside tool (" + reason + ")")
	}
	if ok {
		return
	}
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("%s=1 but this machine cannot run the test: %s", RequireEnv, reason)
	}
	t.Skip(reason)
}

// RequireRoot gates tests that load BPF programs or run labs.
func RequireRoot(t testing.TB) {
	t.Helper()
	Require(t, os.Geteuid() == 0, "needs root (loads BPF programs, mounts filesystems)")
}

// exclusiveLock is shared by every test binary on the machine.
const exclusiveLock = testslock.Path

// Exclusive serialises tests that change or assert on machine-wide state
// (labs that hang tasks, "a healthy host has no finding", "nothing stays
// attached"): `go test ./...` runs packages in parallel, and one package's
// lab would otherwise be another package's unexpected finding. It blocks
// until no other such test runs, and releases at the end of t. Under
// `go test -short` it skips t: such a test is not a unit test.
func Exclusive(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: this test changes or asserts machine-wide state")
	}
	f, err := os.OpenFile(exclusiveLock, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatalf("open %s: %v", exclusiveLock, err)
	}
	yieldToWaiters()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("lock %s: %v", exclusiveLock, err)
	}
	t.Cleanup(func() {
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
		_, waiting, _ := testslock.Queue(exclusiveLock)
		handoff.Store(waiting > 0)
	})
}

// handoff is set when this binary released the lock with others waiting.
var handoff atomic.Bool

// yieldToWaiters lets another test binary take the lock first when it
// waited as this one released it. flock(2) is not fair: the waiters are
// only woken, and a binary whose next test locks again at once (a package
// of exclusive tests, -count=20) wins nearly every time; the others then
// wait until their 10-minute test timeout. So it waits until another
// process holds the lock or nobody waits any more, 2 s at most.
func yieldToWaiters() {
	if !handoff.Swap(false) {
		return
	}
	self := os.Getpid()
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		holders, waiting, err := testslock.Queue(exclusiveLock)
		if err != nil || waiting == 0 {
			return
		}
		for pid := range holders {
			if pid != self {
				return
			}
		}
	}
}
