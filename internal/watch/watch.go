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

	"github.com/wolf-investigator/wolf/internal/fact"
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
	Diagnose func(*finding.Report, *fact.Set) []Diagnosed
	// Ring is how many host views before an incident its bundle keeps;
	// 0 means DefaultRing.
	Ring int
	// Options are what every investigator starts with (a PID filter, a
	// BTF file).
	Options investigator.Options
	// PeekEvery is how often sessions that can (Peeker) are looked into
	// between windows; 0 means DefaultPeek, negative never.
	PeekEvery time.Duration
	// Namer, when set, names the containers and pods of every window's
	// findings and of the diagnoses, before anything is emitted, counted
	// or recorded (internal/containers).
	Namer Namer
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
	// Diagnosis is set on the lines of investigator "diagnose".
	Diagnosis *finding.Diagnosis `json:"diagnosis,omitempty"`
	Error     string             `json:"error,omitempty"`
	// RetryInS is the backoff before the failed investigator runs again.
	RetryInS float64 `json:"retry_in_s,omitempty"`
	Failures int     `json:"failures,omitempty"` // consecutive failed windows
	// Incident and Path name the bundle an "incident" line announces.
	Incident string `json:"incident,omitempty"`
	Path     string `json:"path,omitempty"`
}

// Watcher supervises the investigators. Use New, then Run.
type Watcher struct {
	cfg  Config
	mu   sync.Mutex // serializes event lines
	enc  *json.Encoder
	rec  *recorder
	diag diagnoser
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
	if cfg.PeekEvery == 0 {
		cfg.PeekEvery = DefaultPeek
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

// supervise is one investigator's loop: start a session (load and
// attach once), collect a window every window length without detaching,
// and when anything fails, close the session and start again after a
// backoff.
func (w *Watcher) supervise(ctx context.Context, inv investigator.Investigator) {
	name := inv.Name()
	st := &invState{name: name, window: w.WindowOf(name), active: map[string]*Active{}, backoff: w.cfg.Backoff}
	for ctx.Err() == nil {
		start := time.Now()
		err := w.attached(ctx, inv, st)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("session ended")
		}
		st.failures++
		if w.cfg.Metrics != nil {
			w.cfg.Metrics.Failed(name, time.Since(start))
		}
		w.emit(Event{Event: "error", Time: w.cfg.Now(), Investigator: name, Error: err.Error(), RetryInS: st.backoff.Seconds(), Failures: st.failures})
		t := time.NewTimer(st.backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		st.backoff = min(2*st.backoff, w.cfg.MaxBackoff)
	}
}

// invState is what one investigator's supervisor keeps across sessions.
type invState struct {
	name     string
	window   time.Duration
	active   map[string]*Active // findings emitted and not cleared
	failures int                // consecutive failures
	backoff  time.Duration
}

// Peeker is a session that can conclude the window so far without ending
// it: the same findings Collect would give now, the window going on. The
// watch peeks every PeekEvery so that a hang that starts and clears
// inside one window still opens an incident, with its evidence, while it
// lasts. Peeks start and escalate findings; only windows clear them.
type Peeker interface {
	Peek(ctx context.Context) (*investigator.Result, error)
}

// DefaultPeek is how often the watch peeks into sessions that can: hung's
// walker looks every second and a hang counts from 5 s, so a hang of 8 s
// is seen at least once.
const DefaultPeek = 2 * time.Second

// attached runs one session until ctx ends (nil) or it fails (the error).
// The session is always closed before it returns; closing waits for the
// kernel's grace periods, and the investigators' supervisors close theirs
// side by side, so at exit those waits overlap.
func (w *Watcher) attached(ctx context.Context, inv investigator.Investigator, st *invState) error {
	sess, err := startSession(ctx, inv, w.cfg.Options)
	if err != nil {
		return err
	}
	defer closeSession(sess)
	if w.cfg.Metrics != nil {
		w.cfg.Metrics.Attached(st.name)
	}
	winStart := time.Now()
	next := winStart.Add(st.window)
	var peeks <-chan time.Time
	peeker, canPeek := sess.(Peeker)
	if canPeek && w.cfg.PeekEvery > 0 {
		t := time.NewTicker(w.cfg.PeekEvery)
		defer t.Stop()
		peeks = t.C
	}
	for {
		timer := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			// Shutting down: a window cut short says nothing about the
			// findings, so nothing is cleared or changed.
			timer.Stop()
			return nil
		case <-peeks:
			timer.Stop()
			if err := w.peek(ctx, peeker, st, winStart); err != nil {
				return err
			}
			continue
		case <-timer.C:
		}
		due := next
		cstart := time.Now()
		res, err := collect(ctx, sess)
		end := time.Now()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		if st.failures > 0 {
			w.emit(Event{Event: "recovered", Time: w.cfg.Now(), Investigator: st.name, Failures: st.failures})
		}
		st.failures, st.backoff = 0, w.cfg.Backoff
		w.window(st, winStart, end, due, end.Sub(cstart), res)
		winStart = end
		// Windows keep their cadence; one that ran late (a slow Collect
		// on a sick host) does not make the next one short.
		if next = next.Add(st.window); next.Before(end) {
			next = end.Add(st.window)
		}
	}
}

// window handles one concluded window: metrics, finding changes and their
// lines, the recorder.
func (w *Watcher) window(st *invState, start, end, due time.Time, took time.Duration, res *investigator.Result) {
	w.nameFindings(res)
	if w.cfg.Metrics != nil {
		w.cfg.Metrics.Observe(st.name, res, took, end)
	}
	if w.cfg.OnWindow != nil {
		w.cfg.OnWindow(st.name, start, end, res)
	}
	now := w.cfg.Now()
	changes := Diff(st.active, w.shown(res), w.cfg.ClearAfter)
	for _, c := range changes {
		w.emit(Event{Event: c.Event, Time: now, Investigator: st.name, Key: c.Key, Reason: c.Reason, Finding: c.Finding})
	}
	w.rec.record(&winResult{name: st.name, start: start, end: end, due: due, res: res}, changes)
	w.joinWindow(st.name, res)
}

// peek looks into the window so far: findings that start or escalate are
// emitted now and may open an incident; nothing clears.
func (w *Watcher) peek(ctx context.Context, p Peeker, st *invState, winStart time.Time) error {
	res, err := peekSession(ctx, p)
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return err
	}
	w.nameFindings(res)
	now := w.cfg.Now()
	changes := DiffPeek(st.active, w.shown(res))
	for _, c := range changes {
		w.emit(Event{Event: c.Event, Time: now, Investigator: st.name, Key: c.Key, Reason: c.Reason, Finding: c.Finding})
	}
	if len(changes) > 0 {
		w.rec.peeked(&winResult{name: st.name, start: winStart, end: time.Now(), res: res, partial: true}, changes)
	}
	return nil
}

