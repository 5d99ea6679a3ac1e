package hung

import (
	"strings"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/diagnose"
	"github.com/wolf-investigator/wolf/internal/fact"
	"github.com/wolf-investigator/wolf/internal/finding"
)

// rec is a walk's record of a task asleep since since (ktime), read at at.
func rec(tid int, since, at time.Duration, l *Lock) *Task {
	return &Task{TID: tid, TGID: tid, Comm: "sh", State: 2, At: at, Blocked: at - since, Lock: l}
}

// A task is a wait from before attach only while every walk since the
// first finds it in the sleep the first found it in.
func TestTrackKeepsOnlyThePreAttachSleep(t *testing.T) {
	l := &Lock{Addr: 0xa0, Kind: LockMutex, Owner: OwnerTask, OwnerTID: 9, OwnerTGID: 9, OwnerComm: "o"}
	seen := map[int]*tracked{}
	s := time.Second
	track(seen, rec(1, 0, 40*s, l), 1) // asleep 40 s at the first walk
	track(seen, rec(2, 0, 40*s, l), 1) // likewise, then wakes and sleeps again
	track(seen, rec(3, 0, 40*s, l), 1) // likewise, then missed by walk 2
	track(seen, rec(1, 0, 41*s, l), 2) // the same sleep
	track(seen, rec(2, 40500*time.Millisecond, 41*s, l), 2)
	track(seen, rec(4, 40*s, 41*s, l), 2)               // began after attach
	track(seen, rec(1, 5*time.Millisecond, 42*s, l), 3) // the same (scheduler clock)
	track(seen, rec(3, 0, 42*s, l), 3)
	for tid, want := range map[int]bool{1: true, 2: false, 3: false, 4: false} {
		if got := seen[tid].preAttach; got != want {
			t.Errorf("tid %d preAttach %v, want %v", tid, got, want)
		}
	}
	if seen[1].maxBlocked != 42*s-5*time.Millisecond {
		t.Errorf("maxBlocked %v", seen[1].maxBlocked)
	}
	// At walk 4 only 1 has run again: it is the one ended wait.
	seen[1].owner = rec(9, 0, 42*s, nil)
	for _, tid := range []int{2, 3, 4} {
		track(seen, rec(tid, 0, 43*s, l), 4)
	}
	ended, owners := endedEarly(seen, 4, 0)
	if len(ended) != 1 || ended[0].TID != 1 || ended[0].Blocked != seen[1].maxBlocked || owners[9] == nil {
		t.Fatalf("ended %+v owners %+v", ended, owners)
	}
	if ended, _ := endedEarly(seen, 4, 77); len(ended) != 0 {
		t.Errorf("another process's wait kept: %+v", ended)
	}
}

// fuseMutexEnded is the fuse-mutex lab's shape when its stall ended in the
// window: two lookups that waited on the directory's mutex since before
// wolf attached, whose owner waited for the FUSE daemon, all running again
// by the last walk.
func fuseMutexEnded() *Snapshot {
	lock := func() *Lock {
		return &Lock{Addr: 0xffff8881d3e5d810, Kind: LockMutex, Source: SourceBlocker, Owner: OwnerTask, OwnerTID: 6744, OwnerTGID: 6744, OwnerComm: "sh"}
	}
	st := []string{"__schedule+0x3c5", "schedule+0x27", "schedule_preempt_disabled+0x15", "__mutex_lock.constprop.0+0x2b1", "fuse_lock_inode+0x2a", "fuse_lookup+0x3d"}
	owner := &Task{TID: 6744, TGID: 6744, Comm: "sh", State: 1, Wanted: true, At: 30 * time.Second,
		Stack: []string{"__schedule+0x3c5", "schedule+0x27", "request_wait_answer+0xd0", "__fuse_simple_request+0xd8", "fuse_lookup_name+0xe2", "fuse_lookup+0x5c"}}
	return &Snapshot{
		Ended: []*Task{
			{TID: 6750, TGID: 6750, Comm: "sh", State: 2, Blocked: 41 * time.Second, Lock: lock(), Stack: st},
			{TID: 6751, TGID: 6751, Comm: "sh", State: 2, Blocked: 3 * time.Second, Lock: lock(), Stack: st},
		},
		Recovered:   []*Task{{TID: 6750, TGID: 6750, Comm: "sh", State: 2, Blocked: 41 * time.Second, Lock: lock(), Stack: st}},
		EndedOwners: map[int]*Task{6744: owner},
		FirstSeen:   map[int]*Task{6744: {TID: 6744, At: 22 * time.Second}},
		// The daemon answered (or the connection was aborted) before
		// Collect: what it owed is as the walks last read it.
		EndedFuse:   []FuseReq{{DaemonPID: 6601, DaemonComm: "fz", Conn: 39, Sender: 6744, Opcode: 1, Unique: 4, Age: 40 * time.Second, Read: true, Waiting: 1}},
		FuseDaemons: func() []Proc { return nil },
		Threshold:   5 * time.Second,
	}
}

