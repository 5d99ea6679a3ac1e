package bpflpm

import (
	"encoding/binary"
	"math/bits"
	"sync/atomic"
	"unsafe"
)

// Layout shared with wolf_lpm.h. The whole structure is one array of
// 32-bit words, the one value of a one-element array map (see
// WOLF_LPM_TABLE), addressed in words and, by pointers, in 8-byte units:
//
//	units 0..7   the header: word 0 is the root entry
//	units 8..    the directory, 2^DirBits words (used once the table
//	             outgrows a list)
//	then         the arena: direct nodes and lists (arena.go)
//	the last 69  padding, so that one bounds check covers a whole node
//
// An entry (the root, a directory or a direct node's slot) is one word:
// a value below 2^30 (Miss when nothing matches), or with ptrFlag a
// pointer: bits 26..30 the stride k of a direct node (1..24), 24+k for a
// packed one (k up to 6), wideCode for a wide packed one (8 bits, IPv6),
// or 0 for a list, and bits 0..25 the node's offset in units. A packed
// node is a direct node stored run-length compressed: a 64-bit word
// marks at bit j where a run of equal entries starts at entry j, then
// one word per run; entry j is run popcount(bits 0..j) - 1. A wide one
// has eight 32-bit words of marks, eight count bytes and the runs (see
// wideHdr). A
// direct node of
// stride k is 2^k entries indexed by the next k address bits; a list
// holds up to listK prefixes, longest first, and the value of its range
// when none matches (see listWord). Entries are leaf-pushed: a slot that
// no longer prefix covers holds the value of the longest shorter one, so
// a lookup never remembers a best match on the way down and ends at the
// first value it reads.
const (
	ptrFlag     = 1 << 31
	strideShift = 26
	strideMask  = 31
	offMask     = 1<<strideShift - 1

	// A list: word 0 the value of its range where no entry matches,
	// word 1 the number of entries (never changes), then entries of four
	// words: the prefix's remaining bits, top-aligned (a 64-bit word),
	// its length below the list's depth (1..64), and its value, or skip
	// once it was deleted. The value and word 0 change in place.
	listK        = 7
	listMaxWords = 2 + 4*listK
	entWords     = 4
	skip         = ^uint32(0)

	headerUnits = 8
	padUnits    = 69 // >= listMaxWords/2, (2+64)/2 and (wideHdr+wideMaxRuns)/2: one bounds check per node
	unitWords   = 2

	// maxMapBytes bounds the map's value: the verifier refuses variable
	// offsets into a value from 2^29 bytes on (BPF_MAX_VAR_OFF), and a
	// pointer's 26 bits of units reach exactly that far.
	maxMapBytes = 1 << 29
)

// ptr is the entry pointing at a node of stride k (0: a list) at unit at.
func ptr(k uint8, at uint32) uint32 { return ptrFlag | uint32(k)<<strideShift | at }

// image is the words map's memory: mmap'd from the kernel, or plain Go
// memory in tests that run without BPF. Stores that readers may observe
// (entries, list values and defaults) are atomic; new blocks are written
// with plain stores before the atomic store that publishes them, which
// orders them on every architecture Go supports (a release store), and a
// reader reaches a block only through the entry that points at it (an
// address dependency), so it finds the block complete.
type image struct {
	w []byte
}

func (im *image) p(i uint64) *uint32 { return (*uint32)(unsafe.Pointer(&im.w[i*4])) }

func (im *image) words() uint64 { return uint64(len(im.w) / 4) }

// load reads word i atomically; store publishes it, skipping stores that
// change nothing so that rewrites do not dirty cache lines lookups use.
func (im *image) load(i uint64) uint32 { return atomic.LoadUint32(im.p(i)) }

func (im *image) store(i uint64, v uint32) {
	if p := im.p(i); atomic.LoadUint32(p) != v {
		atomic.StoreUint32(p, v)
	}
}

// put writes word i of a block no reader can reach yet.
func (im *image) put(i uint64, v uint32) { *im.p(i) = v }

// putRun writes v into words [i, j) of a block no reader can reach yet.
func (im *image) putRun(i, j uint64, v uint32) {
	ws := unsafe.Slice(im.p(i), j-i)
	for x := range ws {
		ws[x] = v
	}
}

func (im *image) put64(i uint64, v uint64) { binary.NativeEndian.PutUint64(im.w[i*4:], v) }

func (im *image) get64(i uint64) uint64 { return binary.NativeEndian.Uint64(im.w[i*4:]) }

// lookup is wolf_lpm.h's lookup, step for step, in Go: Table.Lookup uses
// it, and tests hold it to a naive reference without needing BPF.
func (im *image) lookup(k key, levels int) uint32 {
	v, _ := im.walk(k, levels)
	return v
}

// walk is lookup that also counts the node reads below the root word:
// the dependent loads a lookup makes (a list's entries share its lines).
func (im *image) walk(k key, levels int) (uint32, int) {
	capw := im.words()
	if capw == 0 {
		return Miss, 0
	}
	hi, lo := k.hi, k.lo
	e := im.load(0)
	for r := range levels {
		if e&ptrFlag == 0 {
			return e, r
		}
		i := uint64(e&offMask) * unitWords
		s := uint(e>>strideShift) & strideMask
		if s == wideCode {
			// A wide packed node: the run of the next 8 bits.
			if i+wideHdr+wideMaxRuns > capw {
				return Miss, r
			}
			v := hi >> (64 - wideStride)
			hi = hi<<wideStride | lo>>(64-wideStride)
			lo <<= wideStride
			bm := im.load(i + v>>5)
			c := uint64(im.w[(i+8)*4+v>>5])
			e = im.load(i + wideHdr - 1 + c + uint64(bits.OnesCount32(bm&(2<<(v&31)-1))))
			continue
		}
		if s > packedCode {
			// A packed node: the run of the next s-24 bits.
			s -= packedCode
			if i+2+64 > capw {
				return Miss, r
			}
			v := hi >> (64 - s)
			hi = hi<<s | lo>>(64-s)
			lo <<= s
			bm := im.get64(i)
			e = im.load(i + 1 + uint64(bits.OnesCount64(bm&(2<<v-1))))
			continue
		}
		if s != 0 {
			i += hi >> (64 - s)
			hi = hi<<s | lo>>(64-s)
			lo <<= s
			if i >= capw {
				return Miss, r
			}
			e = im.load(i)
			continue
		}
		if i+listMaxWords > capw {
			return Miss, r
		}
		n := uint64(im.load(i + 1))
		for j := uint64(0); j < listK && j < n; j++ {
			b := i + 2 + entWords*j
			rl := uint(im.load(b + 2))
			v := im.load(b + 3)
			if rl-1 < 64 && (hi^im.get64(b))>>(64-rl) == 0 && v != skip {
				return v, r + 1
			}
		}
		return im.load(i), r + 1
	}
	return Miss, levels
}
