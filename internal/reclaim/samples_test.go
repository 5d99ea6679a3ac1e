package reclaim

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/wolf-investigator/wolf/internal/fact"
	"github.com/wolf-investigator/wolf/internal/kallsyms"
	"github.com/wolf-investigator/wolf/internal/probekit"
)

// Windows of the samples map: each is the reading less the one before; a
// cgroup unchanged for probekit.IdleAfter readings is evicted, and counts
// from zero when it comes back.
func TestSampleWindows(t *testing.T) {
	var w sampleWindows
	got, ev := w.step(map[uint64]reclaimCpuSamples{7: {Busy: 100, Kernel: 80, Miss: 50, Reclaim: 5}})
	if got[7] != (CPUSamples{Busy: 100, Kernel: 80, Miss: 50, Reclaim: 5}) || len(ev) != 0 {
		t.Fatalf("first window %+v, evict %v", got, ev)
	}
	got, _ = w.step(map[uint64]reclaimCpuSamples{7: {Busy: 150, Kernel: 100, Miss: 70, Reclaim: 5}})
	if got[7] != (CPUSamples{Busy: 50, Kernel: 20, Miss: 20}) {
		t.Fatalf("second window %+v", got[7])
	}
	var evicted bool
	for i := range probekit.IdleAfter {
		got, ev = w.step(map[uint64]reclaimCpuSamples{7: {Busy: 150, Kernel: 100, Miss: 70, Reclaim: 5}})
		if _, ok := got[7]; ok {
			t.Fatalf("idle window %d has samples: %+v", i, got[7])
		}
		evicted = evicted || len(ev) == 1 && ev[0] == 7
	}
	if !evicted {
		t.Fatal("an idle cgroup was not evicted")
	}
	got, _ = w.step(map[uint64]reclaimCpuSamples{7: {Busy: 3}})
	if got[7] != (CPUSamples{Busy: 3}) {
		t.Fatalf("after eviction %+v, want counted from zero", got[7])
	}
}

// A restart (every investigator attached) leaves out what was counted
// before it: the next window is the reading less the one at the restart.
func TestSampleWindowsRestart(t *testing.T) {
	var w sampleWindows
	w.restart(map[uint64]reclaimCpuSamples{7: {Busy: 500, Kernel: 400}, 9: {Busy: 300}})
	got, _ := w.step(map[uint64]reclaimCpuSamples{7: {Busy: 600, Kernel: 450, Miss: 30}, 9: {Busy: 300}, 11: {Busy: 5}})
	if got[7] != (CPUSamples{Busy: 100, Kernel: 50, Miss: 30}) || got[11] != (CPUSamples{Busy: 5}) {
		t.Fatalf("window after a restart %+v", got)
	}
	if _, ok := got[9]; ok {
		t.Errorf("a cgroup with nothing since the restart has samples: %+v", got[9])
	}
}

// The sampled miss path is a usage of the host's CPUs for the cgroup's
// limit, its share of every task's samples; reclaim's own CPU stays the
// tracepoints' per-process usage. Unclassified samples make none.
func TestMissPathFacts(t *testing.T) {
	s := seedSnapshot()
	s.Samples = Samples{Hz: 99, Busy: 1000, Classified: true}
	s.Cgroups[0].CPU = CPUSamples{Busy: 800, Kernel: 700, Miss: 400, Reclaim: 100}
	_, set := ConcludeFacts(s)
	var miss *fact.Usage
	for i := range set.Usage {
		if set.Usage[i].Activity == fact.ActivityMissPath {
			miss = &set.Usage[i]
		}
	}
	mk := fact.MemoryKey("/kubepods/burstable/pod-ch")
	if miss == nil || miss.On != fact.HostCPUKey() || miss.For != mk || miss.BusyShare != 0.4 || miss.Unit != "cpu_s" ||
		miss.Amount < 4.04 || miss.Amount > 4.05 {
		t.Fatalf("miss-path usage %+v", miss)
	}
	var sat *fact.Saturation
	for i := range set.Saturations {
		if set.Saturations[i].On == mk {
			sat = &set.Saturations[i]
		}
	}
	if sat == nil || sat.Numbers["miss_path_cpu_pct"] != 50 || sat.Numbers["reclaim_cpu_pct"] != 12.5 || sat.Numbers["cpu_samples"] != 800 {
		t.Fatalf("saturation numbers %+v", sat)
	}

	s.Samples.Classified = false
	_, set = ConcludeFacts(s)
	for _, u := range set.Usage {
		if u.Activity == fact.ActivityMissPath {
			t.Fatalf("unclassified samples made a miss-path usage: %+v", u)
		}
	}
}

