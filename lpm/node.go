package lpm

import (
	"math/bits"
	"unsafe"
)

// The trie has a stride of 8 bits: the node at depth d branches on octet d
// of the address (bits 8d … 8d+7). A prefix of length L lives in the node at
// depth d with 8d < L ≤ 8d+8 (the /0 in the root), as an "in-node" prefix of
// relative length L-8d covering a contiguous range of that node's 256 octet
// values. Longer prefixes live in children.
//
// A node is immutable once it is reachable from a published snapshot; the
// writer copies the path it changes (see cow.go).
//
// Why popcount: a node has up to 256 children and up to 511 in-node
// prefixes, but real tables are sparse below the top levels. A 256-bit
// bitmap says which octets have a child, and the child's index in the
// compact array is the number of set bits before it (its rank). The
// popcounts of the preceding whole words are stored (base), so a rank is one
// masked POPCNT and one add, with no loop. A 256-entry pointer array (2 KiB
// per node) would be ten times larger and miss the cache more.
//
// The in-node prefixes are kept twice. pfxs, in prefix order, is the source
// of truth for Get, Delete and iteration, and is never read by a lookup.
// runs is a derived, leaf-pushed form for lookups (the "leafvec" idea of
// Poptrie): the best (longest) in-node prefix of every octet is a step
// function over 0…255. cov marks the octets that some in-node prefix
// covers, run marks where a step starts, and runs holds one entry per step:
// the best in-node match for a covered octet o is runs[rank(run, o+1)-1].
// That is one masked POPCNT, instead of testing up to 9 candidate prefix
// lengths (or ANDing a 512-bit ancestor mask, as ART does). A lookup
// carries the best match seen so far downwards and never backtracks.
//
// Memory layout, the point of the design: lookups are bound by cache and
// TLB misses, not by instructions. Children are stored by value in one
// array per parent, not as pointers: descending a level is one dependent
// load (parent header → child header in the parent's array), not two
// (→ pointer array → child). The header is exactly 128 bytes and node
// arrays are 128-byte aligned, so a node is one aligned pair of cache
// lines, which the L2 spatial prefetcher fetches together: a level costs
// one miss. A lookup decides where to descend and whether it has a match
// from the header alone; the one value it returns is loaded once, at the
// end. To fit in 128 bytes, kids and runs are bare pointers to their
// arrays (their lengths are the popcounts of kid and run) and the cold
// pfxs sit behind one pointer, in the last 8 bytes.
//
// Alignment: BulkLoad carves node arrays from page-aligned slabs (alloc.go).
// Arrays that Insert and Delete allocate on their own are aligned up to 4
// nodes (512 bytes, a size class that is a multiple of 128); larger ones
// start after Go's 8-byte malloc header in a size class that may not be a
// multiple of 128, and a node may then straddle a third line: a little
// slower, never wrong. BulkLoad(nil) realigns a table.
//
// The price of children by value is that a write copies its siblings along
// the path (≤ 256 × 128 bytes per level): a write on a full Internet table
// costs tens of microseconds, most of it garbage collection of the copies.
// Lookups matter more here, and batches go through BulkLoad.
//
// Path compression: a subtree holding exactly one prefix is a leaf node,
// stored in the parent's child slot; it keeps the whole prefix and is
// checked with one masked compare. In real tables many IPv6 /48s sit alone
// under their /32 or /40; each would otherwise cost a chain of nodes.
// The trie is canonical: a non-root subtree with one prefix is always a
// leaf and an empty one never exists, so a bulk build and any sequence of
// inserts and deletes reaching the same set give the same structure.
type node[V any] struct {
	// kid has bit o set when octet o has a child. For a leaf, kid[0] and
	// kid[1] hold the prefix's address bits instead (see leafKey).
	kid [4]uint64
	cov [4]uint64 // bit o: an in-node prefix covers octet o
	run [4]uint64 // bit o: a step of the in-node best match starts at o
	// base[w] and base[4+w] are the popcounts of kid and run words 0…w-1
	// (at most 192, so a byte suffices). base[0] is therefore always 0 in
	// an inner node; a leaf sets it to leafMark and keeps its prefix
	// length in base[1].
	base [8]uint8

	kids *node[V]  // first of popcount(kid) children, in octet order
	runs *run[V]   // first of popcount(run) steps; a leaf's value is runs[0]
	pfxs *[]pfx[V] // in-node prefixes in prefix order; nil if none
}

const leafMark = 1

