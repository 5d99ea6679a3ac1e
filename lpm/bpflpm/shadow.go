package bpflpm

import "math/bits"

// The shadow is user space's copy of the structure, kept as a pointer
// trie with the same shape as what the maps hold: one node per stride of
// 6 bits below the direct-indexed slots. Mutations change the shadow and
// mark what changed dirty; commit (table.go) then writes the dirty parts
// into free blocks of the maps and publishes them with single-word stores.

const (
	stride = 6
	fanout = 1 << stride
)

// own is a prefix that ends inside a node's stride: its rlen (1..6) bits
// after the node's bit offset.
type own struct {
	bits uint8
	rlen uint8
	val  uint32
}

type node struct {
	own    []own   // sorted by rlen, then bits: shorter prefixes first
	kids   []*node // kids[i] hangs off the i-th set bit of vector
	vector uint64  // slots that descend into a child
	def    uint32  // value of slots that no own prefix covers

	// root: a directory slot's root node. Only a root's leaf block starts
	// with a copy of leafvec (a directory entry may point at it).
	root bool

	// What the maps hold for this node, as of the last commit.
	leafvec uint64 // slots that start a run of equal leaves
	nleaves uint32
	leafAt  uint32 // the leaf block (__u32 index, even), or noBlock
	inline  bool   // the leaves are in the record (inl), not in a block
	inl     [inlineMax]uint32
	kidsAt  uint32 // base1: first child record, or noBlock
	kidsN   uint32 // length of the block at kidsAt
	at      uint32 // slot roots only: the record's own 1-entry block
	recAt   uint32 // where the maps hold this node's record, or noBlock

	dirty     bool // this node or one below changed since the last commit
	kidsShape bool // a child was added or removed since the last commit
	plan      *plan
}

func newNode(def uint32) *node {
	return &node{def: def, leafAt: noBlock, kidsAt: noBlock, at: noBlock, recAt: noBlock, dirty: true}
}

// rank is the index in kids of the child at slot c, if vector has it.
func (n *node) rank(c uint32) int {
	return bits.OnesCount64(n.vector & (1<<c - 1))
}

func (n *node) kid(c uint32) *node {
	if n.vector>>c&1 == 0 {
		return nil
	}
	return n.kids[n.rank(c)]
}

func (n *node) addKid(c uint32, k *node) {
	r := n.rank(c)
	n.kids = append(n.kids, nil)
	copy(n.kids[r+1:], n.kids[r:])
	n.kids[r] = k
	n.vector |= 1 << c
	n.kidsShape = true
}

func (n *node) removeKid(c uint32) {
	r := n.rank(c)
	copy(n.kids[r:], n.kids[r+1:])
	n.kids[len(n.kids)-1] = nil
	n.kids = n.kids[:len(n.kids)-1]
	n.vector &^= 1 << c
	n.kidsShape = true
}

// vals expands the node's own prefixes over its 64 slots (controlled
// prefix expansion): longer prefixes are applied last and win.
func (n *node) vals(v *[fanout]uint32) {
	for i := range v {
		v[i] = n.def
	}
	for _, o := range n.own {
		sh := stride - o.rlen
		start := uint32(o.bits) << sh
		end := start + 1<<sh
		for i := start; i < end; i++ {
			v[i] = o.val
		}
	}
}

// valueAt is vals for one slot.
func (n *node) valueAt(c uint32) uint32 {
	for i := len(n.own) - 1; i >= 0; i-- {
		o := n.own[i]
		if uint32(o.bits) == c>>(stride-o.rlen) {
			return o.val
		}
	}
	return n.def
}

