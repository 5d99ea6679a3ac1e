package bpflpm

import (
	"encoding/binary"
	"math/bits"
	"slices"
)

// The writer's copy of the structure: one tnode per node in the words
// map, with what a write needs to find and change its entries and the
// map does not hold (which prefix owns each entry, the values of prefixes
// that more specific ones hide).
//
// Writes change the maps in place wherever one aligned 32-bit store does
// it: a value changing, or a prefix appearing or disappearing, rewrites
// the entries it owns (leaf pushing: the entries of its range that no
// longer prefix owns), and each of them is read by a different lookup, so
// every lookup sees the prefix before or after the change. Only new
// structure - a list taking a prefix, a list growing into a direct node,
// a new subtree - is written into a free block first and published with
// one store into the entry that points at it; what it replaced is retired
// and reused after a grace period.

// maxChildStride bounds the stride of direct nodes below the directory:
// 2^16 entries, 256 KiB.
const maxChildStride = 16

// rho is how dense a direct node must be: the builder gives a node 2^k
// entries only if its subtree holds at least 2^k/rho prefixes. Larger
// means fewer levels and more memory; measured side by side on the real
// tables, the smaller footprint of 1 wins: lookups there are bound by
// cache and TLB misses, not by the number of levels (IPv6, `wolf bench
// lpm --ipv6`: 66 ns at 1, 5.1 node reads per lookup; 67-73 at 8, 4.0
// reads; 76 at 16, 3.7 reads).
const rho = 1

type tnode struct {
	parent *tnode // nil for the root
	pe     uint32 // the entry of the parent that points here
	base   key    // the address bits above this node, masked to depth
	depth  uint8
	k      uint8 // stride of a direct node; 0 for a list
	at     uint32
	order  int8   // the block's order; -1 for the directory
	def    uint32 // the value of the node's range where nothing below matches
	n      int    // live prefixes in the subtree

	// A direct node: own[e] is the length below depth of the longest of
	// the node's own prefixes (length depth+1 … depth+k) covering entry
	// e, 0 if none (the entry holds def or a child's pointer); has holds
	// a bit per own prefix, at (1<<rl)|bits; kids are the children by
	// entry.
	own  []uint8
	has  []uint64
	kids kidTab
	// vals holds the values of own prefixes shorter than the stride, by
	// (1<<rl)|bits; a prefix of the full stride owns its one entry, which
	// holds its value (or the child there holds it as its default).
	vals map[uint32]uint32

	// A list: its entries, as in the block (longest first).
	ents []lent

	// A packed direct node (stride up to 6, or wideStride in IPv6)
	// keeps its entries here: the block holds them run-length
	// compressed (bm marks where a run of equal entries starts, then one
	// word per run). A change that keeps the runs is stored in place;
	// one that moves them rewrites the block (flushPacked); a wide one
	// split into more than wideMaxRuns runs becomes a direct node.
	packed bool
	ent    []uint32
	bm     runBits
	dirty  bool
	// dlo..dhi-1 are the entries changed since the last flush.
	dlo, dhi uint16
}

// code is what a pointer to n carries in bits 26..30: the stride of a
// direct node, 0 for a list, 24+stride for a packed node.
func (n *tnode) code() uint8 {
	if n.wide() {
		return wideCode
	}
	if n.packed {
		return packedCode + n.k
	}
	return n.k
}

// wide says whether n is a packed node of wideStride bits.
func (n *tnode) wide() bool { return n.packed && n.k > maxPackedStride }

type lent struct {
	key  uint64 // remaining bits, top-aligned, masked to rl
	rl   uint8
	val  uint32
	gone bool // deleted: the block's value says skip
}

func (n *tnode) isList() bool { return n.k == 0 }

// units is the size of a list block of c entries.
func listUnits(c int) uint32 { return uint32(1 + 2*c) }

func (n *tnode) word(e uint32) uint64 { return uint64(n.at)*unitWords + uint64(e) }

func (n *tnode) testHas(rl uint8, b uint32) bool {
	i := uint64(1)<<rl | uint64(b)
	return n.has[i>>6]&(1<<(i&63)) != 0
}

func (n *tnode) setHas(rl uint8, b uint32, on bool) {
	i := uint64(1)<<rl | uint64(b)
	if on {
		n.has[i>>6] |= 1 << (i & 63)
	} else {
		n.has[i>>6] &^= 1 << (i & 63)
	}
}

// rest returns the bits of k from offset d on, top-aligned in 64 bits.
func rest(k key, d uint8) uint64 { return k.shl(uint(d)).hi }

