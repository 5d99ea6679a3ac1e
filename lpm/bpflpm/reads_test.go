package bpflpm

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/wolf-investigator/wolf/lpm/realtable"
)

// TestRealReads holds the layout to its purpose: few dependent reads per
// lookup on the tables the benchmark measures. It counts the node reads
// below the root word (the walk the BPF lookup makes) at addresses drawn
// from announced space, and fails if the average grows past what the
// layout gives today: about two for IPv4 (the directory, then one node;
// 1.97 on the real table, 2.00 on a million dense /32s) and 4.3 for IPv6
// (4.27, with wide packed nodes; 5.10 without).
func TestRealReads(t *testing.T) {
	all, err := realtable.Load()
	if err != nil {
		t.Skip(err)
	}
	v4, v6 := realtable.Split(all)
	dense := make([]netip.Prefix, 1<<20)
	for i := range dense {
		dense[i] = netip.PrefixFrom(denseAddr(i), 32)
	}
	for _, set := range []struct {
		name  string
		fam   Family
		ps    []netip.Prefix
		limit float64
	}{{"dense", IPv4, dense, 2.05}, {"real IPv4", IPv4, v4, 2.05}, {"real IPv6", IPv6, v6, 4.4}} {
		tb := loadedHeapTable(t, set.fam, set.ps)
		kt := ktrie{width: 32}
		if set.fam == IPv6 {
			kt.width = 128
		}
		for _, p := range set.ps {
			k, l := maskedKey(p)
			kt.insert(k, l)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		hist := map[int]int{}
		probes := probesFrom(rng, set.ps, 100000)
		total, ktotal := 0, 0
		for _, a := range probes {
			_, r := tb.im.walk(keyOf(a), tb.levels)
			hist[r]++
			total += r
			_, v := kt.lookup(keyOf(a))
			ktotal += v
		}
		avg := float64(total) / float64(len(probes))
		st := tb.Stats()
		t.Logf("%s: %.2f node reads per lookup %v (the kernel trie's shape: %.1f); %.1f bytes per prefix used; %+v",
			set.name, avg, hist, float64(ktotal)/float64(len(probes)), float64(st.BytesUsed)/float64(len(set.ps)), st)
		if avg > set.limit {
			t.Errorf("%s: %.2f node reads per lookup, want at most %.2f", set.name, avg, set.limit)
		}
	}
}

// loadedHeapTable is a user-space table holding ps, prefix i mapped to i.
func loadedHeapTable(t *testing.T, fam Family, ps []netip.Prefix) *Table {
	t.Helper()
	vs := make([]uint32, len(ps))
	for i := range vs {
		vs[i] = uint32(i)
	}
	tb, err := newHeapTable(Options{Family: fam, MaxPrefixes: len(ps)})
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.Load(ps, vs); err != nil {
		t.Fatal(err)
	}
	return tb
}
