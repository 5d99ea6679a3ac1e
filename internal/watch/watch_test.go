package watch

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/investigator"
)

// script is a fake investigator: each Collect returns its next step (an
// error ends the session, and watch starts another that goes on with the
// steps); once the steps are done it closes done and returns empty
// windows. starts and closes count sessions.
type script struct {
	name           string
	mu             sync.Mutex
	steps          []func() (*investigator.Result, error)
	calls          int
	starts, closes int
	done           chan struct{}
}

func (s *script) Name() string    { return s.name }
func (s *script) Summary() string { return "fake" }
func (s *script) Start(ctx context.Context, _ investigator.Options) (investigator.Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.starts++
	return (*scriptSession)(s), nil
}

func (s *script) counts() (starts, closes, calls int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.starts, s.closes, s.calls
}

type scriptSession script

func (ss *scriptSession) Collect(context.Context) (*investigator.Result, error) {
	s := (*script)(ss)
	s.mu.Lock()
	i := s.calls
	s.calls++
	s.mu.Unlock()
	if i < len(s.steps) {
		return s.steps[i]()
	}
	if i == len(s.steps) {
		close(s.done)
	}
	return &investigator.Result{}, nil
}

func (ss *scriptSession) Close() error {
	s := (*script)(ss)
	s.mu.Lock()
	s.closes++
	s.mu.Unlock()
	return nil
}

func found(fs ...finding.Finding) func() (*investigator.Result, error) {
	return func() (*investigator.Result, error) { return &investigator.Result{Findings: fs}, nil }
}

func TestWatcherEventsAndFailures(t *testing.T) {
	good := &script{name: "hung", done: make(chan struct{}), steps: []func() (*investigator.Result, error){
		found(hungGroup([]int{1}, 6, finding.Warning)),
		found(hungGroup([]int{1, 2}, 7, finding.Warning)),
		found(),
	}}
	bad := &script{name: "locks", done: make(chan struct{}), steps: []func() (*investigator.Result, error){
		func() (*investigator.Result, error) { return nil, errors.New("load failed") },
		func() (*investigator.Result, error) { panic("boom") },
		found(),
	}}
	var out syncBuf
	m := NewMetrics("test", "", 10, nil, declared())
	w, err := New(Config{Investigators: []investigator.Investigator{good, bad}, Default: 20 * time.Millisecond, Events: &out, Metrics: m,
		Backoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond, ClearAfter: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	finished := make(chan struct{})
	go func() { w.Run(ctx); close(finished) }()
	<-good.done
	<-bad.done
	cancel()
	<-finished

	byInv := map[string][]Event{}
	sc := bufio.NewScanner(bytes.NewReader(out.Bytes()))
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		byInv[e.Investigator] = append(byInv[e.Investigator], e)
	}
	want := map[string][]string{"hung": {"start", "change", "clear"}, "locks": {"error", "error", "recovered"}}
	for inv, kinds := range want {
		got := byInv[inv]
		if len(got) != len(kinds) {
			t.Fatalf("%s events %+v, want %v", inv, got, kinds)
		}
		for i, k := range kinds {
			if got[i].Event != k {
				t.Errorf("%s event %d: %s, want %s", inv, i, got[i].Event, k)
			}
		}
	}
	if e := byInv["locks"][1]; e.Error != "panic: boom" || e.Failures != 2 || e.RetryInS <= 0 {
		t.Errorf("second error %+v", e)
	}
	if e := byInv["hung"][1]; e.Reason == "" || e.Finding == nil || e.Key != byInv["hung"][0].Key {
		t.Errorf("change event %+v", e)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.collectors["locks"]; s.errors != 2 || s.runs < 3 || !s.success || s.attaches != 3 {
		t.Errorf("locks collector state %+v: want 2 errors, each followed by a new session (3 attaches)", s)
	}
	// The investigator that never failed loaded and attached once for
	// all its windows; the failed sessions were closed.
	if starts, _, calls := good.counts(); starts != 1 || calls < 4 {
		t.Errorf("hung: %d sessions for %d windows, want 1", starts, calls)
	}
	if starts, closes, _ := bad.counts(); closes < starts-1 {
		t.Errorf("locks: %d sessions started, %d closed", starts, closes)
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.b.Bytes()...)
}

func TestCheckListen(t *testing.T) {
	for _, c := range []struct {
		addr string
		any  bool
		ok   bool
	}{
		{"127.0.0.1:9740", false, true},
		{"[::1]:9740", false, true},
		{"localhost:0", false, true},
		{":9740", false, false},
		{"0.0.0.0:9740", false, false},
		{"[::]:9740", false, false},
		{"0.0.0.0:9740", true, true},
		{":9740", true, true},
		{"127.0.0.1", false, false},
		{"127.0.0.1:http", false, false},
		{"127.0.0.1:70000", false, false},
	} {
		err := CheckListen(c.addr, c.any)
		if (err == nil) != c.ok {
			t.Errorf("CheckListen(%q, %v) = %v, want ok=%v", c.addr, c.any, err, c.ok)
		}
	}
}

func (s *syncBuf) String() string { return string(s.Bytes()) }
