package lpm

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
	"sync"
	"sync/atomic"
)

// Table maps IPv4 and IPv6 prefixes to values of type V and answers
// longest-prefix-match lookups.
//
// Readers (Lookup, LookupValue, Contains, Get, All, Len, Bytes) never block
// and never take a lock: they load the current snapshot with one atomic
// pointer load and walk it; snapshots are immutable. Writers (Insert,
// Delete, BulkLoad) are serialised by a mutex: each builds a new snapshot
// sharing every unchanged node with the old one (path copying) and
// publishes it with one atomic store, so a reader sees the table entirely
// before or entirely after a write, never in between.
//
// V is copied into the table's nodes (possibly several times for lookup
// speed); keep it small: an integer, an index or a pointer.
//
// The zero Table is empty and ready to use. A Table must not be copied
// after first use.
type Table[V any] struct {
	mu   sync.Mutex // serialises writers
	snap atomic.Pointer[snapshot[V]]
}

// snapshot is one immutable version of the table.
type snapshot[V any] struct {
	root4, root6 node[V]
	len4, len6   int
}

// load returns the current snapshot; the zero Table has none yet.
func (t *Table[V]) load() *snapshot[V] {
	if s := t.snap.Load(); s != nil {
		return s
	}
	return &snapshot[V]{}
}

// Len returns the number of prefixes in the table.
func (t *Table[V]) Len() int {
	s := t.load()
	return s.len4 + s.len6
}

// Len4 returns the number of IPv4 prefixes.
func (t *Table[V]) Len4() int { return t.load().len4 }

// Len6 returns the number of IPv6 prefixes.
func (t *Table[V]) Len6() int { return t.load().len6 }

// prefixKey returns pfx's family, masked address bits and length; ok is
// false for an invalid prefix.
func prefixKey(pfx netip.Prefix) (is4 bool, k key, plen int, ok bool) {
	if !pfx.IsValid() {
		return false, key{}, 0, false
	}
	plen = pfx.Bits()
	a := pfx.Addr()
	if a.Is4() {
		b := a.As4()
		k.hi = uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32
		is4 = true
	} else {
		b := a.As16()
		k.hi = be64(b[0:8])
		k.lo = be64(b[8:16])
	}
	return is4, k.masked(plen), plen, true
}

func be64(b []byte) uint64 {
	_ = b[7]
	return uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
		uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
}

// prefixOf is the inverse of prefixKey.
func prefixOf(is4 bool, k key, plen int) netip.Prefix {
	if is4 {
		h := k.hi >> 32
		return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(h >> 24), byte(h >> 16), byte(h >> 8), byte(h)}), plen)
	}
	// Two byte-swapped stores, not sixteen byte stores: Lookup pays this
	// on every IPv6 hit.
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], k.hi)
	binary.BigEndian.PutUint64(b[8:], k.lo)
	return netip.PrefixFrom(netip.AddrFrom16(b), plen)
}

// Insert sets pfx's value to val, adding pfx if it is new. pfx is stored
// masked (10.1.2.3/8 is 10.0.0.0/8); an invalid prefix is ignored. An
// IPv4-mapped IPv6 prefix (::ffff:10.0.0.0/104) is an IPv6 prefix, as in
// net/netip, and never matches an IPv4 address.
//
// Insert copies the path it changes, siblings included: on a full
// Internet table a write costs tens of microseconds (see BenchmarkUpdate).
// Load many prefixes at once with BulkLoad.
func (t *Table[V]) Insert(pfx netip.Prefix, val V) {
	is4, k, plen, ok := prefixKey(pfx)
	if !ok {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s := *t.load()
	var added bool
	if is4 {
		s.root4, added = insert(s.root4, 0, k, plen, val)
		if added {
			s.len4++
		}
	} else {
		s.root6, added = insert(s.root6, 0, k, plen, val)
		if added {
			s.len6++
		}
	}
	t.snap.Store(&s)
}

// Delete removes pfx (masked, as in Insert) and reports whether it was in
// the table.
func (t *Table[V]) Delete(pfx netip.Prefix) bool {
	is4, k, plen, ok := prefixKey(pfx)
	if !ok {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s := *t.load()
	if is4 {
		s.root4, ok = remove(s.root4, 0, k, plen)
		if ok {
			s.len4--
		}
	} else {
		s.root6, ok = remove(s.root6, 0, k, plen)
		if ok {
			s.len6--
		}
	}
	if ok {
		t.snap.Store(&s)
	}
	return ok
}

// Get returns the value of exactly pfx (masked, as in Insert).
func (t *Table[V]) Get(pfx netip.Prefix) (V, bool) {
	is4, k, plen, ok := prefixKey(pfx)
	if !ok {
		var zero V
		return zero, false
	}
	s := t.load()
	if is4 {
		return get(&s.root4, 0, k, plen)
	}
	return get(&s.root6, 0, k, plen)
}

// Lookup returns the value and the prefix of the longest prefix in the
// table that contains addr. An IPv4-mapped IPv6 address (::ffff:10.1.2.3)
// is looked up as IPv6 and matches only IPv6 prefixes, as in net/netip; to
// match it against IPv4 prefixes, pass addr.Unmap(). A zone is ignored.
func (t *Table[V]) Lookup(addr netip.Addr) (val V, matched netip.Prefix, ok bool) {
	s := t.snap.Load()
	if s == nil {
		return val, matched, false
	}
	if addr.Is4() {
		b := addr.As4()
		a := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
		r := lookup4(&s.root4, a)
		if r == nil {
			return val, matched, false
		}
		plen := int(r.bits1) - 1
		a &^= uint32(0xffffffff) >> plen // Go: a shift by 32 gives 0
		return r.val, netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)}), plen), true
	}
	if addr.Is6() {
		b := addr.As16()
		k := key{be64(b[0:8]), be64(b[8:16])}
		r := lookup6(&s.root6, k.hi, k.lo)
		if r == nil {
			return val, matched, false
		}
		plen := int(r.bits1) - 1
		return r.val, prefixOf(false, k.masked(plen), plen), true
	}
	return val, matched, false
}

