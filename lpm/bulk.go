package lpm

import (
	"cmp"
	"net/netip"
	"slices"
)

// Entry is one prefix and its value, for BulkLoad.
type Entry[V any] struct {
	Prefix netip.Prefix
	Value  V
}

// BulkLoad inserts every entry, as if by Insert in slice order (a later
// entry for the same prefix wins), and publishes the result at once:
// readers see the table before or after the whole load, never a part.
//
// It rebuilds the table from the union of its current prefixes and entries
// in O(n log n): sort, then build each node once, exactly sized, bottom-up,
// instead of copying a path per prefix. Use it to fill a table or to apply
// a batch that is not tiny compared with the table; for a few prefixes,
// Insert is cheaper.
func (t *Table[V]) BulkLoad(entries []Entry[V]) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.load()
	n4 := 0
	for _, e := range entries {
		if e.Prefix.Addr().Is4() {
			n4++
		}
	}
	v4 := make([]item[V], 0, old.len4+n4)
	v6 := make([]item[V], 0, old.len6+len(entries)-n4)
	collect(&old.root4, 0, key{}, &v4)
	collect(&old.root6, 0, key{}, &v6)
	for _, e := range entries {
		is4, k, plen, ok := prefixKey(e.Prefix)
		if !ok {
			continue
		}
		if is4 {
			v4 = append(v4, item[V]{k: k, plen: uint8(plen), val: e.Value})
		} else {
			v6 = append(v6, item[V]{k: k, plen: uint8(plen), val: e.Value})
		}
	}
	s := &snapshot[V]{}
	v4, v6 = sortItems(v4), sortItems(v6)
	s.root4, s.len4 = newBuilder(v4).build(v4, 0), len(v4)
	s.root6, s.len6 = newBuilder(v6).build(v6, 0), len(v6)
	t.snap.Store(s)
}

// item is a prefix being bulk loaded.
type item[V any] struct {
	k    key
	plen uint8
	seq  uint32 // position in the input, to keep the last of duplicates
	val  V
}

// sortItems sorts items into prefix order and keeps, of equal prefixes, the
// one that came last (the current table's items come first, then entries in
// slice order).
func sortItems[V any](items []item[V]) []item[V] {
	for i := range items {
		items[i].seq = uint32(i)
	}
	slices.SortFunc(items, func(a, b item[V]) int {
		if c := cmp.Compare(a.k.hi, b.k.hi); c != 0 {
			return c
		}
		if c := cmp.Compare(a.k.lo, b.k.lo); c != 0 {
			return c
		}
		if c := cmp.Compare(a.plen, b.plen); c != 0 {
			return c
		}
		return cmp.Compare(a.seq, b.seq)
	})
	out := items[:0]
	for i, it := range items {
		if i+1 < len(items) && items[i+1].k == it.k && items[i+1].plen == it.plen {
			continue // a later duplicate wins
		}
		out = append(out, it)
	}
	return out
}

// builder allocates the trie of one BulkLoad from slabs (see slab).
type builder[V any] struct {
	nodes slab[node[V]]
	runs  slab[run[V]]
	pfxs  slab[pfx[V]]
	hdrs  slab[[]pfx[V]]
}

func newBuilder[V any](items []item[V]) *builder[V] {
	// Chunks: small for small loads; for big ones more than 32 KiB, so
	// page aligned, and small enough that the unused end of the last one
	// (and of one left when an array does not fit) is a small waste.
	n := len(items)
	return &builder[V]{
		nodes: slab[node[V]]{chunk: cond(n < 512, max(n/4, 4), min(max(n/4, 257), 2048))},
		runs:  slab[run[V]]{chunk: min(max(n, 4), 8192)},
		pfxs:  slab[pfx[V]]{chunk: min(max(n, 4), 8192)},
		hdrs:  slab[[]pfx[V]]{chunk: min(max(n/4, 4), 4096)},
	}
}

// build returns the node at depth d holding items, which are sorted, unique
// and share their first 8d bits. Items of one child are contiguous in
// prefix order; a child of one item is a leaf, as Insert would make it.
// Children are allocated before they are built, so the trie is laid out
// in depth-first order.
func (b *builder[V]) build(items []item[V], d int) node[V] {
	var n node[V]
	np, nk := 0, 0
	for i := 0; i < len(items); {
		if int(items[i].plen) <= 8*d+8 {
			np++
			i++
			continue
		}
		o := items[i].k.octet(d)
		i++
		for i < len(items) && int(items[i].plen) > 8*d+8 && items[i].k.octet(d) == o {
			i++
		}
		nk++
	}
	ps := b.pfxs.alloc(np)
	kids := b.nodes.alloc(nk)
	np, nk = 0, 0
	for i := 0; i < len(items); {
		it := &items[i]
		if int(it.plen) <= 8*d+8 {
			rlen := int(it.plen) - 8*d
			ps[np] = pfx[V]{pos: pfxPos(it.k.octet(d)&^(0xff>>rlen), rlen), val: it.val}
			np++
			i++
			continue
		}
		o := it.k.octet(d)
		j := i + 1
		for j < len(items) && int(items[j].plen) > 8*d+8 && items[j].k.octet(d) == o {
			j++
		}
		if j-i == 1 {
			kids[nk] = newLeaf(it.k, int(it.plen), it.val, &b.runs)
		} else {
			kids[nk] = b.build(items[i:j], d+1)
		}
		nk++
		setBit(&n.kid, o)
		i = j
	}
	n.setKids(kids)
	n.setPfxs(ps, d, &b.runs, &b.hdrs)
	return n
}

// collect appends the prefixes below n, a node at depth d reached by path,
// in prefix order.
func collect[V any](n *node[V], d int, path key, out *[]item[V]) {
	if n.isLeaf() {
		k, plen := n.leafKey()
		*out = append(*out, item[V]{k: k, plen: uint8(plen), val: n.leafVal()})
		return
	}
	ps, kids := n.pfxSlice(), n.kidSlice()
	pi, ki := 0, 0
	for o := range 256 {
		for ; pi < len(ps) && int(ps[pi].start()) <= o; pi++ {
			p := ps[pi]
			*out = append(*out, item[V]{k: path.withOctet(d, p.start()), plen: uint8(8*d + p.rlen()), val: p.val})
		}
		if testBit(&n.kid, uint8(o)) {
			collect(&kids[ki], d+1, path.withOctet(d, uint8(o)), out)
			ki++
		}
	}
}

func cond(c bool, a, b int) int {
	if c {
		return a
	}
	return b
}
