package lpm

import (
	"fmt"
	"net/netip"
	"runtime"
	"testing"

	"github.com/gaissmai/bart"
)

// The benchmarks run wolf's Table and bart's three tables (Table, Fast,
// Lite: bart v0.30.0) side by side on the same real table and the same
// probes. Compare with:
//
//	go test -run '^$' -bench . -benchtime 2s -count 3 ./lpm/

// nProbes is large enough that the probes' own array does not fit in L2
// and the trie is walked at random, as by real traffic.
const nProbes = 1 << 18

type realSet struct {
	name string
	ps   []netip.Prefix
	seed uint64
}

func realSets(b *testing.B) []realSet {
	v4, v6 := loadReal(b)
	return []realSet{{"v4", v4, 1}, {"v6", v6, 2}}
}

func BenchmarkLookup(b *testing.B) {
	for _, set := range realSets(b) {
		addrs := probes(set.ps, nProbes, set.seed)
		var w Table[int]
		w.BulkLoad(entries(set.ps))
		bt, bf, bl := new(bart.Table[int]), new(bart.Fast[int]), new(bart.Lite)
		for i, p := range set.ps {
			bt.Insert(p, i)
			bf.Insert(p, i)
			bl.Insert(p)
		}
		runtime.GC()
		run := func(name string, f func(netip.Addr) bool) {
			b.Run(set.name+"/"+name, func(b *testing.B) {
				hits := 0
				i := 0
				for b.Loop() {
					if f(addrs[i&(nProbes-1)]) {
						hits++
					}
					i++
				}
				if hits == 0 {
					b.Fatal("no hits")
				}
			})
		}
		// Grouped by what the call answers; compare within a group.
		// Whether a prefix matches: no value is loaded. bart.Lite stores
		// no values, and its Lookup is its Contains.
		run("wolf/Contains", w.Contains)
		run("bart.Fast/Contains", bf.Contains)
		run("bart.Lite/Lookup", func(a netip.Addr) bool { return bl.Lookup(a) })
		// The longest match's value.
		run("wolf/LookupValue", func(a netip.Addr) bool { _, ok := w.LookupValue(a); return ok })
		run("bart.Table/Lookup", func(a netip.Addr) bool { _, ok := bt.Lookup(a); return ok })
		run("bart.Fast/Lookup", func(a netip.Addr) bool { _, ok := bf.Lookup(a); return ok })
		// The longest match's value and prefix (bart.Lite: the prefix).
		run("wolf/Lookup", func(a netip.Addr) bool { _, _, ok := w.Lookup(a); return ok })
		run("bart.Fast/LookupPrefixLPM", func(a netip.Addr) bool {
			_, _, ok := bf.LookupPrefixLPM(netip.PrefixFrom(a, a.BitLen()))
			return ok
		})
		run("bart.Lite/LookupPrefixLPM", func(a netip.Addr) bool {
			_, ok := bl.LookupPrefixLPM(netip.PrefixFrom(a, a.BitLen()))
			return ok
		})
	}
}

// BenchmarkLoad fills an empty table with the whole real table: wolf's
// BulkLoad against bart's Insert loop (bart has no bulk loader). It also
// reports memory, B/prefix: the live heap a loaded table holds, measured
// the same way for every table (outside the timed loop), and wolf's own
// Bytes estimate (see BenchmarkBytes).
func BenchmarkLoad(b *testing.B) {
	for _, set := range realSets(b) {
		es := entries(set.ps)
		load := func(name string, fill func() any) {
			b.Run(set.name+"/"+name, func(b *testing.B) {
				heap := heapDelta(fill)
				for b.Loop() {
					fill()
				}
				b.ReportMetric(float64(heap)/float64(len(es)), "B/prefix")
			})
		}
		load("wolf/BulkLoad", func() any {
			w := new(Table[int])
			w.BulkLoad(es)
			return w
		})
		load("bart.Table/Insert", func() any {
			t := new(bart.Table[int])
			for i, p := range set.ps {
				t.Insert(p, i)
			}
			return t
		})
		load("bart.Fast/Insert", func() any {
			t := new(bart.Fast[int])
			for i, p := range set.ps {
				t.Insert(p, i)
			}
			return t
		})
		load("bart.Lite/Insert", func() any {
			t := new(bart.Lite)
			for _, p := range set.ps {
				t.Insert(p)
			}
			return t
		})
	}
}

// BenchmarkLoadVsInserts compares BulkLoad with one Insert per prefix on
// the first 100 K prefixes of each family (all of them would take wolf's
// Insert loop, which copies a path per prefix, many seconds).
func BenchmarkLoadVsInserts(b *testing.B) {
	for _, set := range realSets(b) {
		ps := set.ps[:min(len(set.ps), 100_000)]
		es := entries(ps)
		b.Run(set.name+"-100k/wolf/BulkLoad", func(b *testing.B) {
			for b.Loop() {
				new(Table[int]).BulkLoad(es)
			}
		})
		b.Run(set.name+"-100k/wolf/Insert", func(b *testing.B) {
			for b.Loop() {
				w := new(Table[int])
				for i, p := range ps {
					w.Insert(p, i)
				}
			}
		})
		b.Run(set.name+"-100k/bart.Table/Insert", func(b *testing.B) {
			for b.Loop() {
				t := new(bart.Table[int])
				for i, p := range ps {
					t.Insert(p, i)
				}
			}
		})
	}
}

