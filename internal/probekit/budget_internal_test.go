package probekit

import (
	"testing"
	"time"
)

func TestNextInterval(t *testing.T) {
	const ms = time.Millisecond
	for _, c := range []struct {
		name          string
		cur, share    time.Duration
		spend, budget float64
		want          time.Duration
	}{
		{"over budget: tightened in proportion", 8 * ms, 8 * ms, 3e7, 1e7, 24 * ms},
		{"just over: by half again at least", 8 * ms, 8 * ms, 1.1e7, 1e7, 12 * ms},
		{"far over: eightfold at most a step", 8 * ms, 8 * ms, 1e9, 1e7, 64 * ms},
		{"never longer than a second", 500 * ms, 8 * ms, 1e9, 1e7, time.Second},
		{"within budget: kept", 32 * ms, 8 * ms, 0.8e7, 1e7, 32 * ms},
		{"well under: loosened by half", 32 * ms, 8 * ms, 0.2e7, 1e7, 16 * ms},
		{"never looser than the share", 10 * ms, 8 * ms, 0, 1e7, 8 * ms},
		{"at the share: kept", 8 * ms, 8 * ms, 0, 1e7, 8 * ms},
	} {
		if got := nextInterval(c.cur, c.share, c.spend, c.budget); got != c.want {
			t.Errorf("%s: nextInterval(%v, %v, %g, %g) = %v, want %v", c.name, c.cur, c.share, c.spend, c.budget, got, c.want)
		}
	}
}

func TestNewBudgetRefusesNonsense(t *testing.T) {
	for _, pct := range []float64{0, -1, 1e9} {
		if _, err := NewBudget(pct); err == nil {
			t.Errorf("NewBudget(%v) accepted", pct)
		}
	}
	b, err := NewBudget(2)
	if err != nil || b.perSecond() != 2e7 {
		t.Fatalf("NewBudget(2): %v, %v ns a second", err, b.perSecond())
	}
}

func TestNextEvery(t *testing.T) {
	for _, c := range []struct {
		name          string
		cur           uint32
		spend, budget float64
		longest       bool
		want          uint32
	}{
		{"over budget, gates at their longest: from every event to one in four", 0, 3e7, 1e7, true, 4},
		{"and fourfold each tick", 4, 1.1e7, 1e7, true, 16},
		{"up to one in 64", 32, 1.1e7, 1e7, true, 64},
		{"never sparser than one in 64", 64, 1e9, 1e7, true, 64},
		{"over budget, gates still tightening: kept", 4, 1.2e7, 1e7, false, 4},
		{"half as much again over, gates still tightening: sampled", 4, 1.6e7, 1e7, false, 16},
		{"within budget: kept", 8, 0.8e7, 1e7, true, 8},
		{"well under: halved", 8, 0.2e7, 1e7, true, 4},
		{"back to every event", 2, 0, 1e7, false, 1},
		{"every event: kept", 1, 0, 1e7, false, 1},
	} {
		if got := nextEvery(c.cur, c.spend, c.budget, c.longest); got != c.want {
			t.Errorf("%s: nextEvery(%d, %g, %g, %v) = %d, want %d", c.name, c.cur, c.spend, c.budget, c.longest, got, c.want)
		}
	}
}

// Duty rows are never shed for good: the generic shedding leaves them
// alone, and a cycle running is what a restore ends. Their window's
// shedding says the share of each second they ran.
func TestDutyRowsShedAsCycles(t *testing.T) {
	p := &Probe{name: "locks"}
	p.shed.rows = []shedRow{
		{attach: Attach{Target: "lock/contention_begin"}, rank: 8, duty: true},
		{attach: Attach{Target: "lock/contention_end"}, rank: 8, duty: true},
		{attach: Attach{Target: "vmscan/x"}, rank: 2},
	}
	if att, det := p.sheddable(); len(att) != 1 || att[0] != 2 || len(det) != 0 {
		t.Fatalf("not cycling: attached %v, detached %v", att, det)
	}
	if s := p.sheddings(); len(s) != 0 {
		t.Fatalf("nothing detached yet: %+v", s)
	}
	for i := range 2 {
		p.shed.rows[i].cycling, p.shed.rows[i].cycled = true, true
		p.shed.rows[i].total = 1500 * time.Millisecond
	}
	if att, det := p.sheddable(); len(att) != 1 || att[0] != 2 || len(det) != 1 || det[0] != 8 {
		t.Fatalf("cycling: attached %v, detached %v", att, det)
	}
	s := p.sheddings()
	if len(s) != 2 || s[0].DutyPct != 25 || !s[0].Ongoing || s[0].DetachedS != 1.5 || s[1].Target != "lock/contention_end" {
		t.Fatalf("cycling: %+v", s)
	}
	// Ended in the window: said once more, then no longer.
	for i := range 2 {
		p.shed.rows[i].cycling = false
		p.shed.rows[i].total = 100 * time.Millisecond
	}
	if s := p.sheddings(); len(s) != 2 || s[0].Ongoing || s[0].DutyPct != 25 {
		t.Fatalf("ended: %+v", s)
	}
	if s := p.sheddings(); len(s) != 0 {
		t.Fatalf("next window: %+v", s)
	}
}
