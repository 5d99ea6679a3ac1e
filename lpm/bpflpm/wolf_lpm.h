/* SPDX-License-Identifier: GPL-2.0 */
/*
 * wolf_lpm.h: longest-prefix match for BPF programs, over a structure that
 * user space (Go package github.com/wolf-investigator/wolf/lpm/bpflpm)
 * builds in four BPF array maps. Include it after vmlinux.h (or
 * <linux/bpf.h>), declare a table, bind it from Go, look up:
 *
 *	WOLF_LPM_TABLE(routes4);
 *	...
 *	__u32 nh = wolf_lpm_lookup4(routes4, iph->daddr);
 *	if (nh == WOLF_LPM_MISS)
 *		return XDP_PASS;
 *
 * and in Go: table.Bind(spec, "routes4", &opts) before loading (it sizes
 * the maps and sets the table's caps in .rodata).
 *
 * The structure is a Poptrie (Asai and Ohara, SIGCOMM 2015): a directory
 * indexed by the first s address bits (s = 8..24, chosen by user space
 * for each table it loads),
 * then nodes of 64 slots, each resolving 6 more bits. A node holds two
 * 64-bit maps instead of 64 pointers: which slots descend into a child,
 * and which slots start a new run of equal leaves. The children of a node
 * are consecutive records, as are its leaves, so one base index plus the
 * population count of the bits below the slot finds either; runs of equal
 * leaves are stored once, and a node without children and with at most
 * four runs keeps them in its own record. A lookup is one directory read
 * and, per 6 bits that routes need, one 24-byte record read, then one leaf
 * read unless the last record held it: three dependent reads for a /32
 * below a 20-bit directory, two for a /24 below an 18-bit one, where the
 * kernel's LPM_TRIE walks one node per bit that distinguishes its keys.
 *
 * The directory, the records and the leaves are each the one value of a
 * one-element array, found once per lookup with bpf_map_lookup_elem (which
 * the verifier inlines); every read after that is a bounds check against
 * a cap the verifier knows as a constant and an indexed load. BPF has no
 * population count instruction, so it is the usual SWAR bit trick. Loops
 * are bounded by WOLF_LPM_LEVELS4/6.
 *
 * Consistency: the root map's one word holds the active directory
 * generation (bit 0), s (bits 8..12) and where generations start in the
 * directory map (bits 16..20). It is read once per lookup, and
 * everything reachable from it is immutable while any lookup may read it:
 * user space writes changes into free blocks, publishes them with one
 * atomic store (a directory entry, a leaf, or the root word) and reuses
 * what it replaced only after an RCU grace period. So a lookup returns
 * what the table held before an update or after it, never a mix.
 * Non-sleepable programs (XDP, TC, tracing, ...) are covered as they are;
 * a sleepable program must call the lookup between bpf_rcu_read_lock()
 * and bpf_rcu_read_unlock().
 */
#ifndef WOLF_LPM_H
#define WOLF_LPM_H

#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

/* What a lookup returns when no prefix matches. Values are below it. */
#define WOLF_LPM_MISS 0x3fffffffU
/*
 * A directory entry is a value, or with WOLF_LPM_NODE the index of the
 * slot's root record, or with WOLF_LPM_LEAVES the leaf block of a root
 * without children (no record to read: most routing-table lookups).
 */
#define WOLF_LPM_NODE 0x80000000U
#define WOLF_LPM_LEAVES 0x40000000U
/* Nodes a lookup may visit below a directory of at least 8 bits. */
#define WOLF_LPM_LEVELS4 4
#define WOLF_LPM_LEVELS6 20
/*
 * base1 of a record whose leaves are inline: a node without children and
 * with at most WOLF_LPM_INLINE_MAX runs keeps its leaves in the record
 * itself, in the words of vector (0, 1) and base0 (4) and in base1's low
 * 30 bits (5), so the lookup ends in the record it has just read instead
 * of making one more dependent read in the leaves map. A real base1 is
 * below 2^30, so the flag is unambiguous; values are below 2^30 too.
 */
#define WOLF_LPM_INLINE 0x80000000U
#define WOLF_LPM_INLINE_MAX 4
#define WOLF_LPM_VALUE 0x3fffffffU

