package main

import (
	"strings"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/testutil"
)

// --container and --pod that name nothing: one line, exit 2, before the
// window (a window of a day would time the test out).
func TestUnknownWorkloadIsUsage(t *testing.T) {
	testutil.RequireRoot(t)
	for _, args := range [][]string{
		{"doctor", "--duration", "24h", "--container", "wolf-no-such-container"},
		{"sched", "--duration", "24h", "--pod", "wolf-no-such-pod.default"},
		{"hung", "--duration", "24h", "--container", "0123456789ab"},
	} {
		r := runWolf(t, 30*time.Second, args...)
		if r.Code != exitUsage {
			t.Errorf("wolf %v: exit %d, want %d (stderr %q)", args, r.Code, exitUsage, r.Stderr)
		}
		if lines := strings.Count(strings.TrimSpace(r.Stderr), "\n") + 1; lines != 1 || !strings.HasPrefix(r.Stderr, "wolf: --") {
			t.Errorf("wolf %v: want one 'wolf: --…' line on stderr, got %q", args, r.Stderr)
		}
	}
}
