// Package watch runs wolf's investigators continuously: each in its own
// goroutine, in consecutive windows, restarted with backoff when a window
// fails. Every window's findings are compared with the previous ones and
// emitted as JSON lines when a finding starts, changes materially or
// clears; every window also feeds the Prometheus metrics (Metrics) that
// `wolf watch` serves.
package watch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/incident"
	"github.com/wolf-investigator/wolf/internal/investigator"
)

// Default backoff after a failed window: doubled after each consecutive
// failure, capped so a feature that comes back (a module loaded, a
// tracepoint enabled) is picked up within minutes.
const (
	DefaultBackoff    = 5 * time.Second
	DefaultMaxBackoff = 5 * time.Minute
)

// Config is what a Watcher runs.
type Config struct {
	Investigators []investigator.Investigator
	// Window is each investigator's window length, by name; Default
	// applies to the others.
	Window  map[string]time.Duration
	Default time.Duration
	// Events receives the JSON lines; nil discards them.
	Events  io.Writer
	Metrics *Metrics // nil: no metrics
	// Backoff and MaxBackoff bound the wait after a failed window; zero
	// means the defaults.
	Backoff, MaxBackoff time.Duration
	// Now is the clock (tests fix it); nil means time.Now.
	Now func() time.Time
	// MinSeverity drops findings below it from the event stream (they
	// still count in the metrics); a finding that falls below it clears.
	MinSeverity finding.Severity
	// ClearAfter is how many consecutive windows a finding must be
	// missing before it clears; 0 means DefaultClearAfter.
	ClearAfter int

	// Incidents, when set, receives a bundle whenever a critical
	// finding or a diagnosis starts or escalates.
	Incidents *incident.Store
	// Header is the header of every report the watch makes (version,
	// kernel, host); the rest is filled from the windows.
	Header finding.Report
	// Diagnose, when set, runs the diagnosis stage over a report of the
	// latest window of every investigator, filling its diagnoses, and
	// returns them so that the watch can follow them across windows.
	Diagnose func(*finding.Report) []Diagnosed
	// Ring is how many host views before an incident its bundle keeps;
	// 0 means DefaultRing.
	Ring int
	// OnWindow, when set, is called with every successful window's
	// result, in order per investigator (tests total them; it must not
	// keep res past the call or change it).
	OnWindow func(name string, start, end time.Time, res *investigator.Result)
}

// DefaultClearAfter: a finding clears after two windows without it, so
// one caught in most windows but not all does not flap.
const DefaultClearAfter = 2

// Event is one JSON line of the watch's output.
type Event struct {
	Event        string           `json:"event"` // start, change, clear, error, recovered
	Time         time.Time        `json:"time"`
	Investigator string           `json:"investigator"`
	Key          string           `json:"key,omitempty"`
	Reason       string           `json:"reason,omitempty"` // change: what moved
	Finding      *finding.Finding `json:"finding,omitempty"`
	Error        string           `json:"error,omitempty"`
	// RetryInS is the backoff before the failed investigator runs again.
	RetryInS float64 `json:"retry_in_s,omitempty"`
	Failures int     `json:"failures,omitempty"` // consecutive failed windows
	// Incident and Path name the bundle an "incident" line announces.
	Incident string `json:"incident,omitempty"`
	Path     string `json:"path,omitempty"`
}

// Watcher supervises the investigators. Use New, then Run.
type Watcher struct {
	cfg Config
	mu  sync.Mutex // serializes event lines
	enc *json.Encoder
	rec *recorder
}

