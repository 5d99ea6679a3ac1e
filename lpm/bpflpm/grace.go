package bpflpm

import "fmt"

// kernelGrace waits for a grace period of the kind that covers every BPF
// program running now: replacing an element of a map-of-maps from user
// space makes the kernel wait for all running non-sleepable BPF programs
// (maybe_wait_bpf_programs: synchronize_rcu) before the syscall returns.
func (t *Table) kernelGrace() error {
	if err := t.graceMap.Put(uint32(0), t.graceInner); err != nil {
		return fmt.Errorf("bpflpm: wait for a grace period: %w", err)
	}
	return nil
}

// sync waits until no lookup can still see anything retired so far, then
// makes that space reusable. The caller holds t.mu.
func (t *Table) sync() error {
	e := t.epoch
	t.epoch++
	if err := t.grace(); err != nil {
		return err
	}
	t.graceCount++
	t.markSafe(e)
	return nil
}

func (t *Table) markSafe(e uint64) {
	if e > t.safe {
		t.safe = e
	}
	t.nodesA.reclaim(t.safe)
	t.leafA.reclaim(t.safe)
}

// reclaim runs grace periods in the background when retired space builds
// up, so that updates rarely wait for one (an RCU grace period takes
// milliseconds).
func (t *Table) reclaim() {
	defer t.reclaimer.Done()
	for {
		select {
		case <-t.stop:
			return
		case <-t.kick:
		}
		t.mu.Lock()
		e := t.epoch
		t.epoch++
		t.mu.Unlock()
		err := t.grace()
		t.mu.Lock()
		if err == nil && !t.closed {
			t.graceCount++
			t.markSafe(e)
		}
		t.mu.Unlock()
	}
}

// maybeReclaim asks the background reclaimer for a grace period once a
// sixteenth of either map waits in limbo.
func (t *Table) maybeReclaim() {
	if t.kick == nil {
		return
	}
	if t.nodesA.inLimbo*16 > uint64(t.nodesA.cap) || t.leafA.inLimbo*16 > uint64(t.leafA.cap) {
		select {
		case t.kick <- struct{}{}:
		default:
		}
	}
}

// Sync waits for one grace period, reclaims the space of everything
// retired so far, and retries publishing what an Update or Delete could
// not for lack of space. Updates reclaim on their own when they run out
// of free blocks; call it to bound memory held in limbo after a burst.
func (t *Table) Sync() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	if err := t.sync(); err != nil {
		return err
	}
	return t.commit()
}

func (t *Table) retire(nodes bool, at, n uint32) {
	if at != noBlock && n > 0 {
		t.pending = append(t.pending, pend{nodes, at, n})
	}
}

// flushRetired moves the blocks the last commit replaced into limbo: from
// here on no new lookup can reach them.
func (t *Table) flushRetired() {
	for _, p := range t.pending {
		if p.nodes {
			t.nodesA.retire(p.at, p.n, t.epoch)
		} else {
			t.leafA.retire(p.at, p.n, t.epoch)
		}
	}
	t.pending = t.pending[:0]
	t.maybeReclaim()
}

func (t *Table) alloc(nodes bool, n uint32) (uint32, error) {
	a := &t.leafA
	if nodes {
		a = &t.nodesA
	}
	if at, ok := a.alloc(n); ok {
		return at, nil
	}
	if t.nodesA.inLimbo+t.leafA.inLimbo > 0 {
		if err := t.sync(); err != nil {
			return 0, err
		}
		if at, ok := a.alloc(n); ok {
			return at, nil
		}
	}
	return 0, ErrFull
}
