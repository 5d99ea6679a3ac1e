package lockslow

import (
	"context"
	"testing"

	"github.com/wolf-investigator/wolf/internal/testutil"
)

func TestIsSlowpath(t *testing.T) {
	for fn, want := range map[string]bool{
		"rwsem_down_write_slowpath": true, "__mutex_lock_slowpath": true, "__mutex_lock.constprop.0": true,
		"__mutex_lock": true, "mutex_lock": false, "down_write": false, "schedule": false,
	} {
		if IsSlowpath(fn) != want {
			t.Errorf("IsSlowpath(%q) = %v", fn, !want)
		}
	}
}

// This kernel's slow paths have text ranges that cover their own start.
func TestRanges(t *testing.T) {
	testutil.RequireRoot(t) // kallsyms addresses are zero otherwise
	rs, err := Ranges(context.Background(), 8)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Start == 0 || r.End <= r.Start || r.End-r.Start > 1<<20 {
			t.Errorf("range %#x-%#x", r.Start, r.End)
		}
	}
	t.Logf("%d ranges", len(rs))
}
