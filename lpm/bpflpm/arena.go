package bpflpm

import "slices"

// arena hands out blocks of 1..fanout consecutive entries of one array map
// (node records or leaves). Every block the structure uses is at most
// fanout entries long (one node's children, one node's leaves, or a slot's
// root record), so exact-size free lists find a fit in O(1). Free space
// longer than that (merged neighbours) sits in a list of spans that
// blocks are carved from. When nothing fits, the free space is sorted and
// merged once (coalesced) before the arena gives up.
//
// A block that lookups may still be reading is retired, not freed: it waits
// in limbo until a grace period has passed (see Table.sync), and only then
// is it reused. The arena itself does not know about grace periods; it
// reports that limbo holds space and lets the table decide.
type arena struct {
	cap   uint32
	top   uint32 // entries [top, cap) were never handed out
	small [fanout + 1][]uint32
	large []span
	limbo []retired
	// live counts entries in blocks that are allocated and not retired;
	// inLimbo counts entries waiting for a grace period.
	live, inLimbo uint64
}

type span struct{ at, n uint32 }

// retired is a span in limbo and the epoch it was retired in.
type retired struct {
	span
	epoch uint64
}

const noBlock = ^uint32(0)

func newArena(capacity uint32) arena { return arena{cap: capacity} }

// alloc returns the first index of a block of n entries, or false when no
// free space fits (limbo is not considered).
func (a *arena) alloc(n uint32) (uint32, bool) {
	if n == 0 || n > fanout {
		panic("bpflpm: block size out of range")
	}
	at, ok := a.take(n)
	if !ok {
		a.coalesce()
		at, ok = a.take(n)
	}
	if ok {
		a.live += uint64(n)
	}
	return at, ok
}

func (a *arena) take(n uint32) (uint32, bool) {
	if l := a.small[n]; len(l) > 0 {
		at := l[len(l)-1]
		a.small[n] = l[:len(l)-1]
		return at, true
	}
	if k := len(a.large); k > 0 {
		s := a.large[k-1]
		a.large = a.large[:k-1]
		a.put(span{s.at + n, s.n - n})
		return s.at, true
	}
	if a.cap-a.top >= n {
		at := a.top
		a.top += n
		return at, true
	}
	for m := n + 1; m <= fanout; m++ {
		if l := a.small[m]; len(l) > 0 {
			at := l[len(l)-1]
			a.small[m] = l[:len(l)-1]
			a.small[m-n] = append(a.small[m-n], at+n)
			return at, true
		}
	}
	return 0, false
}

// put adds free space.
func (a *arena) put(s span) {
	switch {
	case s.n == 0:
	case s.n <= fanout:
		a.small[s.n] = append(a.small[s.n], s.at)
	default:
		a.large = append(a.large, s)
	}
}

// coalesce merges adjacent free spans and gives the last one back to the
// never-used tail.
func (a *arena) coalesce() {
	var all []span
	for n, l := range a.small {
		for _, at := range l {
			all = append(all, span{at, uint32(n)})
		}
		a.small[n] = l[:0]
	}
	all = append(all, a.large...)
	a.large = a.large[:0]
	slices.SortFunc(all, func(x, y span) int { return int(int64(x.at) - int64(y.at)) })
	var merged []span
	for _, s := range all {
		if k := len(merged); k > 0 && merged[k-1].at+merged[k-1].n == s.at {
			merged[k-1].n += s.n
		} else {
			merged = append(merged, s)
		}
	}
	if k := len(merged); k > 0 && merged[k-1].at+merged[k-1].n == a.top {
		a.top = merged[k-1].at
		merged = merged[:k-1]
	}
	for _, s := range merged {
		a.put(s)
	}
}

// retire puts a block that readers may still see into limbo.
func (a *arena) retire(at, n uint32, epoch uint64) {
	if at == noBlock || n == 0 {
		return
	}
	a.limbo = append(a.limbo, retired{span{at, n}, epoch})
	a.live -= uint64(n)
	a.inLimbo += uint64(n)
}

// release frees a block no reader ever saw.
func (a *arena) release(at, n uint32) {
	if at == noBlock || n == 0 {
		return
	}
	a.put(span{at, n})
	a.live -= uint64(n)
}

// reclaim frees the blocks retired in epochs up to safe: a grace period
// began after they were retired and has ended.
func (a *arena) reclaim(safe uint64) {
	keep := a.limbo[:0]
	for _, r := range a.limbo {
		if r.epoch <= safe {
			a.put(r.span)
			a.inLimbo -= uint64(r.n)
		} else {
			keep = append(keep, r)
		}
	}
	a.limbo = keep
}
