package probekit

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// windowMap is the section wolf.h puts wolf_window in: the number of the
// window whose maxima the programs keep (struct wolf_max).
const windowMap = ".data.wolf_window"

// EndWindow ends the window of the object's per-window maxima and returns
// its number: the programs keep their maxima in the next window's slot
// from now on, and the caller reads the returned window's slots (with
// WindowMax) after this call. Objects that keep no per-window maxima
// return 0 and nil.
//
// Counts and sums are not affected: they stay cumulative, and each window
// is the difference of two readings.
func (p *Probe) EndWindow() (uint32, error) {
	m := p.maps[windowMap]
	if m == nil {
		return 0, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	ended := p.window
	if err := m.Update(uint32(0), ended+1, ebpf.UpdateAny); err != nil {
		return 0, fmt.Errorf("%s: start the next window: %w", p.name, err)
	}
	p.window = ended + 1
	return ended, nil
}

// WindowMax is window w's largest value out of the slots of a struct
// wolf_max (wolf.h; pass its generated fields V and Win), 0 when the
// window saw no value.
func WindowMax(v [2]uint64, win [2]uint32, w uint32) uint64 {
	m, _ := WindowMaxTag(v, win, [2]uint32{}, w)
	return m
}

// WindowMaxTag is WindowMax with the tag noted with the value (Tag).
func WindowMaxTag(v [2]uint64, win, tag [2]uint32, w uint32) (uint64, uint32) {
	s := w & 1
	if win[s] != w {
		return 0, 0
	}
	return v[s], tag[s]
}

// Since turns the readings of a cumulative map (a BPF map that only ever
// adds) into windows: each Step returns what changed since the previous
// reading, key by key, and keeps the new one.
type Since[K comparable, V any] struct {
	prev map[K]V
}

// Step returns, for every key of cur, sub(cur, prev, seen): seen is false
// (and prev the zero value) for a key the previous reading did not have.
// sub also returns what to keep as the previous reading of that key for
// the next Step (usually cur). Keys absent from cur are forgotten.
func (s *Since[K, V]) Step(cur map[K]V, sub func(cur, prev V, seen bool) (delta, keep V)) map[K]V {
	out := make(map[K]V, len(cur))
	next := make(map[K]V, len(cur))
	for k, v := range cur {
		prev, seen := s.prev[k]
		out[k], next[k] = sub(v, prev, seen)
	}
	s.prev = next
	return out
}

// Sub is a minus b, 0 if b is larger (a counter that went back: its entry
// was recreated, or the reading raced with an update).
func Sub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

// Envelope is the window of a sum that only grows but whose readings can
// come short: a value that moves between two maps read one after the
// other (a wait folded by the programs between the reading of their
// aggregations and that of the waits not folded yet) is in neither for
// one reading. The window is what the sum grew by since the largest
// earlier reading (never negative), and keep is the reading to compare
// the next one with: what a short reading missed is counted once, when it
// shows again.
func Envelope(cur, largest uint64) (window, keep uint64) {
	return Sub(cur, largest), max(cur, largest)
}

// IdleAfter is how many readings in a row an entry of a cumulative map
// must stay unchanged before Idle says to delete it: three windows, a few
// minutes of wolf watch.
const IdleAfter = 3

// Idle counts, key by key, the readings in a row an entry of a cumulative
// map did not change. Attached for hours, a bounded map keyed by things
// that come and go (threads, cgroups) would fill with the long gone and
// refuse new keys; its investigator deletes what Idle calls idle, and
// forgets it in its windows, so that a key that comes back counts from
// zero. Call Step for every key of a reading, then End.
type Idle[K comparable] struct {
	n, next map[K]int
}

// Step notes whether key k changed in this reading, and says whether it
// has now been unchanged for IdleAfter readings (it is then forgotten).
func (d *Idle[K]) Step(k K, changed bool) bool {
	if d.next == nil {
		d.next = map[K]int{}
	}
	n := 0
	if !changed {
		n = d.n[k] + 1
	}
	if n >= IdleAfter {
		return true
	}
	d.next[k] = n
	return false
}

// End closes a reading: keys it did not step are forgotten.
func (d *Idle[K]) End() {
	d.n, d.next = d.next, nil
}

// Evict deletes keys from m, one of the object's maps: entries user space
// found idle for long enough to drop (a map the programs keep filling
// would otherwise reach its bound). A key the programs recreate meanwhile
// starts again from zero; one missing already is no error.
func Evict[K any](m *ebpf.Map, keys []K) {
	for _, k := range keys {
		_ = m.Delete(k)
	}
}
