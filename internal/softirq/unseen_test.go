package softirq

import (
	"strings"
	"testing"

	"github.com/wolf-investigator/wolf/internal/hist"
)

// A 2-CPU /proc/softirqs from a 6.18 kernel.
const procSoftirqs = `                    CPU0       CPU1       
          HI:          0          1
       TIMER:    1203344    1176032
      NET_TX:         41          8
      NET_RX:   19170012   17782117
       BLOCK:      48113      51920
    IRQ_POLL:          0          0
     TASKLET:        337        912
       SCHED:    2390176    2301447
     HRTIMER:          0          0
         RCU:    1933201    1911004
`

func TestParseSoftirqs(t *testing.T) {
	got, err := ParseSoftirqs([]byte(procSoftirqs))
	if err != nil {
		t.Fatal(err)
	}
	want := [NrVectors]uint64{1, 2379376, 49, 36952129, 100033, 0, 1249, 4691623, 0, 3844205}
	if got != want {
		t.Errorf("got %v, want %v", got, want)
	}
	if _, err := ParseSoftirqs([]byte("CPU0\n")); err == nil {
		t.Error("a file with no vector line parsed")
	}
	if _, err := ParseSoftirqs([]byte("NET_RX: 12 x\n")); err == nil {
		t.Error("a count that is not a number parsed")
	}
}

func TestRunCounts(t *testing.T) {
	runs := make([][]hist.Log2, NrVectors)
	runs[vecNetRX] = []hist.Log2{{Count: 600}, {Count: 400}}
	runs[1] = []hist.Log2{{Count: 3}}
	got := runCounts(runs)
	if got[vecNetRX] != 1000 || got[1] != 3 || got[0] != 0 {
		t.Errorf("runCounts: %v", got)
	}
}

func TestUnseenRuns(t *testing.T) {
	const cpus = 2
	var reported, kernel, seen [NrVectors]uint64

	// Two runs in flight (entered, counted by the kernel, not yet ended):
	// not unseen.
	kernel[vecNetRX], seen[vecNetRX] = 1002, 1000
	if u := unseenRuns(kernel, seen, cpus, &reported); u != ([NrVectors]uint64{}) {
		t.Fatalf("runs in flight reported unseen: %v", u)
	}

	// Seven more runs than wolf saw and the CPUs could have in flight.
	kernel[vecNetRX], seen[vecNetRX] = 2009, 2000
	u := unseenRuns(kernel, seen, cpus, &reported)
	if u[vecNetRX] != 7 || reported[vecNetRX] != 7 {
		t.Fatalf("unseen %v, reported %v; want 7 NET_RX", u, reported)
	}

	// The next window: nothing new missed, nothing reported again, even
	// when the in-flight runs have ended meanwhile.
	kernel[vecNetRX], seen[vecNetRX] = 3009, 3000
	if u := unseenRuns(kernel, seen, cpus, &reported); u[vecNetRX] != 0 {
		t.Fatalf("a window with no new miss reported %d", u[vecNetRX])
	}

	// Then three more missed: those three only.
	kernel[vecNetRX], seen[vecNetRX] = 4012, 4000
	if u := unseenRuns(kernel, seen, cpus, &reported); u[vecNetRX] != 3 {
		t.Fatalf("three new misses reported as %d", u[vecNetRX])
	}

	// Wolf ahead of the kernel (a run ended between the two readings):
	// no underflow.
	kernel[vecNetRX], seen[vecNetRX] = 4012, 4100
	kernel[1], seen[1] = 5, 6
	if u := unseenRuns(kernel, seen, cpus, &reported); u != ([NrVectors]uint64{}) {
		t.Fatalf("wolf ahead of the kernel reported %v", u)
	}

	note := unseenNote([NrVectors]uint64{vecNetRX: 7, 1: 1})
	for _, want := range []string{"8 softirq runs", "TIMER 1", "NET_RX 7", "/proc/softirqs"} {
		if !strings.Contains(note, want) {
			t.Errorf("note %q lacks %q", note, want)
		}
	}
	if unseenNote([NrVectors]uint64{}) != "" {
		t.Error("a note for nothing unseen")
	}
}
