// Package bpflpm is a longest-prefix-match table that user space builds in
// a BPF array map and any BPF program (XDP, TC, tracing, ...) searches with
// the C header wolf_lpm.h, in place of the kernel's BPF_MAP_TYPE_LPM_TRIE.
//
// # Why not the kernel's trie
//
// BPF_MAP_TYPE_LPM_TRIE is a binary Patricia trie of individually
// allocated nodes (Cloudflare, "A deep dive into BPF LPM trie performance
// and optimization"): a lookup in a million dense /32s follows about 20
// pointers to scattered nodes, each a likely cache miss; updates take one
// lock; and freeing a big trie walks every node in one work item, long
// enough for soft-lockup warnings. `wolf bench lpm` measures all of it
// beside this package.
//
// # The structure
//
// A multibit trie with leaf pushing, in one array of 32-bit words (one
// BPF_F_MMAPABLE array map of one element). Every entry is one word: a
// value, or a pointer to a node. Three kinds of node:
//
//   - A direct node of stride k: 2^k entries indexed by the next k address
//     bits - one load, no arithmetic beyond a shift. The first, the
//     directory, resolves DirBits (8..24) bits; below it the builder gives
//     a subtree a node of 4 to 16 bits, the widest that stays dense
//     (2^k entries for at least 2^k prefixes below it).
//   - A packed node: a direct node of 5 or 6 bits stored run-length
//     compressed - a 64-bit word marks where runs of equal entries start,
//     then one word per run; the entry is the run whose index is the
//     population count of the marks up to it. It holds the middle of a
//     routing table (the /25../30s below a directory entry) in half the
//     space or less, in the same cache line or two. In an IPv6 table the
//     builder uses wide packed nodes instead of direct nodes of 4 or 8
//     bits: 8 bits, eight 32-bit mark words and a byte counting the runs
//     before each (a 32-bit popcount needs no 64-bit constants), at most
//     128 runs - the steps between the real table's /28s and /48s in
//     half the levels.
//   - A list: up to seven prefixes, longest first, each checked with a
//     shift and a compare; the first that matches is the longest. It
//     holds the sparse parts of a table (a /48 alone under its /32), and a
//     table of a few prefixes is a single list: a lookup reads the root
//     word and one cache line, no directory.
//
// Leaf pushing: an entry that no longer prefix covers holds the value of
// the longest shorter one that does, and a list knows the value of its
// whole range, so a lookup reads one entry per level and returns the
// first value it finds: no best match carried down, no backtracking.
//
// # Dependent reads per lookup
//
// The directory grows with the table, up to 18 bits for IPv4 (1 MiB) and
// 16 for IPv6 (chooseDirBits). Below the root word (always cached) a
// lookup in the real IPv4 table reads 1.97 nodes on average - the
// directory entry, then one packed or direct node - and one in a million
// dense /32s reads 2 (the directory, then a 64-entry node); the real IPv6
// table averages 4.3 (5.1 before wide nodes), the upper levels shared by
// many lookups and cached (TestRealReads counts them). The kernel trie follows ~20 pointers for
// the same IPv4 lookups. That footprint is small - 8 bytes per prefix of
// the real IPv4 table, 5 for the dense set, 24 for IPv6, where the kernel
// trie's nodes take 124 to 140 - so the lines a lookup needs stay in the
// caches. A 24-bit directory (DirBits: 24, 64 MiB) would answer nearly
// every routing-table lookup in one read, but its entries miss the caches
// and the TLB; `wolf bench lpm --dir-bits 24` measures that trade.
//
// # Writes, from user space, without syscalls
//
// The map is mmap'd: user space writes the structure as memory. A change
// is published by single aligned 32-bit stores, and a lookup reads every
// word at most once:
//
//   - A prefix's value changes, appears or disappears by rewriting, in
//     place, the entries it owns: those of its range that no longer
//     prefix owns (a delete gives them to the next shorter prefix). A
//     lookup reads one of them. Where a child hangs off such an entry,
//     the child's inherited default is rewritten the same way. A list
//     entry's value changes in place too; a deleted one is marked skip,
//     and comes back in place if the same prefix returns.
//   - New structure - a new list or node, a list that grows (rewritten
//     whole), a list that outgrows seven prefixes (a direct node in its
//     place) - is written into a free block first, then published by one
//     store of the pointer to it (a release store; a lookup reaches the
//     block only through that pointer, an address dependency on every
//     architecture). What it replaced is retired.
//   - Load builds the whole new table's nodes into free blocks, then
//     stores each directory entry once, with its new value or subtree (or,
//     while the table fits a list, the root word): a lookup sees the old
//     table or the new one at its address.
//
// So every lookup sees each change before or after it, never torn; a
// batch (Update or Delete of many prefixes) is applied prefix by prefix,
// in order. Deletes and value changes allocate only in a packed node
// where they split a run (it is rewritten whole and republished); one
// that merges runs, as a delete does, stores into the runs the block
// has - a run need not be the longest. A node a
// delete leaves empty stays in place, holding its default, while the map
// has room to spare, so that adding a prefix back is a store, not a new
// block; Sync drops empty nodes.
//
// Grace periods: a retired block is reused only after every lookup that
// could have reached it has finished. Non-sleepable BPF programs run
// inside an RCU read-side critical section, so that is one RCU grace
// period. User space cannot call synchronize_rcu, but replacing an
// element of a map-of-maps from user space makes the kernel wait for one
// before the syscall returns (maybe_wait_bpf_programs), "so that userspace
// knows that all non-sleepable programs that could be running use the new
// map value"; the table keeps a one-slot map-of-maps for exactly that.
// Retired blocks are tagged with an epoch, and a background goroutine
// runs one grace period (~10 ms) whenever a sixteenth of the space waits:
// one grace period frees everything retired before it began, however many
// changes that was, so writes do not wait for them; a write that finds no
// free block waits for one itself. Free space is a buddy allocator:
// blocks are powers of two (a direct node of stride k is 2^k words), and a
// freed block merges with its free buddy, so churn does not fragment it.
// Sleepable programs are not covered by synchronize_rcu: call the lookup
// between bpf_rcu_read_lock() and bpf_rcu_read_unlock() there.
//
// # Using it
//
//	// BPF side, after vmlinux.h:
//	#include "wolf_lpm.h"
//	WOLF_LPM_TABLE(routes);
//	... __u32 nh = wolf_lpm_lookup4(routes, iph->daddr); ...
//
//	// Go side:
//	t, err := bpflpm.New(bpflpm.Options{Family: bpflpm.IPv4, MaxPrefixes: 1 << 20})
//	err = t.Load(prefixes, nextHops)
//	var opts ebpf.CollectionOptions
//	err = t.Bind(spec, "routes", &opts) // then load spec with opts
//	err = t.Update([]netip.Prefix{p}, []uint32{7})
//	n, err := t.Delete([]netip.Prefix{p})
//	defer t.Close()
//
// Values are below Miss (2^30-1), which a lookup returns when nothing
// matches. Capacity is fixed when the map is created (New); ErrFull says
// when it runs out. A table is for one writer at a time: its methods lock.
//
// The benchmark, Bench, is `wolf bench lpm`: the kernel selftest's method
// (bench_lpm_trie_map.c), both structures side by side in one run, every
// probe's answer compared between them.
package bpflpm