/*
 * A node's record. Its leaves - one per run - start at base0 in the
 * leaves map. The leaf block of a directory slot's root node (at an even
 * index) starts with a copy of leafvec, for directory entries that point
 * straight at it (WOLF_LPM_LEAVES); base0 then points just past the copy.
 * Lookups through a record use the record's leafvec.
 */
struct wolf_lpm_node {
	__u64 vector;  /* slot i descends into a child */
	__u64 leafvec; /* slot i starts a run of equal leaves */
	__u32 base0;   /* this node's first leaf */
	__u32 base1;   /* this node's first child record, or WOLF_LPM_INLINE */
};

/*
 * Declares a table: four BPF_F_MMAPABLE arrays of one element each - the
 * root word, then the whole directory, all node records and all leaves as
 * one value apiece - and, in .rodata, how many directory words, records
 * and leaf words those values hold. The sizes here are placeholders:
 * Table.Bind (Go) sizes the maps and sets the caps before load. The
 * verifier knows the caps as constants, so a lookup indexes straight into
 * a value behind one bounds check per read, where a bpf_map_lookup_elem
 * per read would store the index to the stack and load it back on the
 * lookup's critical path.
 */
#define WOLF_LPM_TABLE(name)                       \
	struct {                                   \
		__uint(type, BPF_MAP_TYPE_ARRAY);  \
		__uint(map_flags, BPF_F_MMAPABLE); \
		__uint(max_entries, 1);            \
		__type(key, __u32);                \
		__type(value, __u32);              \
	} name##_root SEC(".maps");                \
	struct {                                   \
		__uint(type, BPF_MAP_TYPE_ARRAY);  \
		__uint(map_flags, BPF_F_MMAPABLE); \
		__uint(max_entries, 1);            \
		__type(key, __u32);                \
		__uint(value_size, 8);             \
	} name##_dir SEC(".maps");                 \
	struct {                                   \
		__uint(type, BPF_MAP_TYPE_ARRAY);  \
		__uint(map_flags, BPF_F_MMAPABLE); \
		__uint(max_entries, 1);            \
		__type(key, __u32);                \
		__uint(value_size, 24);            \
	} name##_nodes SEC(".maps");               \
	struct {                                   \
		__uint(type, BPF_MAP_TYPE_ARRAY);  \
		__uint(map_flags, BPF_F_MMAPABLE); \
		__uint(max_entries, 1);            \
		__type(key, __u32);                \
		__uint(value_size, 8);             \
	} name##_leaves SEC(".maps");              \
	const volatile __u32 name##_dir_cap = 0;   \
	const volatile __u32 name##_nodes_cap = 0; \
	const volatile __u32 name##_leaves_cap = 0

static __always_inline __u64 wolf_lpm__popcount(__u64 x)
{
	x = x - ((x >> 1) & 0x5555555555555555ULL);
	x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
	x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
	return (x * 0x0101010101010101ULL) >> 56;
}

/*
 * Word i of an array of cap words, or WOLF_LPM_MISS past its end. Indexes
 * are 64-bit all along: a 32-bit one would be zero-extended into a new
 * register after the bounds check, which the verifier then cannot tie to
 * the check.
 */
static __always_inline __u32 wolf_lpm__word(const __u32 *a, __u64 i, __u64 cap)
{
	return i < cap ? a[i] : WOLF_LPM_MISS;
}

/*
 * The address is a 128-bit number, most significant bit first, in two
 * host-order halves; an IPv4 address sits in the top 32 bits of hi.
 * Always inlined, so that each call site sees constant map pointers and
 * caps and a constant level bound.
 */
