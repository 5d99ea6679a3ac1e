package watch

import (
	"math"
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/hist"
	"github.com/wolf-investigator/wolf/internal/investigator"
)

// family maps one kind of report histogram (its name and label keys) to a
// Prometheus histogram. Report histograms cover one window each; a family
// adds every window into running totals per label set, so the exported
// buckets, count and sum only grow and rate() works across windows.
type family struct {
	source string   // report histogram name, "reclaim_duration_us"
	owner  string   // the investigator that fills it
	labels []string // its label keys, sorted: the family takes only exact matches
	name   string   // "wolf_reclaim_duration_seconds"
	help   string
	// unitScale turns a report bucket bound back into the kernel's raw
	// unit (1000: the report's µs to the kernel's ns), so the bound names
	// its log2 slot; baseDiv turns the report's unit into the metric's
	// base unit (1e6: µs to seconds). Divisions, not multiplications by
	// 1e-6, so that bounds print as 1.023e-06, not 1.0229999999999998e-06.
	unitScale, baseDiv float64
	// loSlot..hiSlot are the log2 slots exported as buckets: the same for
	// every scrape, as Prometheus requires; smaller values count in the
	// first bucket, larger ones in +Inf.
	loSlot, hiSlot int
	capped         bool // label sets are tasks, cgroups or locks: keep the top N
	maxName        string
	// cgroupAt and pidAt are the positions of the "cgroup" and "pid"
	// labels (-1: none); a family with either gets namespace, pod and
	// container labels too when the metrics name workloads.
	cgroupAt, pidAt int
	wl              *workloads

	desc, maxDesc *prometheus.Desc
	series        map[string]*series
}

// series is one label set's running totals.
type series struct {
	values []string
	slots  [hist.Slots]uint64
	count  uint64
	sum    float64 // base unit
	max    float64 // base unit, last window only
}

// otherValue is the label value of the series that aggregates everything
// outside the top N.
const otherValue = "other"

// newFamilies builds the histogram families the investigators declare,
// by report histogram name. Report histograms in µs ("_us") become seconds
// with buckets from 1.023 µs to 68.7 s; others (pages) keep their unit,
// buckets 1 to 2^24.
func newFamilies(invs []investigator.Investigator) map[string][]*family {
	out := map[string][]*family{}
	for _, inv := range invs {
		ex, ok := inv.(investigator.Exporter)
		if !ok {
			continue
		}
		hs, _ := ex.Metrics()
		for _, h := range hs {
			f := &family{source: h.Histogram, owner: inv.Name(), labels: h.Labels, name: h.Name, help: h.Help,
				capped: h.TopN, maxName: h.MaxName, unitScale: 1, baseDiv: 1, loSlot: 0, hiSlot: 24}
			if strings.HasSuffix(h.Histogram, "_us") {
				f.unitScale, f.baseDiv, f.loSlot, f.hiSlot = 1000, 1e6, 10, 36 // 1 µs .. 68.7 s
			}
			f.cgroupAt, f.pidAt = indexOf(f.labels, "cgroup"), indexOf(f.labels, "pid")
			f.describe()
			f.series = map[string]*series{}
			out[f.source] = append(out[f.source], f)
		}
	}
	return out
}

// describe makes the family's descriptions, with the workload labels
// when it has them.
func (f *family) describe() {
	labels := f.labels
	if f.workloadLabels() {
		labels = append(append([]string(nil), labels...), workloadLabelNames...)
	}
	f.desc = prometheus.NewDesc(f.name, f.help, labels, nil)
	f.maxDesc = prometheus.NewDesc(f.maxName, "Largest single value of "+f.name+" in the last window.", labels, nil)
}

func (f *family) workloadLabels() bool {
	return f.wl != nil && (f.cgroupAt >= 0 || f.pidAt >= 0)
}

// labelValues are a series' label values, its workload's after them.
func (f *family) labelValues(values []string) []string {
	if !f.workloadLabels() {
		return values
	}
	return f.wl.extend(values, f.cgroupAt, f.pidAt)
}

func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}

// match says whether a report histogram's labels are exactly this
// family's (softirq's per-CPU copies, for one, are not).
func (f *family) match(h *finding.Histogram) bool {
	if len(h.Labels) != len(f.labels) {
		return false
	}
	for _, k := range f.labels {
		if _, ok := h.Labels[k]; !ok {
			return false
		}
	}
	return true
}

