package watch

import (
	"context"
	"os"
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wolf-investigator/wolf/internal/diagnose"
	"github.com/wolf-investigator/wolf/internal/fact"
	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/investigator"
)

// Diagnoses in a watch: after every investigator's window, the diagnosis
// stage joins the latest findings of every investigator (each from its
// own last successful window) into root-cause chains. A diagnosis is
// emitted as a JSON line (investigator "diagnose", field diagnosis) when it
// starts and when it clears (ClearAfter joins without it), and counted in
// wolf_diagnoses (active) and wolf_diagnoses_total (started).

// diagnoser keeps what the joins need between windows.
type diagnoser struct {
	mu      sync.Mutex
	latest  map[string]*investigator.Result // investigator -> its last window
	active  map[string]*diagState           // diagnosis key -> state
	started map[string]uint64               // diagnosis id -> diagnoses started
}

type diagState struct {
	d      finding.Diagnosis
	missed int
}

// diagKey identifies a diagnosis across joins by what its victims wait
// on (the first hop's target, a lock): investigators' windows end at
// different times, so the same chain may reach its root (a cgroup) one
// window after it reached the lock's holder; that is a change, not a new
// diagnosis.
func diagKey(d *finding.Diagnosis) string {
	if len(d.Chain) > 0 {
		to := &d.Chain[0].To
		return "waits_on|" + subjectKey(to) + "|" + to.Lock + "|" + to.LockAddr
	}
	return d.ID + "|" + subjectKey(&d.Root)
}

// joinWindow records one investigator's window and re-diagnoses.
func (w *Watcher) joinWindow(name string, res *investigator.Result) {
	g := &w.diag
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.latest == nil {
		g.latest, g.active, g.started = map[string]*investigator.Result{}, map[string]*diagState{}, map[string]uint64{}
	}
	g.latest[name] = res
	names := make([]string, 0, len(g.latest))
	for n := range g.latest {
		names = append(names, n)
	}
	sort.Strings(names)
	var all []finding.Finding
	facts := &fact.Set{Self: os.Getpid()}
	for _, n := range names {
		all = append(all, g.latest[n].Findings...)
		facts.Merge(g.latest[n].Facts)
	}
	now := w.cfg.Now()
	seen := map[string]bool{}
	ds := diagnose.Diagnose(all, facts)
	if w.cfg.Namer != nil {
		ctx, cancel := context.WithTimeout(context.Background(), nameTimeout)
		w.cfg.Namer.Diagnoses(ctx, ds)
		cancel()
	}
	for _, d := range ds {
		k := diagKey(&d)
		seen[k] = true
		if st, ok := g.active[k]; ok {
			old := st.d
			st.d, st.missed = d, 0
			if old.ID != d.ID || subjectKey(&old.Root) != subjectKey(&d.Root) {
				dd := d
				w.emit(Event{Event: "change", Time: now, Investigator: "diagnose", Key: k, Reason: "root: " + old.ID + " -> " + d.ID, Diagnosis: &dd})
			}
			continue
		}
		g.active[k] = &diagState{d: d}
		g.started[d.ID]++
		dd := d
		w.emit(Event{Event: "start", Time: now, Investigator: "diagnose", Key: k, Diagnosis: &dd})
	}
	for k, st := range g.active {
		if seen[k] {
			continue
		}
		if st.missed++; st.missed >= w.cfg.ClearAfter {
			delete(g.active, k)
			dd := st.d
			w.emit(Event{Event: "clear", Time: now, Investigator: "diagnose", Key: k, Diagnosis: &dd})
		}
	}
	if m := w.cfg.Metrics; m != nil {
		m.observeDiagnoses(g.active, g.started)
	}
}

// diagMetrics is the diagnoses' part of Metrics.
type diagMetrics struct {
	active  map[findingLabels]int
	started map[string]uint64
	gauge   *prometheus.Desc
	total   *prometheus.Desc
}

func (m *Metrics) observeDiagnoses(active map[string]*diagState, started map[string]uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.diag.gauge == nil {
		m.diag.gauge = prometheus.NewDesc("wolf_diagnoses", "Diagnoses (root-cause chains joined across investigators) active after the last window.", []string{"id", "severity"}, nil)
		m.diag.total = prometheus.NewDesc("wolf_diagnoses_total", "Diagnoses that started, by kind of root cause.", []string{"id"}, nil)
	}
	m.diag.active = map[findingLabels]int{}
	for _, st := range active {
		m.diag.active[findingLabels{st.d.ID, st.d.Severity.String()}]++
	}
	m.diag.started = map[string]uint64{}
	for id, n := range started {
		m.diag.started[id] = n
	}
}

// collectDiagnoses exports them; mu held.
func (m *Metrics) collectDiagnoses(ch chan<- prometheus.Metric) {
	if m.diag.gauge == nil {
		return
	}
	for l, n := range m.diag.active {
		ch <- prometheus.MustNewConstMetric(m.diag.gauge, prometheus.GaugeValue, float64(n), l.id, l.severity)
	}
	for id, n := range m.diag.started {
		ch <- prometheus.MustNewConstMetric(m.diag.total, prometheus.CounterValue, float64(n), id)
	}
}

// DiagnoseReport is the diagnosis stage for the recorder (Config.Diagnose):
// it fills the report's diagnoses, so that an incident bundle's report and
// page carry them, and returns them with their identities (the same keys
// as the JSON lines: what their victims wait on).
func DiagnoseReport(r *finding.Report, facts *fact.Set) []Diagnosed {
	return DiagnoseNamed(nil)(r, facts)
}

// DiagnoseNamed is DiagnoseReport with the diagnoses' containers and pods
// named by n (nil: not named).
func DiagnoseNamed(n Namer) func(*finding.Report, *fact.Set) []Diagnosed {
	return func(r *finding.Report, facts *fact.Set) []Diagnosed {
		diagnose.Apply(r, facts)
		if n != nil {
			ctx, cancel := context.WithTimeout(context.Background(), nameTimeout)
			n.Diagnoses(ctx, r.Diagnoses)
			cancel()
		}
		return diagnosed(r)
	}
}

func diagnosed(r *finding.Report) []Diagnosed {
	out := make([]Diagnosed, 0, len(r.Diagnoses))
	for i := range r.Diagnoses {
		d := &r.Diagnoses[i]
		out = append(out, Diagnosed{Identity: diagKey(d), Title: d.Title, Severity: d.Severity})
	}
	return out
}