// BenchmarkBytes reports wolf's own memory estimate, Table.Bytes, beside
// the heap measurement of BenchmarkLoad.
func BenchmarkBytes(b *testing.B) {
	for _, set := range realSets(b) {
		b.Run(set.name, func(b *testing.B) {
			var w Table[int]
			w.BulkLoad(entries(set.ps))
			n := 0
			for b.Loop() {
				n = w.Bytes()
			}
			b.ReportMetric(float64(n)/float64(w.Len()), "Bytes()/prefix")
		})
	}
}

// heapDelta returns how much the live heap grows while fill's result is
// alive.
func heapDelta(fill func() any) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	keep := fill()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(keep)
	if after.HeapAlloc < before.HeapAlloc {
		return 0
	}
	return after.HeapAlloc - before.HeapAlloc
}

// BenchmarkUpdate inserts and deletes single prefixes on the full table:
// the cost of one write visible to concurrent readers. wolf copies the
// path; bart's InsertPersist/DeletePersist are its equivalent, bart's
// Insert/Delete mutate in place and are not safe with concurrent readers.
func BenchmarkUpdate(b *testing.B) {
	for _, set := range realSets(b) {
		var w Table[int]
		w.BulkLoad(entries(set.ps))
		bt := new(bart.Table[int])
		for i, p := range set.ps {
			bt.Insert(p, i)
		}
		// Prefixes not in the table, next to ones that are.
		fresh := make([]netip.Prefix, 0, 4096)
		for _, a := range probes(set.ps, 4096, set.seed+10) {
			fresh = append(fresh, netip.PrefixFrom(a, a.BitLen()))
		}
		b.Run(set.name+"/wolf/Insert+Delete", func(b *testing.B) {
			i := 0
			for b.Loop() {
				p := fresh[i%len(fresh)]
				w.Insert(p, i)
				w.Delete(p)
				i++
			}
		})
		b.Run(set.name+"/bart.Table/InsertPersist+DeletePersist", func(b *testing.B) {
			i := 0
			t := bt
			for b.Loop() {
				p := fresh[i%len(fresh)]
				t = t.InsertPersist(p, i).DeletePersist(p)
				i++
			}
		})
		b.Run(set.name+"/bart.Table/Insert+Delete", func(b *testing.B) {
			i := 0
			for b.Loop() {
				p := fresh[i%len(fresh)]
				bt.Insert(p, i)
				bt.Delete(p)
				i++
			}
		})
	}
}

// BenchmarkLookupSmall measures lookups on small synthetic tables, where
// everything is cached and the instruction path dominates: there wolf's
// Lookup costs about what its Contains does, so the gap between the two on
// the real table is the one cache miss of loading the value.
func BenchmarkLookupSmall(b *testing.B) {
	for _, n := range []int{100, 10_000} {
		g := newGen(uint64(n))
		var ps []netip.Prefix
		for range n {
			ps = append(ps, netip.PrefixFrom(g.randAddr(true), 8+g.r.IntN(25)).Masked())
		}
		var w Table[int]
		w.BulkLoad(entries(ps))
		bf, bl := new(bart.Fast[int]), new(bart.Lite)
		for i, p := range ps {
			bf.Insert(p, i)
			bl.Insert(p)
		}
		addrs := probes(ps, 1<<12, 7)
		b.Run(fmt.Sprintf("v4-%d/wolf/Contains", n), func(b *testing.B) {
			i := 0
			for b.Loop() {
				w.Contains(addrs[i&(1<<12-1)])
				i++
			}
		})
		b.Run(fmt.Sprintf("v4-%d/bart.Lite/Lookup", n), func(b *testing.B) {
			i := 0
			for b.Loop() {
				bl.Lookup(addrs[i&(1<<12-1)])
				i++
			}
		})
		b.Run(fmt.Sprintf("v4-%d/wolf/Lookup", n), func(b *testing.B) {
			i := 0
			for b.Loop() {
				w.Lookup(addrs[i&(1<<12-1)])
				i++
			}
		})
		b.Run(fmt.Sprintf("v4-%d/wolf/LookupValue", n), func(b *testing.B) {
			i := 0
			for b.Loop() {
				w.LookupValue(addrs[i&(1<<12-1)])
				i++
			}
		})
		b.Run(fmt.Sprintf("v4-%d/bart.Fast/Lookup", n), func(b *testing.B) {
			i := 0
			for b.Loop() {
				bf.Lookup(addrs[i&(1<<12-1)])
				i++
			}
		})
	}
}
