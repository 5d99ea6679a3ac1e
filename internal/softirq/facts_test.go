package softirq

import (
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/fact"
	"github.com/wolf-investigator/wolf/internal/hist"
)

// NET_RX on loopback takes half of two CPUs, a microsecond run at a time,
// on top of the tasks that send: each is a wait on the CPUs' softirq
// processing and a use of it by its process; ksoftirqd and wolf are not,
// nor a task it barely touched. On a quiet host there are none.
func TestFactsSoftirqTimePerTask(t *testing.T) {
	s := idleSnapshot()
	s.CPUs, s.SelfTGID = 2, 7
	s.Run[vecNetRX] = []hist.Log2{histOf(many(1000, 5*time.Millisecond)...), histOf(many(1000, 5*time.Millisecond)...)}
	var a, b, k, w, tiny TaskTime
	a = TaskTime{TID: 100, TGID: 100, Comm: "stress-ng-sock", Runs: 90000}
	a.NS[vecNetRX] = uint64(3 * time.Second)
	b = TaskTime{TID: 101, TGID: 100, Comm: "stress-ng-sock", Runs: 50000}
	b.NS[vecNetRX] = uint64(2 * time.Second)
	k = TaskTime{TID: 14, TGID: 14, Comm: "ksoftirqd/0", Runs: 900}
	k.NS[vecNetRX] = uint64(4 * time.Second)
	w = TaskTime{TID: 7, TGID: 7, Comm: "wolf", Runs: 10}
	w.NS[vecNetRX] = uint64(time.Second)
	tiny = TaskTime{TID: 300, TGID: 300, Comm: "sshd", Runs: 3}
	tiny.NS[vecNetRX] = uint64(time.Millisecond)
	s.Tasks = []TaskTime{k, a, b, w, tiny}
	_, set := ConcludeFacts(s)
	var waits []fact.Wait
	for _, x := range set.Waits {
		if x.Kind == fact.WaitSoftirq && x.On == fact.SoftirqKey(-1) {
			waits = append(waits, x)
		}
	}
	if len(waits) != 2 || waits[0].Task.TID != 100 || waits[0].Total != 3*time.Second || waits[1].Task.TID != 101 {
		t.Fatalf("waits %+v", waits)
	}
	var uses []fact.Usage
	for _, u := range set.Usage {
		if u.On == fact.SoftirqKey(-1) {
			uses = append(uses, u)
		}
	}
	if len(uses) != 1 || uses[0].By.PID != 100 || uses[0].Threads != 2 || uses[0].Amount != 5 || uses[0].Activity != "NET_RX" {
		t.Fatalf("usage %+v", uses)
	}

	q := idleSnapshot()
	q.CPUs, q.Tasks = 2, []TaskTime{a}
	_, set = ConcludeFacts(q)
	for _, x := range set.Waits {
		if x.On == fact.SoftirqKey(-1) {
			t.Errorf("quiet host: %+v", x)
		}
	}
}

func TestTaskWindow(t *testing.T) {
	var prev, cur TaskTime
	prev.Runs, prev.NS[1] = 10, 100
	cur.Runs, cur.NS[1] = 15, 90 // a reading that came short
	d, keep := taskWindow(cur, prev, true)
	if d.Runs != 5 || d.NS[1] != 0 || keep.NS[1] != 100 {
		t.Errorf("%+v %+v", d, keep)
	}
}