// window is one label set's share of one window, before it is merged.
type window struct {
	values []string
	slots  [hist.Slots]uint64
	count  uint64
	sum    float64
	max    float64
}

func (f *family) convert(h *finding.Histogram) *window {
	w := &window{count: h.Count, sum: h.Sum / f.baseDiv, max: h.Max / f.baseDiv}
	for _, k := range f.labels {
		w.values = append(w.values, h.Labels[k])
	}
	// Report buckets are cumulative with the slots' upper bounds, scaled:
	// bound*unitScale is 2^i-1 again, which names slot i.
	var prev uint64
	for _, b := range h.Buckets {
		i := hist.Slot(uint64(math.Round(b.LE * f.unitScale)))
		if b.Count >= prev {
			w.slots[i] += b.Count - prev
		}
		prev = b.Count
	}
	return w
}

// add merges one window's histograms into the family's running totals.
// For capped families the label sets with the most time (sum) this window
// keep their own series, up to top, preferring the sets already exported
// on ties; the others, and sets pushed out of the top, are dropped from
// export and their window counted in the "other" series instead.
func (f *family) add(hs []*finding.Histogram, top int) {
	ws := map[string]*window{}
	for _, h := range hs {
		w := f.convert(h)
		k := strings.Join(w.values, "\x00")
		if old, ok := ws[k]; ok { // same labels twice: merge
			for i := range old.slots {
				old.slots[i] += w.slots[i]
			}
			old.count += w.count
			old.sum += w.sum
			old.max = max(old.max, w.max)
			continue
		}
		ws[k] = w
	}
	for _, s := range f.series {
		s.max = 0 // max is per window
	}
	if !f.capped {
		for k, w := range ws {
			f.merge(k, w)
		}
		return
	}
	otherKey := strings.Repeat(otherValue+"\x00", len(f.labels))
	otherKey = otherKey[:len(otherKey)-1]
	type cand struct {
		key   string
		score float64
		had   bool
	}
	var cands []cand
	for k := range f.series {
		if k == otherKey {
			continue
		}
		sc := 0.0
		if w, ok := ws[k]; ok {
			sc = w.sum
		}
		cands = append(cands, cand{k, sc, true})
	}
	for k, w := range ws {
		if _, ok := f.series[k]; !ok && k != otherKey {
			cands = append(cands, cand{k, w.sum, false})
		}
	}
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].score != cands[j].score {
			return cands[i].score > cands[j].score
		}
		if cands[i].had != cands[j].had {
			return cands[i].had
		}
		return cands[i].key < cands[j].key
	})
	for i, c := range cands {
		w := ws[c.key]
		if i < top {
			if w != nil {
				f.merge(c.key, w)
			}
			continue
		}
		delete(f.series, c.key)
		if w != nil {
			w.values = strings.Split(otherKey, "\x00")
			f.merge(otherKey, w)
		}
	}
	if w, ok := ws[otherKey]; ok {
		f.merge(otherKey, w)
	}
}

func (f *family) merge(k string, w *window) {
	s, ok := f.series[k]
	if !ok {
		s = &series{values: w.values}
		f.series[k] = s
	}
	for i := range s.slots {
		s.slots[i] += w.slots[i]
	}
	s.count += w.count
	s.sum += w.sum
	s.max = max(s.max, w.max)
}

// collect exports every series as a constant histogram with the family's
// fixed buckets, and its last window's maximum.
func (f *family) collect(ch chan<- prometheus.Metric) {
	for _, s := range f.series {
		buckets := make(map[float64]uint64, f.hiSlot-f.loSlot+1)
		var cum, total uint64
		for _, c := range s.slots {
			total += c
		}
		for i := 0; i <= f.hiSlot; i++ {
			cum += s.slots[i]
			if i >= f.loSlot {
				buckets[float64(hist.UpperBound(i))/(f.unitScale*f.baseDiv)] = cum
			}
		}
		// count is what the kernel counted; it never falls below the
		// slots' sum, so +Inf is never smaller than the last bucket.
		count := max(s.count, total)
		values := f.labelValues(s.values)
		ch <- prometheus.MustNewConstHistogram(f.desc, count, s.sum, buckets, values...)
		ch <- prometheus.MustNewConstMetric(f.maxDesc, prometheus.GaugeValue, s.max, values...)
	}
}
