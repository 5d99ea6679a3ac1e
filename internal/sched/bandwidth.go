package sched

import (
	"cmp"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/human"
	"github.com/wolf-investigator/wolf/internal/memcg"
	"github.com/wolf-investigator/wolf/internal/procfs"
)

// CFS bandwidth control: a cgroup with a CPU quota runs for at most quota
// per period, and is throttled (its run queues taken off the CPUs) until
// the period ends once it has used it. The kernel counts, per cgroup, the
// periods that ran and those that ended throttled, and the time throttled:
// cgroup v1 cpu.cfs_quota_us, cpu.cfs_period_us and cpu.stat (nr_periods,
// nr_throttled, throttled_time in ns); v2 cpu.max ("quota period" or "max
// period") and cpu.stat (nr_periods, nr_throttled, throttled_usec,
// usage_usec). wolf reads them when its window opens and when it closes.

// Bandwidth is one cgroup's CPU quota and what it did over the window.
type Bandwidth struct {
	Path     string // within the cpu hierarchy
	ID       uint64 // the cgroup directory's inode, the id BPF sees
	Version  int    // 1 or 2
	QuotaUs  int64
	PeriodUs int64
	// Deltas over the window.
	Periods   uint64
	Throttled uint64
	// ThrottledTime is summed over the cgroup's run queues (one per CPU
	// it ran on), as the kernel counts it.
	ThrottledTime time.Duration
	Usage         time.Duration // CPU time its tasks used (v2 usage_usec; 0 when unknown)
	Procs         []Proc        // its processes and its descendants', by pid
}

// Proc is a process of a cgroup.
type Proc struct {
	PID  int
	Comm string
}

// ThrottledPct is the share of the window's periods that ended throttled.
func (b *Bandwidth) ThrottledPct() float64 {
	if b.Periods == 0 {
		return 0
	}
	return 100 * float64(b.Throttled) / float64(b.Periods)
}

// bwReading is one read of a cgroup's files.
type bwReading struct {
	id                   uint64
	quotaUs, periodUs    int64
	periods, throttled   uint64
	throttledNs, usageNs uint64
}

// cpuHierarchy is where the cpu controller's cgroups are, and which
// version they are.
type cpuHierarchy struct {
	root    string
	version int
}

func findCPUHierarchy(ctx context.Context, r procfs.Reader) cpuHierarchy {
	root := cpuCgroupRoot(ctx, r)
	if root == "" {
		return cpuHierarchy{}
	}
	v := 1
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		v = 2
	}
	return cpuHierarchy{root: root, version: v}
}

// readBandwidths walks the hierarchy (bounded) and reads every cgroup that
// has a CPU quota.
func (h cpuHierarchy) readBandwidths() map[string]bwReading {
	out := map[string]bwReading{}
	if h.root == "" {
		return out
	}
	n := 0
	_ = filepath.WalkDir(h.root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		n++
		if n > maxCgroupDirs {
			return filepath.SkipAll
		}
		rd, ok := h.read(path)
		if !ok {
			return nil
		}
		if info, err := d.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				rd.id = st.Ino
			}
		}
		rel, err := filepath.Rel(h.root, path)
		if err != nil {
			return nil
		}
		if rel == "." {
			rel = ""
		}
		out["/"+rel] = rd
		return nil
	})
	return out
}

// read reads one cgroup directory; false when it has no quota.
func (h cpuHierarchy) read(dir string) (bwReading, bool) {
	var r bwReading
	if h.version == 2 {
		b, err := os.ReadFile(filepath.Join(dir, "cpu.max"))
		if err != nil {
			return r, false
		}
		q, p, ok := parseCPUMax(string(b))
		if !ok {
			return r, false
		}
		r.quotaUs, r.periodUs = q, p
	} else {
		q, err1 := readInt(filepath.Join(dir, "cpu.cfs_quota_us"))
		p, err2 := readInt(filepath.Join(dir, "cpu.cfs_period_us"))
		if err1 != nil || err2 != nil || q <= 0 || p <= 0 {
			return r, false
		}
		r.quotaUs, r.periodUs = q, p
	}
	b, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return r, false
	}
	st := memcg.ParseKV(b)
	r.periods, r.throttled = st["nr_periods"], st["nr_throttled"]
	if v, ok := st["throttled_usec"]; ok {
		r.throttledNs = v * 1000
	} else {
		r.throttledNs = st["throttled_time"]
	}
	r.usageNs = st["usage_usec"] * 1000
	return r, true
}

