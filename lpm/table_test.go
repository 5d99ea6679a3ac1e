package lpm

import (
	"net/netip"
	"slices"
	"testing"
	"unsafe"
)

var (
	mp = netip.MustParsePrefix
	ma = netip.MustParseAddr
)

func TestZeroTable(t *testing.T) {
	var tbl Table[int]
	if _, _, ok := tbl.Lookup(ma("1.2.3.4")); ok {
		t.Fatal("empty table matched")
	}
	if _, ok := tbl.Get(mp("0.0.0.0/0")); ok || tbl.Len() != 0 || tbl.Delete(mp("::/0")) {
		t.Fatal("empty table is not empty")
	}
	for range tbl.All() {
		t.Fatal("empty table yields")
	}
	if tbl.Bytes() <= 0 {
		t.Fatal("Bytes of an empty table")
	}
}

func TestBasics(t *testing.T) {
	var tbl Table[int]
	r := ref{}
	add := func(s string, v int) { tbl.Insert(mp(s), v); r[mp(s).Masked()] = v }
	add("0.0.0.0/0", 1)
	add("10.0.0.0/8", 2)
	add("10.1.0.0/16", 3)
	add("10.1.2.0/24", 4)
	add("10.1.2.3/32", 5)
	add("10.1.2.128/25", 6)
	add("10.128.0.0/9", 7)
	add("192.168.0.0/15", 8)
	add("::/0", 10)
	add("2001:db8::/32", 11)
	add("2001:db8:1::/48", 12)
	add("2001:db8:1::1/128", 13)
	add("::ffff:10.0.0.0/104", 14)   // IPv4-mapped: an IPv6 prefix
	tbl.Insert(mp("10.9.9.9/8"), 20) // stored masked: replaces 10.0.0.0/8
	r[mp("10.0.0.0/8")] = 20
	tbl.Insert(netip.Prefix{}, 99) // invalid: ignored

	for _, c := range []struct {
		addr string
		val  int
		pfx  string
	}{
		{"10.1.2.3", 5, "10.1.2.3/32"},
		{"10.1.2.4", 4, "10.1.2.0/24"},
		{"10.1.2.200", 6, "10.1.2.128/25"},
		{"10.1.3.1", 3, "10.1.0.0/16"},
		{"10.200.0.1", 7, "10.128.0.0/9"},
		{"10.2.0.1", 20, "10.0.0.0/8"},
		{"192.169.255.255", 8, "192.168.0.0/15"},
		{"11.0.0.0", 1, "0.0.0.0/0"},
		{"2001:db8:1::1", 13, "2001:db8:1::1/128"},
		{"2001:db8:1::2", 12, "2001:db8:1::/48"},
		{"2001:db8:2::", 11, "2001:db8::/32"},
		{"fe80::1%eth0", 10, "::/0"}, // zone ignored
		{"::ffff:10.1.2.3", 14, "::ffff:10.0.0.0/104"},
		{"::ffff:11.1.2.3", 10, "::/0"},
	} {
		v, p, ok := tbl.Lookup(ma(c.addr))
		if !ok || v != c.val || p != mp(c.pfx) {
			t.Errorf("Lookup(%s) = %d %v %v, want %d %s", c.addr, v, p, ok, c.val, c.pfx)
		}
	}
	if _, _, ok := tbl.Lookup(netip.Addr{}); ok {
		t.Error("invalid address matched")
	}
	g := newGen(1)
	check(t, &tbl, r, g, 2000)

	if !tbl.Delete(mp("10.1.2.3/32")) || tbl.Delete(mp("10.1.2.3/32")) || tbl.Delete(mp("10.1.2.3/31")) {
		t.Fatal("Delete reports wrongly")
	}
	delete(r, mp("10.1.2.3/32"))
	check(t, &tbl, r, g, 2000)
	if tbl.Delete(netip.Prefix{}) {
		t.Fatal("deleted an invalid prefix")
	}
}

// TestUnmapChoice pins the documented 4in6 behaviour: a mapped address is
// IPv6; Unmap makes it IPv4.
func TestUnmapChoice(t *testing.T) {
	var tbl Table[string]
	tbl.Insert(mp("10.0.0.0/8"), "v4")
	if _, _, ok := tbl.Lookup(ma("::ffff:10.1.1.1")); ok {
		t.Fatal("a 4in6 address matched an IPv4 prefix")
	}
	if v, _, ok := tbl.Lookup(ma("::ffff:10.1.1.1").Unmap()); !ok || v != "v4" {
		t.Fatal("the unmapped address did not match")
	}
}

// TestRandomOps interleaves inserts, replacements and deletes on random
// tables of mixed lengths and checks every answer against the reference.
// It also checks that the trie stays canonical: the same as BulkLoad
// builds from the same set.
func TestRandomOps(t *testing.T) {
	for seed := range uint64(30) {
		g := newGen(seed)
		var tbl Table[int]
		r := ref{}
		for step := range 400 {
			p := g.prefix()
			switch g.r.IntN(3) {
			case 0, 1:
				tbl.Insert(p, step)
				r[p] = step
			case 2:
				if len(r) > 0 && g.r.IntN(2) == 0 {
					ps := r.sorted()
					p = ps[g.r.IntN(len(ps))]
				}
				_, had := r[p]
				if got := tbl.Delete(p); got != had {
					t.Fatalf("seed %d: Delete(%v) = %v, want %v", seed, p, got, had)
				}
				delete(r, p)
			}
			if step%50 == 49 {
				check(t, &tbl, r, g, 300)
				assertCanonical(t, &tbl)
			}
		}
		// Delete everything: back to the empty trie.
		for _, p := range r.sorted() {
			if !tbl.Delete(p) {
				t.Fatalf("seed %d: Delete(%v) = false", seed, p)
			}
		}
		if !sameTrie(tbl.load(), &snapshot[int]{}) {
			t.Fatalf("seed %d: emptied table is not the empty trie", seed)
		}
	}
}

