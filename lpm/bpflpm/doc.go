// Package bpflpm is a longest-prefix-match table that user space builds in
// BPF array maps and any BPF program (XDP, TC, tracing, ...) searches with
// the C header wolf_lpm.h, in place of the kernel's BPF_MAP_TYPE_LPM_TRIE.
//
// # Why not the kernel's trie
//
// BPF_MAP_TYPE_LPM_TRIE is a binary Patricia trie of individually
// allocated nodes (Cloudflare, "A deep dive into BPF LPM trie performance and optimization"): a lookup in a million dense /32s follows
// about 20 pointers to scattered nodes, each a likely cache miss; updates
// take one lock; and freeing a big trie walks every node in one work item,
// long enough for soft-lockup warnings. `wolf bench lpm` measures all of
// it beside this package.
//
// # The structure
//
// A Poptrie (Asai and Ohara, SIGCOMM 2015), adapted to what BPF offers:
//
//   - A directory indexed by the first s bits of the address resolves
//     short prefixes outright and points at the root node of each /s that
//     holds longer ones. s (8..24) is chosen for each Load from the prefix
//     lengths (chooseDirBits): 18 for an Internet routing table, where most
//     prefixes are /24 and end one level below, 20 for dense /32 sets.
//   - Below it, nodes of 64 slots resolve 6 bits each. A node stores two
//     64-bit maps instead of 64 pointers: vector (which slots have a
//     child) and leafvec (which slots start a new run of equal leaves).
//     Its children are consecutive records and its leaves a consecutive
//     block, so one base index plus the population count of the map bits
//     below the slot finds either, and runs of slots with one value - a
//     /20 inside a node of /24s - are stored once. BPF has no population
//     count instruction; the header uses the SWAR bit trick.
//   - A directory entry can point straight at the leaf block of a root
//     node without children (a /18 holding only /19../24), which saves a
//     dependent memory read on most routing-table lookups.
//   - A node without children and with at most four runs keeps its leaves
//     in its own record (flagged in base1): a lookup that ends there makes
//     no leaf read. A third of the lookups in the real IPv6 table end in
//     such a node (a /48 alone in its /42 has two or three runs), and the
//     leaves map shrinks by more than half.
//
// A lookup is one read of the root word, one of the directory, then one
// 24-byte record per 6 bits the table needs beyond s, then one leaf unless
// the record held it: two to four dependent reads for IPv4, where the
// binary trie needs tens; for the real IPv6 table, whose /48s lie five
// levels below an 18-bit directory, the directory, four or five records
// and, in two lookups of three, a leaf. The loop is bounded
// (WOLF_LPM_LEVELS4/6 levels). The only helper is bpf_map_lookup_elem,
// once per map and lookup (the verifier inlines it): the directory, the
// records and the leaves are each the one value of a one-element array,
// and every read into them is an indexed load behind a bounds check
// against caps the verifier knows as constants (Bind sets them in
// .rodata). An element per record would cost a helper call per level,
// which stores the index to the stack and loads it back, on the critical
// path.
//
// No path compression: in the real IPv6 table fewer than 2% of the
// records a lookup visits are single-child pass-throughs that a skip
// could replace (prefixes share their upper levels), so it would add a
// test to every level for almost nothing.
//
// Maps: root (1 word), dir (2 generations × 2^MaxDirBits words), nodes
// (24-byte records), leaves (4-byte words), each one value of a
// one-element array. All are BPF_F_MMAPABLE: user space writes the
// structure through shared memory, without a syscall per entry, which is
// why Load fills a million prefixes several times faster than a batch
// update fills the kernel trie. Memory for the real IPv4 table: about 8
// bytes per prefix live, ~34 allocated with the defaults (two generations
// and room for updates), against ~130 bytes of slab the kernel trie takes
// for the same prefixes (its own memlock accounting says 32; it leaves out
// the trie's intermediate nodes and allocator rounding); for the real IPv6
// table 22 live, 78 allocated, against ~120.
//
// # Updates while programs look up
//
// Every lookup reads the root word once, and everything it reaches from
// there stays as it was for as long as the lookup may run:
//
//   - Load builds the whole new table beside the live one - new blocks,
//     and the directory generation that is not in use - then switches the
//     root word with one atomic store. A lookup sees the old table or the
//     new one.
//   - Update and Delete change the user-space copy (a pointer trie of the
//     same shape), then write only what changed into free blocks and
//     publish it with one aligned 4-byte atomic store: a directory entry,
//     a record's child pointer, or a leaf value rewritten in place when
//     nothing else about its node changes. Each lookup reads one directory
//     entry and one path, so it sees every slot before or after the change.
//     A changed leaf layout or child set copies one block of at most 64
//     records; nothing is copied up to the root.
//
// New blocks are written before the store that publishes them (a release
// store on every architecture Go supports), so a reader that finds them
// finds them complete.
//
// Grace period: a replaced block is reused only after every lookup that
// could have started before the switch has finished. Non-sleepable BPF
// programs run inside an RCU read-side critical section, so that is one
// RCU grace period. User space cannot call synchronize_rcu, but replacing
// an element of a map-of-maps from user space makes the kernel wait for one
// before the syscall returns (maybe_wait_bpf_programs), "so that userspace
// knows that all non-sleepable programs that could be running use the new
// map value"; the table keeps a one-slot map-of-maps for exactly that.
// Retired blocks are tagged with an epoch; a background goroutine runs the
// grace period (~10 ms) once enough has been retired, so updates rarely
// wait for one; an update that finds no free block waits itself. A Load
// also waits, if needed, until a grace period has passed since the previous
// switch before it rewrites the directory generation that switch left.
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
// matches. Capacity is fixed when the maps are created (New); ErrFull says
// when it runs out. A table is for one writer at a time: its methods lock.
//
// The benchmark, Bench, is `wolf bench lpm`: the kernel selftest's method
// (bench_lpm_trie_map.c), both structures side by side in one run, every
// probe's answer compared between them.
package bpflpm