// run is one step of the leaf-pushed in-node match function.
type run[V any] struct {
	val   V
	bits1 uint8 // the matched prefix's absolute length plus one
}

// pfx is an in-node prefix: pos packs its first octet and its relative
// length (0…8) so that ordering by pos is prefix order within the node.
type pfx[V any] struct {
	pos uint16
	val V
}

func pfxPos(start uint8, rlen int) uint16 { return uint16(start)<<4 | uint16(rlen) }
func (p pfx[V]) start() uint8             { return uint8(p.pos >> 4) }
func (p pfx[V]) rlen() int                { return int(p.pos & 15) }

// key is an address as 128 bits, most significant first; an IPv4 address
// occupies the top 32 bits of hi.
type key struct{ hi, lo uint64 }

// octet returns octet d of k.
func (k key) octet(d int) uint8 {
	if d < 8 {
		return uint8(k.hi >> (56 - 8*d))
	}
	return uint8(k.lo >> (120 - 8*d))
}

// masked keeps the first n bits of k.
func (k key) masked(n int) key {
	switch {
	case n <= 0:
		return key{}
	case n < 64:
		return key{k.hi &^ (^uint64(0) >> n), 0}
	case n < 128:
		return key{k.hi, k.lo &^ (^uint64(0) >> (n - 64))}
	}
	return k
}

// withOctet returns k with octet d set to o.
func (k key) withOctet(d int, o uint8) key {
	if d < 8 {
		s := 56 - 8*d
		k.hi = k.hi&^(0xff<<s) | uint64(o)<<s
	} else {
		s := 120 - 8*d
		k.lo = k.lo&^(0xff<<s) | uint64(o)<<s
	}
	return k
}

func testBit(b *[4]uint64, o uint8) bool { return b[o>>6]&(1<<(o&63)) != 0 }
func setBit(b *[4]uint64, o uint8)       { b[o>>6] |= 1 << (o & 63) }
func clearBit(b *[4]uint64, o uint8)     { b[o>>6] &^= 1 << (o & 63) }

func count(b *[4]uint64) int {
	return bits.OnesCount64(b[0]) + bits.OnesCount64(b[1]) + bits.OnesCount64(b[2]) + bits.OnesCount64(b[3])
}

// setBases recomputes base from kid and run (inner nodes only).
func (n *node[V]) setBases() {
	k, r := 0, 0
	for w := range 4 {
		n.base[w], n.base[4+w] = uint8(k), uint8(r)
		k += bits.OnesCount64(n.kid[w])
		r += bits.OnesCount64(n.run[w])
	}
}

func (n *node[V]) isLeaf() bool { return n.base[0] == leafMark }

// kidAt returns child i; the caller knows i < popcount(kid).
func (n *node[V]) kidAt(i int) *node[V] {
	return (*node[V])(unsafe.Add(unsafe.Pointer(n.kids), uintptr(i)*unsafe.Sizeof(*n)))
}

// runAt returns step i; the caller knows i < popcount(run).
func (n *node[V]) runAt(i int) *run[V] {
	return (*run[V])(unsafe.Add(unsafe.Pointer(n.runs), uintptr(i)*unsafe.Sizeof(run[V]{})))
}

// kidSlice returns the children array (nil for a leaf).
func (n *node[V]) kidSlice() []node[V] {
	if n.isLeaf() {
		return nil
	}
	return unsafe.Slice(n.kids, count(&n.kid))
}

// setKids points n at kids, whose length must be popcount(kid).
func (n *node[V]) setKids(kids []node[V]) {
	n.kids = nil
	if len(kids) > 0 {
		n.kids = &kids[0]
	}
	n.base[0], n.base[1], n.base[2], n.base[3] = 0, 0, 0, 0
	n.setBases()
}

// runSlice returns the steps array.
func (n *node[V]) runSlice() []run[V] {
	if n.isLeaf() {
		return unsafe.Slice(n.runs, 1)
	}
	return unsafe.Slice(n.runs, count(&n.run))
}

// pfxSlice returns the in-node prefixes.
func (n *node[V]) pfxSlice() []pfx[V] {
	if n.pfxs == nil {
		return nil
	}
	return *n.pfxs
}

// kidIndex returns the index in kids of octet o's child and whether there
// is one.
func (n *node[V]) kidIndex(o uint8) (int, bool) {
	w := o >> 6
	return int(n.base[w]) + bits.OnesCount64(n.kid[w]&(1<<(o&63)-1)), testBit(&n.kid, o)
}

