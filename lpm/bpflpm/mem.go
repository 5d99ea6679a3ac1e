package bpflpm

import (
	"encoding/binary"
	"math/bits"
	"sync/atomic"
	"unsafe"
)

// Layout shared with wolf_lpm.h. The directory, the records and the
// leaves are each one value of a one-element array map (see
// WOLF_LPM_TABLE): arrays of __u32s and of 24-byte records.
//
// A node's record holds its vector, its leafvec, and where its children's
// records (base1) and its leaves (base0) start. The leaf block of a
// directory slot's root node starts with a copy of the node's leafvec (two
// __u32s, 8-byte aligned), for directory entries that point straight at
// it; other nodes' blocks are just their leaves. A node without children
// and with at most inlineMax runs keeps its leaves in its record instead
// (inlineFlag in base1): the lookup ends where it read the record.
const (
	recordSize = 24 // struct wolf_lpm_node: vector, leafvec, base0, base1
	chunkWords = 16 // the leaves map holds a multiple of this many words
	// maxMapBytes bounds each map's value: the verifier refuses variable
	// offsets into a value from 2^29 bytes on (BPF_MAX_VAR_OFF).
	maxMapBytes = 1 << 29
	// A directory entry is a value, or with nodeFlag the index of the
	// slot's root record, or with leavesFlag the leaf block of a root
	// that has no children: then the lookup skips the record, one
	// dependent memory read fewer for most lookups in a routing table
	// (prefixes up to /24 below an 18-bit directory).
	nodeFlag    = 1 << 31
	leavesFlag  = 1 << 30
	rootGenMask = 1
	// inlineFlag in base1 marks a record holding its leaves
	// (WOLF_LPM_INLINE); run j is the record's __u32 word inlineWord(j).
	inlineFlag = 1 << 31
	inlineMax  = 4
	valueMask  = 1<<30 - 1
)

// inlineWord is the __u32 word of a record that holds inline run j (0..3):
// the two halves of vector, then base0 and base1.
func inlineWord(j uint32) uint32 { return j + j&2 }

// image is the memory of one table's maps: mmap'd from the kernel, or
// plain Go memory in tests that run without BPF. Stores that readers may
// observe (directory entries, leaves rewritten in place, the root word)
// are atomic; new blocks are written with plain stores before the atomic
// store that publishes them, which orders them on every architecture Go
// supports (a release store).
type image struct {
	root, dir, nodes, leaves []byte
}

func word(b []byte, i uint32) *uint32 {
	return (*uint32)(unsafe.Pointer(&b[uint64(i)*4]))
}

func (im *image) loadRoot() uint32      { return atomic.LoadUint32(word(im.root, 0)) }
func (im *image) storeRoot(v uint32)    { atomic.StoreUint32(word(im.root, 0), v) }
func (im *image) dirAt(i uint32) uint32 { return atomic.LoadUint32(word(im.dir, i)) }

// storeDir publishes a directory entry. It skips stores that change
// nothing, so that rewriting a slot does not dirty cache lines lookups use.
func (im *image) storeDir(i, v uint32) {
	if p := word(im.dir, i); atomic.LoadUint32(p) != v {
		atomic.StoreUint32(p, v)
	}
}

func (im *image) leafAt(i uint32) uint32 { return atomic.LoadUint32(word(im.leaves, i)) }

func (im *image) storeLeaf(i, v uint32) {
	if p := word(im.leaves, i); atomic.LoadUint32(p) != v {
		atomic.StoreUint32(p, v)
	}
}

// putLeaves writes a new (unpublished) leaf block: for a root, leafvec,
// then the leaves.
func (im *image) putLeaves(at uint32, leafvec uint64, vs []uint32, root bool) {
	b := im.leaves[uint64(at)*4:]
	if root {
		binary.NativeEndian.PutUint64(b, leafvec)
		b = b[8:]
	}
	for i, v := range vs {
		binary.NativeEndian.PutUint32(b[i*4:], v)
	}
}

type record struct {
	vector, leafvec uint64
	base0, base1    uint32
	// inline: the leaves are in the record (vector must be 0).
	inline bool
	leaves [inlineMax]uint32
}

