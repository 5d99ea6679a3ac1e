package watch

import (
	"runtime"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/investigator"
)

// Metrics is the Prometheus view of a watch: what each investigator's last
// window found (gauges), running totals across windows (counters and
// histograms, monotonic as Prometheus requires), and the health and cost
// of every collector. It is a prometheus.Collector that builds constant
// metrics from its state at each scrape, so a series that leaves the top N
// or a finding that clears simply stops being exported.
type Metrics struct {
	mu         sync.Mutex
	top        int
	collectors map[string]*collectorState
	families   map[string][]*family
	gauges     []*gauge
	findings   map[string]map[findingLabels]int // investigator -> active findings
	diag       diagMetrics

	buildInfo                                              *prometheus.Desc
	success, lastDuration, lastSuccess, window, runs, errs *prometheus.Desc
	attaches                                               *prometheus.Desc
	bpfRun, events, dropped                                *prometheus.Desc
	detailRatio, budget, shed                              *prometheus.Desc
	findingsDesc                                           *prometheus.Desc
	version, kernel                                        string
	// wl, when set (SetWorkloads), labels series about cgroups and tasks
	// with their workloads.
	wl        *workloads
	budgetPct float64 // --max-cpu, 0: none
}

// gauge is a GaugeMetric an investigator declares, with its last window's
// values.
type gauge struct {
	owner  string
	spec   investigator.GaugeMetric
	desc   *prometheus.Desc
	values []investigator.GaugeValue
	// cgroupAt and pidAt are the positions of its "cgroup" and "pid"
	// labels (-1: none), for the workload labels.
	cgroupAt, pidAt int
	wl              *workloads
}

func (g *gauge) workloadLabels() bool {
	return g.wl != nil && (g.cgroupAt >= 0 || g.pidAt >= 0)
}

// describe makes the gauge's description, with the workload labels when
// it has them.
func (g *gauge) describe(wl *workloads) {
	g.wl = wl
	g.cgroupAt, g.pidAt = indexOf(g.spec.Labels, "cgroup"), indexOf(g.spec.Labels, "pid")
	labels := g.spec.Labels
	if g.workloadLabels() {
		labels = append(append([]string(nil), labels...), workloadLabelNames...)
	}
	g.desc = prometheus.NewDesc(g.spec.Name, g.spec.Help, labels, nil)
}

type collectorState struct {
	window       time.Duration
	success      bool
	ran          bool
	lastDuration time.Duration
	lastSuccess  time.Time
	runs, errors uint64
	attaches     uint64
	bpfRunNs     uint64
	events       uint64
	dropped      uint64
	// detailRatio is the last window's share of events that got their
	// detail under the BPF budget (1: all of them, nothing sampled).
	detailRatio float64
	// shedS is how long the budget kept the investigator's programs
	// detached, summed over programs and windows.
	shedS float64
}

type findingLabels struct{ id, severity string }

