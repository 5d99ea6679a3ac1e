package lpm

// slab hands out consecutive pieces of large arrays. BulkLoad builds the
// whole trie from slabs: one allocation per chunk instead of one per node
// array (a 1 M-prefix build makes ~100 K arrays), the node arrays are
// 128-byte aligned (a chunk of more than 32 KiB is page aligned, with no
// malloc header in front), and the trie is laid out in depth-first order,
// so the nodes and steps of a small subtree share pages and a lookup's
// last levels miss the TLB less.
//
// The price: a chunk stays allocated while any piece of it is referenced.
// Nodes that later writes replace are garbage that their chunk keeps until
// all its pieces are replaced; at most the size of the bulk-built trie.
// BulkLoad(nil) rebuilds the table compactly.
type slab[T any] struct {
	buf   []T
	chunk int // elements per chunk
}

// alloc returns a zeroed array of n elements (nil for n == 0).
func (s *slab[T]) alloc(n int) []T {
	if n == 0 {
		return nil
	}
	if s == nil {
		return make([]T, n)
	}
	if n > len(s.buf) {
		s.buf = make([]T, max(s.chunk, n))
	}
	out := s.buf[:n:n]
	s.buf = s.buf[n:]
	return out
}
