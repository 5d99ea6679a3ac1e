package watch

import (
	"fmt"
	"path/filepath"
	"runtime/debug"
	"sort"
	"sync"
	"time"

	"github.com/wolf-investigator/wolf/internal/fact"
	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/incident"
	"github.com/wolf-investigator/wolf/internal/investigator"
)

// DefaultRing is how many host views before an incident its bundle keeps,
// a window apart (the longest window): with the defaults, the host 1, 2
// and 3 minutes before.
const DefaultRing = 3

// Diagnosed is one diagnosis as the watch tracks it across windows.
type Diagnosed struct {
	Identity string // stable while the situation lasts (its root and relations, no numbers)
	Title    string
	Severity finding.Severity
}

// winResult is one investigator window's result.
type winResult struct {
	name       string
	start, end time.Time
	// due is when the window was to end on its investigator's cadence
	// (zero: at end). A window that ends late, on a busy host, is due
	// on time all the same, so the next one is still a window after it.
	due     time.Time
	res     *investigator.Result
	partial bool // a peek: the window so far
}

// dueAt is when the window was to end: due, else end.
func (w *winResult) dueAt() time.Time {
	if w.due.IsZero() {
		return w.end
	}
	return w.due
}

// view is the host as the watch knew it after one window ended: the
// latest window of every investigator.
type view struct {
	at      time.Time    // when the window that made it was due
	windows []*winResult // by investigator name
}

// recorder keeps the latest window of each investigator and a ring of
// recent host views, tracks diagnoses across them, and opens incidents.
// Its memory is bounded: at most ring+1 results per investigator are
// referenced at any time.
type recorder struct {
	w       *Watcher
	ring    int
	spacing time.Duration // least time between two views of the ring: the longest window

	mu     sync.Mutex
	latest map[string]*winResult
	views  []view // oldest first, at most ring
	diags  map[string]*trackedDiag

	queue chan *incident.Bundle
	done  chan struct{}
}

type trackedDiag struct {
	sev    finding.Severity
	missed int
}

func newRecorder(w *Watcher) *recorder {
	r := &recorder{w: w, ring: w.cfg.Ring, latest: map[string]*winResult{}, diags: map[string]*trackedDiag{}}
	if r.ring <= 0 {
		r.ring = DefaultRing
	}
	for _, inv := range w.cfg.Investigators {
		r.spacing = max(r.spacing, w.WindowOf(inv.Name()))
	}
	if w.cfg.Incidents != nil {
		// A small queue: rendering and writing take a moment, and a
		// burst of triggers in one window goes into one bundle anyway.
		r.queue = make(chan *incident.Bundle, 4)
		r.done = make(chan struct{})
		go r.writer()
	}
	return r
}

// enabled says whether the recorder has anything to do: without an
// incidents directory or a diagnosis stage it keeps nothing.
func (r *recorder) enabled() bool { return r.queue != nil || r.w.cfg.Diagnose != nil }

// record records one successful window and the finding changes it made,
// and opens an incident when a critical finding or a diagnosis started
// or escalated.
func (r *recorder) record(win *winResult, changes []Change) {
	if !r.enabled() {
		return
	}
	var triggers []incident.Trigger
	for _, c := range changes {
		if t, ok := findingTrigger(win.name, c); ok {
			triggers = append(triggers, t)
		}
	}

	r.mu.Lock()
	r.latest[win.name] = win
	cur := view{at: win.dueAt()}
	for _, w := range r.latest {
		cur.windows = append(cur.windows, w)
	}
	sort.Slice(cur.windows, func(i, j int) bool { return cur.windows[i].name < cur.windows[j].name })
	before := append([]view(nil), r.views...)
	// The ring keeps views a window apart: investigators' windows end
	// at nearly the same moments, and three views a second apart would
	// show the same host three times. Apart by when they were due: a
	// window that ended late would otherwise push out the next one.
	// (A quarter of slack: investigators start a little apart.)
	if n := len(r.views); n == 0 || cur.at.Sub(r.views[n-1].at) >= r.spacing*3/4 {
		r.views = append(r.views, cur)
		if len(r.views) > r.ring {
			r.views = r.views[len(r.views)-r.ring:]
		}
	}
	var rep *finding.Report
	if r.w.cfg.Diagnose != nil {
		rep = r.w.hostReport(cur)
		triggers = append(triggers, r.trackDiagnoses(r.w.cfg.Diagnose(rep, viewFacts(cur)))...)
	}
	r.mu.Unlock()

	if len(triggers) == 0 || r.queue == nil {
		return
	}
	if rep == nil {
		rep = r.w.hostReport(cur)
	}
	r.open(triggers, rep, before)
}

