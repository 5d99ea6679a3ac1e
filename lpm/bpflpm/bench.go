package bpflpm

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"

	"github.com/wolf-investigator/wolf/lpm/realtable"
)

// The benchmark (`wolf bench lpm`): wolf's structure and the kernel's
// BPF_MAP_TYPE_LPM_TRIE side by side, in one run, by the kernel
// selftest's method. See bench.bpf.c for the BPF side.

// BenchOps are the operations Bench knows, in the order it runs them.
var BenchOps = []string{"load", "lookup", "update", "delete", "free"}

// DefaultBenchEntries are the dense table sizes of the kernel's benchmark
// runs in Cloudflare's LPM trie write-up.
var DefaultBenchEntries = []int{1, 100, 10_000, 100_000, 1_000_000}

// BenchOptions configure Bench. Zero values take the defaults.
type BenchOptions struct {
	Entries []int    // dense /32 table sizes
	Ops     []string // subset of BenchOps
	Real    bool     // also the real IPv4 table
	IPv6    bool     // also the real IPv6 table
	Repeat  int      // BPF_PROG_TEST_RUN runs per lookup measurement (100)
	Loops   int      // operations per run, inside bpf_loop (10000, the selftest's NR_LOOPS)
	Trials  int      // measurements of each lookup; the median is kept (3)
	// UserOps is how many update and delete calls each user-space
	// measurement makes (100 × Repeat).
	UserOps int
	// Probes is how many addresses from announced space the real-table
	// lookups cycle through (1 Mi). A few thousand stay in the caches,
	// and so do the lines they read: a lookup then costs its
	// instructions and dependent loads, not its misses.
	Probes             int
	DirBits4, DirBits6 int                           // 0: the package default
	RealPrefixes       []netip.Prefix                // nil: realtable.Load
	Log                func(format string, a ...any) // progress; may be nil
}

// BenchResult is one measurement.
type BenchResult struct {
	Set     string `json:"set"`  // dense-v4, real-v4 or real-v6
	Impl    string `json:"impl"` // kernel-trie or wolf
	Op      string `json:"op"`
	Via     string `json:"via"` // bpf (in a BPF program), syscall, user (wolf's Go API), close
	Entries int    `json:"entries"`
	// NsPerOp is the cost of one operation with the harness subtracted
	// (bpf rows); for free, the time to free the whole structure.
	NsPerOp float64 `json:"ns_per_op"`
	Mops    float64 `json:"mops"` // million operations per second: 1000 / NsPerOp
	// Bytes is the memory the kernel holds for the structure: for the
	// trie, the slab it grew by while filling (from 1 K entries, see
	// fillTrie; its memlock accounting below that); for wolf, its map's
	// memlock (with room for a second copy of the nodes and the spare
	// capacity). BytesUsed is
	// the trie's own accounting (entries × node size, what bpftool shows)
	// and the live part of wolf's maps.
	Bytes     uint64 `json:"bytes"`
	BytesUsed uint64 `json:"bytes_used"`
	// RawNsPerOp includes the harness.
	RawNsPerOp float64 `json:"raw_ns_per_op,omitempty"`
	Ops        uint64  `json:"ops"`
	// Speedup, on wolf rows: the kernel trie's ns_per_op over wolf's for
	// the same set, size and operation (bpf against bpf, user space
	// against user space).
	Speedup float64 `json:"speedup,omitempty"`
	// The spread: the lowest and highest ns_per_op and speedup among the
	// samples behind the row - with one run, the lookup trials or the
	// chunks of user-space operations, each a side-by-side pair; with
	// several (Runs), the runs' figures, of which ns_per_op and speedup
	// are then the medians.
	NsPerOpMin float64 `json:"ns_per_op_min,omitempty"`
	NsPerOpMax float64 `json:"ns_per_op_max,omitempty"`
	SpeedupMin float64 `json:"speedup_min,omitempty"`
	SpeedupMax float64 `json:"speedup_max,omitempty"`
	Runs       int     `json:"runs,omitempty"`
}

// BenchHarness is the bare loop's cost, measured in the same run.
type BenchHarness struct {
	Set     string `json:"set"`
	Entries int    `json:"entries"`
	Keys    string `json:"keys"` // random, sequential or probes
	// Probes is how many addresses the lookups cycle through, with
	// keys "probes".
	Probes  int     `json:"probes,omitempty"`
	NsPerOp float64 `json:"ns_per_op"`
}

// BenchReport is everything Bench measured.
type BenchReport struct {
	Results []BenchResult `json:"results"`
	// Mismatches counts probes for which wolf's answer differed from the
	// kernel trie's, over Compared probes.
	Mismatches uint64         `json:"mismatches"`
	Compared   uint64         `json:"probes_compared"`
	Harness    []BenchHarness `json:"harness"`
	Repeat     int            `json:"repeat"`
	Loops      int            `json:"loops"`
	Trials     int            `json:"trials"`
	Method     string         `json:"method"`
	Notes      []string       `json:"notes,omitempty"`
}

const benchMethod = "XDP program run by BPF_PROG_TEST_RUN; bpf_loop does `loops` operations per run timed with bpf_ktime_get_ns " +
	"(tools/testing/selftests/bpf/benchs/bench_lpm_trie_map.c); dense sets hold every /32 in [0,N) and look up prandom % N; " +
	"real sets look up addresses drawn from announced space; the bare loop is measured in the same run and subtracted; " +
	"a lookup measurement is the median of the runs' ns/op (a run another task preempted is dropped), the result the median of `trials` such, interleaved; " +
	"free is the bpf_map_free_deferred work item, timed by workqueue tracepoints"

