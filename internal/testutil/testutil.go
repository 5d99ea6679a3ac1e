// Package testutil holds the one gate every test that needs root, BPF or a
// lab passes through, so that CI (WOLF_REQUIRE_BPF=1) can turn "skipped
// because this machine cannot" into a failure.
package testutil

import (
	"os"
	"testing"

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
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("lock %s: %v", exclusiveLock, err)
	}
	t.Cleanup(func() {
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
	})
}
