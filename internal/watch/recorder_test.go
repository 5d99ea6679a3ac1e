package watch

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/fact"
	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/incident"
	"github.com/wolf-investigator/wolf/internal/investigator"
)

func events(t *testing.T, b []byte) []Event {
	t.Helper()
	var out []Event
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<22)
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	return out
}

func withProfile(f finding.Finding, frame string) func() (*investigator.Result, error) {
	return func() (*investigator.Result, error) {
		return &investigator.Result{Findings: []finding.Finding{f},
			Profiles: []finding.Profile{{Name: "blocked_stacks", Unit: "tasks", Stacks: []finding.StackCount{{Frames: []string{"[D state]", frame}, Value: 1}}}}}, nil
	}
}

// A critical finding that starts opens an incident; one that escalates
// from warning to critical opens another; one that stays critical does
// not. Each bundle holds the report of the window that opened it and the
// windows before it, and the event stream announces it.
func TestIncidentOnCriticalStartAndEscalation(t *testing.T) {
	other := hungGroup([]int{7}, 6, finding.Warning)
	other.Subjects[0].PID, other.Subjects[0].TID, other.Subjects[0].Comm = 20, 20, "other"
	otherCrit := other
	otherCrit.Severity = finding.Critical
	inv := &script{name: "hung", done: make(chan struct{}), steps: []func() (*investigator.Result, error){
		found(),                  // 1: quiet
		withProfile(other, "w1"), // 2: a warning: no incident
		func() (*investigator.Result, error) { // 3: a critical starts
			r, _ := withProfile(hungGroup([]int{1, 2}, 9, finding.Critical), "w3")()
			r.Findings = append(r.Findings, other)
			return r, nil
		},
		func() (*investigator.Result, error) { // 4: both; the warning escalates
			return &investigator.Result{Findings: []finding.Finding{hungGroup([]int{1, 2}, 10, finding.Critical), otherCrit}}, nil
		},
		func() (*investigator.Result, error) { // 5: unchanged: nothing new
			return &investigator.Result{Findings: []finding.Finding{hungGroup([]int{1, 2}, 11, finding.Critical), otherCrit}}, nil
		},
	}}
	dir := t.TempDir()
	store, err := incident.Open(dir, incident.Limits{MinInterval: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out syncBuf
	w, err := New(Config{Investigators: []investigator.Investigator{inv}, Default: 20 * time.Millisecond, Events: &out,
		ClearAfter: 1, Incidents: store, Ring: 2, Header: finding.Report{WolfVersion: "test", Host: "box", Kernel: "6.18"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	finished := make(chan struct{})
	go func() { w.Run(ctx); close(finished) }()
	<-inv.done
	cancel()
	<-finished // Run returns once queued incidents are written

	metas, err := incident.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(metas) != 2 {
		t.Fatalf("%d incidents, want 2 (a start, an escalation): %+v", len(metas), metas)
	}
	esc, start := metas[0], metas[1] // newest first
	if len(start.Triggers) != 1 || start.Triggers[0].Event != "start" || start.Triggers[0].Kind != "finding" || !strings.HasPrefix(start.Triggers[0].Identity, "hung|hung.lock-owner|") {
		t.Errorf("first incident's triggers: %+v", start.Triggers)
	}
	if len(esc.Triggers) != 1 || esc.Triggers[0].Event != "escalate" || !strings.Contains(esc.Triggers[0].Identity, "comm=other") {
		t.Errorf("second incident's triggers: %+v", esc.Triggers)
	}
	if start.Before != 2 || esc.Before != 2 {
		t.Errorf("windows before: %d and %d, want the ring's 2", start.Before, esc.Before)
	}
	rep, err := incident.ReadReport(dir, start.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Findings) != 2 || rep.Findings[0].Severity != finding.Critical || rep.Host != "box" || rep.Command != "watch" {
		t.Errorf("incident report: %+v", rep)
	}
	if len(rep.Profiles) != 1 || rep.Profiles[0].Stacks[0].Frames[1] != "w3" {
		t.Errorf("incident profiles: %+v", rep.Profiles)
	}
	folded, err := os.ReadFile(filepath.Join(dir, start.ID, "profiles", "blocked_stacks.folded"))
	if err != nil || !strings.Contains(string(folded), "w3") {
		t.Errorf("folded: %q %v", folded, err)
	}
	// The window before the critical one had the warning and its stacks.
	b, err := filepath.Glob(filepath.Join(dir, start.ID, "before", "*.json"))
	if err != nil || len(b) != 2 {
		t.Fatalf("before files %v %v", b, err)
	}
	last, _ := os.ReadFile(b[1])
	if !bytes.Contains(last, []byte(`"w1"`)) {
		t.Errorf("the window before does not hold its profile:\n%s", last)
	}
	var announced []Event
	for _, e := range events(t, out.Bytes()) {
		if e.Event == "incident" {
			announced = append(announced, e)
		}
	}
	if len(announced) != 2 || announced[0].Incident != start.ID || announced[0].Path != filepath.Join(dir, start.ID) {
		t.Errorf("incident events %+v", announced)
	}
}

// The diagnosis stage sees the latest window of every investigator in
// one report; a diagnosis that starts opens an incident whose report
// carries what the stage added, and one that persists does not open
// another.
func TestIncidentOnDiagnosis(t *testing.T) {
	owner := finding.Finding{ID: "locks.owner", Investigator: "locks", Severity: finding.Warning, Title: "mmap_lock held"}
	locks := &script{name: "locks", done: make(chan struct{}), steps: []func() (*investigator.Result, error){
		found(owner), found(owner), found(owner), found(owner),
	}}
	hung := &script{name: "hung", done: make(chan struct{}), steps: []func() (*investigator.Result, error){
		found(), found(hungGroup([]int{1}, 6, finding.Warning)), found(hungGroup([]int{1}, 7, finding.Warning)), found(hungGroup([]int{1}, 8, finding.Warning)),
	}}
	dir := t.TempDir()
	store, err := incident.Open(dir, incident.Limits{MinInterval: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	diagnose := func(r *finding.Report, _ *fact.Set) []Diagnosed {
		var h, l bool
		for _, f := range r.Findings {
			h = h || f.Investigator == "hung"
			l = l || f.Investigator == "locks"
		}
		if !h || !l {
			return nil
		}
		// What the diagnosis stage adds to the report goes into the
		// bundle: here a note, until the report has diagnoses.
		r.Notes = append(r.Notes, "diagnosis: hung waits on locks")
		return []Diagnosed{{Identity: "hung.lock-owner->locks.owner", Title: "tasks hang behind a held mmap_lock", Severity: finding.Critical}}
	}
	w, err := New(Config{Investigators: []investigator.Investigator{locks, hung}, Default: 20 * time.Millisecond,
		ClearAfter: 1, Incidents: store, Diagnose: diagnose})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	finished := make(chan struct{})
	go func() { w.Run(ctx); close(finished) }()
	<-locks.done
	<-hung.done
	cancel()
	<-finished
	metas, err := incident.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(metas) != 1 {
		t.Fatalf("%d incidents, want 1: %+v", len(metas), metas)
	}
	m := metas[0]
	if m.Triggers[0].Kind != "diagnosis" || m.Title != "tasks hang behind a held mmap_lock" || m.Severity != finding.Critical {
		t.Errorf("incident %+v", m)
	}
	rep, err := incident.ReadReport(dir, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Findings) != 2 || !strings.Contains(strings.Join(rep.Notes, "\n"), "diagnosis: hung waits on locks") {
		t.Errorf("report: %d findings, notes %q", len(rep.Findings), rep.Notes)
	}
}

// Timelines from windows that started later are shifted to the merged
// report's start.
func TestHostReportShiftsTimelines(t *testing.T) {
	w, err := New(Config{Investigators: []investigator.Investigator{&script{name: "x"}}, Default: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tl := finding.Timeline{Name: "migrations", Events: []finding.TimelineEvent{{AtS: 1, Value: 3}}}
	v := view{windows: []*winResult{
		{name: "hung", start: t0, end: t0.Add(20 * time.Second), res: &investigator.Result{}},
		{name: "sched", start: t0.Add(5 * time.Second), end: t0.Add(65 * time.Second), res: &investigator.Result{Timelines: []finding.Timeline{tl}}},
	}}
	rep := w.hostReport(v)
	if rep.DurationS != 65 || !rep.StartedAt.Equal(t0) {
		t.Errorf("report spans %v from %v", rep.DurationS, rep.StartedAt)
	}
	if got := rep.Timelines[0].Events[0].AtS; got != 6 {
		t.Errorf("timeline event at %v s, want 6", got)
	}
	if tl.Events[0].AtS != 1 {
		t.Errorf("the window's own timeline was changed")
	}
}

// peeky is a session whose windows end empty while a look inside shows a
// critical finding: a hang that starts and clears inside one window.
type peeky struct {
	mu     sync.Mutex
	peeks  int
	hang   finding.Finding
	collct int
}

func (p *peeky) Name() string    { return "hung" }
func (p *peeky) Summary() string { return "fake" }
func (p *peeky) Start(context.Context, investigator.Options) (investigator.Session, error) {
	return p, nil
}
func (p *peeky) Collect(context.Context) (*investigator.Result, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.collct++
	return &investigator.Result{}, nil
}
func (p *peeky) Peek(context.Context) (*investigator.Result, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.peeks++
	if p.peeks < 3 || p.collct > 0 {
		return &investigator.Result{}, nil // before the hang, and after it cleared
	}
	return &investigator.Result{Findings: []finding.Finding{p.hang},
		Profiles: []finding.Profile{{Name: "blocked_stacks", Unit: "tasks", Stacks: []finding.StackCount{{Frames: []string{"[D state]", "rwsem_down_write_slowpath"}, Value: 2}}}}}, nil
}
func (p *peeky) Close() error { return nil }

// A critical finding seen by a peek inside a window that ends without it
// opens an incident with the peek's evidence, is said as a start line at
// once, and clears only through windows.
func TestPeekCapturesWhatAWindowMisses(t *testing.T) {
	p := &peeky{hang: hungGroup([]int{1, 2}, 7, finding.Critical)}
	dir := t.TempDir()
	store, err := incident.Open(dir, incident.Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out syncBuf
	w, err := New(Config{Investigators: []investigator.Investigator{p}, Default: 400 * time.Millisecond, PeekEvery: 20 * time.Millisecond,
		Events: &out, ClearAfter: 1, Incidents: store})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), `"event":"clear"`) {
		if time.Now().After(deadline) {
			t.Fatalf("no clear line:\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	var kinds []string
	for _, e := range events(t, out.Bytes()) {
		kinds = append(kinds, e.Event)
	}
	if got := strings.Join(kinds, " "); got != "start incident clear" && got != "start clear incident" {
		t.Errorf("events %q, want start, incident, clear", got)
	}
	metas, err := incident.List(dir)
	if err != nil || len(metas) != 1 {
		t.Fatalf("incidents %+v %v", metas, err)
	}
	rep, err := incident.ReadReport(dir, metas[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Findings) != 1 || rep.Findings[0].ID != "hung.lock-owner" || len(rep.Profiles) != 1 {
		t.Errorf("the incident lacks the peek's evidence: %+v", rep)
	}
}

// The ring keeps a view of every window of a lone investigator, even one
// that ended late on a busy host and so ended just before the next one:
// views are spaced by when their windows were due.
func TestRingKeepsALateWindow(t *testing.T) {
	none := func(*finding.Report, *fact.Set) []Diagnosed { return nil } // the ring is kept for diagnoses
	w, err := New(Config{Investigators: []investigator.Investigator{&script{name: "hung"}}, Default: 20 * time.Millisecond, Ring: 3, Diagnose: none})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	// Due at 20, 40, 60 ms; the first ends 16 ms late, 4 ms before the second.
	for _, e := range []struct{ due, end int }{{20, 36}, {40, 40}, {60, 61}} {
		w.rec.record(&winResult{name: "hung", start: ms(e.due - 20), end: ms(e.end), due: ms(e.due), res: &investigator.Result{}}, nil)
	}
	if len(w.rec.views) != 3 {
		t.Errorf("%d views in the ring after 3 windows, want 3", len(w.rec.views))
	}
	// Two investigators whose windows end together make one view.
	w, err = New(Config{Investigators: []investigator.Investigator{&script{name: "hung"}, &script{name: "locks"}}, Default: time.Second, Ring: 3, Diagnose: none})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"hung", "locks"} {
		w.rec.record(&winResult{name: name, end: ms(1000), due: ms(1000), res: &investigator.Result{}}, nil)
	}
	if len(w.rec.views) != 1 {
		t.Errorf("%d views for two windows due together, want 1", len(w.rec.views))
	}
}