// ownValue is the value of direct node n's own prefix (rl, b).
func (t *Table) ownValue(n *tnode, rl uint8, b uint32) uint32 {
	if rl < n.k {
		return n.vals[1<<rl|b]
	}
	if c := n.kids.get(b); c != nil {
		return c.def
	}
	return t.entryWord(n, b)
}

// entryWord is what entry e of direct node n holds.
func (t *Table) entryWord(n *tnode, e uint32) uint32 {
	if n.packed {
		return n.ent[e]
	}
	return t.im.load(n.word(e))
}

// writeEntry sets entry e of direct node n: one store in a plain node;
// in a packed one, the entry, to be published by flushPacked.
func (t *Table) writeEntry(n *tnode, e, v uint32) {
	if !n.packed {
		t.im.store(n.word(e), v)
		return
	}
	if n.ent[e] != v {
		n.ent[e] = v
		if !n.dirty {
			n.dirty, n.dlo, n.dhi = true, uint16(e), uint16(e+1)
			t.dirty = append(t.dirty, n)
		}
		n.dlo, n.dhi = min(n.dlo, uint16(e)), max(n.dhi, uint16(e+1))
	}
}

// entryValue is what entry e of a direct node holds for lookups when no
// child hangs there: its owner's value, or the node's default.
func (t *Table) entryValue(n *tnode, e uint32) uint32 {
	rl := n.own[e]
	if rl == 0 {
		return n.def
	}
	return t.ownValue(n, rl, e>>(n.k-rl))
}

// withBits returns k with the rl bits at offset d set to b (1 <= rl <=
// 64, d+rl <= 128; those bits of k must be zero).
func (k key) withBits(d, rl uint8, b uint64) key {
	sh := 128 - uint(d) - uint(rl)
	var add key
	switch {
	case sh >= 64:
		add.hi = b << (sh - 64)
	case sh == 0:
		add.lo = b
	default:
		add.lo, add.hi = b<<sh, b>>(64-sh)
	}
	return key{hi: k.hi | add.hi, lo: k.lo | add.lo}
}

// setEntry makes entry e of direct node n hold v for lookups: the entry
// itself, or the default of the child that hangs there.
func (t *Table) setEntry(n *tnode, e uint32, v uint32) {
	// The entry itself says whether a child hangs there: no map lookup
	// for the common case of a value.
	if t.entryWord(n, e)&ptrFlag == 0 {
		t.writeEntry(n, e, v)
		return
	}
	t.pushDef(n.kids.get(e), v)
}

// pushDef changes the value n's range inherits from above.
func (t *Table) pushDef(n *tnode, v uint32) {
	if n.def == v {
		return
	}
	n.def = v
	if n.isList() {
		t.im.store(n.word(0), v)
		return
	}
	for e, rl := range n.own {
		if rl == 0 {
			t.setEntry(n, uint32(e), v)
		}
	}
}

// rootEntry is what word 0 holds.
func (t *Table) rootEntry() uint32 {
	if t.root == nil {
		return t.zeroVal()
	}
	return ptr(t.root.code(), t.root.at)
}

// zeroVal is the value of /0, or Miss.
func (t *Table) zeroVal() uint32 {
	if t.hasZero {
		return t.zero
	}
	return Miss
}

// publish makes the entry that points at n (the root word, or n's entry
// in its parent) point at it.
func (t *Table) publish(n *tnode) {
	if n.parent == nil {
		t.im.store(0, ptr(n.code(), n.at))
		return
	}
	t.writeEntry(n.parent, n.pe, ptr(n.code(), n.at))
}

// replace puts n where old was, in the Go trie and then in the maps, and
// retires old's block (not its children: n took them over).
func (t *Table) replace(old, n *tnode) {
	n.parent, n.pe = old.parent, old.pe
	if n.parent == nil {
		t.root = n
	} else {
		n.parent.kids.set(n.pe, n)
	}
	t.publish(n)
	t.retireNode(old)
}

func (t *Table) retireNode(n *tnode) {
	if n.order >= 0 {
		t.retire(n.at, n.order)
		n.order = -3 // gone: a dirty entry must not resurrect it
	} else {
		t.dirRetired, t.dirEpoch = true, t.epoch
	}
}

// retireTree retires n and everything below it.
func (t *Table) retireTree(n *tnode) {
	for _, c := range n.kids.all() {
		t.retireTree(c)
	}
	t.retireNode(n)
}