// assertCanonical checks that tbl's trie equals the one BulkLoad builds
// from its prefixes.
func assertCanonical(t testing.TB, tbl *Table[int]) {
	t.Helper()
	var es []Entry[int]
	for p, v := range tbl.All() {
		es = append(es, Entry[int]{p, v})
	}
	var b Table[int]
	b.BulkLoad(es)
	if !sameTrie(tbl.load(), b.load()) {
		t.Fatal("trie after inserts and deletes differs from the bulk-built one")
	}
	if tbl.Bytes() < b.Bytes() {
		t.Fatalf("Bytes %d < bulk-built %d", tbl.Bytes(), b.Bytes())
	}
}

func TestBulkLoad(t *testing.T) {
	for seed := range uint64(20) {
		g := newGen(100 + seed)
		var es []Entry[int]
		for i := range 300 {
			es = append(es, Entry[int]{g.prefix(), i})
		}
		es = append(es, es[3]) // a duplicate: the later entry wins
		es[len(es)-1].Value = -1
		es = append(es, Entry[int]{netip.Prefix{}, 5}) // invalid: ignored

		var bulk, ins Table[int]
		r := ref{}
		for _, e := range es {
			ins.Insert(e.Prefix, e.Value)
			if e.Prefix.IsValid() {
				r[e.Prefix.Masked()] = e.Value
			}
		}
		bulk.BulkLoad(es)
		check(t, &bulk, r, g, 500)
		if !sameTrie(bulk.load(), ins.load()) {
			t.Fatalf("seed %d: BulkLoad and Inserts build different tries", seed)
		}
		// A second load merges into the table.
		more := []Entry[int]{{g.prefix(), 1000}, {es[0].Prefix, 1001}}
		bulk.BulkLoad(more)
		for _, e := range more {
			r[e.Prefix] = e.Value
		}
		check(t, &bulk, r, g, 500)
	}
}

func TestAllStops(t *testing.T) {
	var tbl Table[int]
	tbl.BulkLoad([]Entry[int]{{mp("10.0.0.0/8"), 1}, {mp("10.1.0.0/16"), 2}, {mp("::/0"), 3}, {mp("2001::/16"), 4}})
	n := 0
	for range tbl.All() {
		n++
		if n == 3 {
			break
		}
	}
	if n != 3 {
		t.Fatal(n)
	}
	n4, n6 := 0, 0
	for range tbl.All4() {
		n4++
	}
	for range tbl.All6() {
		n6++
	}
	if n4 != 2 || n6 != 2 || tbl.Len4() != 2 || tbl.Len6() != 2 {
		t.Fatal(n4, n6)
	}
}

// sameTrie reports whether two snapshots have the same structure, node by
// node, arrays included.
func sameTrie(a, b *snapshot[int]) bool {
	return a.len4 == b.len4 && a.len6 == b.len6 && sameNode(&a.root4, &b.root4) && sameNode(&a.root6, &b.root6)
}

func sameNode(a, b *node[int]) bool {
	if a.kid != b.kid || a.cov != b.cov || a.run != b.run || a.base != b.base ||
		!slices.Equal(a.runSlice(), b.runSlice()) || !slices.Equal(a.pfxSlice(), b.pfxSlice()) ||
		(a.pfxs == nil) != (b.pfxs == nil) || (a.kids == nil) != (b.kids == nil) || (a.runs == nil) != (b.runs == nil) {
		return false
	}
	ak, bk := a.kidSlice(), b.kidSlice()
	if len(ak) != len(bk) {
		return false
	}
	for i := range ak {
		if !sameNode(&ak[i], &bk[i]) {
			return false
		}
	}
	return true
}

// TestNodeSize pins the layout the lookup's speed depends on: one node is
// one 128-byte pair of cache lines, whatever V is.
func TestNodeSize(t *testing.T) {
	if s := unsafe.Sizeof(node[int]{}); s != 128 {
		t.Fatalf("node is %d bytes, want 128", s)
	}
	if s := unsafe.Sizeof(node[[64]byte]{}); s != 128 {
		t.Fatalf("node[[64]byte] is %d bytes, want 128", s)
	}
	if off := unsafe.Offsetof(node[int]{}.pfxs); off != 120 {
		t.Fatalf("the cold pfxs pointer is at %d, want the last 8 bytes", off)
	}
	// BulkLoad allocates node arrays from page-aligned slabs.
	g := newGen(9)
	var es []Entry[int]
	for i := range 3000 {
		es = append(es, Entry[int]{g.prefix(), i})
	}
	var tbl Table[int]
	tbl.BulkLoad(es)
	var walk func(n *node[int])
	walk = func(n *node[int]) {
		kids := n.kidSlice()
		if len(kids) > 0 && uintptr(unsafe.Pointer(&kids[0]))%128 != 0 {
			t.Fatalf("a %d-node array is not 128-byte aligned", len(kids))
		}
		for i := range kids {
			walk(&kids[i])
		}
	}
	walk(&tbl.load().root4)
	walk(&tbl.load().root6)
}
