package probekit_test

import (
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/probekit"
	"github.com/wolf-investigator/wolf/internal/probekit/kittest"
	"github.com/wolf-investigator/wolf/internal/testutil"
)

var gatedRow = probekit.Attach{Kind: probekit.RawTracepoint, Target: "sched/sched_switch", Program: "on_switch_gated", Required: true, Why: "task switches, with detail"}

func openGated(t *testing.T) *probekit.Probe {
	t.Helper()
	testutil.RequireRoot(t)
	p, err := probekit.Open(probekit.Object{
		Name: "kittest", Spec: kittest.Spec, Table: []probekit.Attach{gatedRow},
		Detail: "test detail", DetailEvents: "switches",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// switchMany makes this process switch out a few thousand times, from
// several threads at once.
func switchMany() {
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				time.Sleep(50 * time.Microsecond)
			}
		}()
	}
	wg.Wait()
}

// Without a budget the gate takes every event and nothing says sampled.
func TestNoBudgetTakesEveryDetail(t *testing.T) {
	probekit.SetBudget(nil)
	p := openGated(t)
	switchMany()
	ov := p.Overhead(0, 0)
	c, err := p.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if c[kittest.StatDetailed] == 0 || c[kittest.StatDetailed] != c[kittest.StatSwitches] {
		t.Fatalf("detailed %d of %d switches", c[kittest.StatDetailed], c[kittest.StatSwitches])
	}
	if len(ov.Sampled) != 0 {
		t.Fatalf("nothing was sampled, yet: %+v", ov.Sampled)
	}
}

// A budget too small for the events samples their detail, keeps the count
// exact, and the overhead says at what rate.
func TestBudgetSamplesDetail(t *testing.T) {
	b, err := probekit.NewBudget(0.0001) // the gate's interval: a second
	if err != nil {
		t.Fatal(err)
	}
	probekit.SetBudget(b)
	defer probekit.SetBudget(nil)
	start := time.Now()
	p := openGated(t)
	switchMany()
	c, err := p.Counters()
	if err != nil {
		t.Fatal(err)
	}
	ov := p.Overhead(0, 0)
	elapsed := time.Since(start)
	if len(ov.Sampled) != 1 {
		t.Fatalf("sampled: %+v", ov.Sampled)
	}
	s := ov.Sampled[0]
	if s.Investigator != "kittest" || s.What != "test detail" || s.IntervalUs != 1e6 {
		t.Errorf("sampling: %+v", s)
	}
	// Each CPU takes a burst, then one a second.
	bound := uint64(runtime.NumCPU()) * uint64(16+2+elapsed/time.Second)
	if s.Detailed == 0 || s.Detailed > bound || s.Detailed != c[kittest.StatDetailed] {
		t.Errorf("detailed %d (counter %d), want 1..%d", s.Detailed, c[kittest.StatDetailed], bound)
	}
	// Every switch counted, exactly, whatever the gate did.
	if s.Events < c[kittest.StatSwitches] || s.Events < 4000 || s.Rate != float64(s.Detailed)/float64(s.Events) {
		t.Errorf("events %d (switches counted %d), rate %v", s.Events, c[kittest.StatSwitches], s.Rate)
	}
}

// Over budget with the detail sampled as far as it goes, the budget
// detaches the sheddable rows and the overhead says for how long.
func TestBudgetShedsOverBudget(t *testing.T) {
	testutil.RequireRoot(t)
	b, err := probekit.NewBudget(0.0001) // far under what any program costs
	if err != nil {
		t.Fatal(err)
	}
	probekit.SetBudget(b)
	defer probekit.SetBudget(nil)
	// A raw tracepoint program attaches anywhere: the sheddable row on an
	// event of its own (rows are keyed by their target).
	shed := probekit.Attach{Kind: probekit.RawTracepoint, Target: "sched/sched_wakeup", Program: "on_switch", Why: "wake-ups", Shed: 1}
	p, err := probekit.Open(probekit.Object{
		Name: "kittest", Spec: kittest.Spec, Table: []probekit.Attach{gatedRow, shed},
		Vars: map[string]any{"target_tgid": uint32(os.Getpid())},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// The controller ticks once a second: shedding takes a few.
	deadline := time.Now().Add(15 * time.Second)
	var got []string
	for time.Now().Before(deadline) && len(got) == 0 {
		switchMany()
		for _, s := range p.Overhead(0, 0).Shed {
			got = append(got, s.Target)
			if s.Investigator != "kittest" || s.Why != "wake-ups" || s.DetachedS <= 0 {
				t.Errorf("shedding: %+v", s)
			}
		}
	}
	if len(got) != 1 || got[0] != "sched/sched_wakeup" {
		t.Fatalf("shed: %v", got)
	}
}

// Over budget with the gates at their longest, the budget times about one
// event in N (WOLF_STORM): each one timed stands for itself and those its
// CPU skipped before it, so the estimate it makes of the events is never
// over their count and under it by at most what each CPU skipped last
// (fewer than 2N), and the overhead says so.
func TestBudgetStormSamples(t *testing.T) {
	testutil.RequireRoot(t)
	b, err := probekit.NewBudget(0.0001) // the gates start at their longest
	if err != nil {
		t.Fatal(err)
	}
	probekit.SetBudget(b)
	defer probekit.SetBudget(nil)
	p, err := probekit.Open(probekit.Object{
		Name: "kittest", Spec: kittest.Spec, Table: []probekit.Attach{gatedRow},
		Detail: "test detail", DetailEvents: "switches", Storm: "test events",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// The controller ticks once a second: sampling starts within a few.
	deadline := time.Now().Add(15 * time.Second)
	var storm *finding.Sampling
	for time.Now().Before(deadline) && storm == nil {
		switchMany()
		for _, s := range p.Overhead(0, 0).Sampled {
			if s.Estimated {
				storm = &s
			}
		}
	}
	if storm == nil {
		t.Fatal("no storm sampling under a budget far under the programs' cost")
	}
	if storm.Investigator != "kittest" || storm.What != "test events" || storm.Detailed == 0 ||
		storm.Detailed >= storm.Events || storm.Rate != float64(storm.Detailed)/float64(storm.Events) {
		t.Errorf("storm sampling: %+v", *storm)
	}
	p.Detach() // the counters stop moving
	c, err := p.Counters()
	if err != nil {
		t.Fatal(err)
	}
	n, est, timed := c[kittest.StatSwitches], c[kittest.StatEstimate], c[kittest.StatTimed]
	if timed >= n || est > n || n-est >= uint64(2*64*runtime.NumCPU()) {
		t.Errorf("%d switches: %d timed standing for %d", n, timed, est)
	}
}
