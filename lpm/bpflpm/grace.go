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
	t.arena.reclaim(t.safe)
}

// reclaim runs grace periods in the background when retired space builds
// up, so that writes rarely wait for one (an RCU grace period takes
// milliseconds): one grace period frees everything retired before it
// began, however many changes that was.
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
// sixteenth of the arena waits in limbo.
func (t *Table) maybeReclaim() {
	if t.kick == nil {
		return
	}
	if t.arena.inLimbo*16 > uint64(t.arena.size) {
		select {
		case t.kick <- struct{}{}:
		default:
		}
	}
}

// Sync drops the nodes deletes left empty (see Delete), publishes what a
// change could not for lack of room, then waits for one grace period and
// reclaims the space of everything retired so far. Writes reclaim on
// their own when they run out of free blocks; call it to bound memory
// held in limbo or in empty nodes after a burst.
func (t *Table) Sync() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	if t.root != nil {
		t.dropEmpty(t.root)
	}
	err := t.flushPacked()
	t.flushRetired()
	if serr := t.sync(); serr != nil {
		return serr
	}
	return err
}

// retire notes a block the change being made stops using; flushRetired
// puts it in limbo once the change is published.
func (t *Table) retire(at uint32, order int8) {
	t.pending = append(t.pending, pend{at, order})
}

// flushRetired moves the blocks the last change replaced into limbo: from
// here on no new lookup can reach them.
func (t *Table) flushRetired() {
	for _, p := range t.pending {
		t.arena.retire(p.at-t.base, p.order, t.epoch)
	}
	t.pending = t.pending[:0]
	t.maybeReclaim()
}

// alloc returns the first unit of a free block of 2^order units, waiting
// for a grace period when only limbo has room.
func (t *Table) alloc(order int8) (uint32, error) {
	if at, ok := t.arena.alloc(order); ok {
		return t.base + at, nil
	}
	if t.arena.inLimbo > 0 {
		if err := t.sync(); err != nil {
			return 0, err
		}
		if at, ok := t.arena.alloc(order); ok {
			return t.base + at, nil
		}
	}
	return 0, ErrFull
}
