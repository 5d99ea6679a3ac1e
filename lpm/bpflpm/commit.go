package bpflpm

import "errors"

func (n *node) record() record {
	if n.inline {
		return record{leafvec: n.leafvec, inline: true, leaves: n.inl}
	}
	r := record{vector: n.vector, leafvec: n.leafvec}
	// Unused fields are zero: base1 must never look like inlineFlag.
	if n.leafAt != noBlock {
		r.base0 = n.leafAt + leafHeader(n.root)
	}
	if n.kidsAt != noBlock {
		r.base1 = n.kidsAt
	}
	return r
}

// leafHeader is where the leaves start in a node's leaf block, in __u32s:
// after the copy of leafvec in a root's block, at once in the others.
func leafHeader(root bool) uint32 {
	if root {
		return 2
	}
	return 0
}

// leafBlock is the size, in the leaf arena's 8-byte units, of a block of
// n leaves (after the 8-byte leafvec for a root).
func leafBlock(n uint32, root bool) uint32 { return (leafHeader(root) + n + 1) / 2 }

// inlineable says whether a node with this vector and nl runs keeps its
// leaves in its record.
func inlineable(vector uint64, nl uint32) bool { return vector == 0 && nl <= inlineMax }

// A commit writes what changed in a slot's subtree in two phases, so
// that running out of space never leaves half of a change behind: plan
// decides, for every dirty node, what it will write and allocates the
// blocks (nothing is visible to lookups yet, and on failure the blocks
// are released at once); apply then writes and publishes and cannot
// fail.
//
// Changes are published in place whenever a lookup then reads the old
// value or the new one, both right for one of the two tables:
//   - leaf values, when the node keeps its leafvec and leaf count: every
//     version of the node indexes its leaves the same way, and a lookup
//     reads one leaf (in the leaf block, or in the record if inline);
//   - base1, when the node's children's records moved to a new block but
//     its vector and leaves did not change: one aligned 4-byte store, and
//     the old block stays valid until a grace period has passed.
//
// A new vector or new leaves need a new record, hence a copy of the
// parent's block of children (at most 64 records), whose own base1 then
// changes in place: an update copies one block of records and one leaf
// block at most, never a whole path. Changing a value rewrites a leaf.
type plan struct {
	leaves   [fanout]uint32
	nl       uint32
	lv       uint64
	inPlace  bool   // rewrite leaf values where they are
	inline   bool   // the leaves go in the record
	leafAt   uint32 // new leaf block (when !inPlace), noBlock if none
	moveKids bool   // write the children's records to kidsAt
	kidsAt   uint32
	newRec   bool // the parent must write a new record for this node
}

// planNode plans n and its dirty descendants and reports whether n needs
// a new record. planned collects the nodes it planned.
func (t *Table) planNode(n *node, planned *[]*node) (bool, error) {
	p := t.newPlan()
	n.plan = p
	*planned = append(*planned, n)
	p.moveKids = n.kidsShape || (n.kidsAt == noBlock && len(n.kids) > 0)
	for _, k := range n.kids {
		if k.dirty {
			c, err := t.planNode(k, planned)
			if err != nil {
				return false, err
			}
			p.moveKids = p.moveKids || c
		}
	}
	var v [fanout]uint32
	n.vals(&v)
	for i := uint32(0); i < fanout; i++ {
		if n.vector>>i&1 != 0 {
			continue
		}
		if p.nl == 0 || v[i] != p.leaves[p.nl-1] {
			p.lv |= 1 << i
			p.leaves[p.nl] = v[i]
			p.nl++
		}
	}
	p.newRec = n.kidsShape || n.recAt == noBlock
	p.inline = inlineable(n.vector, p.nl)
	same := p.lv == n.leafvec && p.nl == n.nleaves
	switch {
	case p.inline:
		// In place only in a record lookups can reach; otherwise the
		// parent (or commitSlot) writes a new one.
		p.inPlace = n.inline && same && n.recAt != noBlock
		p.newRec = p.newRec || !p.inPlace
	case n.leafAt != noBlock && same:
		p.inPlace = true
	case p.nl > 0:
		at, err := t.alloc(false, leafBlock(p.nl, n.root))
		if err != nil {
			return false, err
		}
		p.leafAt = at * 2 // the arena counts pairs of __u32s
		p.newRec = true
	case n.leafAt != noBlock || n.inline:
		p.newRec = true // no leaves any more
	}
	if p.moveKids && len(n.kids) > 0 {
		at, err := t.alloc(true, uint32(len(n.kids)))
		if err != nil {
			return false, err
		}
		p.kidsAt = at
	}
	return p.newRec, nil
}