// MaxBenchEntries is the largest dense set Bench builds: 32 Mi /32s, what
// a table's maps hold with the default capacities (each map value at most
// 512 MiB).
const MaxBenchEntries = 1 << 25

func (o *BenchOptions) normalize() error {
	if o.Entries == nil {
		o.Entries = DefaultBenchEntries
	}
	for _, n := range o.Entries {
		if n < 1 || n > MaxBenchEntries {
			return fmt.Errorf("entries must be 1..%d, got %d", MaxBenchEntries, n)
		}
	}
	if o.Ops == nil {
		o.Ops = BenchOps
	}
	for _, op := range o.Ops {
		if !slices.Contains(BenchOps, op) {
			return fmt.Errorf("unknown op %q (want %s)", op, strings.Join(BenchOps, ", "))
		}
	}
	if o.Repeat == 0 {
		o.Repeat = 100
	}
	if o.Loops == 0 {
		o.Loops = 10_000
	}
	if o.Trials == 0 {
		o.Trials = 3
	}
	if o.UserOps == 0 {
		o.UserOps = 100 * o.Repeat
	}
	if o.Probes == 0 {
		o.Probes = 1 << 20
	}
	if o.Repeat < 1 || o.Loops < 1 || o.Loops > 1<<23 || o.Trials < 1 || o.UserOps < 1 || o.Probes < 1 {
		return errors.New("repeat, loops, trials, user ops and probes must be positive (loops at most 8 Mi, bpf_loop's limit)")
	}
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	return nil
}

func (o *BenchOptions) has(op string) bool { return slices.Contains(o.Ops, op) }

// Bench runs the benchmark. It needs root. Everything it loads is closed
// before it returns, also when ctx is cancelled.
func Bench(ctx context.Context, o BenchOptions) (*BenchReport, error) {
	if err := o.normalize(); err != nil {
		return nil, err
	}
	rep := &BenchReport{Results: []BenchResult{}, Harness: []BenchHarness{}, Repeat: o.Repeat, Loops: o.Loops, Trials: o.Trials, Method: benchMethod}
	var ft *freeTracer
	if o.has("free") {
		var err error
		if ft, err = newFreeTracer(); err != nil {
			rep.Notes = append(rep.Notes, "free not measured: "+err.Error())
		} else {
			defer ft.close()
		}
	}
	for _, n := range o.Entries {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		if err := benchSetOps(ctx, &o, rep, ft, denseSet(n)); err != nil {
			return rep, fmt.Errorf("dense %d: %w", n, err)
		}
	}
	if o.Real || o.IPv6 {
		ps := o.RealPrefixes
		if ps == nil {
			var err error
			if ps, err = realtable.Load(); err != nil {
				return rep, err
			}
		}
		v4, v6 := realtable.Split(ps)
		for _, r := range []struct {
			want bool
			fam  Family
			ps   []netip.Prefix
		}{{o.Real, IPv4, v4}, {o.IPv6, IPv6, v6}} {
			if !r.want {
				continue
			}
			s, err := realSet(r.fam, r.ps, o.Probes)
			if err == nil {
				err = benchSetOps(ctx, &o, rep, ft, s)
			}
			if err != nil {
				return rep, fmt.Errorf("real %v: %w", r.fam, err)
			}
		}
	}
	rep.speedups()
	return rep, nil
}

func (rep *BenchReport) speedups() {
	for i := range rep.Results {
		w := &rep.Results[i]
		if w.Impl != "wolf" || w.NsPerOp <= 0 {
			continue
		}
		via := w.Via
		if via == "user" {
			via = "syscall"
		}
		for _, k := range rep.Results {
			if k.Impl == "kernel-trie" && k.Set == w.Set && k.Entries == w.Entries && k.Op == w.Op && k.Via == via {
				w.Speedup = k.NsPerOp / w.NsPerOp
			}
		}
	}
}

// benchColl is bench.bpf.c loaded with two wolf tables and two tries.
type benchColl struct {
	objs struct {
		benchPrograms
		benchMaps
	}
	w4, w6 *Table
	closed bool
}

// openBench loads bench.bpf.c around tables w4 and w6 (one of them a
// placeholder), with tries and probe arrays of the given sizes.
func openBench(w4, w6 *Table, trie4, trie6, probes4, probes6 int) (*benchColl, error) {
	spec, err := loadBench()
	if err != nil {
		return nil, err
	}
	var opts ebpf.CollectionOptions
	if err := w4.Bind(spec, "w4", &opts); err != nil {
		return nil, err
	}
	if err := w6.Bind(spec, "w6", &opts); err != nil {
		return nil, err
	}
	spec.Maps["trie4"].MaxEntries = uint32(trie4)
	spec.Maps["trie6"].MaxEntries = uint32(trie6)
	spec.Maps["probes4"].MaxEntries = uint32((probes4 + chunkWords - 1) / chunkWords)
	spec.Maps["probes6"].MaxEntries = uint32(max(probes6, 1))
	c := &benchColl{w4: w4, w6: w6}
	if err := spec.LoadAndAssign(&c.objs, &opts); err != nil {
		return nil, fmt.Errorf("load bench.bpf.c: %w", err)
	}
	return c, nil
}

