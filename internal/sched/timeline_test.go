package sched

import (
	"testing"
	"time"
)

func TestTimelines(t *testing.T) {
	a := &Task{TID: 7, PID: 5, Comm: "worker", Migrations: 40}
	b := &Task{TID: 8, PID: 5, Comm: "quiet", Migrations: 3}
	moves := map[int][]Migration{
		7: {{At: 2 * time.Second, From: 1, To: 0, Kind: KindBalance}, {At: time.Second, From: 0, To: 1, Kind: KindWakeup}},
		8: {{At: time.Second, From: 0, To: 1}},
	}
	tls := Timelines([]*Task{b, a}, moves, map[int]bool{7: true})
	if len(tls) != 1 {
		t.Fatalf("timelines of unnamed tasks: %+v", tls)
	}
	tl := tls[0]
	if tl.Labels["tid"] != "7" || tl.Labels["comm"] != "worker" || tl.Unit != "cpu" || tl.Dropped != 38 {
		t.Errorf("timeline %+v", tl)
	}
	want := []struct {
		at    float64
		cpu   float64
		label string
	}{{1, 0, "first kept move"}, {1, 1, "wakeup"}, {2, 0, "balance"}}
	if len(tl.Events) != len(want) {
		t.Fatalf("events %+v", tl.Events)
	}
	for i, w := range want {
		if e := tl.Events[i]; e.AtS != w.at || e.Value != w.cpu || e.Label != w.label {
			t.Errorf("event %d %+v, want %+v", i, e, w)
		}
	}
}
