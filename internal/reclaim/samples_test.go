package reclaim

import (
	"testing"

	"github.com/wolf-investigator/wolf/internal/fact"
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
