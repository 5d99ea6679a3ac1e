package bpflpm

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/wolf-investigator/wolf/internal/testutil"
)

// ref is the naive longest-prefix match the structure is held to: try
// every length, longest first.
type ref struct {
	v4 bool
	m  map[netip.Prefix]uint32
}

func newRef(v4 bool) *ref { return &ref{v4: v4, m: map[netip.Prefix]uint32{}} }

func (r *ref) lookup(a netip.Addr) uint32 {
	for l := a.BitLen(); l >= 0; l-- {
		p, _ := a.Prefix(l)
		if v, ok := r.m[p]; ok {
			return v
		}
	}
	return Miss
}

// genPrefixes draws n prefixes that nest and collide the way routing
// tables do: lengths cluster around a few values, addresses around a few
// bases, and some prefixes are shorter than the directory.
func genPrefixes(rng *rand.Rand, v4 bool, n int) ([]netip.Prefix, []uint32) {
	width := 128
	if !v4 {
		width = 128
	} else {
		width = 32
	}
	bases := make([]key, 1+rng.IntN(8))
	for i := range bases {
		bases[i] = key{hi: rng.Uint64(), lo: rng.Uint64()}
		if v4 {
			bases[i] = key{hi: bases[i].hi &^ (1<<32 - 1)}
		}
	}
	ps := make([]netip.Prefix, 0, n)
	vs := make([]uint32, 0, n)
	for range n {
		var l int
		switch rng.IntN(6) {
		case 0:
			l = rng.IntN(width + 1)
		case 1:
			l = rng.IntN(17)
		case 2:
			l = width - rng.IntN(4)
		default:
			l = width/2 + rng.IntN(width/2+1)
		}
		b := bases[rng.IntN(len(bases))]
		// Flip a few random bits below 24 so neighbours share paths.
		k := b
		for range rng.IntN(4) {
			bit := uint(rng.IntN(width))
			if bit < 64 {
				k.hi ^= 1 << (63 - bit)
			} else {
				k.lo ^= 1 << (127 - bit)
			}
		}
		if rng.IntN(4) == 0 {
			k = key{hi: rng.Uint64(), lo: rng.Uint64()}
			if v4 {
				k.lo, k.hi = 0, k.hi&^(1<<32-1)
			}
		}
		p, err := k.addr(v4).Prefix(l)
		if err != nil {
			panic(err)
		}
		ps = append(ps, p)
		vs = append(vs, uint32(rng.IntN(1000)))
	}
	return ps, vs
}

// probesFor returns addresses at, just inside and just outside every
// prefix, plus random ones.
func probesFor(rng *rand.Rand, v4 bool, ps []netip.Prefix, random int) []netip.Addr {
	var out []netip.Addr
	width := uint(128)
	if v4 {
		width = 32
	}
	for _, p := range ps {
		k := keyOf(p.Addr())
		l := uint(p.Bits())
		out = append(out, p.Addr())
		// last address of the prefix and the one after it
		last := k
		for b := l; b < width; b++ {
			if b < 64 {
				last.hi |= 1 << (63 - b)
			} else {
				last.lo |= 1 << (127 - b)
			}
		}
		out = append(out, last.addr(v4))
		if n := last.addr(v4).Next(); n.IsValid() {
			out = append(out, n)
		}
		if pr := p.Addr().Prev(); pr.IsValid() {
			out = append(out, pr)
		}
	}
	for range random {
		k := key{hi: rng.Uint64(), lo: rng.Uint64()}
		if v4 {
			k = key{hi: k.hi &^ (1<<32 - 1)}
		}
		out = append(out, k.addr(v4))
	}
	return out
}