// A lock wait that began before wolf attached and ended in the window is
// a wait of at least what the walks saw, on the lock, whatever its length,
// with the owner and what it was doing then; the diagnosis names the
// victims, the holder and the daemon behind it.
func TestEndedLockWaitsAreFacts(t *testing.T) {
	fs, set := ConcludeFacts(fuseMutexEnded())
	k := fact.LockKey("0xffff8881d3e5d810")
	var waits []fact.Wait
	for _, w := range set.Waits {
		if w.On == k {
			waits = append(waits, w)
		}
	}
	if len(waits) != 2 || waits[0].Max != 41*time.Second || waits[1].Max != 3*time.Second {
		t.Fatalf("lock waits %+v", waits)
	}
	for _, w := range waits {
		if !w.AtLeast || w.Ongoing || w.Hung || w.Kind != fact.WaitLock {
			t.Errorf("wait %+v", w)
		}
	}
	if waits[0].Finding != "hung.recovered" || waits[1].Finding != "" {
		t.Errorf("findings %q %q (recovered: %d findings)", waits[0].Finding, waits[1].Finding, len(fs))
	}
	var hold *fact.Hold
	for i, h := range set.Holds {
		if h.On == k {
			if hold != nil {
				t.Errorf("the owner's hold twice: %+v", set.Holds)
			}
			hold = &set.Holds[i]
		}
	}
	if hold == nil || hold.Holder.TID != 6744 || !hold.Exact || hold.Split == nil || hold.Split.Still || hold.Split.SleepsOn != fact.FUSEKey("39") || hold.Split.Span != 8*time.Second {
		t.Fatalf("hold %+v split %+v", hold, hold.Split)
	}
	for _, w := range set.Waits {
		if w.Task.TID == 6744 && (w.Ongoing || w.Hung || !w.AtLeast) {
			t.Errorf("the owner's own ended wait: %+v", w)
		}
	}

	set.Window = 10 * time.Second
	ds := diagnose.Diagnose(fs, set)
	if len(ds) == 0 {
		t.Fatalf("no diagnosis")
	}
	d := ds[0]
	t.Logf("%s: %s", d.ID, d.Title)
	if d.ID != "diagnose.fuse-daemon" || d.Root.PID != 6601 {
		t.Errorf("%s root %+v", d.ID, d.Root)
	}
	var victim *finding.Hop
	for i, h := range d.Chain {
		if h.Relation == finding.WaitsOn && h.From.TID == 6750 {
			victim = &d.Chain[i]
		}
	}
	if victim == nil || !strings.Contains(victim.Text, "waited at least 41 s for mutex") || victim.Evidence["at_least"] != true {
		t.Errorf("the victim's hop: %+v", victim)
	}
	daemonHop := false
	for _, h := range d.Chain {
		daemonHop = daemonHop || (h.Relation == finding.HeldBy && h.To.PID == 6601 && strings.Contains(h.Text, "the wait has ended"))
	}
	if !daemonHop {
		t.Errorf("no ended hop to the daemon: %+v", d.Chain)
	}
	if !strings.Contains(d.Title, "sh (pid 6744) held mutex") || !strings.Contains(d.Title, "at least 41 s") {
		t.Errorf("the holder is not named: %s", d.Title)
	}
}
