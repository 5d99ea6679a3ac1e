package runner

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/investigator"
)

// fake is an investigator whose session records the order of events.
type fake struct {
	name     string
	startErr error
	collect  func(ctx context.Context) (*investigator.Result, error)
	log      *eventLog
}

type eventLog struct {
	mu     sync.Mutex
	events []string
}

func (l *eventLog) add(e string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

func (l *eventLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.events...)
}

func (f *fake) Name() string    { return f.name }
func (f *fake) Summary() string { return "fake" }
func (f *fake) Start(context.Context, investigator.Options) (investigator.Session, error) {
	if f.startErr != nil {
		return nil, f.startErr
	}
	f.log.add(f.name + ":start")
	return &fakeSession{f: f}, nil
}

type fakeSession struct{ f *fake }

func (s *fakeSession) Collect(ctx context.Context) (*investigator.Result, error) {
	s.f.log.add(s.f.name + ":collect")
	if s.f.collect != nil {
		return s.f.collect(ctx)
	}
	return &investigator.Result{Findings: []finding.Finding{{ID: s.f.name + ".x", Investigator: s.f.name, Severity: finding.Warning}},
		Capabilities: map[string]bool{s.f.name: true}, Notes: []string{"note"}}, nil
}

func (s *fakeSession) Close() error {
	s.f.log.add(s.f.name + ":close")
	return nil
}

func TestReportBeforeDetach(t *testing.T) {
	log := &eventLog{}
	invs := []investigator.Investigator{&fake{name: "a", log: log}, &fake{name: "b", log: log}}
	r := Start(context.Background(), Config{Report: &finding.Report{}, Investigators: invs, Duration: time.Millisecond})
	for _, e := range log.list() {
		if strings.HasSuffix(e, ":close") {
			t.Fatalf("%s before the report was complete: %v", e, log.list())
		}
	}
	if len(r.Report.Findings) != 2 || !r.Report.Capabilities["a"] || len(r.Report.Notes) != 2 || r.Report.Notes[0] != "a: note" {
		t.Fatalf("report not merged: %+v", r.Report)
	}
	r.Close()
	r.Close() // twice is harmless
	closes := 0
	for _, e := range log.list() {
		if strings.HasSuffix(e, ":close") {
			closes++
		}
	}
	if closes != 2 {
		t.Fatalf("want each session closed once, got %v", log.list())
	}
}

func TestFailuresAreReportedAndOthersStand(t *testing.T) {
	log := &eventLog{}
	invs := []investigator.Investigator{
		&fake{name: "a", log: log},
		&fake{name: "b", log: log, startErr: errors.New("no tracepoint")},
		&fake{name: "c", log: log, collect: func(context.Context) (*investigator.Result, error) { return nil, errors.New("map read") }},
	}
	r := Start(context.Background(), Config{Report: &finding.Report{}, Investigators: invs, Duration: time.Millisecond})
	defer r.Close()
	if len(r.Errors) != 2 || len(r.Report.Errors) != 2 || !strings.HasPrefix(r.Report.Errors[0], "b: no tracepoint") || !strings.HasPrefix(r.Report.Errors[1], "c: map read") {
		t.Fatalf("errors: %v / %v", r.Errors, r.Report.Errors)
	}
	if len(r.Report.Findings) != 1 || r.Report.Findings[0].Investigator != "a" {
		t.Fatalf("a's findings lost: %+v", r.Report.Findings)
	}
}

