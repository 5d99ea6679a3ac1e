package probekit

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"time"

	"github.com/cilium/ebpf"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/overhead"
)

// The detail budget. wolf's cost is per event, so it is highest when the
// host is busiest: a lock storm runs contention_begin hundreds of
// thousands of times a second. What each event costs at least (its
// counts, sums, histograms: what the findings are exact about) is kept
// cheap in the programs; what costs microseconds (a stack walk, a record
// through a ring buffer, a task decoded) goes through the gate wolf.h's
// WOLF_BUDGET declares, and the Budget here sets the gate's rate:
//
//   - at Open, every object with a gate gets an even share of the detail
//     part of the budget (DetailShare of it), at DetailCost per detailed
//     event, spread over the CPUs: a storm gets a sample of its detail
//     from the first event on;
//   - then once a second, after the meters' measured period (see
//     internal/overhead), it adds up what every member's programs cost
//     in that period: over budget, it tightens every gate that took or
//     skipped detail (the cheap part cannot be sampled away, the detail
//     can); well under it, it loosens them back towards their share.
//
// The programs' counts of what they took and skipped make the report's
// overhead.sampled (finding.Sampling): who sampled, what, at what rate.
// A Budget is process-wide (SetBudget), so that every investigator a
// command runs shares one, whichever package it lives in.

// DetailCost is what one detailed event costs, for the gates' initial
// rate: a kernel stack walk of 30–50 frames (a page fault's reclaim) into
// a stack map, measured on the development VM under the memcg storm: 7–8
// µs, where the rest of a program's run is tens of ns. The controller
// corrects for the real cost.
const DetailCost = 8 * time.Microsecond

// DetailShare is the part of the budget the gates start with; the rest
// is the cheap, exact part's, which the budget cannot sample.
const DetailShare = 0.1

// The gate's interval is kept within these bounds: 50 µs is 20 000
// detailed events a second per CPU (no storm is sampled that lightly);
// one second, a detail per second per CPU, the most the budget takes away.
const (
	minDetailInterval = 50 * time.Microsecond
	maxDetailInterval = time.Second
)

// budgetMap is the section wolf.h puts wolf_detail_ns in.
const budgetMap = ".data.wolf_budget"

// Budget is the CPU wolf's BPF programs may use, shared by every probe
// opened while it is set.
type Budget struct {
	// OneCPUPct is the budget in percent of one CPU (2: 20 ms of BPF run
	// time a second).
	OneCPUPct float64

	mu      sync.Mutex
	members map[*Probe]*member
	stop    chan struct{}
	ncpu    int
	tick    time.Duration // the controller's period: the meters' cycle
	offset  time.Duration // into each cycle: after the measured period ends
}

// member is one probe under the budget.
type member struct {
	share    time.Duration // its gate's initial interval
	interval time.Duration // its gate's interval now
}

var (
	budgetMu sync.Mutex
	current  *Budget
)

// SetBudget makes b the budget of the probes opened from now on (nil: no
// budget, every gate takes everything). The previous one keeps its
// members.
func SetBudget(b *Budget) {
	budgetMu.Lock()
	defer budgetMu.Unlock()
	current = b
}

// CurrentBudget is the budget set by SetBudget, nil if none.
func CurrentBudget() *Budget {
	budgetMu.Lock()
	defer budgetMu.Unlock()
	return current
}

// NewBudget returns a budget of pct percent of one CPU.
func NewBudget(pct float64) (*Budget, error) {
	if math.IsNaN(pct) || pct <= 0 || pct > 100*float64(runtime.NumCPU()) {
		return nil, fmt.Errorf("a BPF budget must be above 0 and at most %d%% (every CPU), got %v", 100*runtime.NumCPU(), pct)
	}
	return &Budget{OneCPUPct: pct, members: map[*Probe]*member{}, ncpu: runtime.NumCPU(),
		tick: overhead.OnPeriod + overhead.OffPeriod, offset: overhead.OnPeriod + 50*time.Millisecond}, nil
}

// perSecond is the budget in ns of BPF run time per second.
func (b *Budget) perSecond() float64 { return b.OneCPUPct / 100 * 1e9 }

// join puts p under the budget, if its object has gates, and sets their
// initial interval: the detail share split evenly between the objects
// with gates (counting p), then between each object's gates, each spread
// over the CPUs.
func (b *Budget) join(p *Probe) {
	if p.maps[budgetMap] == nil || p.maps["wolf_detail"] == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(b.members) + 1
	perObject := b.perSecond() * DetailShare / float64(n) // ns a second
	// Each of the object's gates may take that rate (they share the
	// interval and keep their own pace).
	gates := max(p.maps["wolf_detail"].MaxEntries(), 1)
	perCPU := perObject / float64(b.ncpu) / float64(gates) / float64(DetailCost.Nanoseconds())
	share := clampInterval(time.Duration(float64(time.Second) / perCPU))
	m := &member{share: share, interval: share}
	b.members[p] = m
	// The others' shares shrink to make room; their intervals follow
	// at the controller's next tick.
	for q, o := range b.members {
		o.share = share
		if q != p && o.interval < share {
			o.interval = share
			_ = q.setDetailInterval(o.interval)
		}
	}
	_ = p.setDetailInterval(m.interval)
	if b.stop == nil {
		b.stop = make(chan struct{})
		go b.control(b.stop)
	}
}