func (im *image) recWord(i, w uint32) *uint32 {
	return (*uint32)(unsafe.Pointer(&im.nodes[uint64(i)*recordSize+uint64(w)*4]))
}

// putRecord writes a new (unpublished) record.
func (im *image) putRecord(i uint32, r record) {
	b := im.nodes[uint64(i)*recordSize:]
	binary.NativeEndian.PutUint64(b[8:], r.leafvec)
	if r.inline {
		for j := range uint32(inlineMax) {
			v := r.leaves[j]
			if j == inlineMax-1 {
				v |= inlineFlag
			}
			binary.NativeEndian.PutUint32(b[inlineWord(j)*4:], v)
		}
		return
	}
	binary.NativeEndian.PutUint64(b[0:], r.vector)
	binary.NativeEndian.PutUint32(b[16:], r.base0)
	binary.NativeEndian.PutUint32(b[20:], r.base1)
}

// storeInline rewrites inline run j of a live record in place: one aligned
// 4-byte store, and a lookup reads one run.
func (im *image) storeInline(rec, j, v uint32) {
	if j == inlineMax-1 {
		v |= inlineFlag
	}
	if p := im.recWord(rec, inlineWord(j)); atomic.LoadUint32(p) != v {
		atomic.StoreUint32(p, v)
	}
}

// storeBase1 points a live record at a new block of children.
func (im *image) storeBase1(rec, v uint32) {
	atomic.StoreUint32(im.recWord(rec, 5), v)
}

// lookup is wolf_lpm.h's lookup, step for step, in Go: Table.Lookup uses
// it, and tests hold it to a naive reference without needing BPF.
func (im *image) lookup(k key, maxLevels int) uint32 {
	r := im.loadRoot()
	s, m := uint(r>>8)&31, uint(r>>16)&31
	if s < minDirBits || s > maxDirBits {
		return Miss
	}
	i := (r&rootGenMask)<<m | uint32(k.hi>>(64-s))
	if uint64(i)*4 >= uint64(len(im.dir)) {
		return Miss
	}
	e := im.dirAt(i)
	if e&(nodeFlag|leavesFlag) == 0 {
		return e
	}
	k = k.shl(s)
	if e&leavesFlag != 0 {
		return im.leaf(e&^leavesFlag, uint64(2)<<(k.hi>>(64-stride))-1)
	}
	idx := e &^ nodeFlag
	for range maxLevels {
		if uint64(idx+1)*recordSize > uint64(len(im.nodes)) {
			return Miss
		}
		v := k.hi >> (64 - stride)
		mask := uint64(2)<<v - 1
		// vector and leafvec never change in a live record; base1 and
		// inline runs may (atomic stores).
		rec := im.nodes[uint64(idx)*recordSize:]
		leafvec := binary.NativeEndian.Uint64(rec[8:])
		if b1 := atomic.LoadUint32(im.recWord(idx, 5)); b1&inlineFlag != 0 {
			j := (uint32(bits.OnesCount64(leafvec&mask)) - 1) & 3
			return atomic.LoadUint32(im.recWord(idx, inlineWord(j))) & valueMask
		} else if vector := binary.NativeEndian.Uint64(rec); vector>>v&1 != 0 {
			idx = b1 + uint32(bits.OnesCount64(vector&mask)) - 1
			k = k.shl(stride)
			continue
		}
		li := binary.NativeEndian.Uint32(rec[16:]) + uint32(bits.OnesCount64(leafvec&mask)) - 1
		if uint64(li)*4 >= uint64(len(im.leaves)) {
			return Miss
		}
		return im.leafAt(li)
	}
	return Miss
}

// leaf reads the leaf block at b, as a directory entry points to it: its
// leafvec, then the leaf of the run that holds the slots in mask.
func (im *image) leaf(b uint32, mask uint64) uint32 {
	if uint64(b)*4+8 > uint64(len(im.leaves)) {
		return Miss
	}
	lv := uint64(im.leafAt(b)) | uint64(im.leafAt(b+1))<<32
	li := b + 1 + uint32(bits.OnesCount64(lv&mask))
	if uint64(li)*4 >= uint64(len(im.leaves)) {
		return Miss
	}
	return im.leafAt(li)
}
