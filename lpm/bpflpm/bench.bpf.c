//go:build ignore

// SPDX-License-Identifier: GPL-2.0
/*
 * wolf bench lpm, the BPF side. It follows the kernel's own LPM benchmark
 * (tools/testing/selftests/bpf/benchs/bench_lpm_trie_map.c): an XDP
 * program, run by BPF_PROG_TEST_RUN, does `loops` operations per run
 * inside bpf_loop and times the loop with bpf_ktime_get_ns. Keys are
 * bpf_get_prandom_u32() % n over a table holding every /32 in [0, n) -
 * the dense, worst case for a binary trie - or, for a real routing table,
 * addresses drawn from announced space, read in turn from an array.
 *
 * Every operation has a twin that does the same work without touching any
 * table (the harness: the random number, the modulo or the probe read, the
 * callback). User space measures the harness in the same run and
 * subtracts it, so what is left is the cost of the lookup itself.
 *
 * The kernel's BPF_MAP_TYPE_LPM_TRIE and wolf's structure are declared
 * side by side and hold the same prefixes; the compare operations look
 * every key up in both and count disagreements.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "wolf_lpm.h"

char LICENSE[] SEC("license") = "GPL";

WOLF_LPM_TABLE(w4);
WOLF_LPM_TABLE(w6);

struct trie_key4 {
	__u32 prefixlen;
	__u8 data[4];
};

struct trie_key6 {
	__u32 prefixlen;
	__u8 data[16];
};

/* 4-byte aligned, as struct in6_addr is (wolf_lpm_lookup6 reads words). */
struct addr6 {
	__u8 a[16];
} __attribute__((aligned(4)));

/* Every map is sized by user space before load; 1 is a placeholder. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
	__type(key, struct trie_key4);
	__type(value, __u32);
} trie4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
	__type(key, struct trie_key6);
	__type(value, __u32);
} trie6 SEC(".maps");

/* IPv4 probes in network order, 16 to an element (a cache line, and no
 * rounding of each 4-byte value up to 8 bytes). */
struct probe_chunk {
	__u32 v[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct probe_chunk);
} probes4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct addr6);
} probes6 SEC(".maps");

enum bench_op {
	BENCH_NONE = 0,
	/* random /32 keys in [0, n) */
	BENCH_BASE_RAND4,
	BENCH_TRIE_RAND4,
	BENCH_WOLF_RAND4,
	BENCH_TRIE_UPDATE4,
	/* sequential keys from the cursor; stop at n */
	BENCH_BASE_SEQ4,
	BENCH_TRIE_DELETE4,
	BENCH_CMP_SEQ4,
	/* probes from the arrays, in turn, wrapping at n */
	BENCH_BASE_PROBE4,
	BENCH_TRIE_PROBE4,
	BENCH_WOLF_PROBE4,
	BENCH_CMP_PROBE4,
	BENCH_BASE_PROBE6,
	BENCH_TRIE_PROBE6,
	BENCH_WOLF_PROBE6,
	BENCH_CMP_PROBE6,
};

/* What one run does, written by user space before the run. */
struct bench_ctl {
	enum bench_op op;
	__u32 n;     /* key range, or number of probes */
	__u32 loops; /* bpf_loop iterations per run */
	__u32 pad;
};

/* What runs did; user space zeroes it between measurements. */
struct bench_out {
	__u64 ns;   /* time inside bpf_loop, summed */
	__u64 ops;  /* operations done */
	__u64 sink; /* answers summed, so nothing is optimized away */
	__u64 mismatches;
	__u64 cursor;	     /* first key or probe of the next run */
	__u64 last_mismatch; /* key or probe index + 1 */
	__s64 err;	     /* last error from a map update or delete */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bench_ctl);
} ctl SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bench_out);
} out SEC(".maps");

/*
 * The loop's state. The verifier checks a bpf_loop callback once per
 * possible iteration until the states converge, comparing even scalars it
 * does not need exactly by range: a counter that starts at a constant
 * (0, 1, 2, ...) never converges. So every field starts from a value read
 * from a map, unknown to the verifier, and runs write their totals back.
 */
struct loop_ctx {
	__u32 n;
	__u32 start;
	__u64 ops;
	__u64 sink;
	__u64 mismatches;
	__u64 last_mismatch;
	__s64 err;
};

static __always_inline __u32 rand_key(struct loop_ctx *c)
{
	return bpf_get_prandom_u32() % c->n;
}