// insert adds k/l with value v, or changes its value. k is masked.
func (t *Table) insert(k key, l uint8, v uint32) error {
	if l == 0 {
		if !t.hasZero {
			t.count++
		}
		t.hasZero, t.zero = true, v
		t.setZero(v)
		return nil
	}
	if t.root == nil {
		n, err := t.newRoot([]bp{{k, l, v}})
		if err != nil {
			return err
		}
		t.root = n
		t.publish(n)
		t.count++
		return nil
	}
	n := t.root
	for {
		if n.isList() {
			return t.addToList(n, k, l, v)
		}
		rl := l - n.depth
		if rl <= n.k {
			b := k.bits(uint(n.depth), uint(rl))
			lo := b << (n.k - rl)
			if n.testHas(rl, b) { // a new value
				if rl < n.k {
					n.vals[1<<rl|b] = v
				}
				for e := lo; e < lo+1<<(n.k-rl); e++ {
					if n.own[e] == rl {
						t.setEntry(n, e, v)
					}
				}
				return nil
			}
			n.setHas(rl, b, true)
			if rl < n.k {
				if n.vals == nil {
					n.vals = map[uint32]uint32{}
				}
				n.vals[1<<rl|b] = v
			}
			for e := lo; e < lo+1<<(n.k-rl); e++ {
				if n.own[e] <= rl {
					n.own[e] = rl
					t.setEntry(n, e, v)
				}
			}
			t.grow(n, 1)
			return nil
		}
		e := k.bits(uint(n.depth), uint(n.k))
		c := n.kids.get(e)
		if c == nil {
			c, err := t.build([]bp{{k, l, v}}, n.base.withBits(n.depth, n.k, uint64(e)), n.depth+n.k, t.entryValue(n, e))
			if err != nil {
				return err
			}
			c.parent, c.pe = n, e
			n.kids.set(e, c)
			t.publish(c)
			t.grow(n, 1)
			return nil
		}
		n = c
	}
}

// setZero changes the value of /0: the root's default.
func (t *Table) setZero(v uint32) {
	if t.root == nil {
		t.im.store(0, v)
		return
	}
	t.pushDef(t.root, v)
}

// grow adds d to the prefix counts of n, its ancestors and the table.
func (t *Table) grow(n *tnode, d int) {
	t.count += d
	for ; n != nil; n = n.parent {
		n.n += d
	}
}

// addToList inserts a new prefix into list n: a deleted entry of the same
// prefix comes back in place; otherwise the list is rewritten into a new
// block, as a list if it still fits or as a direct node.
func (t *Table) addToList(n *tnode, k key, l uint8, v uint32) error {
	rl, r := l-n.depth, rest(k, n.depth)
	for i := range n.ents {
		if en := &n.ents[i]; en.rl == rl && en.key == r {
			if en.gone {
				t.grow(n, 1)
			}
			en.val, en.gone = v, false
			t.im.store(n.word(uint32(2+entWords*i+3)), v)
			return nil
		}
	}
	ps := make([]bp, 0, len(n.ents)+1)
	for _, en := range n.ents {
		if !en.gone {
			ps = append(ps, bp{n.base.withRest(n.depth, en.key, en.rl), n.depth + en.rl, en.val})
		}
	}
	ps = append(ps, bp{k, l, v})
	sortBP(ps)
	var nn *tnode
	var err error
	if n.parent == nil {
		nn, err = t.newRoot(ps)
	} else {
		nn, err = t.build(ps, n.base, n.depth, n.def)
	}
	if err != nil {
		return err
	}
	t.replace(n, nn)
	t.grow(nn.parent, 1)
	return nil
}

// withRest returns base with the rl bits of r (top-aligned) set at
// offset d.
func (k key) withRest(d uint8, r uint64, rl uint8) key {
	return k.withBits(d, rl, r>>(64-uint(rl)))
}

