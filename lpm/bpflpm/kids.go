package bpflpm

import "iter"

// kidTab holds a direct node's children by entry: a slice indexed by
// entry, made at the first child. A writer's update or delete looks up
// the child of one entry per level; a Go map there cost a few cache
// misses per level (its groups probed, then the node) where the slice
// costs one, and a directory with tens of thousands of children made
// that the bulk of the writer's bookkeeping.
type kidTab struct {
	s    []*tnode
	n    int    // children held
	size uint32 // entries of the node (1 << stride)
}

func (k *kidTab) get(e uint32) *tnode {
	if int(e) < len(k.s) {
		return k.s[e]
	}
	return nil
}

// set puts c (not nil) as the child of entry e.
func (k *kidTab) set(e uint32, c *tnode) {
	if k.s == nil {
		k.s = make([]*tnode, k.size)
	}
	if k.s[e] == nil {
		k.n++
	}
	k.s[e] = c
}

func (k *kidTab) del(e uint32) {
	if int(e) < len(k.s) && k.s[e] != nil {
		k.s[e] = nil
		k.n--
	}
}

// all yields the children in entry order; deleting the one yielded is
// allowed.
func (k *kidTab) all() iter.Seq2[uint32, *tnode] {
	return func(yield func(uint32, *tnode) bool) {
		if k.n == 0 {
			return
		}
		for e, c := range k.s {
			if c != nil && !yield(uint32(e), c) {
				return
			}
		}
	}
}
