package overhead

import (
	"context"
	"io"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/testutil"
	"github.com/wolf-investigator/wolf/internal/testutil/bpfcount"
)

// held wraps the real BPF_ENABLE_STATS and adds up how long the meter
// held statistics on.
type held struct {
	opens int
	on    time.Duration
}

func (h *held) enable() (io.Closer, error) {
	st, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return nil, err
	}
	h.opens++
	since := time.Now()
	return closer(func() { st.Close(); h.on += time.Since(since) }), nil
}

// measure runs a steady stream of system calls for d with the counter
// attached under a meter that samples (20 ms of every 200: the same duty
// as in production, more periods to average over a short test), and
// returns the meter's estimate of the runs, the runs the kernel's
// statistics counted, and the exact count.
func measure(t *testing.T, d time.Duration, h *held) (estimate, counted, exact uint64) {
	// A raw tracepoint program on sys_enter that counts its own runs: an
	// exact count, whether run statistics are on or not.
	counter := bpfcount.New(t, ebpf.RawTracepoint)
	prog := counter.Prog
	meter := start(h.enable)
	meter.onPeriod, meter.offPeriod = 20*time.Millisecond, 180*time.Millisecond
	l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sys_enter", Program: prog})
	if err != nil {
		meter.Close()
		t.Fatal(err)
	}
	meter.Track(prog)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	// Each system call comes with a few microseconds of work of its own,
	// as in real workloads: were the loop nothing but system calls, the
	// statistics' own clock reads would slow it by a fifth while they are
	// on, and the periods measured would undercount the others.
	var calls atomic.Uint64
	x := uint64(1)
	for ctx.Err() == nil {
		unix.Getppid()
		calls.Add(1)
		for range 3000 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	sink.Add(x)
	cancel()
	l.Close()
	ov := meter.Finish(0, 0, prog)
	_, counted, _ = Programs(prog)
	v := counter.Count(t)
	if calls.Load() == 0 || v < calls.Load() {
		t.Fatalf("the counter saw %d runs for %d system calls", v, calls.Load())
	}
	return ov.Events, counted, v
}

// The duty cycle keeps statistics off most of the window, and its
// estimate of the whole window's runs is close to the exact count.
func TestSampledStatistics(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.Exclusive(t)
	start := time.Now()
	var h held
	estimate, counted, exact := measure(t, 3*time.Second, &h)
	window := time.Since(start)
	t.Logf("exact %d runs, statistics counted %d (%.0f%%), estimate %d; the meter held statistics on %d times, %v of %v",
		exact, counted, 100*float64(counted)/float64(exact), estimate, h.opens, h.on.Round(time.Millisecond), window.Round(time.Millisecond))
	// 15 periods of 20 ms in 3 s: 10 %. Under `go test ./...` the other
	// packages' tests load both CPUs, timers fire late and toggling takes
	// longer (seen: 12 periods, 19 %); always-on would be 100 %. (What the
	// kernel counted depends also on other tests that turn statistics on
	// meanwhile.)
	if h.opens < 5 || h.on > window/3 {
		t.Errorf("statistics were on %v of %v, in %d periods: not a 10 %% duty cycle", h.on, window, h.opens)
	}
	// Quiet, the estimate is within ~2 %; with other tests competing for
	// the CPUs the loop's rate is not steady and a sample of periods misses
	// by up to ~20 % (seen: 18 %). Scaling mistakes miss by 2x or 10x.
	if rel := math.Abs(float64(estimate)-float64(exact)) / float64(exact); rel > 0.3 {
		t.Errorf("estimate %d is %.0f%% off the exact %d", estimate, 100*rel, exact)
	}
}

// When somebody else keeps statistics on, the kernel counts every run,
// and the meter's estimate, from its own on periods only, still matches.
func TestSampledStatisticsKeptOnElsewhere(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.Exclusive(t)
	other, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	estimate, counted, exact := measure(t, 2*time.Second, &held{})
	t.Logf("exact %d runs, statistics counted %d, estimate %d", exact, counted, estimate)
	if float64(counted) < 0.98*float64(exact) {
		t.Errorf("statistics held on elsewhere counted only %d of %d runs", counted, exact)
	}
	if rel := math.Abs(float64(estimate)-float64(exact)) / float64(exact); rel > 0.3 { // as above
		t.Errorf("estimate %d is %.1f%% off the exact %d", estimate, 100*rel, exact)
	}
}

// Without Track the meter is what it always was: statistics on from
// Start to Finish, nothing scaled.
func TestUntrackedMeterKeepsStatisticsOn(t *testing.T) {
	var opened, closed int
	m := start(func() (io.Closer, error) { opened++; return closer(func() { closed++ }), nil })
	if opened != 1 || closed != 0 {
		t.Fatalf("opened %d closed %d after Start", opened, closed)
	}
	ov := m.Finish(7, 1)
	if closed != 1 || ov.Events != 7 || ov.Dropped != 1 {
		t.Fatalf("closed %d, overhead %+v", closed, ov)
	}
	m.Close() // twice is harmless
	if closed != 1 {
		t.Fatalf("closed %d times", closed)
	}
}

var sink atomic.Uint64 // keeps the busy work from being optimized away

// Close (and Finish) stop the duty cycle whenever they come, and leave
// statistics off. A hang here once kept `wolf hung` from exiting.
func TestCloseStopsTheCycle(t *testing.T) {
	for _, after := range []time.Duration{0, 5 * time.Millisecond, 30 * time.Millisecond} {
		var open int
		m := start(func() (io.Closer, error) { open++; return closer(func() { open-- }), nil })
		m.onPeriod, m.offPeriod = time.Millisecond, 2*time.Millisecond
		m.Track()
		time.Sleep(after)
		finished := make(chan struct{})
		go func() { m.Finish(1, 0); m.Close(); close(finished) }()
		select {
		case <-finished:
		case <-time.After(10 * time.Second):
			t.Fatalf("Finish %v after Track never returned", after)
		}
		if open != 0 {
			t.Fatalf("%d statistics holders left open", open)
		}
	}
}

type closer func()

func (c closer) Close() error { c(); return nil }

// Meters align their on periods to the wall clock, so meters side by side
// are on at the same moments.
func TestUntilToggleAlignsToTheClock(t *testing.T) {
	m := &Meter{onPeriod: 100 * time.Millisecond, offPeriod: 900 * time.Millisecond}
	sec := time.Date(2026, 1, 1, 0, 0, 7, 0, time.UTC)
	cases := []struct {
		into time.Duration
		on   bool
		want time.Duration
	}{
		{0, true, 100 * time.Millisecond},                       // on at a second's start: on for 100 ms
		{30 * time.Millisecond, true, 70 * time.Millisecond},    // tracked 30 ms in: on for the rest
		{400 * time.Millisecond, true, 0},                       // tracked past the on part: off at once
		{100 * time.Millisecond, false, 900 * time.Millisecond}, // off until the next second
		{950 * time.Millisecond, false, 50 * time.Millisecond},
	}
	for _, c := range cases {
		if got := m.untilToggle(sec.Add(c.into), c.on); got != c.want {
			t.Errorf("%v into the second, on %v: %v, want %v", c.into, c.on, got, c.want)
		}
	}
}