// closeProgs releases everything but the tries, so that freeing them can
// be timed alone.
func (c *benchColl) closeProgs() {
	c.objs.RunBench.Close()
	for _, m := range []*ebpf.Map{c.objs.Ctl, c.objs.Out, c.objs.Probes4, c.objs.Probes6, c.objs.W4Words, c.objs.W6Words} {
		m.Close()
	}
}

func (c *benchColl) close() {
	if c.closed {
		return
	}
	c.closed = true
	c.closeProgs()
	c.objs.Trie4.Close()
	c.objs.Trie6.Close()
}

type benchOp = benchBenchOp

const (
	opBaseRand4   = benchBenchOpBENCH_BASE_RAND4
	opTrieRand4   = benchBenchOpBENCH_TRIE_RAND4
	opWolfRand4   = benchBenchOpBENCH_WOLF_RAND4
	opTrieUpdate4 = benchBenchOpBENCH_TRIE_UPDATE4
	opBaseSeq4    = benchBenchOpBENCH_BASE_SEQ4
	opTrieDelete4 = benchBenchOpBENCH_TRIE_DELETE4
	opCmpSeq4     = benchBenchOpBENCH_CMP_SEQ4
	opBaseProbe4  = benchBenchOpBENCH_BASE_PROBE4
	opTrieProbe4  = benchBenchOpBENCH_TRIE_PROBE4
	opWolfProbe4  = benchBenchOpBENCH_WOLF_PROBE4
	opCmpProbe4   = benchBenchOpBENCH_CMP_PROBE4
	opBaseProbe6  = benchBenchOpBENCH_BASE_PROBE6
	opTrieProbe6  = benchBenchOpBENCH_TRIE_PROBE6
	opWolfProbe6  = benchBenchOpBENCH_WOLF_PROBE6
	opCmpProbe6   = benchBenchOpBENCH_CMP_PROBE6
)

// exec runs op `runs` times, `loops` iterations each, over n keys or
// probes, starting at cursor, and returns what the runs did.
func (c *benchColl) exec(ctx context.Context, op benchOp, n, loops, runs int, cursor uint64) (benchBenchOut, error) {
	return c.execEach(ctx, op, n, loops, runs, cursor, nil)
}

// execEach is exec that also calls each with what the runs did so far,
// after every run.
func (c *benchColl) execEach(ctx context.Context, op benchOp, n, loops, runs int, cursor uint64, each func(benchBenchOut)) (benchBenchOut, error) {
	var out benchBenchOut
	if err := c.objs.Out.Put(uint32(0), benchBenchOut{Cursor: cursor}); err != nil {
		return out, err
	}
	if err := c.objs.Ctl.Put(uint32(0), benchBenchCtl{Op: op, N: uint32(n), Loops: uint32(loops)}); err != nil {
		return out, err
	}
	pkt := make([]byte, 64) // XDP test runs want at least an Ethernet header
	for range runs {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		ret, err := c.objs.RunBench.Run(&ebpf.RunOptions{Data: pkt})
		if err != nil {
			return out, fmt.Errorf("BPF_PROG_TEST_RUN: %w", err)
		}
		if ret != 2 { // XDP_PASS
			return out, fmt.Errorf("bench program returned %d", ret)
		}
		if each != nil {
			if err := c.objs.Out.Lookup(uint32(0), &out); err != nil {
				return out, err
			}
			each(out)
		}
	}
	if err := c.objs.Out.Lookup(uint32(0), &out); err != nil {
		return out, err
	}
	if out.Err != 0 {
		return out, fmt.Errorf("map operation failed in BPF: errno %d", -out.Err)
	}
	return out, nil
}

// execMedian runs op like exec and returns the median over the runs of
// each run's ns per operation. A BPF program runs preemptibly under
// BPF_PROG_TEST_RUN, and this machine is shared: a run during which
// another task or the hypervisor took the CPU is an outlier that a total
// over all runs would carry into the result, and the median drops.
func (c *benchColl) execMedian(ctx context.Context, op benchOp, n, loops, runs int) (float64, uint64, error) {
	per := make([]float64, 0, runs)
	var prev benchBenchOut
	out, err := c.execEach(ctx, op, n, loops, runs, 0, func(cur benchBenchOut) {
		if cur.Ops > prev.Ops {
			per = append(per, float64(cur.Ns-prev.Ns)/float64(cur.Ops-prev.Ops))
		}
		prev = cur
	})
	if err != nil {
		return 0, 0, err
	}
	if len(per) == 0 {
		return 0, 0, nil
	}
	return median(per), out.Ops, nil
}

func nsPer(out benchBenchOut) float64 {
	if out.Ops == 0 {
		return 0
	}
	return float64(out.Ns) / float64(out.Ops)
}

// compare looks every key in [0, n) (or every probe) up in both tables,
// in runs of 64 Ki, and adds disagreements to the report.
func (c *benchColl) compare(ctx context.Context, rep *BenchReport, op benchOp, n int, what string) error {
	const chunk = 1 << 16
	out, err := c.exec(ctx, op, n, chunk, (n+chunk-1)/chunk, 0)
	if err != nil {
		return err
	}
	if out.Ops != uint64(n) {
		return fmt.Errorf("compare %s: %d of %d keys compared", what, out.Ops, n)
	}
	rep.Compared += out.Ops
	rep.Mismatches += out.Mismatches
	if out.Mismatches > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%s: %d mismatches, the last at key/probe %d", what, out.Mismatches, out.LastMismatch-1))
	}
	return nil
}

