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

func perCPU(counts ...uint64) []hist.Log2 {
	out := make([]hist.Log2, len(counts))
	for i, c := range counts {
		out[i].Count = c
	}
	return out
}

func TestUnseenRuns(t *testing.T) {
	var reported [NrVectors]uint64
	var kernel [NrVectors]uint64
	var runs [NrVectors][]hist.Log2
	for vec := range NrVectors {
		runs[vec] = perCPU(0, 0)
	}

	// Two runs in flight (entered, counted by the kernel, not yet ended):
	// not unseen.
	kernel[vecNetRX] = 1002
	runs[vecNetRX] = perCPU(600, 400)
	if u := unseenRuns(kernel, runs, &reported); u != ([NrVectors]uint64{}) {
		t.Fatalf("runs in flight reported unseen: %v", u)
	}

	// Seven more runs than wolf saw and the CPUs could have in flight.
	kernel[vecNetRX] = 2009
	runs[vecNetRX] = perCPU(1000, 1000)
	u := unseenRuns(kernel, runs, &reported)
	if u[vecNetRX] != 7 || reported[vecNetRX] != 7 {
		t.Fatalf("unseen %v, reported %v; want 7 NET_RX", u, reported)
	}

	// The next window: nothing new missed, nothing reported again, even
	// when the in-flight runs have ended meanwhile.
	kernel[vecNetRX] = 3009
	runs[vecNetRX] = perCPU(1500, 1500)
	if u := unseenRuns(kernel, runs, &reported); u[vecNetRX] != 0 {
		t.Fatalf("a window with no new miss reported %d", u[vecNetRX])
	}

	// Wolf ahead of the kernel (a run ended between the two readings):
	// no underflow.
	kernel[vecNetRX] = 3009
	runs[vecNetRX] = perCPU(1600, 1500)
	kernel[1] = 5
	runs[1] = perCPU(3, 3)
	if u := unseenRuns(kernel, runs, &reported); u != ([NrVectors]uint64{}) {
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
