// Package testutil holds the one gate every test that needs root, BPF or a
// lab passes through, so that CI (WOLF_REQUIRE_BPF=1) can turn "skipped
// because this machine cannot" into a failure.
package testutil

import (
	"os"
	"testing"
)

// RequireEnv is the variable that turns capability skips into failures.
const RequireEnv = "WOLF_REQUIRE_BPF"

// Require skips t with reason when ok is false, or fails it when the
// environment says this machine must be able to run it.
func Require(t testing.TB, ok bool, reason string) {
	t.Helper()
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