// lookups measures base, trie and wolf Trials times, interleaved, each
// time the median of Repeat runs (execMedian), and returns the trials.
func (c *benchColl) lookups(ctx context.Context, o *BenchOptions, base, trie, wolf benchOp, n int, probes bool) (bs, ks, ws []float64, err error) {
	loops := o.Loops
	if probes {
		loops = min(loops, n) // a run reads each probe at most once
	}
	for range o.Trials {
		for _, x := range []struct {
			op  benchOp
			out *[]float64
		}{{base, &bs}, {trie, &ks}, {wolf, &ws}} {
			ns, _, err := c.execMedian(ctx, x.op, n, loops, o.Repeat)
			if err != nil {
				return nil, nil, nil, err
			}
			*x.out = append(*x.out, ns)
		}
	}
	return bs, ks, ws, nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func result(set, impl, op, via string, entries int, ns float64, ops uint64) BenchResult {
	r := BenchResult{Set: set, Impl: impl, Op: op, Via: via, Entries: entries, NsPerOp: ns, Ops: ops}
	if ns > 0 {
		r.Mops = 1000 / ns
	}
	return r
}

// mem is a structure's memory: what the kernel holds for it, and what
// the live structure uses of that.
type mem struct{ bytes, used uint64 }

func (r BenchResult) with(m mem) BenchResult {
	r.Bytes, r.BytesUsed = m.bytes, m.used
	return r
}

// lookupRows makes the rows of lookups measured in trials: per trial,
// the harness bs[i] subtracted from the trie's ks[i] and wolf's ws[i].
func lookupRows(set string, entries int, bs, ks, ws []float64, ops uint64, km, wm mem) []BenchResult {
	kd, wd := make([]float64, len(bs)), make([]float64, len(bs))
	for i := range bs {
		kd[i], wd[i] = max(ks[i]-bs[i], 0.01), max(ws[i]-bs[i], 0.01)
	}
	k := result(set, "kernel-trie", "lookup", "bpf", entries, median(kd), ops).with(km)
	k.RawNsPerOp = median(ks)
	w := result(set, "wolf", "lookup", "bpf", entries, median(wd), ops).with(wm)
	w.RawNsPerOp = median(ws)
	spreadRows(&k, &w, kd, wd)
	return []BenchResult{k, w}
}

// spreadRows sets the spread of a pair of rows from side-by-side samples
// of their ns/op.
func spreadRows(k, w *BenchResult, ks, ws []float64) {
	k.NsPerOpMin, k.NsPerOpMax = slices.Min(ks), slices.Max(ks)
	w.NsPerOpMin, w.NsPerOpMax = slices.Min(ws), slices.Max(ws)
	for i := range ks {
		r := ks[i] / ws[i]
		if i == 0 || r < w.SpeedupMin {
			w.SpeedupMin = r
		}
		if i == 0 || r > w.SpeedupMax {
			w.SpeedupMax = r
		}
	}
}

// wolfMem is what the kernel holds for a table's maps, by its own
// accounting, and the live part of it.
func wolfMem(t *Table) mem {
	var m mem
	for _, mp := range t.Maps() {
		m.bytes += memlock(mp)
	}
	m.used = t.Stats().BytesUsed
	return m
}

// fillTrie fills the kernel trie by batch update and measures its memory.
// The trie's own accounting (memlock: entries × node size) leaves out its
// intermediate nodes and the allocator's rounding, so what it holds is
// measured as the growth of unreclaimable slab while it fills: exact
// enough from ~64 K entries on. From 1 K entries up to that, identical
// tries are filled beside it (untimed) until ~64 K entries went in, and
// the growth is shared out among them; below 1 K the memlock figure stays.
func fillTrie(trie *ebpf.Map, keys any, vs []uint32) (time.Duration, mem, error) {
	// Let frees of structures closed before (a kworker can take a
	// third of a second for a big trie) finish first.
	s0 := slab()
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		s1 := slab()
		if d := s1 - s0; d < 256<<10 && d > -256<<10 {
			break
		}
		s0 = s1
	}
	d, err := timeIt(func() error { _, err := trie.BatchUpdate(keys, vs, nil); return err })
	if err != nil {
		return 0, mem{}, fmt.Errorf("fill the kernel trie: %w", err)
	}
	m := mem{used: memlock(trie)}
	m.bytes = m.used
	copies := 1
	if n := len(vs); n >= 1000 && n < 1<<16 {
		for ; copies*n < 1<<16; copies++ {
			extra, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.LPMTrie, KeySize: trie.KeySize(), ValueSize: trie.ValueSize(),
				MaxEntries: trie.MaxEntries(), Flags: trie.Flags()})
			if err != nil {
				return 0, mem{}, fmt.Errorf("a kernel trie to measure memory with: %w", err)
			}
			defer extra.Close()
			if _, err := extra.BatchUpdate(keys, vs, nil); err != nil {
				return 0, mem{}, fmt.Errorf("fill a kernel trie to measure memory with: %w", err)
			}
		}
	}
	if grown := (slab() - s0) / int64(copies); copies*len(vs) >= 1<<16 && grown > int64(m.used) {
		m.bytes = uint64(grown)
	}
	return d, m, nil
}

// slab is the kernel's unreclaimable slab memory, where LPM trie nodes
// live.
func slab() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "SUnreclaim:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n * 1024
			}
		}
	}
	return 0
}

func trieKey4(a uint32, l int) benchTrieKey4 {
	k := benchTrieKey4{Prefixlen: uint32(l)}
	binary.BigEndian.PutUint32(k.Data[:], a)
	return k
}

