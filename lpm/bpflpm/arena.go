package bpflpm

// arena hands out blocks of the words map's free space: 2^order units of
// 8 bytes, aligned to their size relative to the arena's start (a buddy
// allocator). Every block the structure uses has a power-of-two size - a
// direct node of stride k is 2^k words, a list is rounded up to 4, 8 or
// 16 units - so a block wastes at most half of itself (lists only), and a
// freed block merges with its free buddy back into larger ones: churn
// never fragments the space into pieces too small for a node.
//
// A block that lookups may still be reading is retired, not freed: it
// waits in limbo until a grace period has passed (see Table.sync), and
// only then is it reused. The arena does not know about grace periods; it
// reports what limbo holds and lets the table decide.
type arena struct {
	size uint32 // units
	// free[o] is a stack of the offsets of free blocks of order o; an
	// offset whose freeAt entry says otherwise is stale (its block was
	// merged or taken) and skipped.
	free   [maxOrder + 1][]uint32
	freeAt map[uint32]int8 // offset → order of the free block there
	limbo  []retired
	// live counts units in blocks that are allocated and not retired;
	// inLimbo counts units waiting for a grace period.
	live, inLimbo uint64
}

// maxOrder is the largest block: a direct node of stride 16 (2^16 words,
// 256 KiB). The directory is not allocated from the arena.
const maxOrder = maxChildStride - 1

// tight reports whether more than half the arena is used or in limbo:
// then space is worth more than avoiding a rewrite (Table.shrink).
func (a *arena) tight() bool {
	return 2*(a.live+a.inLimbo) > uint64(a.size)
}

// retired is a block in limbo and the epoch it was retired in.
type retired struct {
	at    uint32
	order int8
	epoch uint64
}

const noBlock = ^uint32(0)

// newArena covers units [0, size) with the largest aligned blocks that fit.
func newArena(size uint32) arena {
	a := arena{size: size, freeAt: map[uint32]int8{}}
	for at := uint32(0); at < size; {
		o := int8(maxOrder)
		for o > 0 && (at&(1<<o-1) != 0 || at+1<<o > size) {
			o--
		}
		a.push(at, o)
		at += 1 << o
	}
	return a
}

func (a *arena) push(at uint32, o int8) {
	a.freeAt[at] = o
	a.free[o] = append(a.free[o], at)
}

// pop takes a free block of order o, if there is one.
func (a *arena) pop(o int8) (uint32, bool) {
	l := a.free[o]
	for len(l) > 0 {
		at := l[len(l)-1]
		l = l[:len(l)-1]
		if oo, ok := a.freeAt[at]; ok && oo == o {
			delete(a.freeAt, at)
			a.free[o] = l
			return at, true
		}
	}
	a.free[o] = l
	return 0, false
}

// alloc returns a block of 2^o units, or false when no free block is
// large enough (limbo is not considered).
func (a *arena) alloc(o int8) (uint32, bool) {
	if o < 0 || o > maxOrder {
		panic("bpflpm: block order out of range")
	}
	for j := o; j <= maxOrder; j++ {
		at, ok := a.pop(j)
		if !ok {
			continue
		}
		for j > o { // split, keeping the lower half
			j--
			a.push(at+1<<j, j)
		}
		a.live += 1 << o
		return at, true
	}
	return 0, false
}

// put frees a block, merging it with its buddy while that is free too.
func (a *arena) put(at uint32, o int8) {
	for o < maxOrder {
		b := at ^ 1<<o
		if bo, ok := a.freeAt[b]; !ok || bo != o {
			break
		}
		delete(a.freeAt, b)
		at &^= 1 << o
		o++
	}
	a.push(at, o)
}

// release frees a block no reader ever saw.
func (a *arena) release(at uint32, o int8) {
	if at == noBlock {
		return
	}
	a.put(at, o)
	a.live -= 1 << o
}

// retire puts a block that readers may still see into limbo.
func (a *arena) retire(at uint32, o int8, epoch uint64) {
	if at == noBlock {
		return
	}
	a.limbo = append(a.limbo, retired{at, o, epoch})
	a.live -= 1 << o
	a.inLimbo += 1 << o
}

// reclaim frees the blocks retired in epochs up to safe: a grace period
// began after they were retired and has ended.
func (a *arena) reclaim(safe uint64) {
	keep := a.limbo[:0]
	for _, r := range a.limbo {
		if r.epoch <= safe {
			a.put(r.at, r.order)
			a.inLimbo -= 1 << r.order
		} else {
			keep = append(keep, r)
		}
	}
	a.limbo = keep
}

// orderFor is the order of the smallest block of at least n units.
func orderFor(n uint32) int8 {
	o := int8(0)
	for uint32(1)<<o < n {
		o++
	}
	return o
}