// NewMetrics returns the collector of the metrics invs declare (see
// investigator.Exporter) and wolf's own. top bounds the label sets of
// every per-task, per-cgroup and per-lock series; windows gives each
// investigator's window length (exported so dashboards know the delay).
func NewMetrics(version, kernel string, top int, windows map[string]time.Duration, invs []investigator.Investigator) *Metrics {
	if top <= 0 {
		top = 10
	}
	m := &Metrics{
		top: top, version: version, kernel: kernel,
		collectors: map[string]*collectorState{},
		families:   newFamilies(invs),
		findings:   map[string]map[findingLabels]int{},
	}
	for _, inv := range invs {
		if ex, ok := inv.(investigator.Exporter); ok {
			_, gs := ex.Metrics()
			for _, g := range gs {
				gg := &gauge{owner: inv.Name(), spec: g}
				gg.describe(nil)
				m.gauges = append(m.gauges, gg)
			}
		}
	}
	for name, w := range windows {
		m.collectors[name] = &collectorState{window: w}
	}
	c := []string{"collector"}
	m.buildInfo = prometheus.NewDesc("wolf_build_info", "Always 1; labels name wolf's version, the Go version and the kernel.", []string{"version", "goversion", "kernel"}, nil)
	m.success = prometheus.NewDesc("wolf_collector_success", "1 if the investigator's last window succeeded, 0 if it failed (it is retried with backoff).", c, nil)
	m.lastDuration = prometheus.NewDesc("wolf_collector_last_run_duration_seconds", "Wall time the investigator took to conclude its last window (Collect: reading and analysing its maps; its programs stay attached), or to fail.", c, nil)
	m.lastSuccess = prometheus.NewDesc("wolf_collector_last_success_timestamp_seconds", "When the investigator's last successful window ended (Unix time).", c, nil)
	m.window = prometheus.NewDesc("wolf_collector_window_seconds", "How long each of the investigator's windows watches.", c, nil)
	m.runs = prometheus.NewDesc("wolf_collector_runs_total", "Windows the investigator completed, failed ones included.", c, nil)
	m.errs = prometheus.NewDesc("wolf_collector_errors_total", "Failures: a start or a window that failed (the investigator is then closed and started again with backoff).", c, nil)
	m.attaches = prometheus.NewDesc("wolf_collector_attaches_total", "Times the investigator loaded and attached its programs: once, plus once per restart after a failure.", c, nil)
	m.bpfRun = prometheus.NewDesc("wolf_bpf_run_seconds_total", "CPU time wolf's BPF programs ran in the kernel (kernel run statistics).", c, nil)
	m.events = prometheus.NewDesc("wolf_events_total", "Kernel events wolf's programs handled.", c, nil)
	m.dropped = prometheus.NewDesc("wolf_events_dropped_total", "Events lost: ring buffer full, map full, recursion misses.", c, nil)
	m.detailRatio = prometheus.NewDesc("wolf_collector_detail_ratio", "Share of the last window's events whose detail (stacks, records) the investigator kept under the BPF budget: 1 when nothing was sampled. Counts, sums and histograms are exact either way.", c, nil)
	m.shed = prometheus.NewDesc("wolf_collector_shed_seconds_total", "Program-seconds the BPF budget kept the investigator's sheddable programs detached (what they see was not seen meanwhile; the JSON lines' notes say which).", c, nil)
	m.budget = prometheus.NewDesc("wolf_bpf_budget_ratio", "The budget of wolf's BPF programs (--max-cpu) as a fraction of one CPU; compare with rate(wolf_bpf_run_seconds_total[5m]) summed over collectors.", nil, nil)
	m.findingsDesc = prometheus.NewDesc("wolf_findings", "Findings active after the investigator's last window.", []string{"investigator", "id", "severity"}, nil)
	return m
}

func (m *Metrics) state(name string) *collectorState {
	s, ok := m.collectors[name]
	if !ok {
		s = &collectorState{}
		m.collectors[name] = s
	}
	return s
}

// Observe records one investigator window that succeeded.
func (m *Metrics) Observe(name string, res *investigator.Result, took time.Duration, end time.Time) {
	// The gauges' values, and the workloads of the cgroups and tasks the
	// window names, are worked out before the lock: learning a workload
	// may read /proc and runtime state, and a scrape must not wait on it.
	values := map[*gauge][]investigator.GaugeValue{}
	for _, g := range m.gauges {
		if g.owner != name || g.spec.Values == nil {
			continue
		}
		vs := g.spec.Values(res)
		if g.spec.TopN {
			sort.SliceStable(vs, func(i, j int) bool { return vs[i].Value > vs[j].Value })
			if len(vs) > m.top {
				vs = vs[:m.top]
			}
		}
		values[g] = vs
	}
	m.learnWorkloads(res, values)
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.state(name)
	s.ran, s.success = true, true
	s.lastDuration, s.lastSuccess = took, end
	s.runs++
	s.bpfRunNs += res.Overhead.BPFRunNs
	s.events += res.Overhead.Events
	s.dropped += res.Overhead.Dropped
	s.detailRatio = 1
	for _, sm := range res.Overhead.Sampled {
		s.detailRatio = min(s.detailRatio, sm.Rate)
	}
	for _, sh := range res.Overhead.Shed {
		s.shedS += sh.DetachedS
	}

	active := map[findingLabels]int{}
	for _, f := range res.Findings {
		active[findingLabels{f.ID, f.Severity.String()}]++
	}
	m.findings[name] = active

	byFamily := map[*family][]*finding.Histogram{}
	for i := range res.Histograms {
		h := &res.Histograms[i]
		for _, f := range m.families[h.Name] {
			if f.match(h) {
				byFamily[f] = append(byFamily[f], h)
			}
		}
	}
	for _, fams := range m.families {
		for _, f := range fams {
			// A window with none of its histograms still ages the
			// family's per-window maxima and top N.
			if hs, ok := byFamily[f]; ok || f.owner == name {
				f.add(hs, m.top)
			}
		}
	}
	for g, vs := range values {
		g.values = vs
	}
}