// A Collect that does not return (a stuck /proc read) costs its
// investigator, not the report; Close still waits for it before closing.
func TestSlowCollectIsLeftBehind(t *testing.T) {
	log := &eventLog{}
	release := make(chan struct{})
	stuck := &fake{name: "stuck", log: log, collect: func(context.Context) (*investigator.Result, error) {
		<-release
		return &investigator.Result{}, nil
	}}
	r := Start(context.Background(), Config{Report: &finding.Report{}, Investigators: []investigator.Investigator{&fake{name: "a", log: log}, stuck},
		Duration: time.Millisecond, CollectTimeout: 20 * time.Millisecond})
	if len(r.Report.Errors) != 1 || !strings.Contains(r.Report.Errors[0], "stuck: did not conclude within 20ms") {
		t.Fatalf("want the stuck investigator reported late, got %v", r.Report.Errors)
	}
	if len(r.Report.Findings) != 1 {
		t.Fatalf("a's findings lost: %+v", r.Report.Findings)
	}
	closed := make(chan struct{})
	go func() { r.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while a Collect was still running")
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	<-closed
	if ev := log.list(); ev[len(ev)-1] != "stuck:close" && ev[len(ev)-2] != "stuck:close" {
		t.Fatalf("stuck session not closed: %v", ev)
	}
}

// restartable is a fake whose session can begin its window again.
type restartable struct{ fake }

func (f *restartable) Start(ctx context.Context, o investigator.Options) (investigator.Session, error) {
	s, err := f.fake.Start(ctx, o)
	if err != nil {
		return nil, err
	}
	return &restartSession{s.(*fakeSession)}, nil
}

type restartSession struct{ *fakeSession }

func (s *restartSession) Restart(context.Context) error {
	s.f.log.add(s.f.name + ":restart")
	return nil
}

// With several investigators, the ones that measure waits begin their
// window again once every one is attached, and before their Collect; one
// investigator alone is not restarted (nothing loads after it).
func TestRestartAfterEveryAttach(t *testing.T) {
	log := &eventLog{}
	invs := []investigator.Investigator{&restartable{fake{name: "a", log: log}}, &fake{name: "b", log: log}}
	r := Start(context.Background(), Config{Report: &finding.Report{}, Investigators: invs, Duration: time.Millisecond})
	r.Close()
	ev := log.list()
	idx := map[string]int{}
	for i, e := range ev {
		idx[e] = i
	}
	ri, ok := idx["a:restart"]
	if !ok || ri < idx["a:start"] || ri < idx["b:start"] || ri > idx["a:collect"] {
		t.Fatalf("want a restarted after both starts and before its collect: %v", ev)
	}
	if _, ok := idx["b:restart"]; ok {
		t.Fatalf("b cannot restart: %v", ev)
	}

	log = &eventLog{}
	r = Start(context.Background(), Config{Report: &finding.Report{}, Investigators: []investigator.Investigator{&restartable{fake{name: "a", log: log}}}, Duration: time.Millisecond})
	r.Close()
	for _, e := range log.list() {
		if e == "a:restart" {
			t.Fatalf("one investigator alone restarted: %v", log.list())
		}
	}
}

func TestWindowCostApartFromStartup(t *testing.T) {
	o := finding.Overhead{BPFRunNs: 300_000_000, Sampled: []finding.Sampling{{Investigator: "locks", What: "stacks of lock waiters and owners", Events: 250_000, Detailed: 1000, Rate: 0.004}}}
	window(&o, 1500*time.Millisecond, 900*time.Millisecond, 10*time.Second, 200*time.Millisecond, 2)
	if o.StartupS != 1.5 || o.StartupCPUS != 0.9 || o.WindowCPUS != 0.2 || o.CPUPct != 2 || o.BPFPct != 3 {
		t.Fatalf("%+v", o)
	}
	if o.BudgetPct != 2 || !o.BudgetBit || !o.OverBudget {
		t.Fatalf("budget: %+v", o)
	}
	notes := SamplingNotes(o)
	if len(notes) != 1 || !strings.Contains(notes[0], "locks: under the BPF budget (2.0% of one CPU)") || !strings.Contains(notes[0], "1 in 250") || !strings.Contains(notes[0], "stacks of lock waiters and owners") {
		t.Fatalf("notes: %q", notes)
	}
	o.Shed = []finding.Shedding{{Investigator: "hung", Target: "lock/contention_begin", Why: "the lock a task waits on", DetachedS: 6.5, Ongoing: true},
		{Investigator: "hung", Target: "lock/contention_end", Why: "the end of a lock wait", DetachedS: 6.5, Ongoing: true}}
	window(&o, time.Second, time.Second, 10*time.Second, 0, 2)
	notes = SamplingNotes(o)
	if len(notes) != 2 || !strings.Contains(notes[1], "hung: over the BPF budget (2.0% of one CPU) with its detail sampled, its programs on lock/contention_begin, lock/contention_end were detached for 6.5 s, still at the window's end: the lock a task waits on; the end of a lock wait not seen meanwhile") {
		t.Fatalf("notes: %q", notes)
	}
	o.Sampled = append(o.Sampled, finding.Sampling{Investigator: "locks", What: "spin lock waits", Events: 480_000, Detailed: 30_000, Rate: 0.0625, Estimated: true})
	notes = SamplingNotes(o)
	if len(notes) != 3 || notes[1] != "locks: over the BPF budget (2.0% of one CPU) with its detail sampled, 30K of 480K spin lock waits were measured, 1 in 16: their counts, sums and histograms are estimates, each measured one standing for those its CPU skipped before it" ||
		!strings.Contains(notes[0], "1 in 250: counts, sums and histograms are exact (but for spin lock waits: estimates), the detail is a sample") {
		t.Fatalf("notes: %q", notes)
	}
	// A duty cycle: one line for the begin and its end, with what an
	// event seen stands for.
	o.Shed = append(o.Shed, finding.Shedding{Investigator: "locks", Target: "lock/contention_begin", Why: "every lock wait as it begins", DetachedS: 5.25, Ongoing: true, DutyPct: 25},
		finding.Shedding{Investigator: "locks", Target: "lock/contention_end", Why: "every lock wait as it ends", DetachedS: 5.25, Ongoing: true, DutyPct: 25})
	notes = SamplingNotes(o)
	if len(notes) != 4 || notes[3] != "locks: over the BPF budget (2.0% of one CPU) with its events sampled as far as they go, its programs on lock/contention_begin, lock/contention_end ran 25% of each second (detached 5.2 s in all, still at the window's end): their counts and sums are estimates, each event seen standing for 4" {
		t.Fatalf("duty notes: %q", notes)
	}
	var calm finding.Overhead
	window(&calm, time.Second, time.Second, 10*time.Second, 0, 2)
	if calm.BudgetBit || calm.OverBudget || len(SamplingNotes(calm)) != 0 {
		t.Fatalf("nothing sampled, nothing spent: %+v", calm)
	}
}
