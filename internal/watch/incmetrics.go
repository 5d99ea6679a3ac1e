package watch

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wolf-investigator/wolf/internal/incident"
)

// incidentMetrics exports an incident store's counters.
type incidentMetrics struct {
	s                                     *incident.Store
	written, dropped, removed, kept, size *prometheus.Desc
}

// IncidentMetrics is the Prometheus view of an incident store: bundles
// written, dropped by reason, removed to stay within the limits, and what
// is kept (count and bytes).
func IncidentMetrics(s *incident.Store) prometheus.Collector {
	return &incidentMetrics{
		s:       s,
		written: prometheus.NewDesc("wolf_incidents_written_total", "Incident bundles written to the incidents directory.", nil, nil),
		dropped: prometheus.NewDesc("wolf_incidents_dropped_total", "Incidents not written, by reason: rate_limited (the same finding or diagnosis wrote one recently), too_large, write_error (disk full, read-only), queue_full.", []string{"reason"}, nil),
		removed: prometheus.NewDesc("wolf_incidents_removed_total", "Incident bundles removed, oldest first, to keep within the count and byte limits.", nil, nil),
		kept:    prometheus.NewDesc("wolf_incidents_kept", "Incident bundles in the incidents directory.", nil, nil),
		size:    prometheus.NewDesc("wolf_incidents_bytes", "Bytes the kept incident bundles take.", nil, nil),
	}
}

func (m *incidentMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.written, m.dropped, m.removed, m.kept, m.size} {
		ch <- d
	}
}

func (m *incidentMetrics) Collect(ch chan<- prometheus.Metric) {
	st := m.s.Stats()
	ch <- prometheus.MustNewConstMetric(m.written, prometheus.CounterValue, float64(st.Written))
	// Every reason is exported from the start, so that rate() works on
	// the first drop.
	for _, r := range []string{incident.DropRateLimited, incident.DropTooLarge, incident.DropWriteError, incident.DropQueueFull} {
		ch <- prometheus.MustNewConstMetric(m.dropped, prometheus.CounterValue, float64(st.Dropped[r]), r)
	}
	ch <- prometheus.MustNewConstMetric(m.removed, prometheus.CounterValue, float64(st.Removed))
	ch <- prometheus.MustNewConstMetric(m.kept, prometheus.GaugeValue, float64(st.Kept))
	ch <- prometheus.MustNewConstMetric(m.size, prometheus.GaugeValue, float64(st.Bytes))
}
