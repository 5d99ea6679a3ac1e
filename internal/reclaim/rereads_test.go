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