/* The i-th sequential key of this run; callers stop at n. */
static __always_inline __u32 seq_key(struct loop_ctx *c, __u32 i)
{
	return c->start + i;
}

/* The i-th probe of this run, wrapping (user space keeps loops <= n). */
static __always_inline __u32 probe_index(struct loop_ctx *c, __u32 i)
{
	__u32 k = c->start + i;

	return k >= c->n ? k - c->n : k;
}

static __always_inline __u32 trie_get4(__be32 a)
{
	struct trie_key4 key = { .prefixlen = 32 };
	__u32 *v;

	__builtin_memcpy(key.data, &a, sizeof(a));
	v = bpf_map_lookup_elem(&trie4, &key);
	return v ? *v : WOLF_LPM_MISS;
}

static __always_inline __u32 trie_get6(const struct addr6 *a)
{
	struct trie_key6 key = { .prefixlen = 128 };
	__u32 *v;

	__builtin_memcpy(key.data, a->a, sizeof(key.data));
	v = bpf_map_lookup_elem(&trie6, &key);
	return v ? *v : WOLF_LPM_MISS;
}

static __always_inline __be32 probe4(__u32 i)
{
	__u32 k = i / 16;
	struct probe_chunk *c = bpf_map_lookup_elem(&probes4, &k);

	return c ? c->v[i & 15] : 0;
}

static long base_rand4(__u32 i, void *ctx)
{
	struct loop_ctx *c = ctx;

	c->sink += bpf_htonl(rand_key(c));
	c->ops++;
	return 0;
}

static long trie_rand4(__u32 i, void *ctx)
{
	struct loop_ctx *c = ctx;

	c->sink += trie_get4(bpf_htonl(rand_key(c)));
	c->ops++;
	return 0;
}

static long wolf_rand4(__u32 i, void *ctx)
{
	struct loop_ctx *c = ctx;

	c->sink += wolf_lpm_lookup4(w4, bpf_htonl(rand_key(c)));
	c->ops++;
	return 0;
}

/* Replace an existing entry with the same value, as the selftest does. */
static long trie_update4(__u32 i, void *ctx)
{
	struct loop_ctx *c = ctx;
	struct trie_key4 key = { .prefixlen = 32 };
	__u32 k = rand_key(c);
	__be32 a = bpf_htonl(k);
	long err;

	__builtin_memcpy(key.data, &a, sizeof(a));
	err = bpf_map_update_elem(&trie4, &key, &k, BPF_ANY);
	if (err)
		c->err = err;
	c->ops++;
	return 0;
}

static long base_seq4(__u32 i, void *ctx)
{
	struct loop_ctx *c = ctx;
	__u32 k = seq_key(c, i);

	if (k >= c->n)
		return 1;
	c->sink += bpf_htonl(k);
	c->ops++;
	return 0;
}

static long trie_delete4(__u32 i, void *ctx)
{
	struct loop_ctx *c = ctx;
	struct trie_key4 key = { .prefixlen = 32 };
	__u32 k = seq_key(c, i);
	__be32 a;
	long err;

	if (k >= c->n)
		return 1;
	a = bpf_htonl(k);
	__builtin_memcpy(key.data, &a, sizeof(a));
	err = bpf_map_delete_elem(&trie4, &key);
	if (err)
		c->err = err;
	c->ops++;
	return 0;
}

static __always_inline void compare(struct loop_ctx *c, __u32 a, __u32 b, __u32 k)
{
	if (a != b) {
		c->last_mismatch = (__u64)k + 1;
		c->mismatches++;
	}
	c->ops++;
}

static long cmp_seq4(__u32 i, void *ctx)
{
	struct loop_ctx *c = ctx;
	__u32 k = seq_key(c, i);
	__be32 a;

	if (k >= c->n)
		return 1;
	a = bpf_htonl(k);
	compare(c, trie_get4(a), wolf_lpm_lookup4(w4, a), k);
	return 0;
}

static long base_probe4(__u32 i, void *ctx)
{
	struct loop_ctx *c = ctx;

	c->sink += probe4(probe_index(c, i));
	c->ops++;
	return 0;
}

static long trie_probe4(__u32 i, void *ctx)
{
	struct loop_ctx *c = ctx;

	c->sink += trie_get4(probe4(probe_index(c, i)));
	c->ops++;
	return 0;
}

static long wolf_probe4(__u32 i, void *ctx)
{
	struct loop_ctx *c = ctx;

	c->sink += wolf_lpm_lookup4(w4, probe4(probe_index(c, i)));
	c->ops++;
	return 0;
}