// remove deletes k/l and reports whether it was in the table.
func (t *Table) remove(k key, l uint8) bool {
	if l == 0 {
		if !t.hasZero {
			return false
		}
		t.hasZero = false
		t.count--
		t.setZero(Miss)
		return true
	}
	n := t.root
	for n != nil {
		if n.isList() {
			rl, r := l-n.depth, rest(k, n.depth)
			for i := range n.ents {
				if en := &n.ents[i]; en.rl == rl && en.key == r && !en.gone {
					en.gone = true
					t.im.store(n.word(uint32(2+entWords*i+3)), skip)
					t.shrink(n)
					return true
				}
			}
			return false
		}
		rl := l - n.depth
		if rl <= n.k {
			b := k.bits(uint(n.depth), uint(rl))
			if !n.testHas(rl, b) {
				return false
			}
			n.setHas(rl, b, false)
			if rl < n.k {
				delete(n.vals, 1<<rl|b)
			}
			// The entries it owned go to the longest shorter own prefix
			// that covers them, or to the default.
			cr, cv := uint8(0), n.def
			for r := rl - 1; r >= 1; r-- {
				if n.testHas(r, b>>(rl-r)) {
					cr, cv = r, n.vals[1<<r|b>>(rl-r)]
					break
				}
			}
			lo := b << (n.k - rl)
			for e := lo; e < lo+1<<(n.k-rl); e++ {
				if n.own[e] == rl {
					n.own[e] = cr
					t.setEntry(n, e, cv)
				}
			}
			t.shrink(n)
			return true
		}
		n = n.kids.get(k.bits(uint(n.depth), uint(n.k)))
	}
	return false
}

// shrink takes one prefix off the counts from n up, and removes the
// nodes left empty: the entry that pointed at one gets its default back.
// The root stays (a list with every entry deleted, or the directory).
//
// A node left empty stays where it is, holding its default, while the
// arena has room to spare: a prefix added back there is then a store in
// place, not a new block, and a run of deletes and re-adds retires
// nothing and never waits for a grace period. A Load drops those of the
// directory entries it rebuilds, Sync all of them.
func (t *Table) shrink(n *tnode) {
	t.grow(n, -1)
	if n.n == 0 && !t.arena.tight() {
		return
	}
	for n.parent != nil && n.n == 0 {
		p := n.parent
		p.kids.del(n.pe)
		t.writeEntry(p, n.pe, n.def)
		t.retireTree(n)
		n = p
	}
}

// bp is a prefix to build: masked key, length, value.
type bp struct {
	k key
	l uint8
	v uint32
}

// dropEmpty removes the nodes shrink left empty below n: the entry that
// pointed at each gets its default back, the node is retired.
func (t *Table) dropEmpty(n *tnode) {
	for e, c := range n.kids.all() {
		if c.n == 0 {
			n.kids.del(e)
			t.writeEntry(n, e, c.def)
			t.retireTree(c)
			continue
		}
		t.dropEmpty(c)
	}
}

// sortBP orders prefixes by address, then length: a prefix comes before
// the prefixes it contains.
func sortBP(ps []bp) { slices.SortFunc(ps, cmpBP) }

// cmpBP orders by address, then length (values are not compared).
func cmpBP(a, b bp) int {
	switch {
	case a.k.hi != b.k.hi:
		return cmpU64(a.k.hi, b.k.hi)
	case a.k.lo != b.k.lo:
		return cmpU64(a.k.lo, b.k.lo)
	}
	return int(a.l) - int(b.l)
}

func cmpU64(a, b uint64) int {
	if a < b {
		return -1
	}
	return 1
}

// fitsList says whether prefixes longer than depth can all be list
// entries of a node at depth: at most listK, each within 64 bits.
func fitsList(ps []bp, depth uint8) bool {
	if len(ps) > listK {
		return false
	}
	for _, p := range ps {
		if p.l-depth > 64 {
			return false
		}
	}
	return true
}

// within reports whether every prefix of ps is at most l long.
func within(ps []bp, l uint8) bool {
	for _, p := range ps {
		if p.l > l {
			return false
		}
	}
	return true
}

// stride chooses a direct node's stride at depth for a subtree of m
// prefixes: down to the next multiple of 4 bits (at least 4 bits), or
// further while the node stays dense (2^k <= rho*m), up to 16 bits.
func (t *Table) stride(depth uint8, m int) uint8 {
	rem := t.width - uint(depth)
	k := uint(4 - depth%4)
	if k < 4 {
		k += 4
	}
	if k >= rem {
		return uint8(rem)
	}
	// A block at most an eighth of the arena: a small table's arena does
	// not go to one node.
	for kk := k + 4; kk <= maxChildStride && kk <= rem && uint64(1)<<(kk-1) <= uint64(t.arena.size)/8; kk += 4 {
		if uint64(1)<<kk <= uint64(rho)*uint64(m) {
			k = kk
		}
	}
	return uint8(k)
}

// newRoot builds the root for ps: a list while they fit one, else the
// directory.
func (t *Table) newRoot(ps []bp) (*tnode, error) {
	if fitsList(ps, 0) {
		return t.build(ps, key{}, 0, t.zeroVal())
	}
	return t.buildDir(ps, nil, t.zeroVal())
}

