package bpflpm

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/wolf-investigator/wolf/internal/testutil"
)

// prober runs lookup.bpf.c: the header's lookups, in the kernel, over
// addresses the test supplies.
type prober struct {
	objs struct {
		lookupPrograms
		lookupMaps
	}
	max int
}

func newProber(t *testing.T, t4, t6 *Table, max int) *prober {
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
	p := &prober{max: max}
	if err := spec.LoadAndAssign(&p.objs, &opts); err != nil {
		t.Fatalf("load lookup.bpf.c: %v", err)
	}
	t.Cleanup(func() {
		p.objs.lookupPrograms.Close()
		p.objs.lookupMaps.Close()
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
	if _, err := p.objs.Probes.BatchUpdate(keys, vals, nil); err != nil {
		t.Fatal(err)
	}
}

func (p *prober) run(family Family, n int, out []uint32) error {
	if err := p.objs.Reqs.Put(uint32(0), lookupLpmReq{Family: uint32(family), Count: uint32(n)}); err != nil {
		return err
	}
	if _, err := p.objs.LookupProbes.Run(&ebpf.RunOptions{Data: make([]byte, 64)}); err != nil {
		return err
	}
	keys := make([]uint32, n)
	var cursor ebpf.MapBatchCursor
	got := 0
	for got < n {
		c, err := p.objs.Answers.BatchLookup(&cursor, keys[got:], out[got:n], nil)
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

func newTestTable(t *testing.T, fam Family, dirBits, maxPrefixes int) *Table {
	t.Helper()
	tb, err := New(Options{Family: fam, MaxPrefixes: maxPrefixes, DirBits: dirBits, Nodes: 40 * maxPrefixes, Leaves: 80 * maxPrefixes})
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
	for _, fam := range []Family{IPv4, IPv6} {
		v4 := fam == IPv4
		for _, dirBits := range []int{0, 8, 19} {
			tb := newTestTable(t, fam, dirBits, 2000)
			other := IPv6
			if !v4 {
				other = IPv4
			}
			p := newProber(t, map[bool]*Table{true: tb, false: newTestTable(t, other, 16, 16)}[v4],
				map[bool]*Table{false: tb, true: newTestTable(t, other, 16, 16)}[v4], 20000)
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

// TestGenerationSwitch switches a table between two contents, by bulk
// Load and by batched Update/Delete, while BPF lookups run on the other
// CPU, and requires every answer to be one of the two tables' answers for
// that address: never a torn mix.
func TestGenerationSwitch(t *testing.T) {
	testutil.RequireRoot(t)
	rng := rand.New(rand.NewPCG(7, 7))
	psA, vsA := genPrefixes(rng, true, 3000)
	psB, vsB := genPrefixes(rng, true, 3000)
	for i := range vsB {
		vsB[i] += 1000 // B's answers are told apart from A's
	}
	refA, refB := newRef(true), newRef(true)
	for i, p := range psA {
		refA.m[p.Masked()] = vsA[i]
	}
	for i, p := range psB {
		refB.m[p.Masked()] = vsB[i]
	}
	onlyA := []netip.Prefix{}
	for p := range refA.m {
		if _, ok := refB.m[p]; !ok {
			onlyA = append(onlyA, p)
		}
	}
	onlyB := []netip.Prefix{}
	for p := range refB.m {
		if _, ok := refA.m[p]; !ok {
			onlyB = append(onlyB, p)
		}
	}
	probes := append(probesFor(rng, true, psA, 5000), probesFor(rng, true, psB, 5000)...)
	tb := newTestTable(t, IPv4, 16, 8000)
	p := newProber(t, tb, newTestTable(t, IPv6, 16, 16), len(probes))
	p.set(t, probes)
	if err := tb.Load(psA, vsA); err != nil {
		t.Fatal(err)
	}

	var stop atomic.Bool
	var wg sync.WaitGroup
	var writerErr error
	switches := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		// Alternate: bulk Load B, then back to A by incremental
		// Update+Delete, then Load A, then to B incrementally.
		for i := 0; !stop.Load(); i++ {
			var err error
			switch i % 4 {
			case 0:
				err = tb.Load(psB, vsB)
			case 1:
				if err = tb.Update(psA, vsA); err == nil {
					_, err = tb.Delete(onlyB)
				}
			case 2:
				err = tb.Load(psA, vsA)
			case 3:
				if err = tb.Update(psB, vsB); err == nil {
					_, err = tb.Delete(onlyA)
				}
			}
			if err != nil {
				writerErr = err
				return
			}
			switches++
		}
	}()

	wantA := make([]uint32, len(probes))
	wantB := make([]uint32, len(probes))
	for i, addr := range probes {
		wantA[i], wantB[i] = refA.lookup(addr), refB.lookup(addr)
	}
	out := make([]uint32, len(probes))
	runs, mixed, fromA, fromB := 0, 0, 0, 0
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if err := p.run(IPv4, len(probes), out); err != nil {
			stop.Store(true)
			wg.Wait()
			t.Fatal(err)
		}
		runs++
		a, b := 0, 0
		for i, addr := range probes {
			wa, wb := wantA[i], wantB[i]
			switch out[i] {
			case wa:
				if wa != wb {
					a++
				}
			case wb:
				b++
			default:
				stop.Store(true)
				wg.Wait()
				t.Fatalf("run %d: %v answered %d; table A says %d, table B %d", runs, addr, out[i], wa, wb)
			}
		}
		if a > 0 && b > 0 {
			mixed++
		}
		fromA += a
		fromB += b
	}
	stop.Store(true)
	wg.Wait()
	if writerErr != nil {
		t.Fatal(writerErr)
	}
	t.Logf("%d runs of %d lookups, %d switches; %d runs straddled a switch; %d answers only A gives, %d only B", runs, len(probes), switches, mixed, fromA, fromB)
	if switches < 4 || fromA == 0 || fromB == 0 {
		t.Fatalf("the test did not exercise switching: %d switches, %d A-only and %d B-only answers", switches, fromA, fromB)
	}
}

// TestBPFInline runs inlineScenario with the header's lookup in the
// kernel: every layout a node goes through, and the in-place rewrite of an
// inline leaf, as BPF sees them.
func TestBPFInline(t *testing.T) {
	testutil.RequireRoot(t)
	tb := newTestTable(t, IPv6, 16, 64)
	p := newProber(t, newTestTable(t, IPv4, 16, 16), tb, 4096)
	rng := rand.New(rand.NewPCG(9, 9))
	inlineScenario(t, tb, func(r *ref, what string) {
		t.Helper()
		var ps []netip.Prefix
		for q := range r.m {
			ps = append(ps, q)
		}
		probes := probesFor(rng, false, ps, 50)
		p.set(t, probes)
		out := make([]uint32, len(probes))
		if err := p.run(IPv6, len(probes), out); err != nil {
			t.Fatal(err)
		}
		for i, a := range probes {
			if want := r.lookup(a); out[i] != want {
				t.Fatalf("%s: BPF lookup %v = %d, want %d", what, a, out[i], want)
			}
		}
	})
}