// SetBudget records the BPF budget, percent of one CPU, for its metric.
func (m *Metrics) SetBudget(pct float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.budgetPct = pct
}

// Attached records that an investigator loaded and attached (a session
// started).
func (m *Metrics) Attached(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.state(name).attaches++
}

// Failed records one investigator window (or start) that failed.
func (m *Metrics) Failed(name string, took time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.state(name)
	s.ran, s.success = true, false
	s.lastDuration = took
	s.runs++
	s.errors++
}

// Describe sends nothing: the metric set changes as findings and top-N
// label sets come and go, so Metrics is an unchecked collector.
func (m *Metrics) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(m.buildInfo, prometheus.GaugeValue, 1, m.version, runtime.Version(), m.kernel)
	if m.budgetPct > 0 {
		ch <- prometheus.MustNewConstMetric(m.budget, prometheus.GaugeValue, m.budgetPct/100)
	}
	for name, s := range m.collectors {
		ch <- prometheus.MustNewConstMetric(m.window, prometheus.GaugeValue, s.window.Seconds(), name)
		ch <- prometheus.MustNewConstMetric(m.runs, prometheus.CounterValue, float64(s.runs), name)
		ch <- prometheus.MustNewConstMetric(m.errs, prometheus.CounterValue, float64(s.errors), name)
		ch <- prometheus.MustNewConstMetric(m.attaches, prometheus.CounterValue, float64(s.attaches), name)
		ch <- prometheus.MustNewConstMetric(m.bpfRun, prometheus.CounterValue, float64(s.bpfRunNs)/1e9, name)
		ch <- prometheus.MustNewConstMetric(m.events, prometheus.CounterValue, float64(s.events), name)
		ch <- prometheus.MustNewConstMetric(m.dropped, prometheus.CounterValue, float64(s.dropped), name)
		ch <- prometheus.MustNewConstMetric(m.shed, prometheus.CounterValue, s.shedS, name)
		if !s.ran {
			continue // no window finished yet: success unknown
		}
		ch <- prometheus.MustNewConstMetric(m.success, prometheus.GaugeValue, b2f(s.success), name)
		ch <- prometheus.MustNewConstMetric(m.lastDuration, prometheus.GaugeValue, s.lastDuration.Seconds(), name)
		if !s.lastSuccess.IsZero() {
			ch <- prometheus.MustNewConstMetric(m.lastSuccess, prometheus.GaugeValue, float64(s.lastSuccess.UnixNano())/1e9, name)
			ch <- prometheus.MustNewConstMetric(m.detailRatio, prometheus.GaugeValue, s.detailRatio, name)
		}
	}
	for inv, active := range m.findings {
		for l, n := range active {
			ch <- prometheus.MustNewConstMetric(m.findingsDesc, prometheus.GaugeValue, float64(n), inv, l.id, l.severity)
		}
	}
	for _, g := range m.gauges {
		if s, ok := m.collectors[g.owner]; !ok || !s.ran {
			continue // no window yet: no value to tell
		}
		for _, v := range g.values {
			labels := v.Labels
			if g.workloadLabels() {
				labels = g.wl.extend(labels, g.cgroupAt, g.pidAt)
			}
			ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, v.Value, labels...)
		}
	}
	m.collectDiagnoses(ch)
	for _, fams := range m.families {
		for _, f := range fams {
			f.collect(ch)
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
