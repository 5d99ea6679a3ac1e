package fact

import (
	"testing"
	"time"
)

// A use keeps the window of the set it came in: the investigators'
// windows differ, and the merged set's is the longest.
func TestMergeKeepsEachUsesWindow(t *testing.T) {
	sched := &Set{Window: 8 * time.Second, Usage: []Usage{{On: HostCPUKey(), Amount: 3, Unit: "cpu_s"}}}
	reclaim := &Set{Window: 5 * time.Second, Usage: []Usage{{On: HostCPUKey(), Amount: 1, Unit: "cpu_s", Activity: "reclaim"}}}
	var s Set
	s.Merge(sched)
	s.Merge(reclaim)
	if s.Window != 8*time.Second {
		t.Errorf("merged window %v, want the longest, 8s", s.Window)
	}
	if len(s.Usage) != 2 || s.Usage[0].Window != 8*time.Second || s.Usage[1].Window != 5*time.Second {
		t.Fatalf("uses %+v, want each with its own set's window", s.Usage)
	}
	if reclaim.Usage[0].Window != 0 {
		t.Errorf("the merged set changed its source: %+v", reclaim.Usage[0])
	}
	// Merged again (watch merges windows already merged), a use keeps its own.
	var again Set
	again.Merge(&s)
	if again.Usage[1].Window != 5*time.Second {
		t.Errorf("merged twice: %v, want 5s", again.Usage[1].Window)
	}
}
