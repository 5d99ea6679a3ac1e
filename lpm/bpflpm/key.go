package bpflpm

import (
	"encoding/binary"
	"net/netip"
)

// key is an address as a 128-bit big-endian number: bit 0 of the address
// (its most significant bit) is bit 63 of hi. IPv4 addresses occupy the top
// 32 bits of hi, which is also how the BPF side shifts them, so both
// families walk the structure with the same code.
type key struct{ hi, lo uint64 }

func keyOf(a netip.Addr) key {
	if a.Is4() {
		b := a.As4()
		return key{hi: uint64(binary.BigEndian.Uint32(b[:])) << 32}
	}
	b := a.As16()
	return key{hi: binary.BigEndian.Uint64(b[:8]), lo: binary.BigEndian.Uint64(b[8:])}
}

func (k key) addr(v4 bool) netip.Addr {
	if v4 {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(k.hi>>32))
		return netip.AddrFrom4(b)
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], k.hi)
	binary.BigEndian.PutUint64(b[8:], k.lo)
	return netip.AddrFrom16(b)
}

// shl shifts the key left by n bits (0 <= n < 128), as the lookup consumes
// it from the top.
func (k key) shl(n uint) key {
	switch {
	case n == 0:
		return k
	case n < 64:
		return key{hi: k.hi<<n | k.lo>>(64-n), lo: k.lo << n}
	default:
		return key{hi: k.lo << (n - 64)}
	}
}

// bits returns n bits (1 <= n <= 32) of k starting at bit offset off,
// counted from the most significant bit. Bits past the end of the address
// read as zero.
func (k key) bits(off, n uint) uint32 {
	if off >= 128 {
		return 0
	}
	return uint32(k.shl(off).hi >> (64 - n))
}

// masked clears every bit at or after offset l.
func (k key) masked(l uint) key {
	switch {
	case l == 0:
		return key{}
	case l < 64:
		return key{hi: k.hi &^ (^uint64(0) >> l)}
	case l == 64:
		return key{hi: k.hi}
	case l < 128:
		return key{hi: k.hi, lo: k.lo &^ (^uint64(0) >> (l - 64))}
	default:
		return k
	}
}
