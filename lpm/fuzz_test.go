package lpm

import (
	"net/netip"
	"testing"
)

// opReader decodes fuzz input into table operations.
type opReader struct{ b []byte }

func (r *opReader) byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// prefix decodes a prefix: a flags byte picks the family (IPv4, IPv6, or
// IPv4-mapped IPv6) and the length, then as many address bytes as the
// length needs follow. Few bytes per prefix keep collisions, nesting and
// shared paths frequent.
func (r *opReader) prefix() netip.Prefix {
	f := r.byte()
	var b [16]byte
	switch f % 3 {
	case 0:
		bits := int(r.byte()) % 33
		for i := range (bits + 7) / 8 {
			b[i] = r.byte()
		}
		return netip.PrefixFrom(netip.AddrFrom4([4]byte(b[:4])), bits).Masked()
	case 1:
		bits := int(r.byte()) % 129
		for i := range (bits + 7) / 8 {
			b[i] = r.byte()
		}
		return netip.PrefixFrom(netip.AddrFrom16(b), bits).Masked()
	}
	bits := 96 + int(r.byte())%33 // ::ffff:a.b.c.d/96…128
	b[10], b[11] = 0xff, 0xff
	for i := range (bits - 96 + 7) / 8 {
		b[12+i] = r.byte()
	}
	return netip.PrefixFrom(netip.AddrFrom16(b), bits).Masked()
}

// addr decodes an address: one inside a prefix seen before, with some bits
// after it flipped, or the 4in6 form of such an address.
func (r *opReader) addr(seen []netip.Prefix) netip.Addr {
	if len(seen) == 0 {
		return netip.IPv6Unspecified()
	}
	p := seen[int(r.byte())%len(seen)]
	b := p.Addr().AsSlice()
	flip := r.byte()
	for i := p.Bits(); i < len(b)*8 && flip != 0; i += 1 + int(flip&7) {
		b[i/8] ^= 0x80 >> (i % 8)
		flip >>= 1
	}
	a, _ := netip.AddrFromSlice(b)
	if r.byte()%5 == 0 && a.Is4() {
		a = netip.AddrFrom16(a.As16())
	}
	return a
}

// FuzzTable runs a sequence of inserts, deletes and lookups against the
// naive reference, then checks every answer and that the trie equals the
// one BulkLoad builds from the same set.
func FuzzTable(f *testing.F) {
	f.Add([]byte{0, 0, 8, 10, 0, 0, 16, 10, 1, 2, 0, 0, 3})
	f.Add([]byte{0, 1, 0, 0, 1, 128, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 2, 0, 1, 1})
	f.Add([]byte{0, 2, 32, 10, 1, 2, 3, 0, 0, 32, 10, 1, 2, 3, 2, 0, 0, 0, 1, 0, 0, 32, 10, 1, 2, 3})
	f.Add([]byte{0, 0, 0, 0, 1, 0, 0, 0, 0, 24, 192, 168, 1, 0, 0, 25, 192, 168, 1, 128, 2, 1, 3, 0, 1, 0, 24, 192, 168, 1, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &opReader{b: data}
		var tbl Table[int]
		ref := ref{}
		var seen []netip.Prefix
		for step := 0; len(r.b) > 0 && step < 200; step++ {
			switch r.byte() % 4 {
			case 0:
				p := r.prefix()
				tbl.Insert(p, step)
				ref[p] = step
				seen = append(seen, p)
			case 1:
				p := r.prefix()
				_, had := ref[p]
				if got := tbl.Delete(p); got != had {
					t.Fatalf("Delete(%v) = %v, want %v", p, got, had)
				}
				delete(ref, p)
			case 2:
				checkLookup(t, &tbl, ref, r.addr(seen))
			case 3:
				p := r.prefix()
				wv, wok := ref[p]
				if v, ok := tbl.Get(p); ok != wok || v != wv {
					t.Fatalf("Get(%v) = %d %v, want %d %v", p, v, ok, wv, wok)
				}
			}
		}
		check(t, &tbl, ref, newGen(uint64(len(data))), 50)
		assertCanonical(t, &tbl)
	})
}

// FuzzBulkLoad checks that BulkLoad gives the same trie as the same
// entries inserted one by one, including duplicates and a load into a
// table that already holds prefixes.
func FuzzBulkLoad(f *testing.F) {
	f.Add([]byte{0, 8, 10, 0, 16, 10, 1, 0, 8, 10}, uint8(1))
	f.Add([]byte{1, 0, 1, 128, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 2, 104, 10}, uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, split uint8) {
		r := &opReader{b: data}
		var es []Entry[int]
		for i := 0; len(r.b) > 0 && i < 300; i++ {
			es = append(es, Entry[int]{r.prefix(), i})
		}
		cut := 0
		if len(es) > 0 {
			cut = int(split) % (len(es) + 1)
		}
		var bulk, ins Table[int]
		ref := ref{}
		for _, e := range es {
			ins.Insert(e.Prefix, e.Value)
			ref[e.Prefix] = e.Value
		}
		bulk.BulkLoad(es[:cut])
		bulk.BulkLoad(es[cut:])
		if !sameTrie(bulk.load(), ins.load()) {
			t.Fatal("BulkLoad and Inserts build different tries")
		}
		check(t, &bulk, ref, newGen(uint64(len(data))), 50)
	})
}
