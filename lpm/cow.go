package lpm

// Copy-on-write updates. insert and remove take a node by value (a copy of
// its header) and return the changed copy; every array they change is a
// fresh one, so the nodes of the published snapshot, which readers may be
// walking, are never written. What is not on the changed path is shared
// between the old and the new snapshot.

// insert returns n, an inner node at depth d covering k, with prefix k/plen
// set to val, and whether the prefix is new.
func insert[V any](n node[V], d int, k key, plen int, val V) (node[V], bool) {
	o := k.octet(d)
	if plen <= 8*d+8 {
		rlen := plen - 8*d
		pos := pfxPos(o&^(0xff>>rlen), rlen)
		old := n.pfxSlice()
		i, found := findPfx(old, pos)
		var ps []pfx[V]
		if found {
			ps = make([]pfx[V], len(old))
			copy(ps, old)
		} else {
			ps = make([]pfx[V], len(old)+1)
			copy(ps, old[:i])
			copy(ps[i+1:], old[i:])
		}
		ps[i] = pfx[V]{pos: pos, val: val}
		n.setPfxs(ps, d, nil, nil)
		return n, !found
	}
	old := n.kidSlice()
	i, has := n.kidIndex(o)
	if !has {
		kids := make([]node[V], len(old)+1)
		copy(kids, old[:i])
		copy(kids[i+1:], old[i:])
		kids[i] = newLeaf(k, plen, val, nil)
		setBit(&n.kid, o)
		n.setKids(kids)
		return n, true
	}
	c := &old[i]
	var nc node[V]
	added := true
	switch {
	case !c.isLeaf():
		nc, added = insert(*c, d+1, k, plen, val)
	case c.leafIs(k, plen):
		nc, added = newLeaf(k, plen, val, nil), false
	default:
		// A second prefix under a leaf: the leaf becomes a node.
		lk, lplen := c.leafKey()
		nc, _ = insert(node[V]{}, d+1, lk, lplen, c.leafVal())
		nc, _ = insert(nc, d+1, k, plen, val)
	}
	n.setKids(replaceKid(old, i, nc))
	return n, added
}

// remove returns n, an inner node at depth d covering k, without prefix
// k/plen, and whether the prefix was there. The result may be empty or
// hold a single prefix: the caller canonicalizes non-root nodes.
func remove[V any](n node[V], d int, k key, plen int) (node[V], bool) {
	o := k.octet(d)
	if plen <= 8*d+8 {
		rlen := plen - 8*d
		old := n.pfxSlice()
		i, found := findPfx(old, pfxPos(o&^(0xff>>rlen), rlen))
		if !found {
			return n, false
		}
		ps := make([]pfx[V], len(old)-1)
		copy(ps, old[:i])
		copy(ps[i:], old[i+1:])
		n.setPfxs(ps, d, nil, nil)
		return n, true
	}
	old := n.kidSlice()
	i, has := n.kidIndex(o)
	if !has {
		return n, false
	}
	c := &old[i]
	if c.isLeaf() {
		if !c.leafIs(k, plen) {
			return n, false
		}
		n.dropKid(old, i, o)
		return n, true
	}
	nc, ok := remove(*c, d+1, k, plen)
	if !ok {
		return n, false
	}
	nps, nkids := nc.pfxSlice(), nc.kidSlice()
	switch {
	case len(nps) == 0 && len(nkids) == 0:
		n.dropKid(old, i, o)
	case len(nps) == 1 && len(nkids) == 0:
		// One in-node prefix left: it becomes a leaf in this slot.
		p := nps[0]
		lk := k.masked(8*(d+1)).withOctet(d+1, p.start())
		n.setKids(replaceKid(old, i, newLeaf(lk, 8*(d+1)+p.rlen(), p.val, nil)))
	case len(nps) == 0 && len(nkids) == 1 && nkids[0].isLeaf():
		// One leaf left below: it moves up into this slot.
		n.setKids(replaceKid(old, i, nkids[0]))
	default:
		n.setKids(replaceKid(old, i, nc))
	}
	return n, true
}

// replaceKid returns a copy of kids with kids[i] = c.
func replaceKid[V any](kids []node[V], i int, c node[V]) []node[V] {
	out := make([]node[V], len(kids))
	copy(out, kids)
	out[i] = c
	return out
}

// dropKid removes child i (octet o) of old, n's children, into a fresh
// array.
func (n *node[V]) dropKid(old []node[V], i int, o uint8) {
	kids := make([]node[V], len(old)-1)
	copy(kids, old[:i])
	copy(kids[i:], old[i+1:])
	clearBit(&n.kid, o)
	n.setKids(kids)
}

// get returns the value of exactly k/plen below n, an inner node at depth d.
func get[V any](n *node[V], d int, k key, plen int) (V, bool) {
	for {
		o := k.octet(d)
		if plen <= 8*d+8 {
			rlen := plen - 8*d
			ps := n.pfxSlice()
			if i, ok := findPfx(ps, pfxPos(o&^(0xff>>rlen), rlen)); ok {
				return ps[i].val, true
			}
			break
		}
		i, has := n.kidIndex(o)
		if !has {
			break
		}
		n = n.kidAt(i)
		if n.isLeaf() {
			if n.leafIs(k, plen) {
				return n.leafVal(), true
			}
			break
		}
		d++
	}
	var zero V
	return zero, false
}
