package bpflpm

import (
	"math/rand/v2"
	"net/netip"
	"testing"
)

// inlineScenario walks one node through every change of layout a node can
// go through: leaves inline in its record (at most inlineMax runs, no
// children), a value rewritten there in place, more runs (a leaf block),
// back to inline, a child (no longer inline), back again - for a node
// below the directory and for a slot's root, whose directory entry then
// switches between its record and its leaf block. check holds the table
// to the reference after every step.
func inlineScenario(t *testing.T, tb *Table, check func(r *ref, what string)) {
	t.Helper()
	if tb.opts.Family != IPv6 || tb.opts.DirBits != 16 {
		t.Fatal("the scenario is written for an IPv6 table with a 16-bit directory")
	}
	r := newRef(false)
	mp := netip.MustParsePrefix
	up := func(what string, p netip.Prefix, v uint32) {
		t.Helper()
		if err := tb.Update([]netip.Prefix{p}, []uint32{v}); err != nil {
			t.Fatal(err)
		}
		r.m[p] = v
		check(r, what)
	}
	del := func(what string, p netip.Prefix) {
		t.Helper()
		if n, err := tb.Delete([]netip.Prefix{p}); err != nil || n != 1 {
			t.Fatalf("delete %v: %d, %v", p, n, err)
		}
		delete(r.m, p)
		check(r, what)
	}
	// The node at depth 2 below slot 2001::/16 resolves bits 28..33.
	k := keyOf(mp("2001:db8::/32").Addr())
	slot := topBits(k, 16)
	node := func() *node { return tb.sh.find(k, slot, 2) }
	state := func(what string, inline bool) {
		t.Helper()
		n := node()
		if n == nil || n.inline != inline || (n.leafAt == noBlock) != inline {
			t.Fatalf("%s: node %+v, want inline=%v", what, n, inline)
		}
	}
	up("/32 alone: three runs", mp("2001:db8::/32"), 1)
	state("/32 alone", true)
	rec := node().recAt
	before := tb.inlineRewrites
	up("new value", mp("2001:db8::/32"), 2)
	state("new value", true)
	if node().recAt != rec || tb.inlineRewrites == before {
		t.Fatalf("a new value in an inline node was not rewritten in place (record %d → %d)", rec, node().recAt)
	}
	up("a /34 inside: five runs", mp("2001:db8:4000::/34"), 3)
	state("five runs", false)
	up("another /34: still a block", mp("2001:db8:8000::/34"), 4)
	del("back to three runs", mp("2001:db8:4000::/34"))
	del("back to three runs", mp("2001:db8:8000::/34"))
	state("three runs again", true)
	up("a /48 below: a child", mp("2001:db8::/48"), 5)
	state("with a child", false)
	del("child gone", mp("2001:db8::/48"))
	state("child gone", true)
	up("two /33s: four runs", mp("2001:db8::/33"), 6)
	up("", mp("2001:db8:8000::/33"), 7)
	state("four runs", true)
	del("", mp("2001:db8:8000::/33"))
	del("", mp("2001:db8::/33"))

	// A slot's root: 2400::/16's node resolves bits 16..21.
	rk := keyOf(mp("2400::/20").Addr())
	rslot := topBits(rk, 16)
	root := func(what string, inline bool) {
		t.Helper()
		n := tb.sh.slots[rslot]
		e := tb.im.dirAt(tb.gen<<tb.maxS | rslot)
		if n == nil || n.inline != inline || (e&leavesFlag != 0) == inline {
			t.Fatalf("%s: root %+v, directory entry %#x, want inline=%v", what, n, e, inline)
		}
	}
	up("root /20: two runs", mp("2400::/20"), 8)
	root("root /20", true)
	up("root value", mp("2400::/20"), 9)
	for i, p := range []string{"2400:1000::/20", "2400:2000::/20", "2400:3000::/20", "2400:4000::/20"} {
		up("root, more runs", mp(p), uint32(10+i))
	}
	root("root with six runs", false)
	for _, p := range []string{"2400:1000::/20", "2400:2000::/20", "2400:3000::/20", "2400:4000::/20"} {
		del("root, fewer runs", mp(p))
	}
	root("root back to two runs", true)
	up("root with a child", mp("2400::/32"), 20)
	del("root child gone", mp("2400::/32"))
	root("root child gone", true)
	del("root empty", mp("2400::/20"))
	del("all gone", mp("2001:db8::/32"))
	if tb.sh.slots[rslot] != nil || tb.sh.slots[slot] != nil {
		t.Fatal("empty slots keep nodes")
	}
}

func TestHeapInline(t *testing.T) {
	tb, err := newHeapTable(Options{Family: IPv6, DirBits: 16, MaxPrefixes: 64})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(9, 9))
	inlineScenario(t, tb, func(r *ref, what string) {
		t.Helper()
		var ps []netip.Prefix
		for p := range r.m {
			ps = append(ps, p)
		}
		checkAgainst(t, tb, r, probesFor(rng, false, ps, 50), what)
	})
}
