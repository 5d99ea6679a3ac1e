package sched

import (
	"context"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/lab/bounce"
)

// mover is a thread of the test's that moves itself between two CPUs with
// sched_setaffinity: each move is exactly one migration, and between moves
// it is pinned, so it makes no other.
type mover struct {
	tid  int
	cmds chan int // moves to make
	done chan error
}

func startMover(t *testing.T) *mover {
	t.Helper()
	m := &mover{cmds: make(chan int), done: make(chan error)}
	ready := make(chan int)
	go func() {
		runtime.LockOSThread()
		var orig unix.CPUSet
		if err := unix.SchedGetaffinity(0, &orig); err != nil {
			ready <- -1
			return
		}
		pin := func(cpu int) error {
			var set unix.CPUSet
			set.Set(cpu)
			return unix.SchedSetaffinity(0, &set)
		}
		if err := pin(0); err != nil {
			ready <- -1
			return
		}
		ready <- unix.Gettid()
		cpu := 0
		for n := range m.cmds {
			var err error
			for i := 0; i < n && err == nil; i++ {
				cpu = 1 - cpu
				err = pin(cpu)
			}
			m.done <- err
		}
		if unix.SchedSetaffinity(0, &orig) == nil {
			runtime.UnlockOSThread()
		}
		close(m.done)
	}()
	if m.tid = <-ready; m.tid < 0 {
		t.Fatal("mover: cannot set its affinity")
	}
	t.Cleanup(func() {
		close(m.cmds)
		<-m.done
	})
	return m
}

func (m *mover) move(t *testing.T, n int) {
	t.Helper()
	m.cmds <- n
	if err := <-m.done; err != nil {
		t.Fatalf("mover: %v", err)
	}
}

// One session, three windows: the test's thread moves itself 20 times,
// then not at all, then 30 times. Each window counts exactly its moves
// (and the kernel's own se.nr_migrations agrees): none lost, none counted
// twice, the second window does not repeat the first.
func TestLiveWindows(t *testing.T) {
	requireLive(t)
	if runtime.NumCPU() < 2 {
		t.Skip("needs two CPUs to move a thread between")
	}
	m := startMover(t)
	s := New()
	s.watchSelf = true // the mover is one of the test's threads
	var snaps []*Snapshot
	s.snapshot = func(sn *Snapshot) { snaps = append(snaps, sn) }
	sess, err := s.Start(context.Background(), investigator.Options{PID: os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	pid := os.Getpid()
	k0 := bounce.NrMigrations(pid, m.tid)
	var total uint64
	for i, moves := range []int{20, 0, 30} {
		m.move(t, moves)
		time.Sleep(100 * time.Millisecond)
		if _, err := sess.Collect(context.Background()); err != nil {
			t.Fatal(err)
		}
		k := bounce.NrMigrations(pid, m.tid)
		var got, byAffinity uint64
		for _, tk := range snaps[len(snaps)-1].Tasks {
			if tk.TID == m.tid {
				got, byAffinity = tk.Migrations, tk.ByKind[KindAffinity]
			}
		}
		t.Logf("window %d: %d moves made, wolf counted %d (%d by an affinity change), the kernel %d", i+1, moves, got, byAffinity, k-k0)
		if got != uint64(moves) || k-k0 != int64(moves) || byAffinity != uint64(moves) {
			t.Errorf("window %d: %d moves made; wolf counted %d (%d by affinity), the kernel %d", i+1, moves, got, byAffinity, k-k0)
		}
		total += got
		k0 = k
	}
	if total != 50 {
		t.Errorf("the windows add up to %d migrations, 50 were made", total)
	}
}

// A task's window is its record now minus its record at the previous
// Collect; its maxima are the window's own, its CPU share over the
// time between the two readings.
func TestTaskWindow(t *testing.T) {
	var prev, cur schedTaskRec
	prev.Tid, prev.NowTs, prev.RuntimeNow = 7, 10e9, 1e9
	prev.St.FirstTs, prev.St.Migrations, prev.St.Bounces = 1e9, 40, 10
	prev.St.ByKind[KindAffinity] = 40
	prev.St.Runq.Slots[10], prev.St.Runq.Count, prev.St.Runq.Sum = 5, 5, 5000
	cur = prev
	cur.NowTs, cur.RuntimeNow = 12e9, 1.5e9 // 0.5 s of CPU in 2 s
	cur.St.Migrations, cur.St.Bounces, cur.St.ByKind[KindAffinity] = 55, 13, 55
	cur.St.Runq.Slots[10], cur.St.Runq.Slots[12], cur.St.Runq.Count, cur.St.Runq.Sum = 6, 2, 8, 11000
	// Window 3's maximum in slot 1, window 2's (stale) in slot 0.
	cur.St.Runq.Max.V, cur.St.Runq.Max.Win = [2]uint64{9000, 3000}, [2]uint32{2, 3}
	tk := taskWindow(&cur, &prev, true, 10e9, 3)
	if tk.Migrations != 15 || tk.Bounces != 3 || tk.ByKind[KindAffinity] != 15 {
		t.Errorf("counts %+v", tk)
	}
	if tk.Runq.Count != 3 || tk.Runq.Sum != 6000 || tk.Runq.Slots[10] != 1 || tk.Runq.Slots[12] != 2 || tk.Runq.Max != 3000 {
		t.Errorf("run-queue window %+v", tk.Runq)
	}
	if tk.CPUPct != 25 || tk.Window != 2*time.Second {
		t.Errorf("cpu %.1f%% over %v, want 25%% over 2s", tk.CPUPct, tk.Window)
	}
	// Not seen before (new, or a reused tid): everything since wolf
	// first saw it.
	first := taskWindow(&cur, &schedTaskRec{}, false, 10e9, 3)
	if first.Migrations != 55 || first.Runq.Count != 8 || first.CPUPct != 100*1.5/11 {
		t.Errorf("first window %+v", first)
	}
}
