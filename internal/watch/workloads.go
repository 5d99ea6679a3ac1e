package watch

import (
	"context"
	"strconv"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/investigator"
)

// Namer names the containers and pods of findings and diagnoses
// (internal/containers): it fills the subjects' workloads and rewrites the
// texts that name a container's cgroup by its path. Both calls are
// bounded by ctx.
type Namer interface {
	Findings(ctx context.Context, fs []finding.Finding)
	Diagnoses(ctx context.Context, ds []finding.Diagnosis)
}

// WorkloadLabels gives a series about a cgroup or a task its workload's
// namespace, pod and container labels (internal/containers.Labels).
// Resolve learns, within ctx, about the cgroups and tasks of a window;
// Cgroup and Task answer from what it learnt, without I/O, at scrape time.
type WorkloadLabels interface {
	Resolve(ctx context.Context, cgroups []string, pids []int)
	Cgroup(path string) [3]string
	Task(pid int) [3]string
}

// workloadLabelNames are the labels WorkloadLabels fills, in order.
var workloadLabelNames = []string{"namespace", "pod", "container"}

// nameTimeout bounds naming one window's findings or diagnoses, and
// learning its series' workloads: a runtime's state that does not answer
// by then is read in the background, for the next window.
const nameTimeout = time.Second

// workloads is the metrics' WorkloadLabels, shared by the families and
// gauges that have a cgroup or pid label.
type workloads struct{ l WorkloadLabels }

// extend appends the workload labels of the series whose cgroup (or pid)
// label is at cg (pid); "other", the top N's overflow, has none.
func (w *workloads) extend(values []string, cg, pid int) []string {
	var wl [3]string
	switch {
	case cg >= 0 && cg < len(values) && values[cg] != otherValue:
		wl = w.l.Cgroup(values[cg])
	case pid >= 0 && pid < len(values) && values[pid] != otherValue:
		if n, err := strconv.Atoi(values[pid]); err == nil {
			wl = w.l.Task(n)
		}
	}
	return append(append(make([]string, 0, len(values)+3), values...), wl[:]...)
}

// SetWorkloads makes every series about a cgroup or a task (a family or
// gauge with a "cgroup" or "pid" label) carry its workload's namespace,
// pod and container labels. Call it before the first window.
func (m *Metrics) SetWorkloads(l WorkloadLabels) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.wl = &workloads{l: l}
	for _, fams := range m.families {
		for _, f := range fams {
			f.wl = m.wl
			f.describe()
		}
	}
	for _, g := range m.gauges {
		g.describe(m.wl)
	}
}

// learnWorkloads tells the labeller about the cgroups and tasks one
// window's series name, within nameTimeout; mu not held.
func (m *Metrics) learnWorkloads(res *investigator.Result, gauges map[*gauge][]investigator.GaugeValue) {
	m.mu.Lock()
	wl := m.wl
	var cgroups []string
	var pids []int
	seen := map[string]bool{}
	add := func(cg, pid string) {
		if cg != "" && cg != otherValue && !seen["c"+cg] {
			seen["c"+cg] = true
			cgroups = append(cgroups, cg)
		}
		if n, err := strconv.Atoi(pid); err == nil && !seen["p"+pid] {
			seen["p"+pid] = true
			pids = append(pids, n)
		}
	}
	if wl != nil {
		for i := range res.Histograms {
			h := &res.Histograms[i]
			for _, f := range m.families[h.Name] {
				if f.workloadLabels() && f.match(h) {
					add(h.Labels["cgroup"], h.Labels["pid"])
				}
			}
		}
		for g, vs := range gauges {
			if !g.workloadLabels() {
				continue
			}
			for _, v := range vs {
				cg, pid := "", ""
				if g.cgroupAt >= 0 && g.cgroupAt < len(v.Labels) {
					cg = v.Labels[g.cgroupAt]
				}
				if g.pidAt >= 0 && g.pidAt < len(v.Labels) {
					pid = v.Labels[g.pidAt]
				}
				add(cg, pid)
			}
		}
	}
	m.mu.Unlock()
	if wl == nil || (len(cgroups) == 0 && len(pids) == 0) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), nameTimeout)
	defer cancel()
	wl.l.Resolve(ctx, cgroups, pids)
}