static __always_inline __u32 wolf_lpm__lookup(void *rootm, void *dirm, void *nodesm, void *leavesm,
					      __u32 dcap, __u32 ncap, __u32 lcap, __u64 hi,
					      __u64 lo, const int levels)
{
	struct wolf_lpm_node *nodes, *n;
	__u32 zero = 0, *r, *dir, *leaves, w, s, e, j;
	__u64 v, mask, leafvec, idx;
	int l;

	r = bpf_map_lookup_elem(rootm, &zero);
	dir = bpf_map_lookup_elem(dirm, &zero);
	nodes = bpf_map_lookup_elem(nodesm, &zero);
	leaves = bpf_map_lookup_elem(leavesm, &zero);
	if (!r || !dir || !nodes || !leaves)
		return WOLF_LPM_MISS;
	/* One read: generation, directory width and layout from one store. */
	w = *(volatile __u32 *)r;
	s = (w >> 8) & 31;
	if (s < 8 || s > 24)
		return WOLF_LPM_MISS; /* not loaded yet */
	e = wolf_lpm__word(dir, ((__u64)(w & 1) << ((w >> 16) & 31)) | hi >> (64 - s), dcap);
	if (!(e & (WOLF_LPM_NODE | WOLF_LPM_LEAVES)))
		return e;
	hi = hi << s | lo >> (64 - s);
	lo <<= s;
	v = hi >> 58;
	/* Slots 0..v; for v = 63 the shift wraps to 0 and mask is ~0. */
	mask = (2ULL << v) - 1;
	if (e & WOLF_LPM_LEAVES) {
		/* A root's leaf block: leafvec (two words), then the leaves. */
		idx = e & ~WOLF_LPM_LEAVES;
		leafvec = wolf_lpm__word(leaves, idx, lcap) |
			  (__u64)wolf_lpm__word(leaves, idx + 1, lcap) << 32;
		return wolf_lpm__word(leaves, idx + 1 + wolf_lpm__popcount(leafvec & mask), lcap);
	}
	idx = e & ~WOLF_LPM_NODE;
	for (l = 0; l < levels; l++) {
		if (idx >= ncap)
			return WOLF_LPM_MISS;
		n = &nodes[idx];
		v = hi >> 58;
		mask = (2ULL << v) - 1;
		if (n->base1 & WOLF_LPM_INLINE) {
			/* Run j (0..3) lives in word j + (j & 2): 0, 1, 4, 5. */
			j = ((__u32)wolf_lpm__popcount(n->leafvec & mask) - 1) & 3;
			return ((__u32 *)n)[j + (j & 2)] & WOLF_LPM_VALUE;
		}
		if ((n->vector >> v) & 1) {
			idx = (__u64)n->base1 + wolf_lpm__popcount(n->vector & mask) - 1;
			hi = hi << 6 | lo >> 58;
			lo <<= 6;
			continue;
		}
		return wolf_lpm__word(
			leaves, (__u64)n->base0 + wolf_lpm__popcount(n->leafvec & mask) - 1, lcap);
	}
	return WOLF_LPM_MISS;
}

#define wolf_lpm__maps(name)                                                      \
	&name##_root, &name##_dir, &name##_nodes, &name##_leaves, name##_dir_cap, \
		name##_nodes_cap, name##_leaves_cap

/* Look up an IPv4 address in network byte order (iph->daddr). */
#define wolf_lpm_lookup4(name, be32_addr)                                            \
	wolf_lpm__lookup(wolf_lpm__maps(name), (__u64)bpf_ntohl(be32_addr) << 32, 0, \
			 WOLF_LPM_LEVELS4)

/*
 * Look up an IPv6 address given as 16 bytes in network order, 4-byte
 * aligned as struct in6_addr is (&ip6h->daddr qualifies: the verifier
 * models packet data as NET_IP_ALIGN-ed, so the IPv6 addresses behind an
 * Ethernet header are). Four word loads, where a byte-aligned copy would
 * take sixteen loads and as many stack spills.
 */
static __always_inline void wolf_lpm__key6(const void *addr, __u64 *hi, __u64 *lo)
{
	const __u32 *a = addr;

	*hi = (__u64)bpf_ntohl(a[0]) << 32 | bpf_ntohl(a[1]);
	*lo = (__u64)bpf_ntohl(a[2]) << 32 | bpf_ntohl(a[3]);
}

#define wolf_lpm_lookup6(name, addr16)                                                \
	({                                                                            \
		__u64 __hi, __lo;                                                     \
		wolf_lpm__key6((addr16), &__hi, &__lo);                               \
		wolf_lpm__lookup(wolf_lpm__maps(name), __hi, __lo, WOLF_LPM_LEVELS6); \
	})

#endif /* WOLF_LPM_H */