func denseAddr(i int) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(i))
	return netip.AddrFrom4(b)
}

// memlock is the kernel's own account of a map's memory (fdinfo), what
// bpftool prints as memlock.
func memlock(m *ebpf.Map) uint64 {
	f, err := os.Open(fmt.Sprintf("/proc/self/fdinfo/%d", m.FD()))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "memlock:"); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

func timeIt(f func() error) (time.Duration, error) {
	t0 := time.Now()
	err := f()
	return time.Since(t0), err
}

// chunkWords is how many IPv4 probes bench.bpf.c's probes4 holds per
// element (struct probe_chunk).
const chunkWords = 16

// benchSet is one set of prefixes the benchmark runs every operation on:
// n dense /32s, or a real routing table of one family.
type benchSet struct {
	name string // "dense-v4", "real-v4", "real-v6"
	fam  Family
	ps   []netip.Prefix
	vs   []uint32 // ps[i]'s value, i until an update changes it
	keys any      // the kernel trie's keys in ps's order: []benchTrieKey4 or []benchTrieKey6
	key  func(i int) any
	rng  *rand.Rand
	// Lookups draw random keys of the dense set (probes nil), or read
	// probes drawn from the table's announced space; a real table is also
	// compared at every prefix's edges.
	probes, edge []netip.Addr
}

// denseSet is n /32s, 0.0.0.0, 0.0.0.1, …, each its index as its value.
func denseSet(n int) *benchSet {
	s := &benchSet{name: "dense-v4", fam: IPv4, ps: make([]netip.Prefix, n), vs: make([]uint32, n)}
	keys := make([]benchTrieKey4, n)
	for i := range n {
		s.ps[i] = netip.PrefixFrom(denseAddr(i), 32)
		s.vs[i] = uint32(i)
		keys[i] = trieKey4(uint32(i), 32)
	}
	s.keys, s.key = keys, func(i int) any { return &keys[i] }
	s.rng = rand.New(rand.NewPCG(uint64(n), 1))
	return s
}

// realSet is a real table's prefixes of family fam, masked and without
// duplicates, and nprobes probes drawn from them.
func realSet(fam Family, all []netip.Prefix, nprobes int) (*benchSet, error) {
	s := &benchSet{name: "real-v4", fam: fam}
	if fam == IPv6 {
		s.name = "real-v6"
	}
	seen := map[netip.Prefix]bool{}
	for _, p := range all {
		p = p.Masked()
		if !seen[p] {
			seen[p] = true
			s.ps = append(s.ps, p)
		}
	}
	n := len(s.ps)
	if n == 0 {
		return nil, errors.New("no prefixes")
	}
	s.vs = make([]uint32, n)
	for i := range s.vs {
		s.vs[i] = uint32(i)
	}
	s.rng = rand.New(rand.NewPCG(uint64(n), 2))
	s.probes = probesFrom(s.rng, s.ps, nprobes)
	s.edge = edges(s.ps)
	if fam == IPv4 {
		k4 := make([]benchTrieKey4, n)
		for i, p := range s.ps {
			b := p.Addr().As4()
			k4[i] = trieKey4(binary.BigEndian.Uint32(b[:]), p.Bits())
		}
		s.keys, s.key = k4, func(i int) any { return &k4[i] }
	} else {
		k6 := make([]benchTrieKey6, n)
		for i, p := range s.ps {
			k6[i] = benchTrieKey6{Prefixlen: uint32(p.Bits()), Data: p.Addr().As16()}
		}
		s.keys, s.key = k6, func(i int) any { return &k6[i] }
	}
	return s, nil
}

func (s *benchSet) dense() bool { return s.probes == nil }

