/* SPDX-License-Identifier: GPL-2.0 */
/*
 * wolf_lpm.h: longest-prefix match for BPF programs, over a structure that
 * user space (Go package github.com/wolf-investigator/wolf/lpm/bpflpm)
 * builds in one BPF array map. Include it after vmlinux.h (or
 * <linux/bpf.h>), declare a table, bind it from Go, look up:
 *
 *	WOLF_LPM_TABLE(routes4);
 *	...
 *	__u32 nh = wolf_lpm_lookup4(routes4, iph->daddr);
 *	if (nh == WOLF_LPM_MISS)
 *		return XDP_PASS;
 *
 * and in Go: table.Bind(spec, "routes4", &opts) before loading (it sizes
 * the map and sets the table's cap in .rodata).
 *
 * The structure is a multibit trie with leaf pushing, in an array of
 * 32-bit words. Every entry is one word: a value, or a pointer to a node.
 * A direct node of stride k is 2^k entries indexed by the next k address
 * bits (the first one, the directory, resolves the first 8..24 bits); a
 * packed node is a direct node of up to 6 bits (8 in IPv6 tables) stored
 * run-length compressed, for the sparse middle of a routing table; a
 * list holds up to WOLF_LPM_LIST prefixes, longest first, for the
 * sparsest parts, and a table of a few prefixes is one list. Leaf
 * pushing: an entry that no longer prefix covers already holds the value of the
 * longest shorter one, so a lookup reads one entry per level and returns
 * the first value it finds; there is no best match to remember and
 * nothing to backtrack to.
 *
 * A lookup is one bpf_map_lookup_elem (inlined by the verifier for an
 * array), then, per level, a bounds check against the cap the verifier
 * knows as a constant and one load. Loops are bounded by
 * WOLF_LPM_LEVELS4/6.
 *
 * Consistency: user space changes the structure with single aligned
 * 4-byte stores - an entry, a list's value - each one read by a lookup
 * at most once, and writes new nodes into free space before the one
 * store of the pointer that publishes them (a lookup reaches a node only
 * through that pointer). What it replaces is reused only after an RCU
 * grace period. So a lookup sees every change before or after, never a
 * torn one. Non-sleepable programs (XDP, TC, tracing, ...) are covered as
 * they are; a sleepable program must call the lookup between
 * bpf_rcu_read_lock() and bpf_rcu_read_unlock().
 */
#ifndef WOLF_LPM_H
#define WOLF_LPM_H

#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

/* What a lookup returns when no prefix matches. Values are below it. */
#define WOLF_LPM_MISS 0x3fffffffU
/*
 * An entry with WOLF_LPM_PTR points at a node: bits 26..30 are the
 * stride of a direct node (1..24), or 0 for a list, bits 0..25 the
 * node's offset in 8-byte units.
 */
#define WOLF_LPM_PTR 0x80000000U
#define WOLF_LPM_OFF 0x03ffffffU
/*
 * A list: word 0 is the value of its range where none of its entries
 * matches, word 1 the number of entries, then entries of four words: the
 * prefix's bits below the list's depth, top-aligned (a 64-bit word), how
 * many there are (1..64), and the value, or WOLF_LPM_SKIP once deleted.
 */
#define WOLF_LPM_LIST 7
#define WOLF_LPM_LIST_WORDS (2 + 4 * WOLF_LPM_LIST)
#define WOLF_LPM_SKIP 0xffffffffU
/*
 * A pointer whose stride field is above WOLF_LPM_PACKED points at a packed
 * node of stride field - WOLF_LPM_PACKED (1..6): a direct node stored as
 * a 64-bit word marking where runs of equal entries start, then one word
 * per run.
 */
#define WOLF_LPM_PACKED 24
#define WOLF_LPM_PACKED_WORDS (2 + 64)
/*
 * A pointer whose stride field is WOLF_LPM_WIDE points at a wide packed
 * node (IPv6 tables): 8 bits stored as eight 32-bit words marking where
 * runs start, eight bytes (two words) of which byte w counts the runs
 * that start in the words before w, then one word per run, at most
 * WOLF_LPM_WIDE_RUNS.
 */
