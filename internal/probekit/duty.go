package probekit

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Duty cycling (Attach.Duty): the budget's step past storm sampling. A
// program that times events exactly costs its runs whatever it samples:
// under a lock storm, lock:contention_begin and _end run tens of
// thousands of times a second each, and their runs alone, empty, cost
// about as much as the whole budget. Then the rows run DutyOn of each
// DutyPeriod: their runs, and what they cost, fall 2^DutyShift-fold, and
// an event they see stands for 2^DutyShift (wolf_duty in wolf.h), so
// that counts and sums stay estimates of the whole.
//
// The on-time's place in each period is random: the overhead meter
// measures the first OnPeriod of every second (internal/overhead), and a
// cycle locked to it would be measured always on, or never.
const (
	DutyPeriod = time.Second
	DutyShift  = 2
	DutyOn     = DutyPeriod >> DutyShift
	// DutyGrace is how long the group's other rows (the ends) stay after
	// its first (the begins) detached: a wait begun then ends seen.
	DutyGrace = 25 * time.Millisecond
)

// dutyMap is the section wolf.h puts wolf_duty_shift in.
const dutyMap = ".data.wolf_duty"

// dutyRun is one duty cycle running: stop ends it, reattach says whether
// its rows are to be attached for good then (a restore) or left as they
// are (Detach, Close); done closes when it has.
type dutyRun struct {
	stop     chan struct{}
	done     chan struct{}
	reattach bool
}

// dutyRanks are p's duty ranks that run all the time now (none cycling).
func (p *Probe) dutyRanks() []int {
	if p.maps[dutyMap] == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []int
	for _, r := range p.shed.rows {
		if r.duty && !r.cycling && p.duties[r.rank] == nil && !slices.Contains(out, r.rank) {
			out = append(out, r.rank)
		}
	}
	slices.Sort(out)
	return out
}

// startDuty begins the duty cycle of p's rows of rank; false when it
// cannot (the object has no wolf_duty, or it runs already).
func (p *Probe) startDuty(rank int) bool {
	if err := p.setDutyShift(DutyShift); err != nil {
		return false
	}
	run := &dutyRun{stop: make(chan struct{}), done: make(chan struct{})}
	p.mu.Lock()
	if p.duties == nil {
		p.duties = map[int]*dutyRun{}
	}
	if p.duties[rank] != nil {
		p.mu.Unlock()
		return false
	}
	p.duties[rank] = run
	var first string
	var rest []string
	for i := range p.shed.rows {
		r := &p.shed.rows[i]
		if r.rank != rank || !r.duty {
			continue
		}
		r.cycling, r.cycled = true, true
		if first == "" {
			first = r.attach.Target
		} else {
			rest = append(rest, r.attach.Target)
		}
	}
	p.mu.Unlock()
	go p.dutyCycle(run, first, rest)
	return true
}

// stopDutyRank ends the duty cycle of rank, its rows attached for good
// when reattach (and events counting for themselves again).
func (p *Probe) stopDutyRank(rank int, reattach bool) {
	p.mu.Lock()
	run := p.duties[rank]
	delete(p.duties, rank)
	p.mu.Unlock()
	if run == nil {
		return
	}
	run.reattach = reattach
	close(run.stop)
	<-run.done
	p.mu.Lock()
	cycling := len(p.duties) > 0
	for i := range p.shed.rows {
		if r := &p.shed.rows[i]; r.rank == rank && r.duty {
			r.cycling = false
		}
	}
	p.mu.Unlock()
	if reattach && !cycling {
		_ = p.setDutyShift(0)
	}
}

// stopDuty ends every duty cycle.
func (p *Probe) stopDuty(reattach bool) {
	p.mu.Lock()
	ranks := make([]int, 0, len(p.duties))
	for r := range p.duties {
		ranks = append(ranks, r)
	}
	p.mu.Unlock()
	for _, r := range ranks {
		p.stopDutyRank(r, reattach)
	}
}

// dutyCycle runs the rows first and rest DutyOn of every period until
// run.stop closes. The rows are attached as it begins. The period is the
// time first really ran times 2^DutyShift (attaching and detaching take
// milliseconds): what an event seen stands for stays true.
func (p *Probe) dutyCycle(run *dutyRun, first string, rest []string) {
	defer close(run.done)
	wait := func(d time.Duration) bool {
		if d <= 0 {
			return true
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-run.stop:
			return false
		case <-t.C:
			return true
		}
	}
	all := append([]string{first}, rest...)
	defer func() {
		if run.reattach {
			// The ends before the begins: a wait begun is ended.
			p.attachTargets(append(slices.Clone(rest), first))
		}
	}()
	u := rand.Float64() // where the on-time falls in this period
	for {
		armed := time.Now()
		if !wait(DutyOn) {
			return
		}
		p.detachTargets([]string{first}, all)
		on := time.Since(armed)
		if !wait(DutyGrace) {
			return
		}
		p.detachTargets(rest, nil)
		off := on<<DutyShift - on
		next := rand.Float64()
		// The rest of this period after its on-time, then the next
		// period's part before its own.
		left := time.Duration((1-u)*float64(off)) + time.Duration(next*float64(off)) - time.Since(armed.Add(on))
		u = next
		if !wait(left) {
			return
		}
		p.attachTargets(append(slices.Clone(rest), first))
	}
}

// detachTargets detaches the duty rows with these targets; the rows of
// mark (the whole group, as the first detaches) are counted detached
// from now on.
func (p *Probe) detachTargets(targets, mark []string) {
	now := time.Now()
	var closing []link.Link
	p.mu.Lock()
	for i := range p.shed.rows {
		r := &p.shed.rows[i]
		if !r.duty {
			continue
		}
		if slices.Contains(mark, r.attach.Target) && r.since.IsZero() {
			r.since = now
		}
		if !slices.Contains(targets, r.attach.Target) {
			continue
		}
		if l := p.rowLinks[r.attach.Target]; l != nil {
			delete(p.rowLinks, r.attach.Target)
			p.links = slices.DeleteFunc(p.links, func(x link.Link) bool { return x == l })
			closing = append(closing, l)
		}
	}
	p.mu.Unlock()
	for _, l := range closing {
		_ = l.Close()
	}
}

// attachTargets attaches the duty rows with these targets again, in this
// order, as they attached first; once all are, the group counts as
// attached.
func (p *Probe) attachTargets(targets []string) {
	for _, t := range targets {
		p.mu.Lock()
		a, ok := p.chosen[t]
		have := p.rowLinks[t] != nil
		p.mu.Unlock()
		if !ok || have {
			continue
		}
		l, err := p.attachOne(a, ebpf.CollectionOptions{})
		if err != nil || l == nil {
			continue
		}
		p.mu.Lock()
		p.rowLinks[t] = l
		p.mu.Unlock()
	}
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.shed.rows {
		r := &p.shed.rows[i]
		if r.duty && slices.Contains(targets, r.attach.Target) && !r.since.IsZero() {
			r.total += now.Sub(r.since)
			r.since = time.Time{}
		}
	}
}

// setDutyShift writes wolf_duty_shift: what an event the duty rows see
// stands for, 2^shift.
func (p *Probe) setDutyShift(shift uint32) error {
	m := p.maps[dutyMap]
	if m == nil {
		return fmt.Errorf("%s: no duty cycling in the object", p.name)
	}
	if err := m.Update(uint32(0), shift, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("%s: set the duty cycle: %w", p.name, err)
	}
	return nil
}
