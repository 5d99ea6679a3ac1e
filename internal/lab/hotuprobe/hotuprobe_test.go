package hotuprobe

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/testutil"
)

// The lab slows its loop down (the probes cost something), its programs
// count every call, and Close leaves neither programs nor yes behind.
func TestLabStartsAndCleansUp(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.Exclusive(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	li, err := New().Start(ctx, lab.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	in := li.(*Instance)
	before, with := in.Rates()
	if before <= 0 || with <= 0 || with >= before || in.CostPerCall() <= 0 {
		t.Errorf("rates before %.0f/s, with probes %.0f/s, cost per call %v", before, with, in.CostPerCall())
	}
	w0, _ := in.Writes()
	e0, r0, err := in.Hits()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	w1, _ := in.Writes()
	e1, r1, _ := in.Hits()
	// Every write() call is a hit of both programs (the readings are
	// not simultaneous: 5%).
	near := func(a, b uint64) bool { return float64(a) >= 0.95*float64(b) && float64(a) <= 1.05*float64(b) }
	if calls, entries := w1-w0, e1-e0; calls == 0 || !near(entries, calls) || !near(r1-r0, calls) {
		t.Errorf("%d write() calls, %d entries, %d returns", calls, entries, r1-r0)
	}
	if !strings.Contains(in.Describe(), in.Library()+":"+Symbol) {
		t.Errorf("describe: %s", in.Describe())
	}
	ids, pid := in.ProgramIDs(), in.PID()
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	_ = in.Close() // twice is fine
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && !strings.Contains(string(st), ") Z") {
		t.Errorf("yes (pid %d) still alive after Close", pid)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, id := range ids {
		for {
			p, err := ebpf.NewProgramFromID(id)
			if err != nil {
				break
			}
			p.Close()
			if time.Now().After(deadline) {
				t.Fatalf("program %d still loaded after Close", id)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