#define WOLF_LPM_WIDE 31
#define WOLF_LPM_WIDE_RUNS 128
#define WOLF_LPM_WIDE_HDR 10
#define WOLF_LPM_WIDE_WORDS (WOLF_LPM_WIDE_HDR + WOLF_LPM_WIDE_RUNS)
/* Entries a lookup may read: root, directory, a node per 4 bits, list. */
#define WOLF_LPM_LEVELS4 9
#define WOLF_LPM_LEVELS6 33

/*
 * Declares a table: a BPF_F_MMAPABLE array of one element, the whole
 * structure, and in .rodata how many words it holds. The size here is a
 * placeholder: Table.Bind (Go) sizes the map and sets the cap before
 * load. The verifier knows the cap as a constant, so a lookup indexes
 * straight into the value behind one bounds check per read, where a
 * bpf_map_lookup_elem per read would store the index to the stack and
 * load it back on the lookup's critical path.
 */
#define WOLF_LPM_TABLE(name)                       \
	struct {                                   \
		__uint(type, BPF_MAP_TYPE_ARRAY);  \
		__uint(map_flags, BPF_F_MMAPABLE); \
		__uint(max_entries, 1);            \
		__type(key, __u32);                \
		__uint(value_size, 64);            \
	} name##_words SEC(".maps");               \
	const volatile __u32 name##_cap = 0

/* BPF has no population count instruction: the SWAR one. */
static __always_inline __u64 wolf_lpm__popcount(__u64 x)
{
	x = x - ((x >> 1) & 0x5555555555555555ULL);
	x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
	x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
	return (x * 0x0101010101010101ULL) >> 56;
}

/*
 * The same for x below 2^32, in 64-bit registers: every constant fits an
 * instruction's 32-bit immediate, where the 64-bit ones each take an
 * ld_imm64 (two instruction slots, a movabs once JITed) per use.
 */
static __always_inline __u64 wolf_lpm__popcount32(__u64 x)
{
	x = x - ((x >> 1) & 0x55555555);
	x = (x & 0x33333333) + ((x >> 2) & 0x33333333);
	x = (x + (x >> 4)) & 0x0f0f0f0f;
	return ((x * 0x01010101) >> 24) & 0xff;
}

/*
 * Moves the address k bits on (k is 1..24). Only IPv6 tables (wide) have
 * a lo half: an IPv4 address is all in hi, and clang does not see that lo
 * stays 0 through the loop.
 */
static __always_inline void wolf_lpm__shift(__u64 *hi, __u64 *lo, __u64 k, const int wide)
{
	if (wide) {
		*hi = *hi << k | *lo >> (64 - k);
		*lo <<= k;
	} else {
		*hi <<= k;
	}
}

/*
 * The walk from entry e - the root word, or a pointer to a node at
 * some depth with the address bits below that depth. The address is a
 * 128-bit number, most significant bit first, in two host-order halves;
 * an IPv4 address sits in the top 32 bits of hi.
 * Always inlined, so that each call site sees a constant map pointer, cap,
 * level bound and wide (an IPv6 table: only those have wide nodes and
 * a lo half; an IPv4 lookup tests for neither). Indexes are 64-bit all along: a 32-bit one
 * would be zero-extended into a new register after the bounds check,
 * which the verifier then cannot tie to the check.
 */
