package bpflpm

import (
	"encoding/binary"
	"math/bits"
	"sync/atomic"
	"unsafe"
)

// Layout shared with wolf_lpm.h. Leaves and directory entries are __u32s
// packed 16 to an array element: an array map rounds every value up to 8
// bytes, so one __u32 per element would double their size, and 64-byte
// elements are exactly a cache line.
//
// A node's record holds its vector, its leafvec, and where its children's
// records (base1) and its leaf block (base0) start. A leaf block starts
// with a copy of the node's leafvec (two __u32s, 8-byte aligned) and then
// holds the leaves: lookups through a record use the record's leafvec
// (records are dense and stay in cache), lookups from a directory entry
// that points straight at a root's leaf block use the block's.
const (
	recordSize = 24 // struct wolf_lpm_node: vector, leafvec, base0, base1
	chunkWords = 16 // __u32s per dir/leaf array element
	chunkSize  = chunkWords * 4
	// A directory entry is a value, or with nodeFlag the index of the
	// slot's root record, or with leavesFlag the leaf block of a root
	// that has no children: then the lookup skips the record, one
	// dependent memory read fewer for most lookups in a routing table
	// (prefixes up to /24 below an 18-bit directory).
	nodeFlag    = 1 << 31
	leavesFlag  = 1 << 30
	rootGenMask = 1
)

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

// putLeaves writes a new (unpublished) leaf block: leafvec, then leaves.
func (im *image) putLeaves(at uint32, leafvec uint64, vs []uint32) {
	b := im.leaves[uint64(at)*4:]
	binary.NativeEndian.PutUint64(b, leafvec)
	for i, v := range vs {
		binary.NativeEndian.PutUint32(b[8+i*4:], v)
	}
}

type record struct {
	vector, leafvec uint64
	base0, base1    uint32
}

func (im *image) putRecord(i uint32, r record) {
	b := im.nodes[uint64(i)*recordSize:]
	binary.NativeEndian.PutUint64(b[0:], r.vector)
	binary.NativeEndian.PutUint64(b[8:], r.leafvec)
	binary.NativeEndian.PutUint32(b[16:], r.base0)
	binary.NativeEndian.PutUint32(b[20:], r.base1)
}

// storeBase1 points a live record at a new block of children.
func (im *image) storeBase1(rec, v uint32) {
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&im.nodes[uint64(rec)*recordSize+20])), v)
}

func (im *image) getRecord(i uint32) (record, bool) {
	off := uint64(i) * recordSize
	if off+recordSize > uint64(len(im.nodes)) {
		return record{}, false
	}
	b := im.nodes[off:]
	return record{
		vector:  binary.NativeEndian.Uint64(b[0:]),
		leafvec: binary.NativeEndian.Uint64(b[8:]),
		base0:   binary.NativeEndian.Uint32(b[16:]),
		base1:   binary.NativeEndian.Uint32(b[20:]),
	}, true
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
		n, ok := im.getRecord(idx)
		if !ok {
			return Miss
		}
		v := k.hi >> (64 - stride)
		mask := uint64(2)<<v - 1
		if n.vector>>v&1 != 0 {
			idx = n.base1 + uint32(bits.OnesCount64(n.vector&mask)) - 1
			k = k.shl(stride)
			continue
		}
		li := n.base0 + 1 + uint32(bits.OnesCount64(n.leafvec&mask))
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
