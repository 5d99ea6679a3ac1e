package watch

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/hist"
	"github.com/wolf-investigator/wolf/internal/hung"
	"github.com/wolf-investigator/wolf/internal/investigator"
	wolfio "github.com/wolf-investigator/wolf/internal/io"
	"github.com/wolf-investigator/wolf/internal/locks"
	"github.com/wolf-investigator/wolf/internal/reclaim"
	"github.com/wolf-investigator/wolf/internal/sched"
	"github.com/wolf-investigator/wolf/internal/softirq"
)

// reclaimWindow is one reclaim window's result: a histogram per cgroup
// with the given durations in ns.
func reclaimWindow(perCgroup map[string][]uint64) *investigator.Result {
	res := &investigator.Result{Overhead: finding.Overhead{BPFRunNs: 1000, Events: 10, Dropped: 1}}
	for cg, vals := range perCgroup {
		var h hist.Log2
		for _, v := range vals {
			h.Add(v)
		}
		res.Histograms = append(res.Histograms, h.Report("reclaim_duration_us", "us", map[string]string{"cgroup": cg, "kind": "memcg"}, 1000))
	}
	return res
}

func gather(t *testing.T, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

func TestHistogramsAccumulateAcrossWindows(t *testing.T) {
	m := NewMetrics("test", "6.18", 10, map[string]time.Duration{"reclaim": time.Second}, declared())
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	m.Observe("reclaim", reclaimWindow(map[string][]uint64{"/a": {1500, 3_000_000}}), time.Second, time.Now())
	m.Observe("reclaim", reclaimWindow(map[string][]uint64{"/a": {3_000_000}}), time.Second, time.Now())
	mf := gather(t, reg)["wolf_reclaim_duration_seconds"]
	if mf == nil || len(mf.Metric) != 1 {
		t.Fatalf("reclaim histogram: %v", mf)
	}
	h := mf.Metric[0].GetHistogram()
	if h.GetSampleCount() != 3 {
		t.Errorf("count %d, want 3 (two windows added)", h.GetSampleCount())
	}
	if s := h.GetSampleSum(); s < 0.0060014 || s > 0.0060016 {
		t.Errorf("sum %v s, want 0.0060015", s)
	}
	// 1.5 µs falls in slot 11 (<= 2047 ns), the 3 ms ones in slot 22
	// (<= 4194303 ns).
	for _, b := range h.GetBucket() {
		want := uint64(0)
		switch ub := b.GetUpperBound(); {
		case ub >= 0.004194303:
			want = 3
		case ub >= 2.047e-06:
			want = 1
		}
		if b.GetCumulativeCount() != want {
			t.Errorf("bucket le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
		}
	}
	if got := testutil.ToFloat64(counterOf(t, reg, "wolf_events_total")); got != 20 {
		t.Errorf("wolf_events_total %v, want 20", got)
	}
}

// counterOf wraps one gathered single-series family so testutil can read it.
func counterOf(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mf := gather(t, reg)[name]
	if mf == nil || len(mf.Metric) != 1 {
		t.Fatalf("%s: %v", name, mf)
	}
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name})
	c.Add(mf.Metric[0].GetCounter().GetValue())
	return c
}

func TestTopNEvictsAndAggregatesOther(t *testing.T) {
	m := NewMetrics("test", "6.18", 2, nil, declared())
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	m.Observe("reclaim", reclaimWindow(map[string][]uint64{"/a": {3e6}, "/b": {2e6}, "/c": {1e6}}), time.Second, time.Now())
	series := func() map[string]uint64 {
		out := map[string]uint64{}
		for _, mt := range gather(t, reg)["wolf_reclaim_duration_seconds"].GetMetric() {
			out[labelsOf(mt)["cgroup"]] = mt.GetHistogram().GetSampleCount()
		}
		return out
	}
	got := series()
	if len(got) != 3 || got["/a"] != 1 || got["/b"] != 1 || got["other"] != 1 {
		t.Errorf("window 1 series %v, want /a, /b and other", got)
	}
	// /c now dominates: it takes /b's place (the lower of the two this
	// window); /b's history is dropped and its window counts as other.
	m.Observe("reclaim", reclaimWindow(map[string][]uint64{"/a": {3e6}, "/b": {1e3}, "/c": {9e6}}), time.Second, time.Now())
	got = series()
	if len(got) != 3 || got["/a"] != 2 || got["/c"] != 1 || got["other"] != 2 || got["/b"] != 0 {
		t.Errorf("window 2 series %v, want /a:2 /c:1 other:2", got)
	}
}