static __always_inline __u32 wolf_lpm__walk(__u32 *w, __u64 cap, __u32 e, __u64 hi, __u64 lo,
					    const int levels, const int wide)
{
	__u32 v;
	__u64 i, j, n, k, l, rl;

	/*
	 * Every table is larger than its largest node (Table.Bind); saying
	 * so once spares a level the check of cap against a node's size.
	 */
	if (cap < WOLF_LPM_WIDE_WORDS)
		return WOLF_LPM_MISS;
	for (l = 0; l < levels; l++) {
		if (!(e & WOLF_LPM_PTR))
			return e;
		i = (__u64)(e & WOLF_LPM_OFF) * 2;
		k = (e >> 26) & 31;
		if (k > WOLF_LPM_PACKED) {
			if (wide && k == WOLF_LPM_WIDE) {
				/*
				 * A wide packed node: run count[j / 32] +
				 * popcount(word j / 32, bits 0..j % 32) - 1 holds
				 * the entry of the next 8 bits, j. The mask is
				 * 64-bit so that the word, loaded zero-extended,
				 * needs no second zero extension after it.
				 */
				barrier_var(i);
				if (i > cap - WOLF_LPM_WIDE_WORDS)
					return WOLF_LPM_MISS;
				j = hi >> 56;
				wolf_lpm__shift(&hi, &lo, 8, wide);
				n = wolf_lpm__popcount32(w[i + (j >> 5)] &
							 ((2ULL << (j & 31)) - 1)) +
				    ((__u8 *)&w[i + 8])[j >> 5];
				if (n > WOLF_LPM_WIDE_RUNS)
					return WOLF_LPM_MISS;
				e = *(volatile __u32 *)&w[i + WOLF_LPM_WIDE_HDR - 1 + n];
				continue;
			}
			/*
			 * A packed node: a 64-bit word marks where runs of
			 * equal entries start, one word per run follows; the
			 * entry of the next k bits is run popcount(bits
			 * 0..slot) - 1.
			 */
			k -= WOLF_LPM_PACKED;
			barrier_var(i);
			if (i > cap - WOLF_LPM_PACKED_WORDS)
				return WOLF_LPM_MISS;
			j = hi >> (64 - k);
			wolf_lpm__shift(&hi, &lo, k, wide);
			/* Bits 0..j; for j = 63 the shift wraps to 0: all. */
			n = wolf_lpm__popcount(*(__u64 *)&w[i] & ((2ULL << j) - 1));
			e = *(volatile __u32 *)&w[i + 1 + (n & 63)];
			continue;
		}
		if (k) {
			/* A direct node: the entry of the next k bits. */
			i += hi >> (64 - k);
			wolf_lpm__shift(&hi, &lo, k, wide);
			if (i >= cap)
				return WOLF_LPM_MISS;
			e = *(volatile __u32 *)&w[i];
			continue;
		}
		/*
		 * A list: the first entry that matches is the longest. Clang
		 * knows i is even and would add the word offsets below with
		 * an OR, whose bounds the verifier does not track: hide it.
		 */
		barrier_var(i);
		if (i > cap - WOLF_LPM_LIST_WORDS)
			return WOLF_LPM_MISS;
		n = w[i + 1];
		for (j = 0; j < WOLF_LPM_LIST; j++) {
			if (j >= n)
				break;
			rl = w[i + 4 + 4 * j];
			v = *(volatile __u32 *)&w[i + 5 + 4 * j];
			if (rl - 1 < 64 && !((hi ^ *(__u64 *)&w[i + 2 + 4 * j]) >> (64 - rl)) &&
			    v != WOLF_LPM_SKIP)
				return v;
		}
		return *(volatile __u32 *)&w[i];
	}
	return WOLF_LPM_MISS;
}

/* wolf_lpm__walk from the root entry, word 0. */
static __always_inline __u32 wolf_lpm__lookup(void *map, __u64 cap, __u64 hi, __u64 lo,
					      const int levels, const int wide)
{
	__u32 zero = 0, *w;

	w = bpf_map_lookup_elem(map, &zero);
	if (!w)
		return WOLF_LPM_MISS;
	return wolf_lpm__walk(w, cap, *(volatile __u32 *)w, hi, lo, levels, wide);
}

/* Look up an IPv4 address in network byte order (iph->daddr). */
#define wolf_lpm_lookup4(name, be32_addr)                                                 \
	wolf_lpm__lookup(&name##_words, name##_cap, (__u64)bpf_ntohl(be32_addr) << 32, 0, \
			 WOLF_LPM_LEVELS4, 0)

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

#define wolf_lpm_lookup6(name, addr16)                                                        \
	({                                                                                    \
		__u64 __hi, __lo;                                                             \
		wolf_lpm__key6((addr16), &__hi, &__lo);                                       \
		wolf_lpm__lookup(&name##_words, name##_cap, __hi, __lo, WOLF_LPM_LEVELS6, 1); \
	})

#endif /* WOLF_LPM_H */
