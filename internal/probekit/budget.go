package probekit

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

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
// a stack map, measured on the development VM under the memcg storm: 7–10
// µs, where the rest of a program's run is tens of ns. The controller
// corrects for the real cost.
const DetailCost = 10 * time.Microsecond

// DetailShare is the part of the budget the gates start with; the rest
// is the cheap, exact part's, which the budget cannot sample.
const DetailShare = 0.05

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

	// Shedding's state (see shedGroup): ticks over and well under the
	// budget in a row, and what the programs spent before each group was
	// shed, by member and rank, to tell whether it fits again.
	overTicks, underTicks int
	shedAt                map[shedKey]float64
	lastSpend             float64
}

type shedKey struct {
	p    *Probe
	rank int
}

// member is one probe under the budget.
type member struct {
	gates    int           // its object's detail gates (0: none)
	share    time.Duration // their initial interval
	interval time.Duration // their interval now
	storm    bool          // its object has storm sampling (WOLF_STORM)
	every    uint32        // one event in every is timed (0, 1: all)
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
	return &Budget{OneCPUPct: pct, members: map[*Probe]*member{}, ncpu: runtime.NumCPU(), shedAt: map[shedKey]float64{},
		tick: overhead.OnPeriod + overhead.OffPeriod, offset: overhead.OnPeriod + 50*time.Millisecond}, nil
}

// perSecond is the budget in ns of BPF run time per second.
func (b *Budget) perSecond() float64 { return b.OneCPUPct / 100 * 1e9 }

// join puts p under the budget: its programs' spend counts, its sheddable
// rows may be shed, and if its object has gates they get their initial
// interval: the detail share split evenly between the objects with gates
// (counting p), then between each object's gates, each spread over the
// CPUs.
func (b *Budget) join(p *Probe) {
	gates := 0
	if p.maps[budgetMap] != nil && p.maps["wolf_detail"] != nil {
		gates = int(max(p.maps["wolf_detail"].MaxEntries(), 1))
	}
	storm := p.maps[stormMap] != nil && p.maps["wolf_storm"] != nil
	b.mu.Lock()
	defer b.mu.Unlock()
	b.members[p] = &member{gates: gates, storm: storm}
	b.reshare(p)
	if b.stop == nil {
		b.stop = make(chan struct{})
		go b.control(b.stop)
	}
}

// reshare gives every member with gates its share of the detail part of
// the budget; a member whose interval is shorter than its new share (or
// the new member, joined) starts there.
func (b *Budget) reshare(joined *Probe) {
	n := 0
	for _, m := range b.members {
		if m.gates > 0 {
			n++
		}
	}
	for q, m := range b.members {
		if m.gates == 0 {
			continue
		}
		perObject := b.perSecond() * DetailShare / float64(n) // ns a second
		perCPU := perObject / float64(b.ncpu) / float64(m.gates) / float64(DetailCost.Nanoseconds())
		m.share = clampInterval(time.Duration(float64(time.Second) / perCPU))
		if q == joined || m.interval < m.share {
			m.interval = m.share
			_ = q.setDetailInterval(m.interval)
		}
	}
}

// leave takes p from the budget (Close).
func (b *Budget) leave(p *Probe) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.members, p)
	for k := range b.shedAt {
		if k.p == p {
			delete(b.shedAt, k)
		}
	}
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
		if m.gates == 0 {
			continue
		}
		if taken, skipped, err := p.detailCounts(); err == nil && taken+skipped > 0 {
			gated = append(gated, active{p, m})
		}
	}
	if measured <= 0 {
		return
	}
	spend := float64(run) / float64(measured) * 1e9 // ns a second
	budget := b.perSecond()
	longest := true
	for _, g := range gated {
		next := nextInterval(g.m.interval, g.m.share, spend, budget)
		if next != g.m.interval {
			g.m.interval = next
			_ = g.p.setDetailInterval(next)
		}
		longest = longest && next >= maxDetailInterval
	}
	for p, m := range b.members {
		if !m.storm {
			continue
		}
		if next := nextEvery(m.every, spend, budget, longest); next != m.every {
			m.every = next
			_ = p.setStormEvery(next)
		}
	}
	b.dutyStep(spend, budget)
	b.shed(spend, budget, longest)
	b.lastSpend = spend
}

// dutyStep starts the duty cycles (Attach.Duty) of every member whose
// storm sampling is at its sparsest while the programs still spend over
// the budget: what is left of their cost is their runs, and only fewer
// runs lower it. Rows that only add detail go first (shed), unless the
// programs spend twice the budget: the shedding, a group every two
// seconds, would then take most of a ten-second window. A cycle comes
// back for good as a group shed does.
func (b *Budget) dutyStep(spend, budget float64) {
	if spend <= budget {
		return
	}
	if spend <= 2*budget {
		for p := range b.members {
			if att, _ := p.sheddable(); len(att) > 0 {
				return
			}
		}
	}
	for p, m := range b.members {
		if !m.storm || m.every < maxStormEvery {
			continue
		}
		for _, rank := range p.dutyRanks() {
			if p.startDuty(rank) {
				b.shedAt[shedKey{p, rank}] = spend
			}
		}
	}
}

