package watch

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/investigator"
)

// A diagnosis joins findings of two investigators, each from its own
// window: it starts once both have reported, is counted, and clears when
// its findings do.
func TestWatcherDiagnoses(t *testing.T) {
	lock := "mmap_lock of lab (pid 5)"
	contention := finding.Finding{ID: "locks.contention", Investigator: "locks", Severity: finding.Critical,
		Evidence: map[string]any{"lock": lock, "lock_addr": "0xffff1", "mm_pid": 5},
		Subjects: []finding.Subject{{Role: finding.RoleWaiter, PID: 9, TID: 9, Comm: "ps", Evidence: map[string]any{"wait_ms_total": 3000.0, "wait_ms_max": 600.0, "waits": 5}}}}
	hold := finding.Finding{ID: "locks.mmap-hold", Investigator: "locks", Severity: finding.Warning,
		Evidence: map[string]any{"mm_pid": 5, "hold_ms_max": 500.0, "hold_ms_total": 4000.0, "holds_over_threshold": 10,
			"runtime_ms_total": 100.0, "runnable_ms_total": 300.0, "throttled_ms_total": 0.0, "reclaim_ms_total": 3500.0},
		Subjects: []finding.Subject{{Role: finding.RoleHolder, PID: 5, TID: 6, Comm: "r_memory"}}}
	memcg := finding.Finding{ID: "reclaim.memcg-pressure", Investigator: "reclaim", Severity: finding.Warning,
		Evidence: map[string]any{"cgroup": "/lab", "limit_bytes": 192 << 20, "pids": []int{5}},
		Subjects: []finding.Subject{{Role: finding.RoleCgroup, Cgroup: "/lab"}}}
	locks := &script{name: "locks", done: make(chan struct{}), steps: []func() (*investigator.Result, error){
		found(contention, hold), found(contention, hold), found(), found()}}
	reclaim := &script{name: "reclaim", done: make(chan struct{}), steps: []func() (*investigator.Result, error){
		found(memcg), found(memcg), found(), found()}}
	var out syncBuf
	m := NewMetrics("test", "", 10, nil, nil)
	w, err := New(Config{Investigators: []investigator.Investigator{locks, reclaim}, Default: 20 * time.Millisecond, Events: &out, Metrics: m, ClearAfter: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	finished := make(chan struct{})
	go func() { w.Run(ctx); close(finished) }()
	<-locks.done
	<-reclaim.done
	cancel()
	<-finished

	var starts, clears []Event
	var rooted *finding.Diagnosis
	sc := bufio.NewScanner(bytes.NewReader(out.Bytes()))
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if e.Investigator != "diagnose" {
			continue
		}
		if e.Diagnosis == nil {
			t.Fatalf("diagnose line without its diagnosis: %s", sc.Text())
		}
		if e.Event != "clear" && e.Diagnosis.ID == "diagnose.memcg-limit" {
			rooted = e.Diagnosis
		}
		switch e.Event {
		case "start":
			starts = append(starts, e)
		case "clear":
			clears = append(clears, e)
		}
	}
	// One diagnosis, which reaches the cgroup while both investigators'
	// latest windows have their findings (a locks window alone ends the
	// chain at the holder's reclaim: a change, either way).
	if len(starts) != 1 || rooted == nil || rooted.Root.Cgroup != "/lab" {
		t.Fatalf("starts %+v, rooted at the cgroup %+v", starts, rooted)
	}
	if len(clears) != 1 || clears[0].Key != starts[0].Key {
		t.Errorf("clears %+v", clears)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	if n := testutil.ToFloat64(onlyMetric(t, reg, "wolf_diagnoses_total")); n != 1 {
		t.Errorf("wolf_diagnoses_total %v", n)
	}
}

// onlyMetric gathers one metric family and returns a collector of it.
func onlyMetric(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			v := mf.GetMetric()[0].GetCounter().GetValue()
			return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: strings.ReplaceAll(name, "wolf_", "x_")}, func() float64 { return v })
		}
	}
	t.Fatalf("no single %s", name)
	return nil
}
