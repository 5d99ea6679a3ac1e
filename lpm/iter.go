package lpm

import (
	"iter"
	"net/netip"
	"unsafe"
)

// All returns every prefix and its value in prefix order (the order of
// netip.Prefix.Compare: IPv4 before IPv6, then by address, then shorter
// before longer, so a prefix comes right before the prefixes it contains).
// It iterates over the snapshot current when All is called: concurrent
// writes neither block it nor show up in it.
func (t *Table[V]) All() iter.Seq2[netip.Prefix, V] {
	s := t.load()
	return func(yield func(netip.Prefix, V) bool) {
		_ = walk(&s.root4, 0, true, key{}, yield) && walk(&s.root6, 0, false, key{}, yield)
	}
}

// All4 returns the IPv4 prefixes of All.
func (t *Table[V]) All4() iter.Seq2[netip.Prefix, V] {
	s := t.load()
	return func(yield func(netip.Prefix, V) bool) { walk(&s.root4, 0, true, key{}, yield) }
}

// All6 returns the IPv6 prefixes of All.
func (t *Table[V]) All6() iter.Seq2[netip.Prefix, V] {
	s := t.load()
	return func(yield func(netip.Prefix, V) bool) { walk(&s.root6, 0, false, key{}, yield) }
}

// walk yields the prefixes below n, a node at depth d reached by the first
// 8d bits of path, in prefix order: within a node an in-node prefix starting
// at octet s comes before the child at octet o ≥ s, whose prefixes are all
// longer. It returns false when yield asked to stop.
func walk[V any](n *node[V], d int, is4 bool, path key, yield func(netip.Prefix, V) bool) bool {
	if n.isLeaf() {
		k, plen := n.leafKey()
		return yield(prefixOf(is4, k, plen), n.leafVal())
	}
	ps, kids := n.pfxSlice(), n.kidSlice()
	pi := 0
	emitUpTo := func(o int) bool {
		for ; pi < len(ps) && int(ps[pi].start()) <= o; pi++ {
			p := ps[pi]
			plen := 8*d + p.rlen()
			if !yield(prefixOf(is4, path.withOctet(d, p.start()), plen), p.val) {
				return false
			}
		}
		return true
	}
	ki := 0
	for o := range 256 {
		if !testBit(&n.kid, uint8(o)) {
			continue
		}
		if !emitUpTo(o) || !walk(&kids[ki], d+1, is4, path.withOctet(d, uint8(o)), yield) {
			return false
		}
		ki++
	}
	return emitUpTo(255)
}

// Bytes returns the memory that the nodes of the table's current snapshot
// use: node headers, steps, in-node prefix lists; not what values of V
// point to. It is a lower bound of what the table keeps allocated: Go
// rounds allocations up to size classes, BulkLoad's slabs have an unused
// tail, and nodes that writes replaced stay in their slab (see slab).
// Snapshots share unchanged nodes, so a reader still holding an older
// snapshot keeps at most the changed paths alive in addition. It walks the
// trie: O(nodes).
func (t *Table[V]) Bytes() int {
	s := t.load()
	return int(unsafe.Sizeof(*s)) + nodeBytes(&s.root4) + nodeBytes(&s.root6)
}

func nodeBytes[V any](n *node[V]) int {
	if n.isLeaf() {
		return int(unsafe.Sizeof(run[V]{}))
	}
	kids := n.kidSlice()
	b := len(kids)*int(unsafe.Sizeof(node[V]{})) + len(n.runSlice())*int(unsafe.Sizeof(run[V]{}))
	if ps := n.pfxSlice(); ps != nil {
		b += int(unsafe.Sizeof(ps)) + len(ps)*int(unsafe.Sizeof(pfx[V]{}))
	}
	for i := range kids {
		b += nodeBytes(&kids[i])
	}
	return b
}