// leafKey returns a leaf's prefix address bits and length.
func (n *node[V]) leafKey() (key, int) {
	return key{n.kid[0], n.kid[1]}, int(n.base[1])
}

func (n *node[V]) leafIs(k key, plen int) bool {
	return n.base[1] == uint8(plen) && n.kid[0] == k.hi && n.kid[1] == k.lo
}

// leafVal returns a leaf's value.
func (n *node[V]) leafVal() V { return n.runs.val }

// newLeaf makes the leaf node holding the single prefix k/plen, its value
// in the step allocated by ra (nil: the heap).
func newLeaf[V any](k key, plen int, val V, ra *slab[run[V]]) node[V] {
	r := &ra.alloc(1)[0]
	*r = run[V]{val: val, bits1: uint8(plen + 1)}
	return node[V]{
		kid:  [4]uint64{k.hi, k.lo},
		base: [8]uint8{leafMark, uint8(plen)},
		runs: r,
	}
}

// findPfx returns the index of the in-node prefix at pos in ps, or where it
// would be inserted, and whether it exists. Nodes hold few prefixes (at
// most 511): binary search on the packed position.
func findPfx[V any](ps []pfx[V], pos uint16) (int, bool) {
	lo, hi := 0, len(ps)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if ps[m].pos < pos {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(ps) && ps[lo].pos == pos
}

// setPfxs replaces n's in-node prefixes by ps and rebuilds cov, run and
// runs for a node at depth d. ra and ha allocate the steps and the pfxs
// header; nil means the heap.
//
// In prefix order, in-node prefixes form nested octet ranges (of two that
// overlap, the longer sorts later and lies inside the other), so one sweep
// with a stack of the open ranges finds every step in O(len(ps)): a step
// starts where a prefix starts, and where a nested one ends inside its
// parent (the parent resumes) or outside of any (a gap).
func (n *node[V]) setPfxs(ps []pfx[V], d int, ra *slab[run[V]], ha *slab[[]pfx[V]]) {
	n.cov, n.run, n.runs, n.pfxs = [4]uint64{}, [4]uint64{}, nil, nil
	defer n.setBases()
	if len(ps) == 0 {
		return
	}
	h := ha.alloc(1)
	h[0] = ps
	n.pfxs = &h[0]

	type step struct {
		at  int16 // first octet
		pfx int16 // index into ps, -1 for a gap
	}
	var steps [256]step // they start at distinct octets, in order
	ns := 0
	add := func(at, i int) {
		if ns > 0 && int(steps[ns-1].at) == at {
			ns-- // a longer prefix starting at the same octet replaces it
		}
		steps[ns] = step{int16(at), int16(i)}
		ns++
	}
	var open [9]int16 // the stack of open ranges (nesting depth ≤ 9)
	top := 0
	end := func(i int16) int { p := ps[i]; return int(p.start()) + 1<<(8-p.rlen()) }
	closeUpTo := func(s int) {
		for top > 0 && end(open[top-1]) <= s {
			e := end(open[top-1])
			top--
			if e < s || s == 256 {
				switch {
				case top > 0 && end(open[top-1]) > e:
					add(e, int(open[top-1]))
				case top == 0 && e < 256:
					add(e, -1)
				}
			}
		}
	}
	for i := range ps {
		s := int(ps[i].start())
		closeUpTo(s)
		add(s, i)
		open[top] = int16(i)
		top++
	}
	closeUpTo(256)

	nr := 0
	for j := range ns {
		if steps[j].pfx < 0 {
			continue
		}
		e := 256
		if j+1 < ns {
			e = int(steps[j+1].at)
		}
		setBit(&n.run, uint8(steps[j].at))
		setRange(&n.cov, int(steps[j].at), e)
		nr++
	}
	runs := ra.alloc(nr)
	nr = 0
	for j := range ns {
		if i := steps[j].pfx; i >= 0 {
			p := &ps[i]
			runs[nr] = run[V]{val: p.val, bits1: uint8(8*d + p.rlen() + 1)}
			nr++
		}
	}
	n.runs = &runs[0]
}

// setRange sets bits lo…hi-1 of b.
func setRange(b *[4]uint64, lo, hi int) {
	for lo < hi {
		w := lo >> 6
		n := min(hi, (w+1)<<6) - lo // bits in this word
		m := ^uint64(0)
		if n < 64 {
			m = (1<<n - 1) << (lo & 63)
		}
		b[w&3] |= m
		lo += n
	}
}
