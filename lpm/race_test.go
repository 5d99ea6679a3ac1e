package lpm

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
)

// TestConcurrentReaders runs readers against a writer that keeps adding
// and removing one prefix at a time (by Insert, by BulkLoad, and by
// replacing its value). The table is therefore always the base set or the
// base set plus one toggled prefix, and every answer a reader gets must be
// the answer of one of those tables: never a torn state. Run it with -race.
func TestConcurrentReaders(t *testing.T) {
	g := newGen(77)
	base := ref{}
	var es []Entry[int]
	for i := range 600 {
		p := g.prefix()
		base[p] = i
		es = append(es, Entry[int]{p, i})
	}
	var toggled []netip.Prefix
	for len(toggled) < 8 {
		if p := g.prefix(); p.Bits() > 0 {
			if _, in := base[p]; !in {
				toggled = append(toggled, p)
			}
		}
	}
	var tbl Table[int]
	tbl.BulkLoad(es)

	// For each probe: the base answer, and which toggled prefixes would
	// be its longest match.
	type want struct {
		addr    netip.Addr
		val     int
		pfx     netip.Prefix
		ok      bool
		winners []netip.Prefix
	}
	var wants []want
	for range 2000 {
		a := g.probe(base.sorted())
		v, p, ok := base.lookup(a)
		w := want{addr: a, val: v, pfx: p, ok: ok}
		for _, tp := range toggled {
			if tp.Contains(a) && (!ok || tp.Bits() > p.Bits()) {
				w.winners = append(w.winners, tp)
			}
		}
		wants = append(wants, w)
	}
	const toggledVal = 1 << 20

	var done atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan string, 16)
	fail := func(s string) {
		select {
		case errs <- s:
		default:
		}
	}
	for r := range 3 {
		wg.Go(func() {
			for i := r; !done.Load(); i++ {
				w := &wants[i%len(wants)]
				v, p, ok := tbl.Lookup(w.addr)
				if ok == w.ok && v == w.val && p == w.pfx {
					continue
				}
				valid := false
				for _, tp := range w.winners {
					valid = valid || (ok && p == tp && v >= toggledVal)
				}
				if !valid {
					fail("Lookup(" + w.addr.String() + ") = " + p.String() + ", valid in neither table")
				}
			}
		})
	}
	wg.Go(func() { // a reader of whole snapshots
		for !done.Load() {
			n, extra := 0, 0
			for p, v := range tbl.All() {
				if bv, in := base[p]; in && bv == v {
					n++
				} else {
					extra++
				}
			}
			if n != len(base) || extra > 1 {
				fail("All saw a torn table")
			}
			if l := tbl.Len(); l != len(base) && l != len(base)+1 {
				fail("Len saw a torn table")
			}
		}
	})

	for round := range 60 {
		for i, p := range toggled {
			v := toggledVal + round*len(toggled) + i
			switch round % 3 {
			case 0:
				tbl.Insert(p, v)
			case 1:
				tbl.BulkLoad([]Entry[int]{{p, v}})
			case 2:
				tbl.Insert(p, v)
				tbl.Insert(p, v+1) // a value replacement
			}
			if !tbl.Delete(p) {
				t.Errorf("Delete(%v) = false", p)
			}
		}
	}
	done.Store(true)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	check(t, &tbl, base, g, 500)
}