// build writes a new subtree for ps (sorted, all longer than depth and
// below base) into free blocks and returns its root, not yet published.
// def is the value of the range where none of ps matches. On ErrFull
// nothing is left allocated.
func (t *Table) build(ps []bp, base key, depth uint8, def uint32) (*tnode, error) {
	k := t.stride(depth, len(ps))
	// A list, unless one packed node resolves every prefix: that is
	// smaller and takes no scan.
	if fitsList(ps, depth) && (k > maxPackedStride || !within(ps, depth+k)) {
		return t.buildList(ps, base, depth, def)
	}
	if t.width == 128 && k <= wideStride && uint(depth)+wideStride <= t.width && !within(ps, depth+k) {
		// IPv6: 8 bits, packed, where a direct node of 4 or 8 would
		// do. The real table's chains of 4-bit nodes between /28 and
		// /48 (its /36s, /40s, /44s and /48s) take half the levels
		// this way: 4.27 node reads per lookup instead of 5.10, in
		// less memory (20.4 bytes per prefix instead of 23.8). Not
		// for IPv4, whose packed 6-bit nodes end at /24.
		n, err := t.buildWide(ps, base, depth, def)
		if err != nil {
			return nil, err
		}
		if n != nil {
			return n, nil
		}
	}
	if k <= maxPackedStride {
		// Entries first, then the block: packed if runs of equal
		// entries make it at most half the size.
		n, ent, err := t.buildEntries(ps, base, depth, k, def)
		if err != nil {
			return nil, err
		}
		// Not below 5 bits: 16 entries are one cache line already,
		// and a packed node's deletes rewrite it when its runs move.
		if bm := runsOf(ent); k > 4 && 2*(2+bm.count()) <= 1<<k {
			n.packed, n.ent = true, ent
		}
		if err := t.writeNode(n, ent); err != nil {
			t.releaseTree(n)
			return nil, err
		}
		return n, nil
	}
	at, err := t.alloc(int8(k) - 1)
	if err != nil {
		return nil, err
	}
	n := t.newDirect(base, depth, k, def, at, int8(k)-1)
	w := n.word(0)
	err = t.fill(n, ps, func(lo, hi, v uint32) { t.im.putRun(w+uint64(lo), w+uint64(hi), v) })
	if err != nil {
		t.releaseTree(n)
		return nil, err
	}
	return n, nil
}

// buildEntries makes a k-bit node for ps at depth, with no block yet,
// and its 1<<k entries filled in, for the caller to lay out.
func (t *Table) buildEntries(ps []bp, base key, depth, k uint8, def uint32) (*tnode, []uint32, error) {
	n := t.newDirect(base, depth, k, def, noBlock, -2)
	ent := make([]uint32, 1<<k)
	if err := t.fill(n, ps, func(lo, hi, v uint32) {
		for e := lo; e < hi; e++ {
			ent[e] = v
		}
	}); err != nil {
		t.releaseTree(n)
		return nil, nil, err
	}
	return n, ent, nil
}

// buildWide builds a wide packed node for ps at depth: wideStride bits,
// stored run-length compressed. It returns nil, having released what it
// built, when the runs would not make it at most half a direct node.
func (t *Table) buildWide(ps []bp, base key, depth uint8, def uint32) (*tnode, error) {
	n, ent, err := t.buildEntries(ps, base, depth, wideStride, def)
	if err != nil {
		return nil, err
	}
	if bm := runsOf(ent); bm.count() > wideMaxRuns {
		t.releaseTree(n)
		return nil, nil
	}
	n.packed, n.ent = true, ent
	if err := t.writeNode(n, ent); err != nil {
		t.releaseTree(n)
		return nil, err
	}
	return n, nil
}

// maxPackedStride is the largest packed node whose run bitmap is one
// 64-bit word.
const maxPackedStride = 6

// packedCode marks a packed node's stride in a pointer.
const packedCode = 24

// A wide packed node (IPv6 only) resolves wideStride bits: its run
// bitmap is eight 32-bit words, then eight bytes (two words), byte w
// counting the runs that start in the bitmap words before w, then one
// word per run; the entry j is run count[j/32] + popcount(word j/32, bits
// 0..j%32) - 1. 32-bit words, not 64: BPF has no popcount instruction,
// and the SWAR one of a 32-bit word needs no 64-bit constants (ld_imm64,
// two instruction slots each, reloaded every level); a count is one byte
// load. It holds at most wideMaxRuns runs (half a direct node), so that
// every count fits a byte. Its pointer's stride code is wideCode.
const (
	wideStride  = 8
	wideCode    = 31
	wideHdr     = 10
	wideMaxRuns = 128
)