// New checks cfg and returns a watcher.
func New(cfg Config) (*Watcher, error) {
	if len(cfg.Investigators) == 0 {
		return nil, errors.New("watch: no investigators")
	}
	if cfg.Default <= 0 {
		return nil, fmt.Errorf("watch: window must be positive, got %v", cfg.Default)
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.MaxBackoff < cfg.Backoff {
		cfg.MaxBackoff = max(DefaultMaxBackoff, cfg.Backoff)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ClearAfter <= 0 {
		cfg.ClearAfter = DefaultClearAfter
	}
	if cfg.Events == nil {
		cfg.Events = io.Discard
	}
	w := &Watcher{cfg: cfg, enc: json.NewEncoder(cfg.Events)}
	w.rec = newRecorder(w)
	return w, nil
}

// WindowOf is the window length the named investigator runs with.
func (w *Watcher) WindowOf(name string) time.Duration {
	if d, ok := w.cfg.Window[name]; ok && d > 0 {
		return d
	}
	return w.cfg.Default
}

// Run runs every investigator until ctx is cancelled, then waits for each
// to finish its window (investigators detach before they return), writes
// the incidents still queued, and returns. Failures never stop the watch;
// they are reported and retried. Run is called once.
func (w *Watcher) Run(ctx context.Context) {
	defer w.rec.close()
	var wg sync.WaitGroup
	for _, inv := range w.cfg.Investigators {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.supervise(ctx, inv)
		}()
	}
	wg.Wait()
}

// supervise is one investigator's loop: window after window, diffing
// findings, backing off after failures.
func (w *Watcher) supervise(ctx context.Context, inv investigator.Investigator) {
	name := inv.Name()
	window := w.WindowOf(name)
	active := map[string]*Active{}
	failures := 0
	backoff := w.cfg.Backoff
	for ctx.Err() == nil {
		start := time.Now()
		res, err := runWindow(ctx, inv, window)
		took := time.Since(start)
		if ctx.Err() != nil {
			// Shutting down: a window cut short says nothing about the
			// findings, so nothing is cleared or changed.
			return
		}
		if err == nil && res == nil {
			err = errors.New("investigator returned no result")
		}
		if err != nil {
			failures++
			if w.cfg.Metrics != nil {
				w.cfg.Metrics.Failed(name, took)
			}
			w.emit(Event{Event: "error", Time: w.cfg.Now(), Investigator: name, Error: err.Error(), RetryInS: backoff.Seconds(), Failures: failures})
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, w.cfg.MaxBackoff)
			continue
		}
		if took < window/2 {
			// A window that "succeeded" in well under its length did
			// not watch; pace the loop rather than spin.
			t := time.NewTimer(window - took)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		if failures > 0 {
			w.emit(Event{Event: "recovered", Time: w.cfg.Now(), Investigator: name, Failures: failures})
		}
		failures, backoff = 0, w.cfg.Backoff
		if w.cfg.Metrics != nil {
			w.cfg.Metrics.Observe(name, res, took, time.Now())
		}
		if w.cfg.OnWindow != nil {
			w.cfg.OnWindow(name, start, start.Add(took), res)
		}
		now := w.cfg.Now()
		var shown []finding.Finding
		for _, f := range res.Findings {
			if f.Severity >= w.cfg.MinSeverity {
				shown = append(shown, f)
			}
		}
		changes := Diff(active, shown, w.cfg.ClearAfter)
		for _, c := range changes {
			w.emit(Event{Event: c.Event, Time: now, Investigator: name, Key: c.Key, Reason: c.Reason, Finding: c.Finding})
		}
		w.rec.record(&winResult{name: name, start: start, end: start.Add(took), res: res}, changes)
	}
}

// runWindow runs one window, turning a panic into an error so that one
// broken investigator cannot take the others down.
func runWindow(ctx context.Context, inv investigator.Investigator, d time.Duration) (res *investigator.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			res, err = nil, fmt.Errorf("panic: %v", p)
		}
	}()
	return investigator.Run(ctx, inv, investigator.Options{Duration: d})
}

func (w *Watcher) emit(e Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e.Time = e.Time.UTC().Truncate(time.Millisecond)
	_ = w.enc.Encode(e) // a closed pipe must not stop the watch; metrics still serve
}