func TestFindingsHungAndLint(t *testing.T) {
	m := NewMetrics("test", "6.18", 10, map[string]time.Duration{"hung": time.Second, "sched": time.Second}, declared())
	reg := Registry(m)
	res := &investigator.Result{Findings: []finding.Finding{
		hungGroup([]int{1, 2}, 12.5, finding.Warning),
		{ID: "hung.recovered", Investigator: "hung", Subjects: []finding.Subject{{Role: finding.RoleVictim, PID: 50}}, Evidence: map[string]any{"blocked_s": 99.0}},
	}}
	m.Observe("hung", res, time.Second, time.Now())
	m.Failed("sched", time.Second)
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	text := buf.String()
	for _, want := range []string{
		"wolf_hung_tasks 2\n",
		"wolf_hung_task_blocked_seconds_max 12.5\n",
		`wolf_findings{id="hung.lock-owner",investigator="hung",severity="warning"} 1`,
		`wolf_findings{id="hung.recovered",investigator="hung",severity="info"} 1`,
		`wolf_collector_success{collector="sched"} 0`,
		`wolf_collector_errors_total{collector="sched"} 1`,
		`wolf_collector_success{collector="hung"} 1`,
		"wolf_build_info{",
		"process_resident_memory_bytes",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q:\n%s", want, text)
		}
	}
	problems, err := promlint.New(strings.NewReader(text)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "wolf_") {
			t.Errorf("lint: %s: %s", p.Metric, p.Text)
		}
	}
}

// Every metric the shipped dashboard and alerting rules query is one wolf
// exports (or client_golang's process collector does).
func TestDeployQueriesUseExportedMetrics(t *testing.T) {
	m := NewMetrics("test", "6.18", 10, map[string]time.Duration{"hung": time.Second}, declared())
	m.SetBudget(1) // wolf watch's default --max-cpu
	var h hist.Log2
	h.Add(5000)
	res := &investigator.Result{Findings: []finding.Finding{
		hungGroup([]int{1}, 6, finding.Warning),
		{ID: "sched.bounce", Investigator: "sched", Subjects: []finding.Subject{{Role: finding.RoleTask, PID: 3, Comm: "x"}}, Evidence: map[string]any{"migrations_per_s": 50.0}},
		{ID: "io.device", Investigator: "io", Evidence: map[string]any{"device": "vda", "busy_pct": 3.0}},
		{ID: "io.throttled", Investigator: "io", Evidence: map[string]any{"device": "vda", "cgroup": "/x", "held_s_total": 9.9, "throttled_requests": uint64(40)}},
	}}
	for _, fams := range m.families {
		for _, f := range fams {
			labels := map[string]string{}
			for _, l := range f.labels {
				labels[l] = "v"
			}
			res.Histograms = append(res.Histograms, h.Report(f.source, "us", labels, 1000))
		}
	}
	for _, name := range []string{"hung", "sched", "reclaim", "locks", "softirq", "io"} {
		m.Observe(name, res, time.Second, time.Now())
	}
	mfs, err := Registry(m).Gather()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, mf := range mfs {
		n := mf.GetName()
		exported[n] = true
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			exported[n+"_bucket"], exported[n+"_sum"], exported[n+"_count"] = true, true, true
		}
	}
	names := regexp.MustCompile(`\b(?:wolf|process)_[a-z_]+\b`)
	for _, file := range []string{"../../deploy/grafana/wolf-dashboard.json", "../../deploy/prometheus/wolf-rules.yml"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(file, ".json") {
			var d struct {
				Panels []struct {
					Targets []struct{ Expr string }
				}
			}
			if err := json.Unmarshal(b, &d); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			if len(d.Panels) == 0 {
				t.Fatalf("%s: no panels", file)
			}
		}
		n := 0
		for _, name := range names.FindAllString(string(b), -1) {
			n++
			if !exported[name] {
				t.Errorf("%s queries %s, which wolf does not export", file, name)
			}
		}
		if n == 0 {
			t.Errorf("%s: no metric names found", file)
		}
	}
}