// runBits marks where runs of equal entries start, entry e at bit e%64
// of word e/64.
type runBits [4]uint64

func (b runBits) count() int {
	return bits.OnesCount64(b[0]) + bits.OnesCount64(b[1]) + bits.OnesCount64(b[2]) + bits.OnesCount64(b[3])
}

func (b runBits) has(e int) bool { return b[e>>6]>>(e&63)&1 != 0 }

// rank is the index of the run entry e is in: the run starts marked at
// or before e, less one.
func (b runBits) rank(e int) int {
	c := bits.OnesCount64(b[e>>6] & (2<<(e&63) - 1))
	for _, w := range b[:e>>6] {
		c += bits.OnesCount64(w)
	}
	return c - 1
}

// runsHold says whether packed node n's block can take the change of
// entries lo..hi-1 in place: every entry still equals the one before it
// unless the block marks a run start there. Runs outside the change
// kept theirs.
func (n *tnode) runsHold(lo, hi int) bool {
	for e := max(lo, 1); e <= hi && e < len(n.ent); e++ {
		if n.ent[e] != n.ent[e-1] && !n.bm.has(e) {
			return false
		}
	}
	return true
}

// runsOf returns the bitmap of where runs of equal entries start.
func runsOf(ent []uint32) runBits {
	var bm runBits
	for e, v := range ent {
		if e == 0 || v != ent[e-1] {
			bm[e>>6] |= 1 << (e & 63)
		}
	}
	return bm
}

// packedHdr is the number of words before a packed node's runs.
func (n *tnode) packedHdr() uint64 {
	if n.wide() {
		return wideHdr
	}
	return 2
}

// writeNode allocates and writes the block of a direct node of stride at
// most maxPackedStride, or a wide one, from its entries, packed or not.
// Nothing points at it yet.
func (t *Table) writeNode(n *tnode, ent []uint32) error {
	var bm runBits
	if n.packed {
		bm = runsOf(ent)
	}
	if n.wide() && bm.count() > wideMaxRuns {
		// Changes split it into more runs than a wide node holds: a
		// direct node from now on (the entries' pointer says which).
		o := int8(n.k) - 1
		at, err := t.alloc(o)
		if err != nil {
			return err
		}
		n.at, n.order, n.packed, n.ent = at, o, false, nil
		w := n.word(0)
		for e, v := range ent {
			t.im.put(w+uint64(e), v)
		}
		return nil
	}
	if !n.packed {
		o := int8(n.k) - 1
		if n.k == 0 {
			o = 0
		}
		at, err := t.alloc(max(o, 0))
		if err != nil {
			return err
		}
		n.at, n.order = at, max(o, 0)
		w := n.word(0)
		for e, v := range ent {
			t.im.put(w+uint64(e), v)
		}
		return nil
	}
	hdr := n.packedHdr()
	words := uint32(hdr) + uint32(bm.count())
	o := orderFor((words + 1) / 2)
	at, err := t.alloc(o)
	if err != nil {
		return err
	}
	n.at, n.order, n.bm = at, o, bm
	w := n.word(0)
	if n.wide() {
		var counts [8]byte
		c := 0
		for x := range 8 {
			m := uint32(bm[x/2] >> (32 * (x % 2)))
			counts[x] = byte(c)
			c += bits.OnesCount32(m)
			t.im.put(w+uint64(x), m)
		}
		t.im.put64(w+8, binary.NativeEndian.Uint64(counts[:]))
	} else {
		t.im.put64(w, bm[0])
	}
	r := hdr
	for e, v := range ent {
		if bm.has(e) {
			t.im.put(w+r, v)
			r++
		}
	}
	return nil
}