// parseCPUMax reads cgroup v2 cpu.max: "max 100000" (no quota) or
// "5000 100000".
func parseCPUMax(s string) (quota, period int64, ok bool) {
	f := strings.Fields(s)
	if len(f) != 2 || f[0] == "max" {
		return 0, 0, false
	}
	q, err1 := strconv.ParseInt(f[0], 10, 64)
	p, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil || q <= 0 || p <= 0 {
		return 0, 0, false
	}
	return q, p, true
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// bandwidthDeltas turns two readings into the window's bandwidths, for the
// cgroups that had a quota at both ends and ran periods in between.
func bandwidthDeltas(before, after map[string]bwReading, version int) []Bandwidth {
	var out []Bandwidth
	for path, a := range after {
		b, ok := before[path]
		if !ok || a.periods < b.periods || a.throttled < b.throttled || a.throttledNs < b.throttledNs {
			continue // new, or recreated under the same name
		}
		bw := Bandwidth{Path: path, ID: a.id, Version: version, QuotaUs: a.quotaUs, PeriodUs: a.periodUs,
			Periods: a.periods - b.periods, Throttled: a.throttled - b.throttled,
			ThrottledTime: time.Duration(a.throttledNs - b.throttledNs)}
		if a.usageNs >= b.usageNs {
			bw.Usage = time.Duration(a.usageNs - b.usageNs)
		}
		if bw.Periods > 0 {
			out = append(out, bw)
		}
	}
	slices.SortFunc(out, func(x, y Bandwidth) int {
		if c := cmp.Compare(y.ThrottledTime, x.ThrottledTime); c != 0 {
			return c
		}
		return cmp.Compare(x.Path, y.Path)
	})
	return out
}

// maxThrottleProcs bounds the processes read per throttled cgroup.
const maxThrottleProcs = 256

// procsOf lists the processes of a cgroup and of its descendants.
func (h cpuHierarchy) procsOf(ctx context.Context, r procfs.Reader, path string) []Proc {
	var out []Proc
	dir := filepath.Join(h.root, path)
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() || len(out) >= maxThrottleProcs {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			return nil
		}
		for _, l := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(l)
			if err != nil || len(out) >= maxThrottleProcs {
				continue
			}
			comm, _ := r.Comm(ctx, pid, pid)
			out = append(out, Proc{PID: pid, Comm: comm})
		}
		return nil
	})
	return out
}

// Throttle thresholds: the share of periods that ended throttled.
const (
	throttleWarnPct = 25
	throttleInfoPct = 5
	throttleMinPer  = 10 // periods in the window, so that a short window does not judge
	maxThrottled    = 5  // cgroups reported
)

// ThrottleFindings reports the cgroups whose CPU quota throttled them over
// the window, worst first.
func ThrottleFindings(bws []Bandwidth, window time.Duration) []finding.Finding {
	var out []finding.Finding
	for _, b := range bws {
		if len(out) == maxThrottled {
			break
		}
		if f, ok := throttleFinding(b, window); ok {
			out = append(out, f)
		}
	}
	return out
}

