package reclaim

import (
	"testing"

	"github.com/wolf-investigator/wolf/internal/fact"
)

// Each window is the cumulative sampled count's difference, scaled to
// pages by the sample (2^evictShift); a cgroup with nothing new has no
// entry, and one idle long enough is forgotten (deleted from the map).
func TestRereadWindows(t *testing.T) {
	var w rereadWindows
	got, _ := w.step(map[uint64]uint64{7: 10, 9: 4})
	if got[7] != 10<<evictShift || got[9] != 4<<evictShift {
		t.Fatalf("first window %v", got)
	}
	got, _ = w.step(map[uint64]uint64{7: 25, 9: 4})
	if got[7] != 15<<evictShift || len(got) != 1 {
		t.Fatalf("second window %v, want only cgroup 7's 15 sampled re-reads", got)
	}
	var evicted []uint64
	inMap := map[uint64]uint64{7: 25, 9: 4} // the kernel's map: evicted entries go
	for range 20 {
		cur := map[uint64]uint64{}
		for k, v := range inMap {
			cur[k] = v
		}
		_, ev := w.step(cur)
		for _, k := range ev {
			delete(inMap, k)
		}
		evicted = append(evicted, ev...)
	}
	if len(evicted) != 2 {
		t.Errorf("idle cgroups forgotten %v, want both once", evicted)
	}
}

// Measured re-reads become a usage of the cgroup's limit beside the
// kernel's refaults, in bytes; without the measure (programs not
// attached) there is none, and the saturation does not claim a zero.
func TestRereadFacts(t *testing.T) {
	s := seedSnapshot()
	s.Rereads = true
	s.Cgroups[0].Rereads = 1000
	_, set := ConcludeFacts(s)
	mk := fact.MemoryKey("/kubepods/burstable/pod-ch")
	var u *fact.Usage
	for i := range set.Usage {
		if set.Usage[i].Activity == fact.ActivityEvictedReread {
			u = &set.Usage[i]
		}
	}
	if u == nil || u.On != mk || u.Unit != "bytes" || u.Amount != 1000*pageSize || u.By.MemCgroup != "/kubepods/burstable/pod-ch" {
		t.Fatalf("re-read usage %+v", u)
	}
	s.Rereads = false
	_, set = ConcludeFacts(s)
	for _, u := range set.Usage {
		if u.Activity == fact.ActivityEvictedReread {
			t.Fatalf("re-reads without the measure: %+v", u)
		}
	}
	for _, x := range set.Saturations {
		if _, ok := x.Numbers["evicted_reread_bytes"]; ok {
			t.Fatalf("evicted_reread_bytes without the measure: %v", x.Numbers)
		}
	}
}