// open queues an incident for the triggers the store admits.
func (r *recorder) open(triggers []incident.Trigger, rep *finding.Report, before []view) {
	if len(triggers) == 0 || r.queue == nil {
		return
	}
	triggers = r.w.cfg.Incidents.Admit(triggers)
	if len(triggers) == 0 {
		return
	}
	b := &incident.Bundle{Time: r.w.cfg.Now(), Triggers: triggers, Report: rep}
	for _, v := range before {
		br := r.w.hostReport(v)
		if r.w.cfg.Diagnose != nil {
			r.w.cfg.Diagnose(br, viewFacts(v))
		}
		b.Before = append(b.Before, br)
	}
	select {
	case r.queue <- b:
	default:
		r.w.cfg.Incidents.Drop(incident.DropQueueFull)
	}
}

// peeked records a look into a window not yet over that started or
// escalated findings: the incident's report is the host with this
// investigator's window so far; the ring and the latest windows keep
// only concluded windows.
func (r *recorder) peeked(win *winResult, changes []Change) {
	if r.queue == nil {
		return
	}
	var triggers []incident.Trigger
	for _, c := range changes {
		if t, ok := findingTrigger(win.name, c); ok {
			triggers = append(triggers, t)
		}
	}
	r.mu.Lock()
	cur := view{at: win.dueAt(), windows: []*winResult{win}}
	for n, w := range r.latest {
		if n != win.name {
			cur.windows = append(cur.windows, w)
		}
	}
	sort.Slice(cur.windows, func(i, j int) bool { return cur.windows[i].name < cur.windows[j].name })
	before := append([]view(nil), r.views...)
	rep := r.w.hostReport(cur)
	if r.w.cfg.Diagnose != nil {
		triggers = append(triggers, r.trackDiagnoses(r.w.cfg.Diagnose(rep, viewFacts(cur)))...)
	}
	r.mu.Unlock()
	r.open(triggers, rep, before)
}

// findingTrigger: a critical finding that started, or that was less than
// critical when last emitted.
func findingTrigger(inv string, c Change) (incident.Trigger, bool) {
	f := c.Finding
	if f == nil || f.Severity < finding.Critical {
		return incident.Trigger{}, false
	}
	var event string
	switch {
	case c.Event == "start":
		event = "start"
	case c.Event == "change" && c.Prev != nil && c.Prev.Severity < f.Severity:
		event = "escalate"
	default:
		return incident.Trigger{}, false
	}
	return incident.Trigger{Kind: "finding", Identity: inv + "|" + c.Key, Event: event, Severity: f.Severity, Title: f.Title, Investigator: inv}, true
}

// trackDiagnoses compares this view's diagnoses with those active and
// returns triggers for the new and the escalated ones (warning or worse).
// A diagnosis clears after ClearAfter views without it. Called with r.mu
// held.
func (r *recorder) trackDiagnoses(ds []Diagnosed) []incident.Trigger {
	var out []incident.Trigger
	seen := map[string]bool{}
	for _, d := range ds {
		seen[d.Identity] = true
		st, ok := r.diags[d.Identity]
		switch {
		case !ok:
			r.diags[d.Identity] = &trackedDiag{sev: d.Severity}
			if d.Severity >= finding.Warning {
				out = append(out, incident.Trigger{Kind: "diagnosis", Identity: d.Identity, Event: "start", Severity: d.Severity, Title: d.Title})
			}
		case d.Severity > st.sev:
			st.sev, st.missed = d.Severity, 0
			if d.Severity >= finding.Warning {
				out = append(out, incident.Trigger{Kind: "diagnosis", Identity: d.Identity, Event: "escalate", Severity: d.Severity, Title: d.Title})
			}
		default:
			st.missed = 0
		}
	}
	for id, st := range r.diags {
		if !seen[id] {
			if st.missed++; st.missed >= r.w.cfg.ClearAfter {
				delete(r.diags, id)
			}
		}
	}
	return out
}