// leave takes p from the budget (Close).
func (b *Budget) leave(p *Probe) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.members, p)
	if len(b.members) == 0 && b.stop != nil {
		close(b.stop)
		b.stop = nil
	}
}

// Interval is p's gate interval now (0 when p is not a member).
func (b *Budget) interval(p *Probe) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if m := b.members[p]; m != nil {
		return m.interval
	}
	return 0
}

func clampInterval(d time.Duration) time.Duration {
	return min(max(d, minDetailInterval), maxDetailInterval)
}

// control runs the feedback once per meter cycle, just after every
// meter's measured period has ended, until stop closes.
func (b *Budget) control(stop <-chan struct{}) {
	for {
		now := time.Now()
		next := now.Truncate(b.tick).Add(b.offset)
		if !next.After(now) {
			next = next.Add(b.tick)
		}
		select {
		case <-stop:
			return
		case <-time.After(next.Sub(now)):
		}
		b.adjust()
	}
}

// adjust is one step of the feedback: the members' last measured spend
// against the budget.
func (b *Budget) adjust() {
	b.mu.Lock()
	defer b.mu.Unlock()
	var run, measured time.Duration
	type active struct {
		p *Probe
		m *member
	}
	var gated []active
	for p, m := range b.members {
		r, d, ok := p.meter.LastPeriod()
		if !ok {
			continue
		}
		run += r
		measured = max(measured, d)
		if taken, skipped, err := p.detailCounts(); err == nil && taken+skipped > 0 {
			gated = append(gated, active{p, m})
		}
	}
	if measured <= 0 {
		return
	}
	spend := float64(run) / float64(measured) * 1e9 // ns a second
	budget := b.perSecond()
	for _, g := range gated {
		next := nextInterval(g.m.interval, g.m.share, spend, budget)
		if next != g.m.interval {
			g.m.interval = next
			_ = g.p.setDetailInterval(next)
		}
	}
}

// nextInterval is a gate's next interval, from its current one, its
// share's, and what the programs spent against the budget (ns a second):
// over budget, tightened in proportion (by half again at least, eightfold
// at most a step: the detail is what can give); under half the budget,
// loosened by half back towards the share; else kept.
func nextInterval(cur, share time.Duration, spend, budget float64) time.Duration {
	switch {
	case spend > budget:
		f := min(max(spend/budget, 1.5), 8)
		return clampInterval(time.Duration(float64(cur) * f))
	case spend < budget/2 && cur > share:
		return max(cur/2, share)
	}
	return cur
}

// setDetailInterval writes the gate's interval (wolf_detail_ns).
func (p *Probe) setDetailInterval(d time.Duration) error {
	m := p.maps[budgetMap]
	if m == nil {
		return nil
	}
	if err := m.Update(uint32(0), uint64(d.Nanoseconds()), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("%s: set the detail budget: %w", p.name, err)
	}
	return nil
}

// detailState is struct wolf_detail (wolf.h), one CPU's.
type detailState struct {
	NextNs, Taken, Skipped uint64
}

// detailCounts sums the gates' counts over the gates and the CPUs, since
// Open.
func (p *Probe) detailCounts() (taken, skipped uint64, err error) {
	m := p.maps["wolf_detail"]
	if m == nil {
		return 0, 0, nil
	}
	for g := range m.MaxEntries() {
		var per []detailState
		if err := m.Lookup(g, &per); err != nil {
			return 0, 0, fmt.Errorf("%s: read the detail budget: %w", p.name, err)
		}
		for _, s := range per {
			taken += s.Taken
			skipped += s.Skipped
		}
	}
	return taken, skipped, nil
}

// sampling is the window's finding.Sampling since the previous call, nil
// when the gate skipped nothing in it (then nothing was sampled).
func (p *Probe) sampling() *finding.Sampling {
	taken, skipped, err := p.detailCounts()
	if err != nil {
		return nil
	}
	var events uint64
	if p.detailEvents >= 0 {
		if c, err := p.Counters(); err == nil && p.detailEvents < len(c) {
			events = c[p.detailEvents]
		}
	}
	p.mu.Lock()
	seen := p.detailSeen
	p.detailSeen.taken, p.detailSeen.skipped, p.detailSeen.events = taken, skipped, events
	p.mu.Unlock()
	dt, ds := Sub(taken, seen.taken), Sub(skipped, seen.skipped)
	if ds == 0 {
		return nil
	}
	n := dt + ds
	if p.detailEvents >= 0 {
		n = max(Sub(events, seen.events), dt)
	}
	s := &finding.Sampling{Investigator: p.name, What: p.detailWhat, Events: n, Detailed: dt,
		Rate: float64(dt) / float64(n)}
	if p.budget != nil {
		s.IntervalUs = float64(p.budget.interval(p).Nanoseconds()) / 1e3
	}
	return s
}
