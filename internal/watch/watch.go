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
}

// Watcher supervises the investigators. Use New, then Run.
type Watcher struct {
	cfg Config
	mu  sync.Mutex // serializes event lines
	enc *json.Encoder
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
	return &Watcher{cfg: cfg, enc: json.NewEncoder(cfg.Events)}, nil
}

// WindowOf is the window length the named investigator runs with.
func (w *Watcher) WindowOf(name string) time.Duration {
	if d, ok := w.cfg.Window[name]; ok && d > 0 {
		return d
	}
	return w.cfg.Default
}

// Run runs every investigator until ctx is cancelled, then waits for each
// to finish its window (investigators detach before they return) and
// returns. Failures never stop the watch; they are reported and retried.
func (w *Watcher) Run(ctx context.Context) {
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
		now := w.cfg.Now()
		var shown []finding.Finding
		for _, f := range res.Findings {
			if f.Severity >= w.cfg.MinSeverity {
				shown = append(shown, f)
			}
		}
		for _, c := range Diff(active, shown, w.cfg.ClearAfter) {
			w.emit(Event{Event: c.Event, Time: now, Investigator: name, Key: c.Key, Reason: c.Reason, Finding: c.Finding})
		}
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
