package lpm

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"

	"github.com/gaissmai/bart"

	"github.com/wolf-investigator/wolf/internal/testutil"
	"github.com/wolf-investigator/wolf/lpm/realtable"
)

// realTable loads the pinned real routing table once per test binary.
var realTable = sync.OnceValues(func() ([]netip.Prefix, error) { return realtable.Load() })

func loadReal(tb testing.TB) (v4, v6 []netip.Prefix) {
	tb.Helper()
	ps, err := realTable()
	if errors.Is(err, realtable.ErrNotInCache) {
		testutil.Require(tb, false, err.Error())
	}
	if err != nil {
		tb.Fatal(err)
	}
	return realtable.Split(ps)
}

// entries numbers the prefixes: the value of a prefix is its index.
func entries(ps []netip.Prefix) []Entry[int] {
	es := make([]Entry[int], len(ps))
	for i, p := range ps {
		es[i] = Entry[int]{p, i}
	}
	return es
}

// probes returns n addresses drawn from announced space, deterministically:
// a random address inside a random prefix of ps.
func probes(ps []netip.Prefix, n int, seed uint64) []netip.Addr {
	r := rand.New(rand.NewPCG(seed, 42))
	out := make([]netip.Addr, n)
	for i := range out {
		p := ps[r.IntN(len(ps))]
		b := p.Addr().AsSlice()
		for j := p.Bits(); j < len(b)*8; j++ {
			if r.IntN(2) == 0 {
				b[j/8] |= 0x80 >> (j % 8)
			}
		}
		out[i], _ = netip.AddrFromSlice(b)
	}
	return out
}

// TestRealTableAgainstBart loads the ~1.06 M real prefixes and checks that
// wolf and bart agree on every probe's value and matched prefix, that the
// bulk-built table holds exactly the input, and that deletes and
// re-inserts on the big table stay consistent.
func TestRealTableAgainstBart(t *testing.T) {
	v4, v6 := loadReal(t)
	all := append(append([]netip.Prefix{}, v4...), v6...)
	var tbl Table[int]
	tbl.BulkLoad(entries(all))
	var bt bart.Table[int]
	for i, p := range all {
		bt.Insert(p, i)
	}
	if tbl.Len() != bt.Size() || tbl.Len4() != bt.Size4() {
		t.Fatalf("Len %d/%d, bart %d/%d", tbl.Len(), tbl.Len4(), bt.Size(), bt.Size4())
	}
	seen := make(map[netip.Prefix]int, len(all))
	for i, p := range all {
		seen[p] = i // a duplicate keeps its last index, as BulkLoad does
	}
	var prev netip.Prefix
	n := 0
	for p, v := range tbl.All() {
		if n > 0 && prev.Compare(p) >= 0 {
			t.Fatalf("All: %v after %v", p, prev)
		}
		if seen[p] != v {
			t.Fatalf("All: %v=%d, want %d", p, v, seen[p])
		}
		prev = p
		n++
	}
	if n != len(seen) {
		t.Fatalf("All yielded %d, want %d", n, len(seen))
	}

	agree := func(addrs []netip.Addr) {
		t.Helper()
		for _, a := range addrs {
			v, p, ok := tbl.Lookup(a)
			bp, bv, bok := bt.LookupPrefixLPM(netip.PrefixFrom(a, a.BitLen()))
			if ok != bok || v != bv || p != bp {
				t.Fatalf("Lookup(%v) = %d %v %v; bart %d %v %v", a, v, p, ok, bv, bp, bok)
			}
		}
	}
	p4, p6 := probes(v4, 200_000, 1), probes(v6, 200_000, 2)
	agree(p4)
	agree(p6)

	// Delete a sample of prefixes from both, check, put them back.
	r := rand.New(rand.NewPCG(3, 3))
	var gone []netip.Prefix
	for range 2000 {
		p := all[r.IntN(len(all))]
		if tbl.Delete(p) {
			bt.Delete(p)
			gone = append(gone, p)
		}
	}
	agree(p4[:50_000])
	agree(p6[:50_000])
	for _, p := range gone {
		tbl.Insert(p, seen[p])
		bt.Insert(p, seen[p])
	}
	agree(p4[:50_000])
	agree(p6[:50_000])
}
