package locks

import (
	"context"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/lab/fusestall"
	"github.com/wolf-investigator/wolf/internal/testutil"
)

// labWaits is, in one window's snapshot, what the FUSE lab's i_rwsem saw:
// the lock is the one its victims wait on.
func labWaits(s *Snapshot, victims []int) (count, ongoing, histCount uint64, waiters []int) {
	var lock uint64
	for _, w := range s.Waiters {
		if slices.Contains(victims, w.TGID) {
			lock = w.Lock
			waiters = append(waiters, w.TGID)
		}
	}
	if lock == 0 {
		return 0, 0, 0, nil
	}
	for _, w := range s.Waits {
		if w.Lock == lock {
			count += w.Count
			ongoing += w.Ongoing
		}
	}
	for _, h := range s.Hists {
		if h.Lock == lock {
			histCount += h.Hist.Count
		}
	}
	slices.Sort(waiters)
	return count, ongoing, histCount, waiters
}

// One session, four windows over the FUSE lab's rw-semaphore: one victim
// starts waiting in the first, two more in the second, all three get the
// lock in the third (the daemon answers), nothing in the fourth. Each
// wait is counted once, in the window it began in; in flight at the end
// of a window it is a gauge (Ongoing) there; it enters the histogram in
// the window it ended in; and the fourth window, where user space folded
// nothing new, counts nothing again.
func TestLiveWindows(t *testing.T) {
	testutil.RequireRoot(t)
	_, err := os.Stat("/dev/fuse")
	testutil.Require(t, err == nil, "needs /dev/fuse for the FUSE lab")
	testutil.Exclusive(t)

	l := New()
	l.ProfileHz = 0
	s, err := l.Start(context.Background(), investigator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var inst *fusestall.Instance
	steps := []func(){
		func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			in, err := fusestall.NewRWSem().Start(ctx, lab.Options{Victims: 1, Logf: t.Logf})
			if err != nil {
				t.Fatalf("start lab: %v", err)
			}
			inst = in.(*fusestall.Instance)
			t.Cleanup(func() { _ = inst.Close() })
		},
		func() {
			if _, err := inst.AddVictims(2); err != nil {
				t.Fatal(err)
			}
		},
		func() {
			inst.Release()
			// The victims go through one after the other, then exit.
			deadline := time.Now().Add(20 * time.Second)
			for _, pid := range inst.Tasks().Victims {
				for procAlive(pid) && time.Now().Before(deadline) {
					time.Sleep(20 * time.Millisecond)
				}
			}
		},
		func() { time.Sleep(200 * time.Millisecond) },
	}
	want := []struct{ count, ongoing, hist uint64 }{{1, 1, 0}, {2, 3, 0}, {0, 0, 3}, {0, 0, 0}}
	var total uint64
	for i, step := range steps {
		step()
		if _, err := s.Collect(context.Background()); err != nil {
			t.Fatal(err)
		}
		victims := inst.Tasks().Victims
		count, ongoing, histCount, waiters := labWaits(l.last, victims)
		t.Logf("window %d: %d waits counted, %d in flight, %d in the histogram; waiters %v (victims %v)", i+1, count, ongoing, histCount, waiters, victims)
		if count != want[i].count || ongoing != want[i].ongoing || histCount != want[i].hist {
			t.Errorf("window %d: %d waits, %d in flight, %d in the histogram; want %d, %d, %d",
				i+1, count, ongoing, histCount, want[i].count, want[i].ongoing, want[i].hist)
		}
		total += count
	}
	if n := uint64(len(inst.Tasks().Victims)); total != n {
		t.Errorf("the windows count %d waits; %d victims waited once each", total, n)
	}
}

func procAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// A zombie is done with the lock.
	for i := len(b) - 1; i > 0; i-- {
		if b[i] == ')' && i+2 < len(b) {
			return b[i+2] != 'Z'
		}
	}
	return true
}