// The sampled functions' ranges come from the kernel's symbols: each
// from its address to the next symbol's, with its class; those the
// kernel lacks are listed as missing, and with none at all the samples
// are not classified and the note says why.
func TestSampleRanges(t *testing.T) {
	syms := `ffffffff81000000 T _text
ffffffff81100000 T try_to_free_mem_cgroup_pages
ffffffff81100400 t __pfx_page_cache_ra_unbounded
ffffffff81100410 T page_cache_ra_unbounded
ffffffff81100800 T folio_wait_bit_common
ffffffff81100c00 T filemap_get_pages
ffffffff81101000 T copy_page_to_iter
`
	p := filepath.Join(t.TempDir(), "kallsyms")
	if err := os.WriteFile(p, []byte(syms), 0o644); err != nil {
		t.Fatal(err)
	}
	tab, err := kallsyms.LoadFiles(context.Background(), p, "")
	if err != nil {
		t.Fatal(err)
	}
	r := rangesFrom(tab)
	want := []struct {
		lo, hi uint64
		class  uint32
	}{
		{0xffffffff81100000, 0xffffffff81100400, classReclaim},
		{0xffffffff81100410, 0xffffffff81100800, classMiss},
		{0xffffffff81100800, 0xffffffff81100c00, classWait},
		{0xffffffff81100c00, 0xffffffff81101000, classLookup},
	}
	if int(r.n) != len(want) || r.why != "" {
		t.Fatalf("%d ranges (why %q), want %d", r.n, r.why, len(want))
	}
	for i, w := range want {
		if r.lo[i] != w.lo || r.hi[i] != w.hi || r.class[i] != w.class {
			t.Errorf("range %d: [%#x, %#x) class %d, want [%#x, %#x) class %d", i, r.lo[i], r.hi[i], r.class[i], w.lo, w.hi, w.class)
		}
	}
	if len(r.missing) != len(sampledFuncs)-len(want) {
		t.Errorf("missing %v", r.missing)
	}
	if len(sampledFuncs) > maxRanges {
		t.Errorf("%d sampled functions, the BPF side holds %d", len(sampledFuncs), maxRanges)
	}

	none := rangesFrom(loadTable(t, "ffffffff81000000 T _text\nffffffff81000100 T schedule\n"))
	if none.n != 0 || none.why == "" {
		t.Errorf("no sampled function in the kernel: %d ranges, why %q", none.n, none.why)
	}
}

func loadTable(t *testing.T, body string) *kallsyms.Table {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kallsyms")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	tab, err := kallsyms.LoadFiles(context.Background(), p, "")
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

// The BPF side finds a frame's range by binary search: the ranges must be
// in order of their start whatever the order of sampledFuncs.
func TestSampleRangesSorted(t *testing.T) {
	var r sampleRanges
	for i, lo := range []uint64{0x3000, 0x1000, 0x4000, 0x2000} {
		r.lo[i], r.hi[i], r.class[i] = lo, lo+0x800, uint32(lo>>12)
		r.n++
	}
	r.sort()
	for i := 0; i < int(r.n); i++ {
		want := uint64(i+1) << 12
		if r.lo[i] != want || r.hi[i] != want+0x800 || r.class[i] != uint32(i+1) {
			t.Errorf("range %d: [%#x, %#x) class %d, want [%#x, %#x) class %d", i, r.lo[i], r.hi[i], r.class[i], want, want+0x800, i+1)
		}
	}
}
