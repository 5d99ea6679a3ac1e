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

	"github.com/wolf-investigator/wolf/internal/fact"
	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/investigator"
)

// A diagnosis joins the facts of two investigators, each from its own
// window: it starts once both have reported, is counted, and clears when
// their facts do.
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
	// The facts each investigator makes of the same windows.
	k := fact.MMLockKey(5)
	lockFacts := &fact.Set{Window: 10 * time.Second}
	lockFacts.Resource(fact.Resource{Kind: fact.Lock, Key: k, Name: lock, LockAddr: "0xffff1", MMPID: 5})
	lockFacts.Waits = []fact.Wait{{Task: fact.Task{PID: 9, TID: 9, Comm: "ps"}, Kind: fact.WaitLock, On: k, Total: 3 * time.Second, Max: 600 * time.Millisecond, Count: 5, Finding: contention.ID}}
	lockFacts.Holds = []fact.Hold{{On: k, Holder: fact.Task{PID: 5, TID: 6, Comm: "r_memory"}, Exact: true, Max: 500 * time.Millisecond, Total: 4 * time.Second, Holds: 10,
		Split: &fact.Split{Span: 4 * time.Second, OnCPU: 100 * time.Millisecond, Runnable: 300 * time.Millisecond, Reclaim: 3500 * time.Millisecond, ThrottleKnown: true}, Finding: hold.ID}}
	memFacts := &fact.Set{Window: 10 * time.Second}
	memFacts.Saturations = []fact.Saturation{{On: fact.MemoryKey("/lab"), Level: 1, Limit: 192 << 20, Unit: "bytes", AtLimit: true, Members: []int{5},
		Numbers: map[string]float64{"limit_bytes": 192 << 20}, Finding: memcg.ID}}
	withFacts := func(f *fact.Set, fs ...finding.Finding) func() (*investigator.Result, error) {
		return func() (*investigator.Result, error) { return &investigator.Result{Findings: fs, Facts: f}, nil }
	}
	locks := &script{name: "locks", done: make(chan struct{}), steps: []func() (*investigator.Result, error){
		withFacts(lockFacts, contention, hold), withFacts(lockFacts, contention, hold), found(), found()}}
	reclaim := &script{name: "reclaim", done: make(chan struct{}), steps: []func() (*investigator.Result, error){
		withFacts(memFacts, memcg), withFacts(memFacts, memcg), found(), found()}}
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