static long cmp_probe4(__u32 i, void *ctx)
{
	struct loop_ctx *c = ctx;
	__u32 k = seq_key(c, i);
	__be32 a;

	if (k >= c->n)
		return 1;
	a = probe4(k);
	compare(c, trie_get4(a), wolf_lpm_lookup4(w4, a), k);
	return 0;
}

static long base_probe6(__u32 i, void *ctx)
{
	struct loop_ctx *c = ctx;
	__u32 k = probe_index(c, i);
	struct addr6 *a = bpf_map_lookup_elem(&probes6, &k);

	if (!a)
		return 1;
	c->sink += a->a[15];
	c->ops++;
	return 0;
}

static long trie_probe6(__u32 i, void *ctx)
{
	struct loop_ctx *c = ctx;
	__u32 k = probe_index(c, i);
	struct addr6 *a = bpf_map_lookup_elem(&probes6, &k);

	if (!a)
		return 1;
	c->sink += trie_get6(a);
	c->ops++;
	return 0;
}

static long wolf_probe6(__u32 i, void *ctx)
{
	struct loop_ctx *c = ctx;
	__u32 k = probe_index(c, i);
	struct addr6 *a = bpf_map_lookup_elem(&probes6, &k);

	if (!a)
		return 1;
	c->sink += wolf_lpm_lookup6(w6, a->a);
	c->ops++;
	return 0;
}

static long cmp_probe6(__u32 i, void *ctx)
{
	struct loop_ctx *c = ctx;
	__u32 k = seq_key(c, i);
	struct addr6 *a;

	if (k >= c->n)
		return 1;
	a = bpf_map_lookup_elem(&probes6, &k);
	if (!a)
		return 1;
	compare(c, trie_get6(a), wolf_lpm_lookup6(w6, a->a), k);
	return 0;
}

/* bpf_loop wants a constant callback: one call site per operation. */
#define RUN(cb) bpf_loop(loops, cb, &c, 0)

SEC("xdp")
int run_bench(struct xdp_md *xdp)
{
	struct loop_ctx c = {};
	struct bench_ctl *cfg;
	struct bench_out *o;
	__u32 zero = 0, loops;
	__u64 t0, t1;

	cfg = bpf_map_lookup_elem(&ctl, &zero);
	o = bpf_map_lookup_elem(&out, &zero);
	if (!cfg || !o || !cfg->n)
		return XDP_ABORTED;
	c.n = cfg->n;
	c.start = o->cursor;
	c.ops = o->ops;
	c.sink = o->sink;
	c.mismatches = o->mismatches;
	c.last_mismatch = o->last_mismatch;
	c.err = o->err;
	loops = cfg->loops;

	t0 = bpf_ktime_get_ns();
	switch (cfg->op) {
	case BENCH_BASE_RAND4:
		RUN(base_rand4);
		break;
	case BENCH_TRIE_RAND4:
		RUN(trie_rand4);
		break;
	case BENCH_WOLF_RAND4:
		RUN(wolf_rand4);
		break;
	case BENCH_TRIE_UPDATE4:
		RUN(trie_update4);
		break;
	case BENCH_BASE_SEQ4:
		RUN(base_seq4);
		break;
	case BENCH_TRIE_DELETE4:
		RUN(trie_delete4);
		break;
	case BENCH_CMP_SEQ4:
		RUN(cmp_seq4);
		break;
	case BENCH_BASE_PROBE4:
		RUN(base_probe4);
		break;
	case BENCH_TRIE_PROBE4:
		RUN(trie_probe4);
		break;
	case BENCH_WOLF_PROBE4:
		RUN(wolf_probe4);
		break;
	case BENCH_CMP_PROBE4:
		RUN(cmp_probe4);
		break;
	case BENCH_BASE_PROBE6:
		RUN(base_probe6);
		break;
	case BENCH_TRIE_PROBE6:
		RUN(trie_probe6);
		break;
	case BENCH_WOLF_PROBE6:
		RUN(wolf_probe6);
		break;
	case BENCH_CMP_PROBE6:
		RUN(cmp_probe6);
		break;
	default:
		return XDP_ABORTED;
	}
	t1 = bpf_ktime_get_ns();

	o->ns += t1 - t0;
	o->ops = c.ops;
	o->sink = c.sink;
	o->mismatches = c.mismatches;
	o->last_mismatch = c.last_mismatch;
	o->err = c.err;
	/* Sequential keys continue where this run stopped; probes wrap. */
	o->cursor = (c.start + loops) % c.n;
	return XDP_PASS;
}
