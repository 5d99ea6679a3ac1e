package lpm

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

// ref is the naive reference: a map and a scan of every prefix.
type ref map[netip.Prefix]int

func (r ref) lookup(a netip.Addr) (int, netip.Prefix, bool) {
	a = a.WithZone("") // Prefix.Contains is false for a zoned address; Table ignores zones
	best, bv, ok := netip.Prefix{}, 0, false
	for p, v := range r {
		if p.Contains(a) && (!ok || p.Bits() > best.Bits()) {
			best, bv, ok = p, v, true
		}
	}
	return bv, best, ok
}

func (r ref) sorted() []netip.Prefix {
	ps := make([]netip.Prefix, 0, len(r))
	for p := range r {
		ps = append(ps, p)
	}
	slices.SortFunc(ps, netip.Prefix.Compare)
	return ps
}

// gen draws prefixes and addresses that collide often: addresses come from
// a few bases with random low bits, lengths favour the octet boundaries
// and the extremes (/0, /32, /128), and a share of IPv6 prefixes are
// IPv4-mapped.
type gen struct {
	r     *rand.Rand
	bases []netip.Addr
}

func newGen(seed uint64) *gen {
	g := &gen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	for range 4 {
		g.bases = append(g.bases, g.randAddr(true), g.randAddr(false))
	}
	g.bases = append(g.bases, netip.MustParseAddr("10.0.0.0"), netip.MustParseAddr("2001:db8::"),
		netip.MustParseAddr("::ffff:10.0.0.0"), netip.MustParseAddr("0.0.0.0"), netip.MustParseAddr("::"))
	return g
}

func (g *gen) randAddr(v4 bool) netip.Addr {
	if v4 {
		return netip.AddrFrom4([4]byte{byte(g.r.Uint32()), byte(g.r.Uint32()), byte(g.r.Uint32()), byte(g.r.Uint32())})
	}
	var b [16]byte
	for i := range b {
		b[i] = byte(g.r.Uint32())
	}
	return netip.AddrFrom16(b)
}

// near returns a with its bits after the first keep flipped at random.
func (g *gen) near(a netip.Addr, keep int) netip.Addr {
	b := a.AsSlice()
	for i := keep; i < len(b)*8; i++ {
		if g.r.IntN(2) == 0 {
			b[i/8] ^= 0x80 >> (i % 8)
		}
	}
	out, _ := netip.AddrFromSlice(b)
	return out
}

func (g *gen) bits(max int) int {
	switch g.r.IntN(6) {
	case 0:
		return 0
	case 1:
		return max
	case 2:
		return 8 * g.r.IntN(max/8+1)
	}
	return g.r.IntN(max + 1)
}

func (g *gen) prefix() netip.Prefix {
	base := g.bases[g.r.IntN(len(g.bases))]
	a := g.near(base, g.r.IntN(base.BitLen()+1))
	return netip.PrefixFrom(a, g.bits(a.BitLen())).Masked()
}

// probe returns an address inside a prefix of ps, or near one of the bases.
func (g *gen) probe(ps []netip.Prefix) netip.Addr {
	if len(ps) > 0 && g.r.IntN(3) != 0 {
		p := ps[g.r.IntN(len(ps))]
		return g.near(p.Addr(), p.Bits())
	}
	base := g.bases[g.r.IntN(len(g.bases))]
	return g.near(base, g.r.IntN(base.BitLen()+1))
}

// check compares every observable answer of tbl with r.
func check(t testing.TB, tbl *Table[int], r ref, g *gen, nprobes int) {
	t.Helper()
	want := r.sorted()
	if tbl.Len() != len(want) {
		t.Fatalf("Len = %d, want %d", tbl.Len(), len(want))
	}
	i := 0
	for p, v := range tbl.All() {
		if i >= len(want) || p != want[i] || v != r[p] {
			t.Fatalf("All()[%d] = %v=%d, want %v", i, p, v, want[min(i, len(want)-1)])
		}
		i++
	}
	if i != len(want) {
		t.Fatalf("All() yielded %d prefixes, want %d", i, len(want))
	}
	for _, p := range want {
		if v, ok := tbl.Get(p); !ok || v != r[p] {
			t.Fatalf("Get(%v) = %d,%v want %d", p, v, ok, r[p])
		}
	}
	for range nprobes {
		a := g.probe(want)
		checkLookup(t, tbl, r, a)
		if a.Is4() {
			checkLookup(t, tbl, r, netip.AddrFrom16(a.As16())) // the 4in6 form is IPv6
		} else if g.r.IntN(8) == 0 {
			checkLookup(t, tbl, r, a.WithZone("eth0"))
		}
	}
}

func checkLookup(t testing.TB, tbl *Table[int], r ref, a netip.Addr) {
	t.Helper()
	wv, wp, wok := r.lookup(a)
	v, p, ok := tbl.Lookup(a)
	if ok != wok || v != wv || p != wp {
		t.Fatalf("Lookup(%v) = %d %v %v, want %d %v %v", a, v, p, ok, wv, wp, wok)
	}
	if v2, ok2 := tbl.LookupValue(a); ok2 != wok || v2 != wv {
		t.Fatalf("LookupValue(%v) = %d %v, want %d %v", a, v2, ok2, wv, wok)
	}
	if tbl.Contains(a) != wok {
		t.Fatalf("Contains(%v) != %v", a, wok)
	}
}