// benchSetOps runs every operation on s: loads, lookups, updates and
// deletes (in BPF for the dense set's kernel trie, from user space for
// every set), and frees, each in the kernel trie and in wolf's table, and
// compares the two after every change.
func benchSetOps(ctx context.Context, o *BenchOptions, rep *BenchReport, ft *freeTracer, s *benchSet) error {
	n := len(s.ps)
	if s.dense() {
		o.Log("dense IPv4, %d entries", n)
	} else {
		o.Log("real %v table, %d prefixes", s.fam, n)
	}
	// The set's table, and a placeholder of the other family: the
	// benchmark's programs use both.
	dirBits, otherFam := o.DirBits4, IPv6
	if s.fam == IPv6 {
		dirBits, otherFam = o.DirBits6, IPv4
	}
	w, err := New(Options{Family: s.fam, MaxPrefixes: n, DirBits: dirBits})
	if err != nil {
		return err
	}
	defer w.Close()
	other, err := New(Options{Family: otherFam, MaxPrefixes: 1})
	if err != nil {
		return err
	}
	defer other.Close()
	slots := max(len(s.probes), len(s.edge), 1)
	var c *benchColl
	if s.fam == IPv4 {
		c, err = openBench(w, other, n+1024, 1, slots, 1)
	} else {
		c, err = openBench(other, w, 1, n+1024, 1, slots)
	}
	if err != nil {
		return err
	}
	defer c.close()
	trie, otherTrie := c.objs.Trie4, c.objs.Trie6
	if s.fam == IPv6 {
		trie, otherTrie = otherTrie, trie
	}

	dk, km, err := fillTrie(trie, s.keys, s.vs)
	if err != nil {
		return err
	}
	dw, err := timeIt(func() error { return w.Load(s.ps, s.vs) })
	if err != nil {
		return fmt.Errorf("load wolf: %w", err)
	}
	wm := wolfMem(w)
	if o.has("load") {
		rep.Results = append(rep.Results,
			result(s.name, "kernel-trie", "load", "syscall", n, float64(dk.Nanoseconds())/float64(n), uint64(n)).with(km),
			result(s.name, "wolf", "load", "user", n, float64(dw.Nanoseconds())/float64(n), uint64(n)).with(wm))
	}
	// check compares the two tables: at every dense key and some that
	// miss, or at a real table's prefix edges and its probes.
	check := func(what string) error {
		if s.dense() {
			return c.compare(ctx, rep, opCmpSeq4, n+n/8+16, fmt.Sprintf("dense %d %s", n, what))
		}
		cmpOp := opCmpProbe4
		if s.fam == IPv6 {
			cmpOp = opCmpProbe6
		}
		if err := c.setProbes(s.fam, s.edge); err != nil {
			return err
		}
		if err := c.compare(ctx, rep, cmpOp, len(s.edge), s.name+" prefix edges "+what); err != nil {
			return err
		}
		if err := c.setProbes(s.fam, s.probes); err != nil {
			return err
		}
		return c.compare(ctx, rep, cmpOp, len(s.probes), s.name+" probes "+what)
	}
	if err := check("after load"); err != nil {
		return err
	}

	baseRand := -1.0
	if o.has("lookup") {
		base, trieOp, wolfOp, keys, lookupN, ops := opBaseRand4, opTrieRand4, opWolfRand4, "random", n, o.Loops*o.Repeat
		switch {
		case !s.dense() && s.fam == IPv4:
			base, trieOp, wolfOp, keys = opBaseProbe4, opTrieProbe4, opWolfProbe4, "probes"
		case !s.dense():
			base, trieOp, wolfOp, keys = opBaseProbe6, opTrieProbe6, opWolfProbe6, "probes"
		}
		if !s.dense() {
			lookupN = len(s.probes)
			ops = min(o.Loops, lookupN) * o.Repeat
		}
		bs, ks, ws, err := c.lookups(ctx, o, base, trieOp, wolfOp, lookupN, !s.dense())
		if err != nil {
			return err
		}
		if s.dense() {
			baseRand = median(bs)
		}
		h := BenchHarness{Set: s.name, Entries: n, Keys: keys, NsPerOp: median(bs)}
		if !s.dense() {
			h.Probes = len(s.probes)
		}
		rep.Harness = append(rep.Harness, h)
		rep.Results = append(rep.Results, lookupRows(s.name, n, bs, ks, ws, uint64(ops), km, wm)...)
	}

	if s.dense() {
		if err := c.bpfWrites(ctx, o, rep, s, trie, baseRand); err != nil {
			return err
		}
	}

	// The same updates and deletes from user space: the kernel trie by
	// syscall, wolf by its Go API.
	if o.has("update") {
		idx := make([]int, o.UserOps)
		for i := range idx {
			idx[i] = s.rng.IntN(n)
		}
		var t userTimes
		if err := t.run("update", trie, s.key, w, s.ps, s.vs, n, idx); err != nil {
			return err
		}
		t.rows(rep, s.name, "update", n)
		if err := check("after updates"); err != nil {
			return err
		}
	}
	if o.has("delete") {
		var t userTimes
		ops := 0
		for ops < o.UserOps {
			idx := s.rng.Perm(n)[:min(n, o.UserOps-ops)]
			if err := t.run("delete", trie, s.key, w, s.ps, s.vs, n, idx); err != nil {
				return err
			}
			ops += len(idx)
			if err := check("after deletes"); err != nil {
				return err
			}
			// Put them back, for the next round and so that free frees
			// the whole table.
			rp := make([]netip.Prefix, len(idx))
			rv := make([]uint32, len(idx))
			for j, i := range idx {
				if err := trie.Update(s.key(i), &s.vs[i], ebpf.UpdateAny); err != nil {
					return err
				}
				rp[j], rv[j] = s.ps[i], s.vs[i]
			}
			if err := w.Update(rp, rv); err != nil {
				return err
			}
		}
		t.rows(rep, s.name, "delete", n)
	}
	if o.has("free") && ft != nil {
		wm.used = w.Stats().BytesUsed
		c.closeProgs()
		otherTrie.Close()
		other.Close()
		dk, err := ft.measure(ctx, trie.Close, 1)
		if err != nil {
			return err
		}
		c.closed = true
		dw, err := ft.measure(ctx, w.Close, wolfMaps)
		if err != nil {
			return err
		}
		rep.Results = append(rep.Results,
			result(s.name, "kernel-trie", "free", "close", n, float64(dk.Nanoseconds()), 1).with(km),
			result(s.name, "wolf", "free", "close", n, float64(dw.Nanoseconds()), 1).with(wm))
	}
	return nil
}