// findOwn returns the index of (bits, rlen) in own and whether it is there;
// if not, the index where it belongs. own is sorted, and a node at the
// bottom of a dense set holds 64 prefixes: binary search.
func (n *node) findOwn(b, rlen uint8) (int, bool) {
	k := uint16(rlen)<<8 | uint16(b)
	lo, hi := 0, len(n.own)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if uint16(n.own[m].rlen)<<8|uint16(n.own[m].bits) < k {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(n.own) && n.own[lo].rlen == rlen && n.own[lo].bits == b
}

// refresh pushes the node's slot values down as its children's defaults,
// recursing wherever a default changed, and marks all of it dirty.
func (n *node) refresh() {
	n.dirty = true
	if len(n.kids) == 0 {
		return
	}
	var v [fanout]uint32
	n.vals(&v)
	vec := n.vector
	for _, k := range n.kids {
		c := uint32(bits.TrailingZeros64(vec))
		vec &= vec - 1
		if k.def != v[c] {
			k.def = v[c]
			k.refresh()
		}
	}
}

// shadow is the whole user-space copy of one table.
type shadow struct {
	width  uint // 32 or 128 address bits
	s      uint // direct-indexed bits
	slots  []*node
	dirDef []uint32 // per slot: the value of the longest prefix of length <= s covering it
	dirLen []int8   // its length, -1 when none
	short  []map[uint32]uint32
	n      int // prefixes held

	dirtyList []uint32
	dirtySlot []bool

	// retire collects blocks the published structure still references but
	// the next commit will no longer need.
	retire func(nodes bool, at, n uint32)
}

func newShadow(width, s uint, retire func(bool, uint32, uint32)) *shadow {
	sh := &shadow{
		width:     width,
		s:         s,
		slots:     make([]*node, 1<<s),
		dirDef:    make([]uint32, 1<<s),
		dirLen:    make([]int8, 1<<s),
		short:     make([]map[uint32]uint32, s+1),
		dirtySlot: make([]bool, 1<<s),
		retire:    retire,
	}
	for i := range sh.dirDef {
		sh.dirDef[i] = Miss
		sh.dirLen[i] = -1
	}
	for i := range sh.short {
		sh.short[i] = map[uint32]uint32{}
	}
	return sh
}

func (sh *shadow) markSlot(slot uint32) {
	if !sh.dirtySlot[slot] {
		sh.dirtySlot[slot] = true
		sh.dirtyList = append(sh.dirtyList, slot)
	}
}

// topBits returns the first l bits of k (l <= s <= 24).
func topBits(k key, l uint) uint32 {
	if l == 0 {
		return 0
	}
	return uint32(k.hi >> (64 - l))
}

// where says which node depth a prefix of length l > s ends in, at which
// bit offset that node starts, and the prefix's length inside it.
func (sh *shadow) where(l uint) (depth int, off, rlen uint) {
	depth = int((l - sh.s - 1) / stride)
	off = sh.s + uint(depth)*stride
	return depth, off, l - off
}

// setSlotDef re-derives a slot's default after short prefixes changed.
func (sh *shadow) setSlotDef(slot uint32) {
	sh.markSlot(slot)
	if r := sh.slots[slot]; r != nil && r.def != sh.dirDef[slot] {
		r.def = sh.dirDef[slot]
		r.refresh()
	}
}

// insert adds or replaces k/l with value v. It reports whether anything
// changed. bulk skips refreshing defaults (finish does it once at the end).
func (sh *shadow) insert(k key, l uint, v uint32, bulk bool) bool {
	if l <= sh.s {
		kk := topBits(k, l)
		old, ok := sh.short[l][kk]
		if ok && old == v {
			return false
		}
		sh.short[l][kk] = v
		if !ok {
			sh.n++
		}
		lo := kk << (sh.s - l)
		hi := lo + 1<<(sh.s-l)
		for slot := lo; slot < hi; slot++ {
			if int(sh.dirLen[slot]) <= int(l) {
				sh.dirDef[slot] = v
				sh.dirLen[slot] = int8(l)
				if !bulk {
					sh.setSlotDef(slot)
				}
			}
		}
		return true
	}
	slot := topBits(k, sh.s)
	depth, off, rlen := sh.where(l)
	b := uint8(k.bits(off, rlen))
	if !bulk {
		// A replace by the same value is a no-op; find out before
		// marking a path dirty.
		if n := sh.find(k, slot, depth); n != nil {
			if i, ok := n.findOwn(b, uint8(rlen)); ok && n.own[i].val == v {
				return false
			}
		}
	}
	sh.markSlot(slot)
	n := sh.slots[slot]
	if n == nil {
		n = newNode(sh.dirDef[slot])
		n.root = true
		sh.slots[slot] = n
	}
	n.dirty = true
	for d := 0; d < depth; d++ {
		c := k.bits(sh.s+uint(d)*stride, stride)
		kid := n.kid(c)
		if kid == nil {
			def := uint32(Miss)
			if !bulk {
				def = n.valueAt(c)
			}
			kid = newNode(def)
			n.addKid(c, kid)
		}
		kid.dirty = true
		n = kid
	}
	i, ok := n.findOwn(b, uint8(rlen))
	if ok {
		n.own[i].val = v
	} else {
		n.own = append(n.own, own{})
		copy(n.own[i+1:], n.own[i:])
		n.own[i] = own{bits: b, rlen: uint8(rlen), val: v}
		sh.n++
	}
	if !bulk {
		n.refresh()
	}
	return true
}

// find returns the node at depth on k's path below slot, or nil.
func (sh *shadow) find(k key, slot uint32, depth int) *node {
	n := sh.slots[slot]
	for d := 0; d < depth && n != nil; d++ {
		n = n.kid(k.bits(sh.s+uint(d)*stride, stride))
	}
	return n
}

// finish sets every default after a bulk build, top-down.
func (sh *shadow) finish() {
	for slot, r := range sh.slots {
		if r != nil {
			r.def = sh.dirDef[slot]
			r.settle()
		}
	}
}

// settle is refresh without the shortcut: after a bulk build no default
// can be trusted, so every node is visited.
func (n *node) settle() {
	n.dirty = true
	if len(n.kids) == 0 {
		return
	}
	var v [fanout]uint32
	n.vals(&v)
	vec := n.vector
	for _, k := range n.kids {
		c := uint32(bits.TrailingZeros64(vec))
		vec &= vec - 1
		k.def = v[c]
		k.settle()
	}
}

// remove deletes k/l and reports whether it was there.
func (sh *shadow) remove(k key, l uint) bool {
	if l <= sh.s {
		kk := topBits(k, l)
		if _, ok := sh.short[l][kk]; !ok {
			return false
		}
		delete(sh.short[l], kk)
		sh.n--
		lo := kk << (sh.s - l)
		hi := lo + 1<<(sh.s-l)
		for slot := lo; slot < hi; slot++ {
			if int(sh.dirLen[slot]) != int(l) {
				continue // a longer short prefix still covers it
			}
			sh.dirDef[slot], sh.dirLen[slot] = Miss, -1
			for ll := int(l) - 1; ll >= 0; ll-- {
				if v, ok := sh.short[ll][slot>>(sh.s-uint(ll))]; ok {
					sh.dirDef[slot], sh.dirLen[slot] = v, int8(ll)
					break
				}
			}
			sh.setSlotDef(slot)
		}
		return true
	}
	slot := topBits(k, sh.s)
	depth, off, rlen := sh.where(l)
	var path [1 + 128/stride]*node
	var slotOf [1 + 128/stride]uint32
	n := sh.slots[slot]
	if n == nil {
		return false
	}
	path[0] = n
	for d := 0; d < depth; d++ {
		c := k.bits(sh.s+uint(d)*stride, stride)
		n = n.kid(c)
		if n == nil {
			return false
		}
		path[d+1], slotOf[d+1] = n, c
	}
	i, ok := n.findOwn(uint8(k.bits(off, rlen)), uint8(rlen))
	if !ok {
		return false
	}
	n.own = append(n.own[:i], n.own[i+1:]...)
	sh.n--
	sh.markSlot(slot)
	for d := 0; d <= depth; d++ {
		path[d].dirty = true
	}
	// Prune nodes left with nothing, bottom-up, then refresh the deepest
	// survivor: its slots (and so its children's defaults) changed.
	d := depth
	for ; d >= 0; d-- {
		x := path[d]
		if len(x.own) > 0 || len(x.kids) > 0 {
			break
		}
		sh.drop(x)
		if d == 0 {
			sh.slots[slot] = nil
		} else {
			path[d-1].removeKid(slotOf[d])
		}
	}
	if d >= 0 {
		path[d].refresh()
	}
	return true
}

// drop retires the blocks of a node that leaves the structure (it has no
// children left: they were dropped before it).
func (sh *shadow) drop(x *node) {
	sh.retire(true, x.kidsAt, x.kidsN)
	if x.leafAt != noBlock {
		sh.retire(false, x.leafAt/2, leafBlock(x.nleaves, x.root))
	}
	sh.retire(true, x.at, 1)
}

// dropAll retires every block of a whole shadow (after a bulk Load
// replaced it).
func (sh *shadow) dropAll() {
	var walk func(n *node)
	walk = func(n *node) {
		for _, k := range n.kids {
			walk(k)
		}
		sh.drop(n)
	}
	for _, r := range sh.slots {
		if r != nil {
			walk(r)
		}
	}
}
