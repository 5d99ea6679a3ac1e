package bpflpm

import (
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// ktrie models the shape of the kernel's BPF_MAP_TYPE_LPM_TRIE
// (kernel/bpf/lpm_trie.c) to count the nodes its lookup visits: a binary
// trie whose nodes are the prefixes plus an intermediate node wherever
// two of them diverge, each node a separate allocation. Its lookup
// follows one child pointer per node until a node's prefix stops
// matching, so every visit is a dependent read, the number the layout
// here is compared with (TestRealReads). Only the shape is modelled:
// insertion order does not change it.
type ktrie struct {
	root  *knode
	width uint8
}

type knode struct {
	k     key
	l     uint8
	im    bool // an intermediate node, no prefix of the set
	child [2]*knode
}

// match is how many leading bits of k, at most l, agree with node n's
// prefix (longest_prefix_match).
func (n *knode) match(k key, l uint8) uint8 {
	m := uint8(bits.LeadingZeros64(n.k.hi ^ k.hi))
	if m == 64 {
		m += uint8(bits.LeadingZeros64(n.k.lo ^ k.lo))
	}
	return min(m, n.l, l)
}

func (k key) bit(i uint8) uint32 { return k.bits(uint(i), 1) }

func (t *ktrie) insert(k key, l uint8) {
	k = k.masked(uint(l))
	slot := &t.root
	for n := *slot; n != nil; n = *slot {
		m := n.match(k, l)
		if n.l != m || n.l == l || n.l == t.width {
			break
		}
		slot = &n.child[k.bit(n.l)]
	}
	n := *slot
	nn := &knode{k: k, l: l}
	switch {
	case n == nil:
		*slot = nn
		return
	case n.l == l && n.match(k, l) == l:
		n.im = false
		return
	}
	m := n.match(k, l)
	if m == l { // the new prefix covers n
		nn.child[n.k.bit(m)] = n
		*slot = nn
		return
	}
	im := &knode{k: k.masked(uint(m)), l: m, im: true}
	im.child[k.bit(m)] = nn
	im.child[n.k.bit(m)] = n
	*slot = im
}

// lookup returns the longest prefix of the set that holds k (its length,
// -1 for none) and how many nodes the lookup read.
func (t *ktrie) lookup(k key) (best, visits int) {
	best = -1
	for n := t.root; n != nil; {
		visits++
		m := n.match(k, t.width)
		if m < n.l {
			break
		}
		if !n.im {
			best = int(n.l)
		}
		if m == t.width {
			break
		}
		n = n.child[k.bit(n.l)]
	}
	return best, visits
}

// TestKernelTrieModel: the model answers like the naive reference, so its
// shape is an LPM trie's; dense /32s take log2(n)+1 reads as in the
// kernel's.
func TestKernelTrieModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, v4 := range []bool{true, false} {
		for range 20 {
			ps, _ := genPrefixes(rng, v4, 1+rng.IntN(300))
			kt := ktrie{width: 32}
			if !v4 {
				kt.width = 128
			}
			r := newRef(v4)
			for _, p := range ps {
				k, l := maskedKey(p)
				kt.insert(k, l)
				r.m[p.Masked()] = uint32(p.Bits())
			}
			for _, a := range probesFor(rng, v4, ps, 200) {
				want := -1
				if v := r.lookup(a); v != Miss {
					want = int(v)
				}
				if got, _ := kt.lookup(keyOf(a)); got != want {
					t.Fatalf("%v in %v: /%d, want /%d", a, ps, got, want)
				}
			}
		}
	}
	kt := ktrie{width: 32}
	for i := range 1 << 10 {
		k, l := maskedKey(netip.PrefixFrom(denseAddr(i), 32))
		kt.insert(k, l)
	}
	if _, v := kt.lookup(keyOf(denseAddr(5))); v != 11 {
		t.Errorf("a lookup in 1024 dense /32s reads %d nodes, want 11", v)
	}
}