// bpfWrites times updates and deletes of the dense set's kernel trie in
// BPF, as the kernel's selftest does them (wolf's structure is written by
// user space, not by BPF). baseRand is the harness's cost with random keys,
// or negative when the lookups did not measure it.
func (c *benchColl) bpfWrites(ctx context.Context, o *BenchOptions, rep *BenchReport, s *benchSet, trie *ebpf.Map, baseRand float64) error {
	n := len(s.ps)
	keys := s.keys.([]benchTrieKey4)
	bpfRuns := max(1, o.Repeat/10)
	if o.has("update") {
		if baseRand < 0 {
			r, err := c.exec(ctx, opBaseRand4, n, o.Loops, bpfRuns, 0)
			if err != nil {
				return err
			}
			baseRand = nsPer(r)
		}
		r, err := c.exec(ctx, opTrieUpdate4, n, o.Loops, bpfRuns, 0)
		if err != nil {
			return err
		}
		k := result(s.name, "kernel-trie", "update", "bpf", n, max(nsPer(r)-baseRand, 0.01), r.Ops)
		k.RawNsPerOp = nsPer(r)
		rep.Results = append(rep.Results, k)
	}
	if o.has("delete") {
		// Delete [0, m) sequentially, refill, repeat; only the deletes
		// are timed. The harness is the same loop without the delete.
		m := min(n, o.UserOps)
		var del, base benchBenchOut
		for del.Ops < uint64(o.UserOps) {
			r, err := c.exec(ctx, opTrieDelete4, m, o.Loops, (m+o.Loops-1)/o.Loops, 0)
			if err != nil {
				return err
			}
			del.Ops += r.Ops
			del.Ns += r.Ns
			if _, err := trie.BatchUpdate(keys[:m], s.vs[:m], nil); err != nil {
				return fmt.Errorf("refill the kernel trie: %w", err)
			}
			r, err = c.exec(ctx, opBaseSeq4, m, o.Loops, (m+o.Loops-1)/o.Loops, 0)
			if err != nil {
				return err
			}
			base.Ops += r.Ops
			base.Ns += r.Ns
		}
		rep.Harness = append(rep.Harness, BenchHarness{Set: s.name, Entries: n, Keys: "sequential", NsPerOp: nsPer(base)})
		k := result(s.name, "kernel-trie", "delete", "bpf", n, max(nsPer(del)-nsPer(base), 0.01), del.Ops)
		k.RawNsPerOp = nsPer(del)
		rep.Results = append(rep.Results, k)
	}
	return nil
}

// userTimes collects user-space operations timed side by side: the
// kernel trie by syscall and wolf's table by its Go API, alternating in
// chunks so that both see the same machine.
type userTimes struct {
	k, w []time.Duration // per chunk
	ops  []int
}

// userChunks is how many side-by-side chunks a measurement is cut into.
const userChunks = 10