// flushPacked publishes the entries of the packed nodes changed by the
// last change: in place where every run of the block still holds equal
// entries (each run's word is read by the lookups of its range only) -
// a change that only merges runs, as a delete does, leaves the block's
// boundaries where they were: a run need not be the longest - else as a
// new block whose pointer replaces the old one in the parent (deepest
// nodes first: that pointer is itself an entry). On ErrFull the nodes stay dirty for the next
// change or Sync to publish.
func (t *Table) flushPacked() error {
	for len(t.dirty) > 0 {
		// The deepest first.
		i := 0
		for j, n := range t.dirty {
			if n.depth > t.dirty[i].depth {
				i = j
			}
		}
		n := t.dirty[i]
		if !n.packed || n.order == -3 { // gone since
			t.dirty = slices.Delete(t.dirty, i, i+1)
			continue
		}
		if lo, hi := int(n.dlo), int(n.dhi); n.runsHold(lo, hi) {
			// The run of lo, then those starting up to hi.
			w := n.word(0) + n.packedHdr()
			r := uint64(n.bm.rank(lo))
			t.im.store(w+r, n.ent[lo])
			for e := lo + 1; e < hi; e++ {
				if n.bm.has(e) {
					r++
					t.im.store(w+r, n.ent[e])
				}
			}
		} else {
			oldAt, oldOrder := n.at, n.order
			if err := t.writeNode(n, n.ent); err != nil {
				n.at, n.order = oldAt, oldOrder
				return err
			}
			t.publish(n)
			t.retire(oldAt, oldOrder)
		}
		n.dirty = false
		t.dirty = slices.Delete(t.dirty, i, i+1)
	}
	return nil
}

func (t *Table) newDirect(base key, depth, k uint8, def, at uint32, order int8) *tnode {
	return &tnode{
		base: base, depth: depth, k: k, at: at, order: order, def: def,
		own:  make([]uint8, 1<<k),
		has:  make([]uint64, max(1, (2<<k)/64)),
		kids: kidTab{size: 1 << k},
	}
}

// buildList writes a list of ps (at most listK, sorted).
func (t *Table) buildList(ps []bp, base key, depth uint8, def uint32) (*tnode, error) {
	o := orderFor(listUnits(len(ps)))
	at, err := t.alloc(o)
	if err != nil {
		return nil, err
	}
	n := &tnode{base: base, depth: depth, at: at, order: o, def: def, n: len(ps)}
	n.ents = make([]lent, len(ps))
	for i, p := range ps {
		n.ents[i] = lent{key: rest(p.k, depth), rl: p.l - depth, val: p.v}
	}
	// Longest first: the first entry that matches is the longest match.
	slices.SortStableFunc(n.ents, func(a, b lent) int { return int(b.rl) - int(a.rl) })
	w := n.word(0)
	t.im.put(w, def)
	t.im.put(w+1, uint32(len(ps)))
	for i, en := range n.ents {
		b := w + 2 + uint64(entWords*i)
		t.im.put64(b, en.key)
		t.im.put(b+2, uint32(en.rl))
		t.im.put(b+3, en.val)
	}
	return n, nil
}

// fill computes direct node n's entries from ps (sorted, all longer than
// n.depth and below n.base): its own prefixes and, for longer ones, new
// children. It calls put once per run of entries [lo, hi) with what they
// must hold, in entry order, each child already written when its pointer
// is put.
func (t *Table) fill(n *tnode, ps []bp, put func(lo, hi, v uint32)) error {
	return t.fillReuse(n, ps, put, nil)
}

// fillReuse is fill that first offers each child's prefixes to reuse,
// which may return an existing subtree holding exactly them.
func (t *Table) fillReuse(n *tnode, ps []bp, put func(lo, hi, v uint32), reuse func(e uint32, ps []bp, def uint32) *tnode) error {
	type open struct {
		end uint32
		rl  uint8
		v   uint32
	}
	var stack []open
	end := n.depth + n.k
	size := uint32(1) << n.k
	i := 0
	for e := uint32(0); e < size; {
		for len(stack) > 0 && stack[len(stack)-1].end <= e {
			stack = stack[:len(stack)-1]
		}
		// Own prefixes starting at e, shortest first (the sort order).
		for i < len(ps) && ps[i].l <= end && ps[i].k.bits(uint(n.depth), uint(n.k)) == e {
			rl := ps[i].l - n.depth
			b := ps[i].k.bits(uint(n.depth), uint(rl))
			n.setHas(rl, b, true)
			if rl < n.k {
				if n.vals == nil {
					n.vals = map[uint32]uint32{}
				}
				n.vals[1<<rl|b] = ps[i].v
			}
			stack = append(stack, open{e + 1<<(n.k-rl), rl, ps[i].v})
			n.n++
			i++
		}
		v, rl := n.def, uint8(0)
		if len(stack) > 0 {
			top := stack[len(stack)-1]
			v, rl = top.v, top.rl
		}
		// Longer prefixes under e: a child.
		j := i
		for j < len(ps) && ps[j].k.bits(uint(n.depth), uint(n.k)) == e {
			j++
		}
		if j > i {
			var c *tnode
			if reuse != nil {
				c = reuse(e, ps[i:j], v)
			}
			if c == nil {
				var err error
				if c, err = t.build(ps[i:j], n.base.withBits(n.depth, n.k, uint64(e)), end, v); err != nil {
					return err
				}
			}
			c.parent, c.pe = n, e
			n.kids.set(e, c)
			n.n += c.n
			n.own[e] = rl
			put(e, e+1, ptr(c.code(), c.at))
			i = j
			e++
			continue
		}
		// A run of entries with the same owner and no child: up to the
		// next prefix's start or the end of the innermost open range.
		next := size
		if i < len(ps) {
			next = ps[i].k.bits(uint(n.depth), uint(n.k))
		}
		if len(stack) > 0 {
			next = min(next, stack[len(stack)-1].end)
		}
		own := n.own[e:next]
		for x := range own {
			own[x] = rl
		}
		put(e, next, v)
		e = next
	}
	return nil
}