// throttleFinding is one cgroup's throttling, when it is worth a finding.
func throttleFinding(b Bandwidth, window time.Duration) (finding.Finding, bool) {
	pct := b.ThrottledPct()
	if b.Periods < throttleMinPer || pct < throttleInfoPct {
		return finding.Finding{}, false
	}
	sev := finding.Info
	if pct >= throttleWarnPct {
		sev = finding.Warning
	}
	cpus := float64(b.QuotaUs) / float64(b.PeriodUs)
	ev := map[string]any{
		"cgroup":         b.Path,
		"cgroup_version": b.Version,
		"cgroup_id":      b.ID,
		"controller":     "cpu",
		"quota_us":       b.QuotaUs,
		"period_us":      b.PeriodUs,
		"quota_cpus":     human.Round(cpus, 3),
		"nr_periods":     b.Periods,
		"nr_throttled":   b.Throttled,
		"throttled_pct":  human.Round(pct, 1),
		"throttled_s":    human.Round(b.ThrottledTime.Seconds(), 3),
		"window_s":       human.Round(window.Seconds(), 3),
	}
	if b.Usage > 0 {
		ev["usage_s"] = human.Round(b.Usage.Seconds(), 3)
	}
	var pids []int
	var names []string
	subj := []finding.Subject{{Role: finding.RoleCgroup, Cgroup: b.Path, CgroupID: b.ID,
		Detail:   fmt.Sprintf("cgroup v%d, CPU quota %s per %s (%.2g CPUs), throttled in %d of %d periods", b.Version, human.Duration(time.Microsecond*time.Duration(b.QuotaUs)), human.Duration(time.Microsecond*time.Duration(b.PeriodUs)), cpus, b.Throttled, b.Periods),
		Evidence: map[string]any{"controller": "cpu", "quota_us": b.QuotaUs, "period_us": b.PeriodUs, "throttled_pct": human.Round(pct, 1)}}}
	for i, p := range b.Procs {
		pids = append(pids, p.PID)
		if i < 8 {
			subj = append(subj, finding.Subject{Role: finding.RoleTask, PID: p.PID, Comm: p.Comm, Cgroup: b.Path})
			names = append(names, fmt.Sprintf("%s (pid %d)", p.Comm, p.PID))
		}
	}
	if len(pids) > 0 {
		ev["pids"] = pids
	}
	who := ""
	if len(names) > 0 {
		who = " Its processes: " + strings.Join(names, ", ")
		if len(b.Procs) > len(names) {
			who += fmt.Sprintf(" and %d more", len(b.Procs)-len(names))
		}
		who += "."
	}
	return finding.Finding{
		ID: "sched.cpu-throttled", Investigator: "sched", Severity: sev,
		Title: fmt.Sprintf("cgroup %s throttled by its CPU quota in %.0f%% of periods: %s per %s (%.2g CPUs), %s throttled in %s",
			b.Path, pct, human.Duration(time.Microsecond*time.Duration(b.QuotaUs)), human.Duration(time.Microsecond*time.Duration(b.PeriodUs)), cpus, human.Duration(b.ThrottledTime), human.Duration(window)),
		Summary: fmt.Sprintf("%d of the cgroup's %d scheduling periods in the window ended with its quota used up and its tasks throttled until the next one.%s",
			b.Throttled, b.Periods, who),
		Mechanism: "CFS bandwidth control lets a cgroup's tasks run for at most its quota in each period; once they have, its run queues are taken off the CPUs until the period ends, however idle the CPUs are. Latency-sensitive work in it waits up to a period at a time; a task throttled while it holds a kernel lock (on kernels before 6.18, which throttle tasks inside the kernel) keeps the lock held meanwhile.",
		Subjects:  subj,
		Evidence:  ev,
		Remediation: []string{
			fmt.Sprintf("Raise the quota (v1: echo N > %s/cpu.cfs_quota_us; v2: echo \"N %d\" > %s/cpu.max), or run fewer busy threads in the cgroup; in Kubernetes, raise or remove the container's CPU limit.", b.Path, b.PeriodUs, b.Path),
			"Allow short bursts above the quota (v1 cpu.cfs_burst_us, v2 cpu.max.burst) when the work is bursty rather than steadily over the limit.",
		},
		References: []string{"https://docs.kernel.org/scheduler/sched-bwc.html"},
	}, true
}