// run times op ("update" or "delete") of the entries idx: key(i) is the
// trie's key for ps[i]. An update sets entry i to i+n, in vs too.
func (u *userTimes) run(op string, trie *ebpf.Map, key func(int) any, w *Table, ps []netip.Prefix, vs []uint32, n int, idx []int) error {
	size := max(1, (len(idx)+userChunks-1)/userChunks)
	for lo := 0; lo < len(idx); lo += size {
		chunk := idx[lo:min(lo+size, len(idx))]
		var dk, dw time.Duration
		var err error
		switch op {
		case "update":
			if dk, err = timeIt(func() error {
				for _, i := range chunk {
					v := uint32(i + n)
					if err := trie.Update(key(i), &v, ebpf.UpdateAny); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				return fmt.Errorf("update the kernel trie: %w", err)
			}
			if dw, err = timeIt(func() error {
				for _, i := range chunk {
					if err := w.Update(ps[i:i+1], []uint32{uint32(i + n)}); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				return fmt.Errorf("update wolf: %w", err)
			}
			for _, i := range chunk {
				vs[i] = uint32(i + n)
			}
		case "delete":
			if dk, err = timeIt(func() error {
				for _, i := range chunk {
					if err := trie.Delete(key(i)); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				return fmt.Errorf("delete from the kernel trie: %w", err)
			}
			if dw, err = timeIt(func() error {
				for _, i := range chunk {
					if _, err := w.Delete(ps[i : i+1]); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				return fmt.Errorf("delete from wolf: %w", err)
			}
		default:
			panic("userTimes: unknown op " + op)
		}
		u.k, u.w, u.ops = append(u.k, dk), append(u.w, dw), append(u.ops, len(chunk))
	}
	return nil
}

// rows appends the pair of rows: ns/op over all operations, the spread
// over the chunks.
func (u *userTimes) rows(rep *BenchReport, set, op string, n int) {
	var tk, tw time.Duration
	ops := 0
	ks, ws := make([]float64, len(u.k)), make([]float64, len(u.k))
	for i := range u.k {
		tk, tw, ops = tk+u.k[i], tw+u.w[i], ops+u.ops[i]
		ks[i] = max(float64(u.k[i].Nanoseconds())/float64(u.ops[i]), 0.01)
		ws[i] = max(float64(u.w[i].Nanoseconds())/float64(u.ops[i]), 0.01)
	}
	k := result(set, "kernel-trie", op, "syscall", n, float64(tk.Nanoseconds())/float64(ops), uint64(ops))
	w := result(set, "wolf", op, "user", n, float64(tw.Nanoseconds())/float64(ops), uint64(ops))
	spreadRows(&k, &w, ks, ws)
	rep.Results = append(rep.Results, k, w)
}

// probesFrom draws addresses from announced space: a random prefix of the
// table, then random host bits inside it.
func probesFrom(rng *rand.Rand, ps []netip.Prefix, n int) []netip.Addr {
	out := make([]netip.Addr, n)
	for i := range out {
		p := ps[rng.IntN(len(ps))]
		k := keyOf(p.Addr())
		r := key{hi: rng.Uint64(), lo: rng.Uint64()}
		l := uint(p.Bits())
		m := key{hi: ^uint64(0), lo: ^uint64(0)}.masked(l)
		k = key{hi: k.hi&m.hi | r.hi&^m.hi, lo: k.lo&m.lo | r.lo&^m.lo}
		if p.Addr().Is4() {
			k.hi &^= 1<<32 - 1
			k.lo = 0
		}
		out[i] = k.addr(p.Addr().Is4())
	}
	return out
}

// edges are the first and the last address of every prefix: where an
// off-by-one in a structure shows.
func edges(ps []netip.Prefix) []netip.Addr {
	out := make([]netip.Addr, 0, 2*len(ps))
	for _, p := range ps {
		k := keyOf(p.Addr())
		m := key{hi: ^uint64(0), lo: ^uint64(0)}.masked(uint(p.Bits()))
		last := key{hi: k.hi | ^m.hi, lo: k.lo | ^m.lo}
		if p.Addr().Is4() {
			last.hi &^= 1<<32 - 1
			last.lo = 0
		}
		out = append(out, p.Addr(), last.addr(p.Addr().Is4()))
	}
	return out
}

func (c *benchColl) setProbes(fam Family, addrs []netip.Addr) error {
	if fam == IPv4 {
		chunks := make([]benchProbeChunk, (len(addrs)+chunkWords-1)/chunkWords)
		for i, a := range addrs {
			b := a.As4()
			// The BPF side reads the word in host order and hands it
			// to the lookups as a network-order address.
			chunks[i/chunkWords].V[i%chunkWords] = binary.NativeEndian.Uint32(b[:])
		}
		keys := make([]uint32, len(chunks))
		for i := range keys {
			keys[i] = uint32(i)
		}
		_, err := c.objs.Probes4.BatchUpdate(keys, chunks, nil)
		return err
	}
	vals := make([]benchAddr6, len(addrs))
	keys := make([]uint32, len(addrs))
	for i, a := range addrs {
		vals[i].A = a.As16()
		keys[i] = uint32(i)
	}
	_, err := c.objs.Probes6.BatchUpdate(keys, vals, nil)
	return err
}

// MergeRuns combines whole runs of Bench, each a side-by-side measurement
// of both structures, into one report: per row the median of the runs'
// ns/op, bytes and speedup (each run's speedup is its own trie-to-wolf
// ratio), and the lowest and highest of them as the spread. Mismatches and
// probes compared add up.
func MergeRuns(reps []*BenchReport) *BenchReport {
	if len(reps) == 0 {
		return &BenchReport{Results: []BenchResult{}, Harness: []BenchHarness{}}
	}
	if len(reps) == 1 {
		return reps[0]
	}
	out := *reps[0]
	out.Results, out.Harness, out.Notes = []BenchResult{}, []BenchHarness{}, nil
	out.Mismatches, out.Compared = 0, 0
	type rowKey struct {
		set, impl, op, via string
		entries            int
	}
	rows := map[rowKey][]BenchResult{}
	var order []rowKey
	harness := map[BenchHarness][]float64{}
	var horder []BenchHarness
	notes := map[string]bool{}
	for _, r := range reps {
		out.Mismatches += r.Mismatches
		out.Compared += r.Compared
		for _, x := range r.Results {
			k := rowKey{x.Set, x.Impl, x.Op, x.Via, x.Entries}
			if _, ok := rows[k]; !ok {
				order = append(order, k)
			}
			rows[k] = append(rows[k], x)
		}
		for _, h := range r.Harness {
			k := h
			k.NsPerOp = 0
			if _, ok := harness[k]; !ok {
				horder = append(horder, k)
			}
			harness[k] = append(harness[k], h.NsPerOp)
		}
		for _, n := range r.Notes {
			if !notes[n] {
				notes[n] = true
				out.Notes = append(out.Notes, n)
			}
		}
	}
	pick := func(xs []BenchResult, f func(BenchResult) float64) []float64 {
		v := make([]float64, 0, len(xs))
		for _, x := range xs {
			if y := f(x); y > 0 {
				v = append(v, y)
			}
		}
		return v
	}
	for _, k := range order {
		xs := rows[k]
		m := xs[0]
		m.Runs = len(xs)
		ns := pick(xs, func(x BenchResult) float64 { return x.NsPerOp })
		m.NsPerOp, m.NsPerOpMin, m.NsPerOpMax = median(ns), slices.Min(ns), slices.Max(ns)
		m.Mops = 1000 / m.NsPerOp
		if raw := pick(xs, func(x BenchResult) float64 { return x.RawNsPerOp }); len(raw) > 0 {
			m.RawNsPerOp = median(raw)
		}
		if b := pick(xs, func(x BenchResult) float64 { return float64(x.Bytes) }); len(b) > 0 {
			m.Bytes = uint64(median(b))
		}
		if b := pick(xs, func(x BenchResult) float64 { return float64(x.BytesUsed) }); len(b) > 0 {
			m.BytesUsed = uint64(median(b))
		}
		m.Speedup, m.SpeedupMin, m.SpeedupMax = 0, 0, 0
		if sp := pick(xs, func(x BenchResult) float64 { return x.Speedup }); len(sp) > 0 {
			m.Speedup, m.SpeedupMin, m.SpeedupMax = median(sp), slices.Min(sp), slices.Max(sp)
		}
		out.Results = append(out.Results, m)
	}
	for _, k := range horder {
		h := k
		h.NsPerOp = median(harness[k])
		out.Harness = append(out.Harness, h)
	}
	return &out
}