// declared are the investigators whose metrics the tests expect.
func declared() []investigator.Investigator {
	return []investigator.Investigator{hung.New(), locks.New(), reclaim.New(), sched.New(), softirq.New(), wolfio.New()}
}

// fakeWorkloads names cgroups and tasks from fixed tables.
type fakeWorkloads struct {
	cgroups  map[string][3]string
	tasks    map[int][3]string
	resolved []string
}

func (f *fakeWorkloads) Resolve(_ context.Context, cgroups []string, pids []int) {
	f.resolved = append(f.resolved, cgroups...)
	for _, p := range pids {
		f.resolved = append(f.resolved, strconv.Itoa(p))
	}
}
func (f *fakeWorkloads) Cgroup(p string) [3]string { return f.cgroups[p] }
func (f *fakeWorkloads) Task(pid int) [3]string    { return f.tasks[pid] }

// Series about cgroups and tasks carry their workload's namespace, pod
// and container; the top N's "other" carries none, and the series count
// does not grow.
func TestWorkloadLabels(t *testing.T) {
	m := NewMetrics("test", "6.18", 2, nil, declared())
	fw := &fakeWorkloads{
		cgroups: map[string][3]string{"/kubepods/burstable/podx/abc": {"prod", "clickhouse-0", "server"}},
		tasks:   map[int][3]string{42: {"", "shop", "web"}},
	}
	m.SetWorkloads(fw)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	m.Observe("reclaim", reclaimWindow(map[string][]uint64{"/kubepods/burstable/podx/abc": {3e6}, "/b": {2e6}, "/c": {1e6}}), time.Second, time.Now())
	got := map[string]map[string]string{}
	for _, mt := range gather(t, reg)["wolf_reclaim_duration_seconds"].GetMetric() {
		l := labelsOf(mt)
		got[l["cgroup"]] = l
	}
	if len(got) != 3 {
		t.Fatalf("series: %v", got)
	}
	if l := got["/kubepods/burstable/podx/abc"]; l["namespace"] != "prod" || l["pod"] != "clickhouse-0" || l["container"] != "server" {
		t.Errorf("a container's series: %v", l)
	}
	if l := got["/b"]; l["pod"] != "" || l["container"] != "" {
		t.Errorf("no container: %v", l)
	}
	if l := got["other"]; l["pod"] != "" || l["container"] != "" {
		t.Errorf("other: %v", l)
	}
	if !strings.Contains(strings.Join(fw.resolved, ","), "/kubepods/burstable/podx/abc") {
		t.Errorf("the window's cgroups were not resolved: %v", fw.resolved)
	}
	// A task's series (sched's per-task run-queue latency), by its pid.
	var h hist.Log2
	h.Add(5e6)
	res := &investigator.Result{Histograms: []finding.Histogram{h.Report("runq_latency_us", "us", map[string]string{"comm": "web", "pid": "42", "tid": "42"}, 1000)}}
	m.Observe("sched", res, time.Second, time.Now())
	mf := gather(t, reg)["wolf_task_runqueue_latency_seconds"]
	if mf == nil || len(mf.Metric) != 1 {
		t.Fatalf("task series: %v", mf)
	}
	if l := labelsOf(mf.Metric[0]); l["pod"] != "shop" || l["container"] != "web" || l["namespace"] != "" {
		t.Errorf("a task's series: %v", l)
	}
	var buf bytes.Buffer
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&buf, mf); err != nil {
			t.Fatal(err)
		}
	}
	problems, err := promlint.New(&buf).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}
