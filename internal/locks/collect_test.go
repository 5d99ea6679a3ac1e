package locks

import (
	"testing"
)

func comm16(s string) (c [16]int8) {
	for i := range min(len(s), 15) {
		c[i] = int8(s[i])
	}
	return c
}

func TestPendingWait(t *testing.T) {
	for _, c := range []struct {
		name           string
		start, end     uint64
		d              uint64
		ongoing, valid bool
	}{
		{"empty", 0, 0, 0, false, false},
		{"over, not folded", 100, 350, 250, false, true},
		{"going on", 100, 0, 900, true, true},
		{"begun after now (clock read before)", 2000, 0, 0, false, false},
		{"end before start (torn)", 300, 200, 0, false, false},
	} {
		pe := locksPending{StartNs: c.start, EndNs: c.end}
		d, ongoing, ok := pendingWait(&pe, 1000)
		if d != c.d || ongoing != c.ongoing || ok != c.valid {
			t.Errorf("%s: got %d %v %v, want %d %v %v", c.name, d, ongoing, ok, c.d, c.ongoing, c.valid)
		}
	}
}

// A wait the programs left unfolded is added as account() would have:
// per lock, in the histogram, to the waiter it merges with, to the owner,
// and for a thread's own mmap_lock to its wait histogram; a spin wait only
// per lock.
func TestAddWaitFoldsLikeBPF(t *testing.T) {
	s := &Snapshot{
		Waiters: []Waiter{{Lock: 0x10, TID: 7, TGID: 5, Comm: "w", Count: 2, TotalNs: 300, MaxNs: 200}},
		MM:      []MMStat{{TGID: 5, TID: 7, MMTGID: 5, Write: true, Comm: "w"}},
		Comm:    func(pid int) string { return map[int]string{9: "owner"}[pid] },
		TGID:    func(tid int) int { return map[int]int{9: 9}[tid] },
	}
	sc := &stackCache{memo: map[int32][]string{}}
	waiterAt := map[[2]uint64]int{{0x10, 7}: 0}
	pe := locksPending{Lock: 0x10, Type: uint32(RwsemWrite), StackId: -1, OwnerStackId: -1, OwnerTid: 9,
		OwnerKind: uint32(OwnerTask), MmTgid: 5, Tgid: 5, Comm: comm16("w")}
	s.addWait(sc, &pe, 7, 500, false, waiterAt)

	if len(s.Waits) != 1 || s.Waits[0].Count != 1 || s.Waits[0].TotalNs != 500 || s.Waits[0].Ongoing != 0 || s.Waits[0].MaxTID != 7 {
		t.Errorf("waits %+v", s.Waits)
	}
	if len(s.Hists) != 1 || s.Hists[0].Hist.Count != 1 || s.Hists[0].Hist.Max != 500 {
		t.Errorf("histograms %+v", s.Hists)
	}
	if w := s.Waiters; len(w) != 1 || w[0].Count != 3 || w[0].TotalNs != 800 || w[0].MaxNs != 500 || w[0].Ongoing {
		t.Errorf("waiters %+v", w)
	}
	if o := s.Owners; len(o) != 1 || o[0].TID != 9 || o[0].TGID != 9 || o[0].Comm != "owner" || o[0].TotalNs != 500 {
		t.Errorf("owners %+v", o)
	}
	if m := s.MM; len(m) != 1 || m[0].Wait.Count != 1 || m[0].Wait.Sum != 500 {
		t.Errorf("mmap_lock waits %+v", m)
	}

	// Still going: counted as ongoing, and not in the mmap_lock wait
	// histogram (which has the waits that ended, as in BPF).
	pe2 := pe
	pe2.Comm = comm16("new")
	s.addWait(sc, &pe2, 8, 4000, true, waiterAt)
	if w := s.Waiters[len(s.Waiters)-1]; w.TID != 8 || w.Comm != "new" || !w.Ongoing || w.TotalNs != 4000 {
		t.Errorf("new waiter %+v", w)
	}
	if s.Waits[1].Ongoing != 1 || s.MM[0].Wait.Count != 1 || len(s.MM) != 1 {
		t.Errorf("ongoing wait %+v, mm %+v", s.Waits[1], s.MM)
	}

	// A spin wait: per lock and histogram only.
	spin := locksPending{Lock: 0x20, Type: uint32(Spinlock), StackId: -1, Tgid: 3}
	before := len(s.Waiters)
	s.addWait(sc, &spin, 3, 50, false, waiterAt)
	if len(s.Waits) != 3 || len(s.Hists) != 3 || len(s.Waiters) != before || len(s.Owners) != 2 {
		t.Errorf("spin wait: %d waits %d hists %d waiters %d owners", len(s.Waits), len(s.Hists), len(s.Waiters), len(s.Owners))
	}
}
