package bpflpm

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"
)

// The shortcut hash of bench.bpf.c (wolf bench lpm --shortcut6), an
// experiment on real IPv6 lookups: the table's nodes that start at
// depths 24, 32 and 40, keyed by the address bits above them, so that a
// lookup reads the hash (three independent probes) and walks from the
// deepest node found. It is built once from a loaded table and cleared
// before any write.
const (
	sc6Bits   = 13 // SC6_BITS
	sc6Slots  = 4
	sc6Bytes  = 8 * sc6Slots << sc6Bits
	sc6M41    = 1<<41 - 1
	sc6TagBit = 41 - sc6Bits
)

var sc6Depths = []uint{24, 32, 40}

// sc6Hash is sc6_hash: a bijection of 41-bit numbers (two odd
// multiplications and an xor-shift), so that the bucket and the tag
// together name the key.
func sc6Hash(hi uint64, d uint) uint64 {
	x := hi>>(64-d) | 1<<d
	x = x * 0x9e3779b97f4b & sc6M41
	x ^= x >> 20
	return x * 0xbf58476d1ce5 & sc6M41
}

type sc6Stats struct{ nodes, held int }

// nodesAt calls f with every node of the structure that starts at depth
// at most maxd in the address's top 64 bits: its depth, the address bits
// above it and its pointer entry.
func (im *image) nodesAt(maxd uint, f func(d uint, p uint64, e uint32)) {
	var visit func(e uint32, d uint, p uint64)
	visit = func(e uint32, d uint, p uint64) {
		if e&ptrFlag == 0 || d > maxd {
			return
		}
		f(d, p, e)
		i := uint64(e&offMask) * unitWords
		s := uint(e>>strideShift) & strideMask
		var n uint
		var get func(j uint64) uint32
		switch {
		case s == wideCode:
			n = wideStride
			get = func(v uint64) uint32 {
				bm := im.get64(i + 2*(v>>6))
				c := uint64(im.load(i+8)>>(8*(v>>6))) & 0xff
				return im.load(i + 8 + c + uint64(bits.OnesCount64(bm&(2<<(v&63)-1))))
			}
		case s > packedCode:
			n = s - packedCode
			get = func(v uint64) uint32 { return im.load(i + 1 + uint64(bits.OnesCount64(im.get64(i)&(2<<v-1)))) }
		case s != 0:
			n = s
			get = func(v uint64) uint32 { return im.load(i + v) }
		default:
			return // a list
		}
		if d+n > 64 {
			return
		}
		var last uint32
		for j := uint64(0); j < 1<<n; j++ {
			if c := get(j); c&ptrFlag != 0 && c != last {
				visit(c, d+n, p|j<<(64-d-n))
				last = c
			}
		}
	}
	visit(im.load(0), 0, 0)
}

// fillShortcut6 builds the hash from w's structure into the sc6 map.
func (c *benchColl) fillShortcut6(w *Table) (sc6Stats, error) {
	var st sc6Stats
	buf := make([]byte, sc6Bytes)
	w.mu.RLock()
	w.im.nodesAt(40, func(d uint, p uint64, e uint32) {
		if !slices.Contains(sc6Depths, d) {
			return
		}
		st.nodes++
		h := sc6Hash(p, d)
		b := int(h>>sc6TagBit) * sc6Slots * 8
		for j := range sc6Slots {
			o := b + 8*j
			if binary.NativeEndian.Uint64(buf[o:]) == 0 {
				binary.NativeEndian.PutUint64(buf[o:], (h&(1<<sc6TagBit-1))<<32|uint64(e))
				st.held++
				return
			}
		}
	})
	w.mu.RUnlock()
	if err := c.objs.Sc6.Update(uint32(0), buf, 0); err != nil {
		return st, fmt.Errorf("fill the shortcut hash: %w", err)
	}
	return st, nil
}

// clearShortcut6 empties the hash: lookups walk from the root again.
func (c *benchColl) clearShortcut6() error {
	if err := c.objs.Sc6.Update(uint32(0), make([]byte, sc6Bytes), 0); err != nil {
		return fmt.Errorf("clear the shortcut hash: %w", err)
	}
	return nil
}