// shed detaches a sheddable group when the programs have spent over the
// budget for shedAfterTicks ticks with the gates at their longest (or
// twice the budget, whatever the gates), and
// attaches one again when they have spent under half of it for
// restoreAfterTicks and what they spent before it was shed fits.
func (b *Budget) shed(spend, budget float64, gatesLongest bool) {
	switch {
	case spend > budget:
		b.overTicks++
		b.underTicks = 0
	case spend < budget/2:
		b.underTicks++
		b.overTicks = 0
	default:
		b.overTicks, b.underTicks = 0, 0
	}
	// Members in a fixed order (by name), so that which goes first is
	// decided by rank, then name, not by map order.
	probes := make([]*Probe, 0, len(b.members))
	for p := range b.members {
		probes = append(probes, p)
	}
	slices.SortFunc(probes, func(x, y *Probe) int { return strings.Compare(x.name, y.name) })
	// Far over, the gates' last steps would take seconds more of a
	// window that may be ten seconds long: shed beside them.
	if b.overTicks >= shedAfterTicks && (gatesLongest || spend > 2*budget) {
		var best *Probe
		rank := 0
		for _, p := range probes {
			if att, _ := p.sheddable(); len(att) > 0 && (best == nil || att[0] < rank) {
				best, rank = p, att[0]
			}
		}
		if best != nil {
			b.shedAt[shedKey{best, rank}] = spend
			best.shedGroup(rank)
			b.overTicks = 0
		}
		return
	}
	if b.underTicks >= restoreAfterTicks {
		var best *Probe
		rank := 0
		for _, p := range probes {
			if _, det := p.sheddable(); len(det) > 0 && (best == nil || det[0] > rank) {
				best, rank = p, det[0]
			}
		}
		if best == nil {
			return
		}
		// What the group cost is at most what all spent before it went
		// minus what they spend now; back only if that fits.
		k := shedKey{best, rank}
		if cost := b.shedAt[k] - spend; spend+max(cost, 0) < budget {
			delete(b.shedAt, k)
			best.restoreGroup(rank)
		}
		b.underTicks = 0
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

// Storm sampling (WOLF_STORM in wolf.h): what a program must time exactly
// costs its runs, whatever the gates do; on a storm of them (a memcg
// storm's spin lock waits, tens of thousands a second) that alone can be
// over the budget. Then, with the gates at their longest (or half as much
// again over the budget, whatever the gates: a stack walk a second less
// is nothing then), the budget times about one event in every per CPU,
// every fourfold each tick over the budget up to maxStormEvery, halving
// back each tick under half of it; each timed event stands for itself and those its CPU
// skipped before it, so that the counts and sums are estimates of the
// whole (the report says so: Sampling.Estimated).
const (
	stormMap      = ".data.wolf_storm"
	maxStormEvery = 64
)

// nextEvery is the storm sampling's next every, from the current one and
// what the programs spent against the budget (ns a second).
func nextEvery(cur uint32, spend, budget float64, gatesLongest bool) uint32 {
	switch {
	case spend > budget && (gatesLongest || spend > 1.5*budget):
		return min(max(cur*4, 4), maxStormEvery)
	case spend < budget/2 && cur > 1:
		return cur / 2
	}
	return cur
}

// setStormEvery writes the storm sampling's every (wolf_storm_every).
func (p *Probe) setStormEvery(every uint32) error {
	m := p.maps[stormMap]
	if m == nil {
		return nil
	}
	if err := m.Update(uint32(0), every, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("%s: set the storm sampling: %w", p.name, err)
	}
	return nil
}

// stormState is struct wolf_storm (wolf.h), one CPU's.
type stormState struct {
	Seen, Kept    uint64
	Left, Skipped uint32
}

// stormSampling is the window's finding.Sampling of the storm sampling
// since the previous call, nil when it skipped nothing in it.
func (p *Probe) stormSampling() *finding.Sampling {
	m := p.maps["wolf_storm"]
	if m == nil || p.stormWhat == "" {
		return nil
	}
	// One slot per kind of event sampled (WOLF_STORM_SLOTS), each per CPU.
	var seen, kept uint64
	for slot := range m.MaxEntries() {
		var per []stormState
		if err := m.Lookup(slot, &per); err != nil {
			return nil
		}
		for _, s := range per {
			seen += s.Seen
			kept += s.Kept
		}
	}
	p.mu.Lock()
	last := p.stormSeen
	p.stormSeen.seen, p.stormSeen.kept = seen, kept
	p.mu.Unlock()
	ds, dk := Sub(seen, last.seen), Sub(kept, last.kept)
	if ds == 0 || dk >= ds {
		return nil
	}
	return &finding.Sampling{Investigator: p.name, What: p.stormWhat, Events: ds, Detailed: dk,
		Rate: float64(dk) / float64(ds), Estimated: !p.stormDetail}
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

// Shedding. Sampling bounds what the detail costs; what a program must
// count exactly costs its runs. When the programs still spend more than
// the budget with every gate at its longest interval, the budget detaches
// the rows their investigators marked sheddable (Attach.Shed), a group at
// a time, lowest Shed first, and attaches them again once the programs
// spend well under the budget. Each report says for how long what was
// detached, and what was not seen meanwhile.

// shedState is a probe's sheddable rows.
type shedState struct {
	rows []shedRow
}

type shedRow struct {
	attach Attach // the row as the table has it
	rank   int
	since  time.Time     // detached since; zero while attached
	total  time.Duration // detached time in the window so far (ended detachments)
	// duty: the budget runs the row part of the time (Attach.Duty)
	// rather than detach it; cycling: it does now, or did in the window
	// (the report says so until the next window).
	duty, cycling, cycled bool
}

// The controller's hysteresis: over budget this many ticks in a row (with
// the gates at their longest) before a group is shed; well under it this
// many before one comes back, and only if what it cost when it was shed
// fits under the budget again.
const (
	shedAfterTicks    = 2
	restoreAfterTicks = 3
)

// sheddable lists the ranks p could shed now (attached groups), lowest
// first, and those it has shed, highest first.
func (p *Probe) sheddable() (attached, detached []int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	seenA, seenD := map[int]bool{}, map[int]bool{}
	for _, r := range p.shed.rows {
		if r.duty {
			// Duty rows are run part of the time (dutyStep), never
			// detached for good; a cycle is restored as a group shed.
			if r.cycling && !seenD[r.rank] {
				seenD[r.rank] = true
				detached = append(detached, r.rank)
			}
			continue
		}
		if r.since.IsZero() && !seenA[r.rank] {
			seenA[r.rank] = true
			attached = append(attached, r.rank)
		} else if !r.since.IsZero() && !seenD[r.rank] {
			seenD[r.rank] = true
			detached = append(detached, r.rank)
		}
	}
	slices.Sort(attached)
	slices.Sort(detached)
	slices.Reverse(detached)
	return attached, detached
}

// shedGroup detaches p's rows of rank.
func (p *Probe) shedGroup(rank int) {
	now := time.Now()
	var closing []link.Link
	p.mu.Lock()
	for i := range p.shed.rows {
		r := &p.shed.rows[i]
		if r.rank != rank || !r.since.IsZero() {
			continue
		}
		l := p.rowLinks[r.attach.Target]
		if l == nil {
			continue
		}
		delete(p.rowLinks, r.attach.Target)
		p.links = slices.DeleteFunc(p.links, func(x link.Link) bool { return x == l })
		closing = append(closing, l)
		r.since = now
	}
	p.mu.Unlock()
	for _, l := range closing {
		_ = l.Close()
	}
}

// restoreGroup attaches p's rows of rank again, as they attached first
// (a duty cycle's for good).
func (p *Probe) restoreGroup(rank int) {
	p.mu.Lock()
	run := p.duties[rank]
	p.mu.Unlock()
	if run != nil {
		p.stopDutyRank(rank, true)
		return
	}
	for i := range p.shed.rows {
		p.mu.Lock()
		r := &p.shed.rows[i]
		if r.rank != rank || r.since.IsZero() {
			p.mu.Unlock()
			continue
		}
		a, ok := p.chosen[r.attach.Target]
		p.mu.Unlock()
		if !ok {
			continue
		}
		l, err := p.attachOne(a, ebpf.CollectionOptions{})
		p.mu.Lock()
		if err == nil && l != nil {
			p.rowLinks[r.attach.Target] = l
			r.total += time.Since(r.since)
			r.since = time.Time{}
		}
		p.mu.Unlock()
	}
}

// sheddings are the window's detachments since the previous call, for
// the report.
func (p *Probe) sheddings() []finding.Shedding {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []finding.Shedding
	for i := range p.shed.rows {
		r := &p.shed.rows[i]
		d := r.total
		ongoing := !r.since.IsZero()
		if ongoing {
			d += now.Sub(r.since)
			r.since = now // the rest counts in the next window
		}
		r.total = 0
		cycled := r.cycled
		r.cycled = r.cycling // the next window's, if it goes on
		if d <= 0 && !cycled {
			continue
		}
		// A detachment that began a few milliseconds ago still reads as one:
		// rounding it to 0 s would say the row was shed for no time at all.
		detached := math.Max(math.Round(d.Seconds()*100)/100, 0.01)
		sh := finding.Shedding{Investigator: p.name, Target: r.attach.Target, Why: r.attach.Why,
			DetachedS: detached, Ongoing: ongoing}
		if cycled {
			sh.DutyPct = 100 / float64(uint64(1)<<DutyShift)
			sh.Ongoing = r.cycling
		}
		out = append(out, sh)
	}
	return out
}
