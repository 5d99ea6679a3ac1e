// Package lpm is a longest-prefix-match table for IPv4 and IPv6 prefixes,
// built for fast lookups that never block.
//
// A Table maps prefixes to values and answers "which is the longest prefix
// that contains this address, and what is its value". Lookups take no lock
// and never wait: a Table is a pointer to an immutable trie, writers build
// a changed copy that shares every untouched node (path copying) and
// publish it with one atomic store, so a lookup sees the table before or
// after a write, never in between. Writers are serialised by a mutex.
//
//	var routes lpm.Table[uint32] // next-hop index per prefix
//	routes.Insert(netip.MustParsePrefix("10.0.0.0/8"), 1)
//	routes.Insert(netip.MustParsePrefix("10.1.0.0/16"), 2)
//	hop, pfx, ok := routes.Lookup(netip.MustParseAddr("10.1.2.3")) // 2, 10.1.0.0/16, true
//
// The trie is a multibit trie with a stride of 8 bits, popcount-compressed
// like Poptrie and Tree Bitmap: each node has bitmaps of the octets that
// have a child, that an in-node prefix covers, and where the best in-node
// match changes, and compact arrays ranked by popcount. A lookup reads one
// 128-byte node header per octet, never backtracks, and loads the value it
// returns once at the end. Subtrees holding one prefix are compressed into
// a leaf. node.go explains the layout and why.
//
// Loading a whole routing table prefix by prefix copies a path per prefix;
// BulkLoad instead sorts and builds every node once, and lays the trie out
// contiguously in depth-first order.
//
// IPv4-mapped IPv6 addresses and prefixes (::ffff:10.0.0.0/104) are IPv6,
// as in net/netip: they never match IPv4 entries. Call Addr.Unmap on an
// address first to look it up as IPv4. Zones are ignored.
//
// The benchmarks in bench_test.go compare Table with github.com/gaissmai/bart
// on a real 1 M-prefix Internet table.
package lpm