// The re-reads the kernel did not count for the shadow nodes it dropped:
// each dropped node's 64 shadows at the rate the kept shadows came back
// (refaults over the evictions whose shadows stayed). A thrash (all its
// evictions come back) gets every dropped shadow; a stream read once (no
// refaults) none, however many nodes went; v1 (no such counters) none.
func TestShadowlessRereads(t *testing.T) {
	stat := func(refaults, nodes, steal uint64) map[string]uint64 {
		return map[string]uint64{"workingset_refault_file": refaults, "workingset_nodereclaim": nodes, "pgsteal": steal}
	}
	for _, tc := range []struct {
		name                   string
		refaults, nodes, steal uint64
		want                   uint64
	}{
		// 60,000 evictions, 6,400 shadows dropped: 53,600 kept, of
		// which 53,600 came back.
		{"thrash", 53600, 100, 60000, 6400},
		// Half of the kept shadows came back: half of the dropped.
		{"half", 26800, 100, 60000, 3200},
		{"stream", 0, 400, 60000, 0},
		// None dropped in the window: the 7 nodes dropped before it
		// (448 of the cgroup's 62,000 evictions) hide re-reads at the
		// rate the kept shadows came back, 50,000 of 61,552.
		{"no nodes in the window", 50000, 0, 60000, 363},
		// More refaults than the kept evictions (pages evicted before
		// the window): the dropped ones all count, no more.
		{"earlier evictions", 50000, 100, 10000, 6400},
	} {
		s := seedSnapshot()
		c := s.Cgroups[0]
		c.Before.Stat = stat(1000, 7, 2000)
		c.State.Stat = stat(1000+tc.refaults, 7+tc.nodes, 2000+tc.steal)
		_, set := ConcludeFacts(s)
		var got float64
		for _, u := range set.Usage {
			if u.Activity == fact.ActivityShadowlessReread {
				if u.On != fact.MemoryKey(c.Path) || u.Unit != "bytes" {
					t.Errorf("%s: %+v", tc.name, u)
				}
				got += u.Amount
			}
		}
		if got != float64(tc.want)*pageSize {
			t.Errorf("%s: %.0f bytes of re-reads without shadows, want %d pages", tc.name, got, tc.want)
		}
		for _, x := range set.Saturations {
			if x.On == fact.MemoryKey(c.Path) && (x.Numbers["evicted_bytes"] != float64(tc.steal)*pageSize || x.Numbers["dropped_shadow_nodes"] != float64(tc.nodes)) {
				t.Errorf("%s: numbers %v", tc.name, x.Numbers)
			}
			// The cgroup's lifetime counters, as memory.stat has them at
			// the window's end.
			if x.On == fact.MemoryKey(c.Path) && (x.Numbers["lifetime_evicted_bytes"] != float64(2000+tc.steal)*pageSize ||
				x.Numbers["lifetime_dropped_shadow_nodes"] != float64(7+tc.nodes) || x.Numbers["lifetime_refault_bytes"] != float64(1000+tc.refaults)*pageSize) {
				t.Errorf("%s: lifetime numbers %v", tc.name, x.Numbers)
			}
		}
	}
	s := seedSnapshot()
	s.Cgroups[0].Before.Stat = map[string]uint64{"workingset_refault_file": 10}
	s.Cgroups[0].State.Stat["workingset_refault_file"] = 50010
	_, set := ConcludeFacts(s)
	for _, u := range set.Usage {
		if u.Activity == fact.ActivityShadowlessReread {
			t.Fatalf("v1 (no shadow counters): %+v", u)
		}
	}
	for _, x := range set.Saturations {
		if _, ok := x.Numbers["dropped_shadow_nodes"]; ok {
			t.Fatalf("dropped_shadow_nodes without the counter: %v", x.Numbers)
		}
		// v1 has no pgsteal either: the evictions are the pages the
		// cgroup's own reclaim calls freed in the window.
		if x.On == fact.MemoryKey(s.Cgroups[0].Path) && x.Numbers["evicted_bytes"] != float64(s.Cgroups[0].Reclaim.Reclaimed)*pageSize {
			t.Errorf("v1 evicted_bytes %v, want the %d pages its reclaim freed", x.Numbers["evicted_bytes"], s.Cgroups[0].Reclaim.Reclaimed)
		}
	}
}

// Four fio readers at random through a 384 MiB file in a 64 MiB v2 cgroup
// (qemu TCG, Debian's 6.12): a sequential pass had read the file through
// the cgroup first, and the shadow shrinker had dropped 1,024 nodes then,
// none in the window. memory.stat at the window's end, and over it: 3,004
// refaults against vda's 7,900 pages read, every one of them a re-read of
// a page the limit evicted. The lifetime's shadows were two thirds
// dropped (65,536 of 99,456 evictions), so the window's refaults are a
// third of its re-reads: 5,803 pages more, and 8,807 against the reads.
func TestShadowlessRereadsDroppedBeforeTheWindow(t *testing.T) {
	s := seedSnapshot()
	c := s.Cgroups[0]
	c.Before.Stat = map[string]uint64{"workingset_refault_file": 4224 - 3004, "workingset_nodereclaim": 1024, "pgsteal": 99456 - 9920}
	c.State.Stat = map[string]uint64{"workingset_refault_file": 4224, "workingset_nodereclaim": 1024, "pgsteal": 99456}
	_, set := ConcludeFacts(s)
	var got float64
	for _, u := range set.Usage {
		if u.Activity == fact.ActivityShadowlessReread {
			got += u.Amount
		}
	}
	if want := 5803.0 * pageSize; got != want {
		t.Errorf("%.0f bytes of re-reads without shadows, want %.0f", got, want)
	}
}