// writer renders and writes bundles one at a time, off the investigators'
// goroutines, and says each in the event stream.
func (r *recorder) writer() {
	defer close(r.done)
	for b := range r.queue {
		m, err := r.w.cfg.Incidents.Write(b)
		// Rendering a bundle (the report as JSON, text and an HTML page
		// with its flame graphs, the windows before it) takes several
		// times the watcher's live heap for a moment; handed back to the
		// kernel now, it does not stay in wolf's resident memory until
		// the Go runtime's scavenger gets to it, minutes later. Incidents
		// are rare and rate-limited, and the collection a few tens of
		// milliseconds of CPU.
		debug.FreeOSMemory()
		t := b.Triggers[0]
		if err != nil {
			r.w.emit(Event{Event: "incident-error", Time: r.w.cfg.Now(), Investigator: t.Investigator, Key: t.Identity, Error: err.Error()})
			continue
		}
		r.w.emit(Event{Event: "incident", Time: m.Time, Investigator: t.Investigator, Key: t.Identity, Reason: m.Title,
			Incident: m.ID, Path: filepath.Join(r.w.cfg.Incidents.Dir(), m.ID)})
	}
}

// close writes the bundles still queued and stops the writer.
func (r *recorder) close() {
	if r.queue == nil {
		return
	}
	close(r.queue)
	<-r.done
}

// viewFacts merges the facts of a view's windows, each investigator's
// from its own latest window: what the diagnoses of the view's report
// are joined from.
func viewFacts(v view) *fact.Set {
	s := &fact.Set{}
	for _, win := range v.windows {
		s.Merge(win.res.Facts)
	}
	return s
}

// hostReport merges a view's windows into one report: every
// investigator's latest findings, histograms, profiles and timelines, the
// report starting at the earliest window's start. Timelines are shifted
// to that start, so their times line up.
func (w *Watcher) hostReport(v view) *finding.Report {
	rep := w.cfg.Header
	rep.Command = "watch"
	rep.Findings = []finding.Finding{}
	rep.Histograms = []finding.Histogram{}
	rep.Profiles, rep.Timelines, rep.Errors, rep.Notes = nil, nil, nil, nil
	rep.Capabilities = map[string]bool{}
	rep.Overhead = finding.Overhead{}
	if len(v.windows) == 0 {
		return &rep
	}
	start, end := v.windows[0].start, v.windows[0].end
	for _, win := range v.windows {
		start = minTime(start, win.start)
		end = maxTime(end, win.end)
	}
	rep.StartedAt = start.UTC().Truncate(time.Millisecond)
	rep.DurationS = float64(end.Sub(start).Milliseconds()) / 1000
	for _, win := range v.windows {
		res := win.res
		rep.Findings = append(rep.Findings, res.Findings...)
		rep.Histograms = append(rep.Histograms, res.Histograms...)
		rep.Profiles = append(rep.Profiles, res.Profiles...)
		shift := win.start.Sub(start).Seconds()
		for _, tl := range res.Timelines {
			if shift != 0 {
				evs := make([]finding.TimelineEvent, len(tl.Events))
				for i, e := range tl.Events {
					e.AtS += shift
					evs[i] = e
				}
				tl.Events = evs
			}
			rep.Timelines = append(rep.Timelines, tl)
		}
		for k, ok := range res.Capabilities {
			rep.Capabilities[k] = ok
		}
		// Each window's CPU figure is the whole process's over that
		// window: added up they would count shared seconds twice.
		cpu := max(rep.Overhead.CPUSeconds, res.Overhead.CPUSeconds)
		rep.Overhead.Add(res.Overhead)
		rep.Overhead.CPUSeconds = cpu
		what := "window"
		if win.partial {
			what = "window so far (a look inside it; the window was not over)"
		}
		rep.Notes = append(rep.Notes, fmt.Sprintf("watch: %s's %s %s to %s (%.0f s)", win.name, what,
			win.start.UTC().Format("15:04:05"), win.end.UTC().Format("15:04:05Z"), win.end.Sub(win.start).Seconds()))
		for _, n := range res.Notes {
			rep.Notes = append(rep.Notes, win.name+": "+n)
		}
	}
	finding.Sort(rep.Findings)
	return &rep
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