// unplan gives back the blocks plans allocated, after a failure.
func (t *Table) unplan(planned []*node) {
	for _, n := range planned {
		if p := n.plan; p != nil {
			if p.leafAt != noBlock {
				t.leafA.release(p.leafAt/2, leafBlock(p.nl, n.root))
			}
			t.nodesA.release(p.kidsAt, uint32(len(n.kids)))
			t.plans = append(t.plans, p)
			n.plan = nil
		}
	}
}

// newPlan reuses the plans of earlier commits: a plan holds a node's 64
// leaves, and an update plans a few nodes.
func (t *Table) newPlan() *plan {
	var p *plan
	if k := len(t.plans); k > 0 {
		p, t.plans = t.plans[k-1], t.plans[:k-1]
		*p = plan{}
	} else {
		p = new(plan)
	}
	p.leafAt, p.kidsAt = noBlock, noBlock
	return p
}

// applyNode carries out the plans of n and its descendants.
func (t *Table) applyNode(n *node) {
	p := n.plan
	for _, k := range n.kids {
		if k.plan != nil {
			t.applyNode(k)
		}
	}
	switch {
	case p.inPlace && p.inline:
		for j := uint32(0); j < p.nl; j++ {
			t.im.storeInline(n.recAt, j, p.leaves[j])
		}
		t.inlineRewrites++
	case p.inPlace:
		for j := uint32(0); j < p.nl; j++ {
			t.im.storeLeaf(n.leafAt+leafHeader(n.root)+j, p.leaves[j])
		}
	default:
		if p.leafAt != noBlock {
			t.im.putLeaves(p.leafAt, p.lv, p.leaves[:p.nl], n.root)
		}
		if n.leafAt != noBlock {
			t.retire(false, n.leafAt/2, leafBlock(n.nleaves, n.root))
		}
		n.leafAt = p.leafAt
	}
	n.inline, n.nleaves, n.leafvec = p.inline, p.nl, p.lv
	n.inl = [inlineMax]uint32{}
	if p.inline {
		copy(n.inl[:], p.leaves[:p.nl])
	}
	if p.moveKids {
		for i, k := range n.kids {
			t.im.putRecord(p.kidsAt+uint32(i), k.record())
			k.recAt = p.kidsAt + uint32(i)
		}
		t.retire(true, n.kidsAt, n.kidsN)
		n.kidsAt, n.kidsN = p.kidsAt, uint32(len(n.kids))
		if !p.newRec {
			t.im.storeBase1(n.recAt, n.kidsAt)
		}
	}
	n.dirty, n.kidsShape, n.plan = false, false, nil
	if len(t.plans) < 64 {
		t.plans = append(t.plans, p)
	}
}

// commitSlot writes slot's subtree (see plan) and returns its directory
// entry. On ErrFull nothing of the slot has changed in the maps and it
// stays dirty.
func (t *Table) commitSlot(sh *shadow, slot uint32) (uint32, error) {
	r := sh.slots[slot]
	if r == nil {
		return sh.dirDef[slot], nil
	}
	if r.dirty || r.at == noBlock {
		var planned []*node
		newRec, err := t.planNode(r, &planned)
		rootAt := noBlock
		if err == nil && (newRec || r.at == noBlock) {
			rootAt, err = t.alloc(true, 1)
		}
		if err != nil {
			t.unplan(planned)
			return 0, err
		}
		t.applyNode(r)
		if rootAt != noBlock {
			t.im.putRecord(rootAt, r.record())
			t.retire(true, r.at, 1)
			r.at, r.recAt = rootAt, rootAt
		}
	}
	if r.vector == 0 && r.leafAt != noBlock && !r.inline {
		return leavesFlag | r.leafAt, nil
	}
	return nodeFlag | r.at, nil
}

// commit publishes every dirty slot of the live shadow into the active
// directory, one atomic store per slot.
func (t *Table) commit() error {
	sh := t.sh
	base := t.gen << t.maxS
	for len(sh.dirtyList) > 0 {
		slot := sh.dirtyList[0]
		e, err := t.commitSlot(sh, slot)
		if errors.Is(err, ErrFull) && len(t.pending) > 0 {
			// What the slots published so far replaced becomes
			// reusable after a grace period: wait for one and retry.
			t.flushRetired()
			if err = t.sync(); err == nil {
				e, err = t.commitSlot(sh, slot)
			}
		}
		if err != nil {
			// Slots published so far stay; this one and the rest stay
			// dirty for the next commit to retry.
			t.flushRetired()
			return err
		}
		t.im.storeDir(base|slot, e)
		sh.dirtySlot[slot] = false
		sh.dirtyList = sh.dirtyList[1:]
	}
	sh.dirtyList = nil
	t.flushRetired()
	return nil
}
