package bpflpm

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/testutil"
)

// prober runs lookup.bpf.c: the header's lookups, in the kernel, over
// addresses the test supplies: all of them in one run through bpf_loop
// (lookup_probes), or, with oneByOne, one per run (lookup_probe), which
// needs no bpf_loop and so loads on kernels before 5.17 (5.10).
type prober struct {
	maps     lookupMaps
	prog     *ebpf.Program
	oneByOne bool
	max      int
}

// newProber loads the bpf_loop program where the kernel has bpf_loop, the
// one-probe program where it has not.
func newProber(t *testing.T, t4, t6 *Table, max int) *prober {
	t.Helper()
	return newProberMode(t, t4, t6, max, features.HaveProgramHelper(ebpf.XDP, asm.FnLoop) != nil)
}

func newProberMode(t *testing.T, t4, t6 *Table, max int, oneByOne bool) *prober {
	t.Helper()
	spec, err := loadLookup()
	if err != nil {
		t.Fatal(err)
	}
	var opts ebpf.CollectionOptions
	if err := t4.Bind(spec, "t4", &opts); err != nil {
		t.Fatal(err)
	}
	if err := t6.Bind(spec, "t6", &opts); err != nil {
		t.Fatal(err)
	}
	spec.Maps["probes"].MaxEntries = uint32(max)
	spec.Maps["answers"].MaxEntries = uint32(max)
	p := &prober{max: max, oneByOne: oneByOne}
	// LoadAndAssign loads only the program named in the struct: the
	// kernel would reject the other one where it lacks bpf_loop.
	var loop struct {
		lookupMaps
		Prog *ebpf.Program `ebpf:"lookup_probes"`
	}
	var one struct {
		lookupMaps
		Prog *ebpf.Program `ebpf:"lookup_probe"`
	}
	if oneByOne {
		err = spec.LoadAndAssign(&one, &opts)
		p.maps, p.prog = one.lookupMaps, one.Prog
	} else {
		err = spec.LoadAndAssign(&loop, &opts)
		p.maps, p.prog = loop.lookupMaps, loop.Prog
	}
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			t.Fatalf("load lookup.bpf.c: %+v", ve)
		}
		t.Fatalf("load lookup.bpf.c: %v", err)
	}
	t.Cleanup(func() {
		p.prog.Close()
		p.maps.Close()
	})
	return p
}

// set stores the probes; run then looks them all up.
func (p *prober) set(t *testing.T, addrs []netip.Addr) {
	t.Helper()
	if len(addrs) > p.max {
		t.Fatalf("%d probes, room for %d", len(addrs), p.max)
	}
	keys := make([]uint32, len(addrs))
	vals := make([]lookupLpmProbe, len(addrs))
	for i, a := range addrs {
		keys[i] = uint32(i)
		if a.Is4() {
			b := a.As4()
			copy(vals[i].Addr[:], b[:])
		} else {
			vals[i].Addr = a.As16()
		}
	}
	if _, err := p.maps.Probes.BatchUpdate(keys, vals, nil); err != nil {
		t.Fatal(err)
	}
}

