package locks

import (
	"fmt"
	"time"
)

// The awaited count (locks.bpf.c): how many threads' entries await a
// sleeping wait's end, so that contention_end skips its lookup when none
// does. The programs' count can be too high, never too low: an entry the
// LRU evicts while it awaits an end leaves it one too high. User space
// counts the entries awaiting and takes the excess back (AWAITED_CORR),
// but only from a count it knows is exact: one taken while the word did
// not change (its high half counts the starts, so a wait that began and
// ended meanwhile changes it too).
const (
	awaitedWord = 0 // AWAITED_WORD
	awaitedCorr = 1 // AWAITED_CORR
)

// awaitingEnd is locks.bpf.c's awaiting(): a timed wait not over, or an
// untimed one's mark.
func awaitingEnd(pe *locksPending) bool {
	return pe.SkipLock != 0 || (pe.StartNs != 0 && pe.EndNs == 0)
}

// awaitedCorrection is the correction that makes the programs' count
// (the low half of the word) equal seen, the entries counted awaiting
// while the word went from before to after; ok is false when the word
// changed meanwhile, and the count seen may then be off. The arithmetic
// is the programs' own: 32 bits, wrapping.
func awaitedCorrection(before, after uint64, seen uint32) (corr uint32, ok bool) {
	if before != after {
		return 0, false
	}
	return uint32(before) - seen, true
}

// awaitedExcess is how far the programs' count, less its correction, is
// above the entries awaiting: 0 when exact.
func awaitedExcess(word uint64, corr, awaiting uint32) uint32 {
	return uint32(word) - corr - awaiting
}

// readAwaited reads the word and the correction.
func (p *probe) readAwaited() (word uint64, corr uint32, err error) {
	var c uint64
	if err := p.maps.Awaited.Lookup(uint32(awaitedWord), &word); err != nil {
		return 0, 0, fmt.Errorf("awaited count: %w", err)
	}
	if err := p.maps.Awaited.Lookup(uint32(awaitedCorr), &c); err != nil {
		return 0, 0, fmt.Errorf("awaited correction: %w", err)
	}
	return word, uint32(c), nil
}

// countAwaiting counts the thread entries awaiting an end.
func (p *probe) countAwaiting() (uint32, error) {
	var n uint32
	var tid uint32
	var pe locksPending
	it := p.maps.PendingTask.Iterate()
	for it.Next(&tid, &pe) {
		if awaitingEnd(&pe) {
			n++
		}
	}
	if err := it.Err(); err != nil {
		return 0, fmt.Errorf("pending waits: %w", err)
	}
	return n, nil
}

// awaitedCount is one count of the entries awaiting an end (seen) between
// two readings of the word (before, after); corr is the correction read
// with the first.
type awaitedCount struct {
	before, after uint64
	corr, seen    uint32
}

// exact says whether the word held still while the entries were counted.
func (c awaitedCount) exact() bool { return c.before == c.after }

// countAwaited reads the word, counts the entries awaiting an end, and
// reads the word again.
func (p *probe) countAwaited() (c awaitedCount, err error) {
	if c.before, c.corr, err = p.readAwaited(); err != nil {
		return c, err
	}
	if c.seen, err = p.countAwaiting(); err != nil {
		return c, err
	}
	c.after, _, err = p.readAwaited()
	return c, err
}

// reconcileAwaited counts the entries awaiting an end and, when the word
// held still meanwhile, sets the correction so that the programs' count
// is exact again. It returns the excess it found (0: the count was
// exact) and whether it could tell.
func (p *probe) reconcileAwaited() (excess uint32, ok bool, err error) {
	c, err := p.countAwaited()
	if err != nil {
		return 0, false, err
	}
	nc, ok := awaitedCorrection(c.before, c.after, c.seen)
	if !ok {
		return 0, false, nil
	}
	if excess = awaitedExcess(c.before, c.corr, c.seen); excess == 0 {
		return 0, true, nil
	}
	if err := p.maps.Awaited.Update(uint32(awaitedCorr), uint64(nc), 0); err != nil {
		return 0, false, fmt.Errorf("awaited correction: %w", err)
	}
	return excess, true, nil
}

// awaitedCheck paces reconcileAwaited from the queue sampler: only when
// the programs count an entry awaiting (an excess looks the same as a
// wait going on), the word moved since the last exact count, and at most
// once per awaitedEvery or 200 times what the last count took, so that a
// host with thousands of threads' entries pays under half a percent.
type awaitedCheck struct {
	next     time.Time
	lastWord uint64
	checked  bool
}

const awaitedEvery = time.Second

func (a *awaitedCheck) maybe(p *probe, now time.Time) {
	if now.Before(a.next) {
		return
	}
	a.next = now.Add(awaitedEvery)
	word, corr, err := p.readAwaited()
	if err != nil || uint32(word) == corr || (a.checked && word == a.lastWord) {
		return
	}
	start := time.Now()
	_, ok, err := p.reconcileAwaited()
	if took := time.Since(start) * 200; took > awaitedEvery {
		a.next = now.Add(took)
	}
	if err == nil && ok {
		a.lastWord, a.checked = word, true
	}
}
