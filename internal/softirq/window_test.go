package softirq

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/investigator"
)

// netRXRuns is the kernel's own count of NET_RX handler runs, every CPU's
// (/proc/softirqs: the kernel counts each run as it enters the handler).
func netRXRuns(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/softirqs")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "NET_RX:" {
			continue
		}
		var n uint64
		for _, c := range f[1:] {
			v, err := strconv.ParseUint(c, 10, 64)
			if err != nil {
				t.Fatalf("/proc/softirqs: %q", line)
			}
			n += v
		}
		return n
	}
	t.Fatal("/proc/softirqs has no NET_RX line")
	return 0
}

// One session, three windows: loopback traffic in the first and third,
// none in the second. Each window's NET_RX runs lie between the kernel's
// own counts over the window's inner and outer edges (read just after and
// just before each Collect), so the windows add up to the kernel's count
// over the session: none lost, none counted twice, and the quiet second
// window does not repeat the first. With a 1 ns threshold every run also
// crosses the ring buffer as a "stall": a record still on its way at a
// Collect is taken by the next window, so over the session (and a last
// quiet window for the stragglers) the records taken are never more than
// the runs, and with the records counted lost, never fewer.
func TestLiveWindows(t *testing.T) {
	requireLive(t)
	ctx := context.Background()
	inv := New()
	inv.Threshold = time.Nanosecond
	inv.SampleHz = 0
	var snaps []*Snapshot
	inv.collected = func(s *Snapshot) { snaps = append(snaps, s) }
	outerStart := netRXRuns(t)
	s, err := inv.Start(ctx, investigator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	innerStart := netRXRuns(t)

	// Runs in progress at an edge: one per CPU at each of the two edges.
	slack := uint64(2 * runtime.NumCPU())
	var total, totalStalls, lost, kernelInner, kernelOuter uint64
	var runs []uint64
	prevInner, prevOuter := innerStart, outerStart
	for i, busy := range []bool{true, false, true} {
		if busy {
			if _, err := loopbackWorkload(400*time.Millisecond, false)(ctx); err != nil {
				t.Fatal(err)
			}
		} else {
			time.Sleep(400 * time.Millisecond)
		}
		before := netRXRuns(t)
		if _, err := s.Collect(ctx); err != nil {
			t.Fatal(err)
		}
		after := netRXRuns(t)
		snap := snaps[len(snaps)-1]
		h := snap.Merged(true, vecNetRX)
		var stalls uint64
		for _, st := range snap.Stalls {
			if st.Vector == "NET_RX" {
				stalls++
			}
		}
		inner, outer := before-prevInner, after-prevOuter
		t.Logf("window %d (traffic %v): wolf %d NET_RX runs, %d stall records (+%d lost, any vector); kernel %d..%d",
			i+1, busy, h.Count, stalls, snap.StallsLost, inner, outer)
		if h.Count+slack < inner || h.Count > outer+slack {
			t.Errorf("window %d: %d runs, the kernel counted %d..%d over its edges", i+1, h.Count, inner, outer)
		}
		runs = append(runs, h.Count)
		total += h.Count
		totalStalls += stalls
		lost += snap.StallsLost
		kernelInner += inner
		kernelOuter += outer
		prevInner, prevOuter = after, before
	}
	// The stragglers: records on their way at the last Collect.
	time.Sleep(200 * time.Millisecond)
	if _, err := s.Collect(ctx); err != nil {
		t.Fatal(err)
	}
	last := snaps[len(snaps)-1]
	for _, st := range last.Stalls {
		if st.Vector == "NET_RX" {
			totalStalls++
		}
	}
	lost += last.StallsLost
	withLast := total + last.Merged(true, vecNetRX).Count
	t.Logf("session: wolf %d NET_RX runs (%d with a last quiet window), %d NET_RX stall records (+%d lost, any vector); kernel %d..%d",
		total, withLast, totalStalls, lost, kernelInner, kernelOuter)
	if totalStalls > withLast || totalStalls+lost < withLast {
		t.Errorf("%d NET_RX stall records and %d lost for %d runs of at least 1 ns: some taken twice, or lost uncounted", totalStalls, lost, withLast)
	}
	if runs[0] < 1000 || runs[2] < 1000 {
		t.Fatalf("the loopback traffic made only %v NET_RX runs: not a test", runs)
	}
	if runs[1]*2 > runs[0] {
		t.Errorf("the quiet window counted %d runs after %d: it repeats the first", runs[1], runs[0])
	}
}