func (p *prober) run(family Family, n int, out []uint32) error {
	for i := range n {
		if !p.oneByOne && i > 0 {
			break
		}
		if err := p.maps.Reqs.Put(uint32(0), lookupLpmReq{Family: uint32(family), Count: uint32(n), Index: uint32(i)}); err != nil {
			return err
		}
		rc, err := p.prog.Run(&ebpf.RunOptions{Data: make([]byte, 64)})
		if err != nil {
			return err
		}
		if rc != 2 { // XDP_PASS
			return fmt.Errorf("lookup program returned %d", rc)
		}
	}
	keys := make([]uint32, n)
	var cursor ebpf.MapBatchCursor
	got := 0
	for got < n {
		c, err := p.maps.Answers.BatchLookup(&cursor, keys[got:], out[got:n], nil)
		got += c
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			break
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// oldKernelWords is the most words an array map's one value holds on
// kernels that cap it at KMALLOC_MAX_SIZE (5.10: 4 MiB on x86-64).
const oldKernelWords = 4 << 20 / 4

func newTestTable(t *testing.T, fam Family, dirBits, maxPrefixes int) *Table {
	t.Helper()
	// Kernels before 5.11 charge maps to RLIMIT_MEMLOCK (64 KiB by
	// default there); later ones to the memory cgroup, and this does
	// nothing.
	if err := rlimit.RemoveMemlock(); err != nil {
		t.Fatal(err)
	}
	opts := Options{Family: fam, MaxPrefixes: maxPrefixes, DirBits: dirBits, Words: 1<<max(dirBits, 16) + 200*maxPrefixes}
	tb, err := New(opts)
	if errors.Is(err, unix.E2BIG) && opts.Words > oldKernelWords {
		// A kernel with the 4 MiB cap: the tests' generous room is
		// not needed, the cap is enough for their tables unless the
		// directory alone takes it.
		if 1<<dirBits >= oldKernelWords/2 {
			t.Skipf("a %d-bit directory does not fit this kernel's 4 MiB map value: %v", dirBits, err)
		}
		opts.Words = oldKernelWords
		tb, err = New(opts)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	return tb
}

// TestBPFProperty loads random prefix sets, updates and deletes them, and
// checks through BPF_PROG_TEST_RUN that the header's lookup in the kernel
// answers every probe as the naive reference does (and as the Go
// rendition does).
func TestBPFProperty(t *testing.T) {
	testutil.RequireRoot(t)
	testBPFProperty(t, features.HaveProgramHelper(ebpf.XDP, asm.FnLoop) != nil)
}

// TestBPFPropertyOneByOne is TestBPFProperty through lookup_probe, the
// program for kernels without bpf_loop, so that it is held to the
// reference on this kernel too.
func TestBPFPropertyOneByOne(t *testing.T) {
	testutil.RequireRoot(t)
	if features.HaveProgramHelper(ebpf.XDP, asm.FnLoop) != nil {
		t.Skip("no bpf_loop here: TestBPFProperty runs one by one already")
	}
	testBPFProperty(t, true)
}

func testBPFProperty(t *testing.T, oneByOne bool) {
	var kinds Stats // the most of each node kind seen after a load
	defer func() {
		if kinds.Directs == 0 || kinds.Packed == 0 || kinds.Lists == 0 {
			t.Errorf("not every node kind was exercised: %+v", kinds)
		}
	}()
	for _, fam := range []Family{IPv4, IPv6} {
		v4 := fam == IPv4
		for _, dirBits := range []int{0, 8, 19} {
			tb := newTestTable(t, fam, dirBits, 2000)
			other := IPv6
			if !v4 {
				other = IPv4
			}
			p := newProberMode(t, map[bool]*Table{true: tb, false: newTestTable(t, other, 16, 16)}[v4],
				map[bool]*Table{false: tb, true: newTestTable(t, other, 16, 16)}[v4], 20000, oneByOne)
			for seed := range uint64(4) {
				rng := rand.New(rand.NewPCG(seed, uint64(dirBits)))
				r := newRef(v4)
				ps, vs := genPrefixes(rng, v4, 1+rng.IntN(1200))
				if err := tb.Load(ps, vs); err != nil {
					t.Fatal(err)
				}
				for i, pf := range ps {
					r.m[pf.Masked()] = vs[i]
				}
				check := func(what string) {
					t.Helper()
					probes := probesFor(rng, v4, ps, 1000)
					if len(probes) > p.max {
						probes = probes[:p.max]
					}
					p.set(t, probes)
					out := make([]uint32, len(probes))
					if err := p.run(fam, len(probes), out); err != nil {
						t.Fatal(err)
					}
					bad := 0
					for i, a := range probes {
						want := r.lookup(a)
						goSide, _ := tb.Lookup(a)
						if out[i] != want || goSide != want {
							if bad < 5 {
								t.Errorf("%v /dir %d seed %d %s: %v: BPF %d, Go %d, want %d", fam, dirBits, seed, what, a, out[i], goSide, want)
							}
							bad++
						}
					}
					if bad > 0 {
						t.Fatalf("%d of %d probes wrong", bad, len(probes))
					}
				}
				check("load")
				st := tb.Stats()
				kinds.Directs, kinds.Packed, kinds.Lists = max(kinds.Directs, st.Directs), max(kinds.Packed, st.Packed), max(kinds.Lists, st.Lists)
				for range 3 {
					ups, uvs := genPrefixes(rng, v4, 1+rng.IntN(50))
					if err := tb.Update(ups, uvs); err != nil {
						t.Fatal(err)
					}
					for i, pf := range ups {
						r.m[pf.Masked()] = uvs[i]
					}
					var dels []netip.Prefix
					for range rng.IntN(50) {
						d := ps[rng.IntN(len(ps))].Masked()
						dels = append(dels, d)
						delete(r.m, d)
					}
					if _, err := tb.Delete(dels); err != nil {
						t.Fatal(err)
					}
					ps = append(ps, ups...)
					check("update")
				}
			}
		}
	}
}

// TestGenerationSwitch switches a table between three contents by Load -
// two big ones, whose directory entries switch one by one, and a small
// one, which fits the root list - while BPF lookups run on the other CPU,
// and requires every answer to be one of the tables' answers for that
// address: never a torn mix.
func TestGenerationSwitch(t *testing.T) {
	testutil.RequireRoot(t)
	rng := rand.New(rand.NewPCG(7, 7))
	type content struct {
		ps  []netip.Prefix
		vs  []uint32
		ref *ref
	}
	var cs []content
	for i, n := range []int{3000, 3000, 5} {
		ps, vs := genPrefixes(rng, true, n)
		for j := range vs {
			vs[j] += 1000 * uint32(i) // answers told apart
		}
		r := newRef(true)
		for j, p := range ps {
			r.m[p.Masked()] = vs[j]
		}
		cs = append(cs, content{ps, vs, r})
	}
	var probes []netip.Addr
	for _, c := range cs {
		probes = append(probes, probesFor(rng, true, c.ps, 3000)...)
	}
	tb := newTestTable(t, IPv4, 16, 8000)
	p := newProber(t, tb, newTestTable(t, IPv6, 16, 16), len(probes))
	p.set(t, probes)
	if err := tb.Load(cs[0].ps, cs[0].vs); err != nil {
		t.Fatal(err)
	}
	want := make([][]uint32, len(cs))
	for i, c := range cs {
		want[i] = make([]uint32, len(probes))
		for j, a := range probes {
			want[i][j] = c.ref.lookup(a)
		}
	}

	var stop atomic.Bool
	var wg sync.WaitGroup
	var writerErr error
	switches := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 1; !stop.Load(); i++ {
			c := cs[i%len(cs)]
			if err := tb.Load(c.ps, c.vs); err != nil {
				writerErr = err
				return
			}
			switches++
		}
	}()
	out := make([]uint32, len(probes))
	runs, mixed := 0, 0
	seen := make([]int, len(cs))
	// Three seconds, and on (up to twenty) until a run has seen every
	// table: on a loaded machine the writer's goroutine may not get the
	// other CPU while the lookups run, and the slow Loads then land
	// between runs.
	deadline, hard := time.Now().Add(3*time.Second), time.Now().Add(20*time.Second)
	for now := time.Now(); now.Before(deadline) || now.Before(hard) && slices.Contains(seen, 0); now = time.Now() {
		if err := p.run(IPv4, len(probes), out); err != nil {
			stop.Store(true)
			wg.Wait()
			t.Fatal(err)
		}
		runs++
		from := make([]bool, len(cs))
		for j, a := range probes {
			ok := false
			for i := range cs {
				if out[j] == want[i][j] {
					ok = true
					only := true
					for o := range cs {
						if o != i && want[o][j] == out[j] {
							only = false
						}
					}
					if only {
						from[i] = true
						seen[i]++
					}
				}
			}
			if !ok {
				stop.Store(true)
				wg.Wait()
				t.Fatalf("run %d: %v answered %d; the tables say %d, %d, %d", runs, a, out[j], want[0][j], want[1][j], want[2][j])
			}
		}
		n := 0
		for _, f := range from {
			if f {
				n++
			}
		}
		if n > 1 {
			mixed++
		}
	}
	stop.Store(true)
	wg.Wait()
	if writerErr != nil {
		t.Fatal(writerErr)
	}
	t.Logf("%d runs of %d lookups, %d switches; %d runs straddled a switch; answers only one table gives: %v", runs, len(probes), switches, mixed, seen)
	if switches < 6 || seen[0] == 0 || seen[1] == 0 || seen[2] == 0 {
		t.Fatalf("the test did not exercise switching: %d switches, answers %v", switches, seen)
	}
}

// TestPrefixAtomicity changes prefixes one at a time while BPF lookups run
// on the other CPU - a /16 with more specific prefixes below it changes
// value, disappears and comes back (its entries and the defaults it
// pushes into nodes below rewritten in place), a /20 and a /26 appear and
// disappear, and ten /30s in one /24 come and go one by one (a list
// rewritten, grown into a direct node, removed) - and requires
// every answer to be what the table gives in one of the states each
// prefix passes through: a lookup sees each change before or after it.
func TestPrefixAtomicity(t *testing.T) {
	testutil.RequireRoot(t)
	for _, dirBits := range []int{8, 16, 24} {
		t.Run(fmt.Sprintf("dir%d", dirBits), func(t *testing.T) {
			mp := netip.MustParsePrefix
			base := map[netip.Prefix]uint32{mp("10.0.0.0/8"): 1, mp("0.0.0.0/0"): 2}
			for i := range 40 {
				base[mp(fmt.Sprintf("10.1.%d.0/24", i*5))] = 30 + uint32(i)
				base[mp(fmt.Sprintf("10.1.%d.%d/28", i*5+1, 16*(i%16)))] = 80 + uint32(i)
			}
			base[mp("10.1.200.0/22")] = 150
			base[mp("10.1.200.64/27")] = 151
			p16, p20, p26 := mp("10.1.0.0/16"), mp("10.1.96.0/20"), mp("10.1.200.128/26")
			// The states: p16 absent or 100 or 101; p20 absent or 200;
			// p26 absent or 300.
			var allowed []*ref
			for _, v16 := range []uint32{0, 100, 101} {
				for _, v20 := range []uint32{0, 200} {
					for _, v26 := range []uint32{0, 300} {
						r := newRef(true)
						for q, v := range base {
							r.m[q] = v
						}
						for q, v := range map[netip.Prefix]uint32{p16: v16, p20: v20, p26: v26} {
							if v != 0 {
								r.m[q] = v
							}
						}
						allowed = append(allowed, r)
					}
				}
			}
			var ps []netip.Prefix
			var vs []uint32
			for q, v := range base {
				ps = append(ps, q)
				vs = append(vs, v)
			}
			ps, vs = append(ps, p16), append(vs, 100)
			var q30 []netip.Prefix
			for i := range 10 {
				q30 = append(q30, mp(fmt.Sprintf("10.1.150.%d/30", 8*i)))
			}
			rng := rand.New(rand.NewPCG(uint64(dirBits), 1))
			probes := probesFor(rng, true, append(append(ps, p20, p26), q30...), 200)
			tb := newTestTable(t, IPv4, dirBits, 1000)
			p := newProber(t, tb, newTestTable(t, IPv6, 16, 16), len(probes))
			p.set(t, probes)
			if err := tb.Load(ps, vs); err != nil {
				t.Fatal(err)
			}
			ok := make([]map[uint32]bool, len(probes))
			for j, a := range probes {
				ok[j] = map[uint32]bool{}
				for _, r := range allowed {
					ok[j][r.lookup(a)] = true
				}
				for i, q := range q30 {
					if q.Contains(a) {
						ok[j][400+uint32(i)] = true
					}
				}
			}
			var stop atomic.Bool
			var wg sync.WaitGroup
			var writerErr error
			changes := 0
			wg.Add(1)
			go func() {
				defer wg.Done()
				steps := []func() error{
					func() error { return tb.Update([]netip.Prefix{p16}, []uint32{101}) },
					func() error { return tb.Update([]netip.Prefix{p20}, []uint32{200}) },
					func() error { _, err := tb.Delete([]netip.Prefix{p16}); return err },
					func() error { return tb.Update([]netip.Prefix{p26}, []uint32{300}) },
					func() error { return tb.Update([]netip.Prefix{p16}, []uint32{100}) },
					func() error { _, err := tb.Delete([]netip.Prefix{p20}); return err },
					func() error { _, err := tb.Delete([]netip.Prefix{p26}); return err },
				}
				for i, q := range q30 {
					steps = append(steps, func() error { return tb.Update([]netip.Prefix{q}, []uint32{400 + uint32(i)}) })
				}
				for _, q := range q30 {
					steps = append(steps, func() error { _, err := tb.Delete([]netip.Prefix{q}); return err })
				}
				for i := 0; !stop.Load(); i++ {
					if err := steps[i%len(steps)](); err != nil {
						writerErr = err
						return
					}
					changes++
				}
			}()
			out := make([]uint32, len(probes))
			runs := 0
			for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); runs++ {
				if err := p.run(IPv4, len(probes), out); err != nil {
					stop.Store(true)
					wg.Wait()
					t.Fatal(err)
				}
				for j, a := range probes {
					if !ok[j][out[j]] {
						stop.Store(true)
						wg.Wait()
						t.Fatalf("run %d: %v answered %d, not an answer of any state (%v)", runs, a, out[j], ok[j])
					}
				}
			}
			stop.Store(true)
			wg.Wait()
			if writerErr != nil {
				t.Fatal(writerErr)
			}
			t.Logf("%d runs of %d lookups during %d changes; %+v", runs, len(probes), changes, tb.Stats())
			if changes < 100 {
				t.Fatalf("only %d changes", changes)
			}
		})
	}
}
