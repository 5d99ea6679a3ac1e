package perfsample

import (
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/wolf-investigator/wolf/internal/testutil"
	"github.com/wolf-investigator/wolf/internal/testutil/bpfcount"
)

func TestParseCPUList(t *testing.T) {
	for in, want := range map[string][]int{
		"0":         {0},
		"0-3":       {0, 1, 2, 3},
		"0-1,4,6-7": {0, 1, 4, 6, 7},
	} {
		got, err := ParseCPUList(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseCPUList(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"x", "3-1", "1-", "0-99999999"} {
		if _, err := ParseCPUList(bad); err == nil {
			t.Errorf("ParseCPUList(%q) accepted", bad)
		}
	}
}

// A perf_event program that counts its runs in a per-CPU array: sampling
// at 1000 Hz on every CPU for 300 ms must run it, and Close must detach it;
// through links, and through the ioctl kernels before 5.15 need.
func TestAttachCountsSamples(t *testing.T) {
	t.Run("link", func(t *testing.T) { testCounts(t, true) })
	t.Run("ioctl", func(t *testing.T) { testCounts(t, false) })
}

func testCounts(t *testing.T, links bool) {
	testutil.RequireRoot(t)
	counter := bpfcount.New(t, ebpf.PerfEvent)
	prog := counter.Prog

	s, err := attach(prog, 1000, links)
	if err != nil {
		t.Fatal(err)
	}
	if s.Legacy == links {
		t.Fatalf("links %v, but Legacy %v", links, s.Legacy)
	}
	// Burn CPU so the clock ticks on at least this CPU.
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
	}
	s.Close()
	total := counter.Count(t)
	if total < 50 {
		t.Fatalf("%d samples in 300 ms at 1000 Hz on %d CPUs", total, len(s.CPUs))
	}
	// Detached: no more runs.
	time.Sleep(50 * time.Millisecond)
	after := counter.Count(t)
	time.Sleep(100 * time.Millisecond)
	if later := counter.Count(t); later != after {
		t.Fatalf("program still runs after Close: %d then %d", after, later)
	}
	if _, err := Attach(prog, 0); err == nil {
		t.Fatal("0 Hz accepted")
	}
}