func checkAgainst(t *testing.T, tb *Table, r *ref, probes []netip.Addr, what string) {
	t.Helper()
	bad := 0
	for _, a := range probes {
		got, _ := tb.Lookup(a)
		if want := r.lookup(a); got != want {
			if bad < 5 {
				t.Errorf("%s: lookup %v = %d, want %d", what, a, got, want)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Fatalf("%s: %d of %d probes wrong", what, bad, len(probes))
	}
}

// TestHeapProperty builds random tables in Go memory and holds the Go
// rendition of the BPF lookup to the naive reference after bulk loads,
// updates and deletes. The same memory image is what the BPF side reads;
// TestBPFProperty checks that the C lookup agrees.
func TestHeapProperty(t *testing.T) {
	var kinds Stats // the most of each node kind seen after a load
	defer func() {
		if kinds.Directs == 0 || kinds.Packed == 0 || kinds.Lists == 0 {
			t.Errorf("not every node kind was exercised: %+v", kinds)
		}
	}()
	for _, v4 := range []bool{true, false} {
		for _, dirBits := range []int{0, 8, 16, 20} {
			for seed := range propertySeeds() {
				rng := rand.New(rand.NewPCG(seed, uint64(dirBits)))
				fam := IPv6
				if v4 {
					fam = IPv4
				}
				tb, err := newHeapTable(Options{Family: fam, MaxPrefixes: 3000, DirBits: dirBits, Words: 1 << 21})
				if err != nil {
					t.Fatal(err)
				}
				r := newRef(v4)
				ps, vs := genPrefixes(rng, v4, 1+rng.IntN(1500))
				if err := tb.Load(ps, vs); err != nil {
					t.Fatal(err)
				}
				for i, p := range ps {
					r.m[p.Masked()] = vs[i]
				}
				probes := probesFor(rng, v4, ps, 2000)
				checkAgainst(t, tb, r, probes, "load")
				st := tb.Stats()
				kinds.Directs, kinds.Packed, kinds.Lists = max(kinds.Directs, st.Directs), max(kinds.Packed, st.Packed), max(kinds.Lists, st.Lists)
				if tb.Len() != len(r.m) {
					t.Fatalf("Len %d, want %d", tb.Len(), len(r.m))
				}
				for round := range 6 {
					ups, uvs := genPrefixes(rng, v4, 1+rng.IntN(60))
					// also re-value some existing prefixes
					for range rng.IntN(20) {
						i := rng.IntN(len(ps))
						ups = append(ups, ps[i])
						uvs = append(uvs, uint32(rng.IntN(1000)))
					}
					if err := tb.Update(ups, uvs); err != nil {
						t.Fatal(err)
					}
					for i, p := range ups {
						r.m[p.Masked()] = uvs[i]
					}
					var dels []netip.Prefix
					for range rng.IntN(80) {
						dels = append(dels, ps[rng.IntN(len(ps))].Masked())
					}
					want := 0
					seen := map[netip.Prefix]bool{}
					for _, p := range dels {
						if _, ok := r.m[p]; ok && !seen[p] {
							want++
						}
						seen[p] = true
						delete(r.m, p)
					}
					n, err := tb.Delete(dels)
					if err != nil {
						t.Fatal(err)
					}
					if n != want {
						t.Fatalf("Delete removed %d, want %d", n, want)
					}
					ps = append(ps, ups...)
					probes = append(probes, probesFor(rng, v4, ups, 100)...)
					checkAgainst(t, tb, r, probes, "update round "+string(rune('0'+round)))
				}
				// Delete everything: the structure must shrink to nothing.
				all := make([]netip.Prefix, 0, len(r.m))
				for p := range r.m {
					all = append(all, p)
				}
				if _, err := tb.Delete(all); err != nil {
					t.Fatal(err)
				}
				clear(r.m)
				checkAgainst(t, tb, r, probes[:200], "emptied")
				if err := tb.Sync(); err != nil {
					t.Fatal(err)
				}
				if st := tb.Stats(); st.Directs != 0 || st.Lists != 0 || st.Prefixes != 0 || st.BytesInLimbo != 0 {
					t.Fatalf("empty table still holds %+v", st)
				}
				if st := tb.Stats(); st.BytesUsed > uint64(headerUnits+listUnits(listK))*8+4<<st.DirBits {
					t.Fatalf("empty table uses %d bytes: %+v", st.BytesUsed, st)
				}
			}
		}
	}
}

// TestHeapChurn makes many single updates and deletes in a table sized
// for the prefixes it holds: retired blocks must come back (after grace
// periods) and free space must not fragment into uselessness.
func TestHeapChurn(t *testing.T) {
	for _, v4 := range []bool{true, false} {
		rng := rand.New(rand.NewPCG(3, 4))
		fam := IPv6
		if v4 {
			fam = IPv4
		}
		pool, vals := genPrefixes(rng, v4, 3000)
		// Room for a few times what the prefixes need, so that reuse
		// must happen.
		opts := Options{Family: fam, DirBits: 12, Words: 1<<12 + 20000}
		if !v4 {
			opts.Words = 1<<12 + 90000
		}
		tb, err := newHeapTable(opts)
		if err != nil {
			t.Fatal(err)
		}
		r := newRef(v4)
		if err := tb.Load(pool[:1000], vals[:1000]); err != nil {
			t.Fatal(err)
		}
		for i, p := range pool[:1000] {
			r.m[p.Masked()] = vals[i]
		}
		for i := range 20000 {
			p := pool[rng.IntN(len(pool))].Masked()
			if rng.IntN(2) == 0 && len(r.m) < 1500 {
				v := uint32(rng.IntN(1000))
				if err := tb.Update([]netip.Prefix{p}, []uint32{v}); err != nil {
					t.Fatalf("op %d: update with %d prefixes live (%+v): %v", i, len(r.m), tb.Stats(), err)
				}
				r.m[p] = v
			} else {
				if _, err := tb.Delete([]netip.Prefix{p}); err != nil {
					t.Fatalf("op %d: delete: %v", i, err)
				}
				delete(r.m, p)
			}
		}
		checkAgainst(t, tb, r, probesFor(rng, v4, pool, 2000), "after churn")
		st := tb.Stats()
		if st.GracePeriods == 0 {
			t.Errorf("%v: 20000 changes and no grace period: retired space is never reused", fam)
		}
		t.Logf("%v: %+v", fam, st)
	}
}

// FuzzBuilder drives a table through loads, updates and deletes decoded
// from the input and holds every lookup to the reference.
func FuzzBuilder(f *testing.F) {
	f.Add([]byte{0x00, 0x18, 10, 1, 2, 3, 0x01, 0x20, 10, 1, 2, 3, 0x02, 0x18, 10, 1, 2, 3})
	f.Add([]byte{0x80, 0x00, 0, 0, 0, 0, 0x81, 0x7f, 0x20, 0x01, 0x0d, 0xb8})
	f.Add([]byte{0x00, 0x01, 0x80, 0, 0, 0, 0x00, 0x21, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		v4 := len(data) == 0 || data[0]&0x80 == 0
		fam, width := IPv6, 128
		if v4 {
			fam, width = IPv4, 32
		}
		tb, err := newHeapTable(Options{Family: fam, MaxPrefixes: 64, DirBits: 8 + len(data)%9, Words: 1 << 17})
		if err != nil {
			t.Fatal(err)
		}
		r := newRef(v4)
		var seen []netip.Prefix
		// Each op: flags byte (low 2 bits: update, delete, load), length
		// byte, then up to 4 address bytes (the rest of the address is
		// repeated from them).
		for len(data) >= 6 {
			op, l := data[0]&3, int(data[1])%(width+1)
			var a [16]byte
			for i := range a {
				a[i] = data[2+i%4]
			}
			data = data[6:]
			addr := netip.AddrFrom16(a)
			if v4 {
				addr = netip.AddrFrom4([4]byte(a[:4]))
			}
			p, _ := addr.Prefix(l)
			v := uint32(l)*7 + uint32(a[0])
			switch op {
			case 0, 3:
				if err := tb.Update([]netip.Prefix{p}, []uint32{v}); err != nil {
					t.Fatal(err)
				}
				r.m[p] = v
				seen = append(seen, p)
			case 1:
				if _, err := tb.Delete([]netip.Prefix{p}); err != nil {
					t.Fatal(err)
				}
				delete(r.m, p)
			case 2:
				ps := make([]netip.Prefix, 0, len(r.m))
				vs := make([]uint32, 0, len(r.m))
				for q, w := range r.m {
					ps = append(ps, q)
					vs = append(vs, w+1)
					r.m[q] = w + 1
				}
				if err := tb.Load(ps, vs); err != nil {
					t.Fatal(err)
				}
			}
		}
		checkAgainst(t, tb, r, probesFor(rand.New(rand.NewPCG(1, 1)), v4, seen, 64), "fuzz")
	})
}

// TestHeapFull runs a table out of space: the change that does not fit
// must leave the table as it was before it (the earlier ones of its batch
// stay), and once deletes make room the same change must go through.
func TestHeapFull(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	tb, err := newHeapTable(Options{Family: IPv4, DirBits: 12, Words: 1<<12 + 2000})
	if err != nil {
		t.Fatal(err)
	}
	r := newRef(true)
	var all []netip.Prefix
	var failed netip.Prefix
	var failedV uint32
	for i := 0; i < 5000 && !failed.IsValid(); i++ {
		ps, vs := genPrefixes(rng, true, 1+rng.IntN(30))
		for j, p := range ps {
			err := tb.Update(ps[j:j+1], vs[j:j+1])
			if err == nil {
				r.m[p.Masked()] = vs[j]
				all = append(all, p)
				continue
			}
			if !errors.Is(err, ErrFull) {
				t.Fatal(err)
			}
			failed, failedV = p.Masked(), vs[j]
			break
		}
	}
	if !failed.IsValid() {
		t.Fatal("the table never filled up")
	}
	checkAgainst(t, tb, r, probesFor(rng, true, append(all, failed), 500), "after ErrFull")
	// Make room (deletes need none), then the change must go through.
	var dels []netip.Prefix
	for p := range r.m {
		if rng.IntN(2) == 0 {
			dels = append(dels, p)
		}
	}
	for _, p := range dels {
		delete(r.m, p)
	}
	if _, err := tb.Delete(dels); err != nil {
		t.Fatal(err)
	}
	if err := tb.Update([]netip.Prefix{failed}, []uint32{failedV}); err != nil {
		t.Fatalf("after deleting half the table: %v (%+v)", err, tb.Stats())
	}
	r.m[failed] = failedV
	checkAgainst(t, tb, r, probesFor(rng, true, append(all, failed), 2000), "after making room")
}

// TestHeapReload loads a table, then the same prefixes again, then with a
// few changes: the unchanged directory entries keep their subtrees (the
// identical reload retires nothing), and every lookup stays right.
func TestHeapReload(t *testing.T) {
	for _, v4 := range []bool{true, false} {
		fam := IPv6
		if v4 {
			fam = IPv4
		}
		rng := rand.New(rand.NewPCG(11, 12))
		tb, err := newHeapTable(Options{Family: fam, MaxPrefixes: 3000, DirBits: 12, Words: 1 << 21})
		if err != nil {
			t.Fatal(err)
		}
		ps, vs := genPrefixes(rng, v4, 3000)
		r := newRef(v4)
		for i, p := range ps {
			r.m[p.Masked()] = vs[i]
		}
		if err := tb.Load(ps, vs); err != nil {
			t.Fatal(err)
		}
		before := tb.Stats()
		if err := tb.Load(ps, vs); err != nil {
			t.Fatal(err)
		}
		if st := tb.Stats(); st.BytesInLimbo != 0 || st.BytesUsed != before.BytesUsed {
			t.Errorf("%v: reloading the same table replaced nodes: %+v, before %+v", fam, st, before)
		}
		probes := probesFor(rng, v4, ps, 1000)
		checkAgainst(t, tb, r, probes, "identical reload")
		for range 20 {
			vs[rng.IntN(len(ps))]++
		}
		// A later duplicate wins.
		ps, vs = append(ps, ps[0]), append(vs, 999)
		for i, p := range ps {
			r.m[p.Masked()] = vs[i]
		}
		if err := tb.Load(ps, vs); err != nil {
			t.Fatal(err)
		}
		checkAgainst(t, tb, r, probes, "changed reload")
		if st := tb.Stats(); st.BytesInLimbo == 0 || st.BytesInLimbo >= before.BytesUsed-4<<st.DirBits {
			t.Errorf("%v: a reload with 21 changes retired %d bytes of %d", fam, st.BytesInLimbo, before.BytesUsed)
		}
		if tb.Len() != len(r.m) {
			t.Errorf("Len %d, want %d", tb.Len(), len(r.m))
		}
	}
}

// TestDeleteReaddNoGrace: deleting every prefix of a small table and
// adding them back, over and over, reuses the nodes the deletes left
// empty, so no write waits for a grace period (it did: each round
// retired the subtree and the next one filled the small map with limbo).
// Sync then drops the empty nodes.
func TestDeleteReaddNoGrace(t *testing.T) {
	const n = 100
	ps := make([]netip.Prefix, n)
	vs := make([]uint32, n)
	for i := range ps {
		ps[i] = netip.PrefixFrom(denseAddr(i), 32)
		vs[i] = uint32(i)
	}
	tb, err := newHeapTable(Options{Family: IPv4, MaxPrefixes: n})
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.Load(ps, vs); err != nil {
		t.Fatal(err)
	}
	used := tb.Stats().BytesUsed
	rng := rand.New(rand.NewPCG(3, 4))
	for range 50 {
		idx := rng.Perm(n)
		for _, i := range idx {
			if k, err := tb.Delete(ps[i : i+1]); k != 1 || err != nil {
				t.Fatalf("delete %v: %d, %v", ps[i], k, err)
			}
		}
		if got, ok := tb.Lookup(ps[0].Addr()); ok {
			t.Fatalf("emptied table answers %d", got)
		}
		for _, i := range idx {
			if err := tb.Update(ps[i:i+1], vs[i:i+1]); err != nil {
				t.Fatal(err)
			}
		}
		for i, p := range ps {
			if got, _ := tb.Lookup(p.Addr()); got != vs[i] {
				t.Fatalf("%v: %d, want %d", p, got, vs[i])
			}
		}
	}
	if st := tb.Stats(); st.GracePeriods != 0 || st.BytesInLimbo != 0 || st.BytesUsed != used {
		t.Errorf("50 rounds of delete and re-add: %+v, want no grace period, nothing in limbo, %d bytes used", st, used)
	}
	if _, err := tb.Delete(ps); err != nil {
		t.Fatal(err)
	}
	if err := tb.Sync(); err != nil {
		t.Fatal(err)
	}
	if st := tb.Stats(); st.Directs+st.Packed+st.Lists != 0 {
		t.Errorf("Sync left nodes in an empty table: %+v", st)
	}
}

// TestWideNode drives an IPv6 wide packed node (8 bits, run-length
// compressed) through the changes that move its runs: /40s with distinct
// values added one by one under a /32 split it into more runs than it
// holds, and it must become a direct node; deleting them must keep every
// answer.
func TestWideNode(t *testing.T) {
	base := netip.MustParseAddr("2001:db8::")
	sub := func(i int) netip.Prefix {
		b := base.As16()
		b[4] = byte(i)
		return netip.PrefixFrom(netip.AddrFrom16(b), 40)
	}
	// Eight /40s and a /48: too many for a list, deeper than 4 bits.
	ps := []netip.Prefix{netip.MustParsePrefix("2001:db8:ffff::/48")}
	for i := range 8 {
		ps = append(ps, sub(i*32))
	}
	vs := make([]uint32, len(ps))
	r := newRef(false)
	for i, p := range ps {
		vs[i] = uint32(i)
		r.m[p] = vs[i]
	}
	tb, err := newHeapTable(Options{Family: IPv6, MaxPrefixes: 1000, DirBits: 16})
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.Load(ps, vs); err != nil {
		t.Fatal(err)
	}
	// The node at /32, wherever the directory's size puts it.
	var at32 func(n *tnode) *tnode
	at32 = func(n *tnode) *tnode {
		if n.depth == 32 {
			return n
		}
		for _, c := range n.kids.all() {
			if f := at32(c); f != nil {
				return f
			}
		}
		return nil
	}
	node := func() *tnode { return at32(tb.root) }
	if n := node(); n == nil || !n.wide() {
		t.Fatalf("the node at /32 is not a wide one: %+v", n)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	probes := probesFor(rng, false, append(ps, netip.MustParsePrefix("2001:db8::/32")), 3000)
	checkAgainst(t, tb, r, probes, "loaded")
	// A delete merges runs and a re-add splits them where they were:
	// both are stores into the block, no new one.
	at := node().at
	if _, err := tb.Delete(ps[1:2]); err != nil {
		t.Fatal(err)
	}
	delete(r.m, ps[1])
	checkAgainst(t, tb, r, probes, "one /40 deleted")
	if err := tb.Update(ps[1:2], vs[1:2]); err != nil {
		t.Fatal(err)
	}
	r.m[ps[1]] = vs[1]
	checkAgainst(t, tb, r, probes, "the /40 back")
	if n := node(); n.at != at || !n.wide() {
		t.Errorf("delete and re-add moved the wide node (block %d, now %d) or unpacked it", at, n.at)
	}
	for i := range 256 {
		p := sub(i)
		v := uint32(100 + i)
		if err := tb.Update([]netip.Prefix{p}, []uint32{v}); err != nil {
			t.Fatal(err)
		}
		r.m[p] = v
		if i%16 == 0 {
			checkAgainst(t, tb, r, probes, "adding /40s")
		}
	}
	if n := node(); n.packed || n.k != wideStride {
		t.Errorf("256 distinct /40s: node packed %v, stride %d, want a direct node of %d", n.packed, n.k, wideStride)
	}
	checkAgainst(t, tb, r, probes, "added /40s")
	for i := range 256 {
		p := sub(i)
		if _, err := tb.Delete([]netip.Prefix{p}); err != nil {
			t.Fatal(err)
		}
		delete(r.m, p)
	}
	checkAgainst(t, tb, r, probes, "deleted /40s")
}

// propertySeeds is how many random tables each of TestHeapProperty's
// shapes builds: six, or two under the race detector, which is there for
// the package's concurrency (its writer and readers), not for more tables
// of this single-goroutine check, and runs it ten times slower.
func propertySeeds() uint64 {
	if testutil.RaceEnabled {
		return 2
	}
	return 6
}