// LookupValue is Lookup without the matched prefix, a little faster.
func (t *Table[V]) LookupValue(addr netip.Addr) (val V, ok bool) {
	s := t.snap.Load()
	if s == nil {
		return val, false
	}
	var r *run[V]
	if addr.Is4() {
		b := addr.As4()
		r = lookup4(&s.root4, uint32(b[0])<<24|uint32(b[1])<<16|uint32(b[2])<<8|uint32(b[3]))
	} else if addr.Is6() {
		b := addr.As16()
		r = lookup6(&s.root6, be64(b[0:8]), be64(b[8:16]))
	}
	if r == nil {
		return val, false
	}
	return r.val, true
}

// Contains reports whether any prefix in the table contains addr. Any
// will do, so the walk stops at the first node with a prefix covering
// addr - the shortest match, not the longest - and touches only node
// headers.
func (t *Table[V]) Contains(addr netip.Addr) bool {
	s := t.snap.Load()
	if s == nil {
		return false
	}
	if addr.Is4() {
		b := addr.As4()
		return contains4(&s.root4, uint32(b[0])<<24|uint32(b[1])<<16|uint32(b[2])<<8|uint32(b[3]))
	}
	if addr.Is6() {
		b := addr.As16()
		return contains6(&s.root6, be64(b[0:8]), be64(b[8:16]))
	}
	return false
}

// contains4 reports whether some prefix contains a: lookup4 that returns
// at the first covering in-node prefix.
func contains4[V any](n *node[V], a uint32) bool {
	for shift := 24; shift >= 0; shift -= 8 {
		o := uint(a>>uint(shift)) & 0xff
		w, m := (o>>6)&3, uint64(1)<<(o&63)
		if n.cov[w]&m != 0 {
			return true
		}
		kw := n.kid[w]
		if kw&m == 0 {
			return false
		}
		n = n.kidAt(int(n.base[w]) + bits.OnesCount64(kw&(m-1)))
		if n.isLeaf() {
			return (a^uint32(n.kid[0]>>32))&^(uint32(0xffffffff)>>n.base[1]) == 0
		}
	}
	return false
}

// contains6 is contains4 for a 128-bit address hi:lo.
func contains6[V any](n *node[V], hi, lo uint64) bool {
	h, l := hi, lo
	for range 16 {
		o := uint(h >> 56)
		h = h<<8 | l>>56
		l <<= 8
		w, m := (o>>6)&3, uint64(1)<<(o&63)
		if n.cov[w]&m != 0 {
			return true
		}
		kw := n.kid[w]
		if kw&m == 0 {
			return false
		}
		n = n.kidAt(int(n.base[w]) + bits.OnesCount64(kw&(m-1)))
		if n.isLeaf() {
			return leafMatch6(n, hi, lo)
		}
	}
	return false
}

// lookup4 returns the step of the longest match of a, or nil. It descends
// once, carrying the best in-node match seen so far (a pointer, not yet
// dereferenced: the caller loads the one it returns) and never
// backtracks. Each level reads only the node's header.
func lookup4[V any](n *node[V], a uint32) *run[V] {
	var best *run[V]
	for shift := 24; shift >= 0; shift -= 8 {
		o := uint(a>>uint(shift)) & 0xff
		w, m := (o>>6)&3, uint64(1)<<(o&63)
		if n.cov[w]&m != 0 {
			best = n.runAt(int(n.base[4+w]) + bits.OnesCount64(n.run[w]&(m|(m-1))) - 1)
		}
		kw := n.kid[w]
		if kw&m == 0 {
			break
		}
		n = n.kidAt(int(n.base[w]) + bits.OnesCount64(kw&(m-1)))
		if n.isLeaf() {
			if (a^uint32(n.kid[0]>>32))&^(uint32(0xffffffff)>>n.base[1]) == 0 {
				best = n.runs
			}
			break
		}
	}
	return best
}

// lookup6 is lookup4 for a 128-bit address hi:lo.
func lookup6[V any](n *node[V], hi, lo uint64) *run[V] {
	var best *run[V]
	h, l := hi, lo // the remaining octets, shifted to the top of h
	for range 16 {
		o := uint(h >> 56)
		h = h<<8 | l>>56
		l <<= 8
		w, m := (o>>6)&3, uint64(1)<<(o&63)
		if n.cov[w]&m != 0 {
			best = n.runAt(int(n.base[4+w]) + bits.OnesCount64(n.run[w]&(m|(m-1))) - 1)
		}
		kw := n.kid[w]
		if kw&m == 0 {
			break
		}
		n = n.kidAt(int(n.base[w]) + bits.OnesCount64(kw&(m-1)))
		if n.isLeaf() {
			if leafMatch6(n, hi, lo) {
				best = n.runs
			}
			break
		}
	}
	return best
}

// leafMatch6 reports whether the leaf n's prefix contains hi:lo.
func leafMatch6[V any](n *node[V], hi, lo uint64) bool {
	plen := uint(n.base[1])
	if plen <= 64 {
		return (hi^n.kid[0])&^(^uint64(0)>>plen) == 0
	}
	return hi == n.kid[0] && (lo^n.kid[1])&^(^uint64(0)>>(plen-64)) == 0
}