// nameFindings names the containers and pods of a window's findings.
func (w *Watcher) nameFindings(res *investigator.Result) {
	if w.cfg.Namer == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), nameTimeout)
	defer cancel()
	w.cfg.Namer.Findings(ctx, res.Findings)
}

// shown are the findings at or above MinSeverity.
func (w *Watcher) shown(res *investigator.Result) []finding.Finding {
	var out []finding.Finding
	for _, f := range res.Findings {
		if f.Severity >= w.cfg.MinSeverity {
			out = append(out, f)
		}
	}
	return out
}

// The session calls below turn a panic into an error, so that one broken
// investigator cannot take the others down, and a nil result into one.

func startSession(ctx context.Context, inv investigator.Investigator, opts investigator.Options) (s investigator.Session, err error) {
	defer func() {
		if p := recover(); p != nil {
			s, err = nil, fmt.Errorf("panic: %v", p)
		}
	}()
	s, err = inv.Start(ctx, opts)
	if err == nil && s == nil {
		err = errors.New("investigator started no session")
	}
	return s, err
}

func collect(ctx context.Context, s investigator.Session) (res *investigator.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			res, err = nil, fmt.Errorf("panic: %v", p)
		}
	}()
	cctx, cancel := context.WithTimeout(ctx, investigator.CollectTimeout)
	defer cancel()
	res, err = s.Collect(cctx)
	if err == nil && res == nil {
		err = errors.New("investigator returned no result")
	}
	return res, err
}

func peekSession(ctx context.Context, p Peeker) (res *investigator.Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			res, err = nil, fmt.Errorf("panic: %v", r)
		}
	}()
	cctx, cancel := context.WithTimeout(ctx, investigator.CollectTimeout)
	defer cancel()
	res, err = p.Peek(cctx)
	if err == nil && res == nil {
		err = errors.New("investigator returned no result")
	}
	return res, err
}

func closeSession(s investigator.Session) {
	defer func() { _ = recover() }()
	_ = s.Close()
}

func (w *Watcher) emit(e Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e.Time = e.Time.UTC().Truncate(time.Millisecond)
	_ = w.enc.Encode(e) // a closed pipe must not stop the watch; metrics still serve
}