// releaseTree frees the blocks of a subtree no reader ever saw.
func (t *Table) releaseTree(n *tnode) {
	for _, c := range n.kids.all() {
		t.releaseTree(c)
	}
	if n.order >= 0 {
		t.arena.release(n.at-t.base, n.order)
		n.order = -3
	}
}

// buildDir builds the directory for ps: a direct node of stride DirBits
// in the directory's place. A directory nobody reads (the root is a list)
// is written as it is built. A live one (old, the current root) is
// switched entry by entry: every new subtree is written first, into free
// blocks, then each entry is stored once, with its new value or subtree,
// and the subtree it pointed at is retired. On ErrFull nothing changed.
func (t *Table) buildDir(ps []bp, old *tnode, zero uint32) (*tnode, error) {
	live := old != nil && old.order < 0
	if !live && t.dirRetired && t.safe < t.dirEpoch {
		// The directory was live before: lookups that started then may
		// still read it.
		if err := t.sync(); err != nil {
			return nil, err
		}
	}
	n := t.newDirect(key{}, 0, t.s, zero, headerUnits, -1)
	var entries []uint32
	w := n.word(0)
	put := func(lo, hi, v uint32) { t.im.putRun(w+uint64(lo), w+uint64(hi), v) }
	var reuse func(e uint32, ps []bp, def uint32) *tnode
	kept := map[*tnode]bool{}
	if live {
		entries = make([]uint32, 1<<t.s)
		put = func(lo, hi, v uint32) {
			for e := range entries[lo:hi] {
				entries[lo+uint32(e)] = v
			}
		}
		// An entry whose prefixes and default did not change keeps its
		// subtree: reloading a table that changed a little needs little
		// room.
		reuse = func(e uint32, ps []bp, def uint32) *tnode {
			c := old.kids.get(e)
			if c == nil || c.def != def || c.n != len(ps) || !sameBP(t.collect(c, nil), ps) {
				return nil
			}
			kept[c] = true
			return c
		}
	}
	if err := t.fillReuse(n, ps, put, reuse); err != nil {
		for e, c := range n.kids.all() {
			if kept[c] {
				n.kids.del(e)
				c.parent = old
			}
		}
		t.releaseTree(n)
		return nil, err
	}
	if live {
		for e, v := range entries {
			t.im.store(n.word(uint32(e)), v)
		}
		for _, c := range old.kids.all() {
			if !kept[c] {
				t.retireTree(c)
			}
		}
	}
	t.dirRetired = false
	return n, nil
}

// collect appends the live prefixes of subtree n, sorted.
func (t *Table) collect(n *tnode, out []bp) []bp {
	start := len(out)
	var walk func(n *tnode)
	walk = func(n *tnode) {
		if n.isList() {
			for _, en := range n.ents {
				if !en.gone {
					out = append(out, bp{n.base.withRest(n.depth, en.key, en.rl), n.depth + en.rl, en.val})
				}
			}
			return
		}
		for rl := uint8(1); rl <= n.k; rl++ {
			for b := uint32(0); b < 1<<rl; b++ {
				if i := uint64(1)<<rl | uint64(b); n.has[i>>6] == 0 {
					b |= 63 // skip an empty word
				} else if n.testHas(rl, b) {
					out = append(out, bp{n.base.withBits(n.depth, rl, uint64(b)), n.depth + rl, t.ownValue(n, rl, b)})
				}
			}
		}
		for _, c := range n.kids.all() {
			walk(c)
		}
	}
	walk(n)
	sortBP(out[start:])
	return out
}

// sameBP reports whether two sorted prefix lists hold the same prefixes
// with the same values.
func sameBP(a, b []bp) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
