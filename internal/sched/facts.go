package sched

import (
	"cmp"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/wolf-investigator/wolf/internal/fact"
	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/human"
)

// Bounds of what becomes facts: the busiest consumers, the tasks that
// waited longest.
const (
	maxConsumerFacts = 20
	maxCgroupFacts   = 10
	maxWaitFacts     = 64
	// consumersBusyShare is the share of the CPUs the tasks used over
	// which sched names its consumers in a finding of their own.
	consumersBusyShare = 0.5
	maxConsumerNames   = 5
)

// Consumer is a process's (or a set of exited tasks') CPU time in the
// window.
type Consumer struct {
	PID     int // 0 for tasks that exited unreported, by name
	Comm    string
	Cgroup  string
	Runtime time.Duration
	Threads int // threads that ran; tasks, for the exited
	Exited  bool
}

// Label names the consumer for people.
func (c *Consumer) Label() string {
	switch {
	case c.Exited:
		return fmt.Sprintf("%s (%d tasks that exited)", c.Comm, c.Threads)
	case c.Threads > 1:
		return fmt.Sprintf("%s (pid %d, %d threads)", c.Comm, c.PID, c.Threads)
	}
	return fmt.Sprintf("%s (pid %d)", c.Comm, c.PID)
}

// Consumers are the window's CPU time per process, the tasks that exited
// unreported by name, largest first.
func (s *Snapshot) Consumers() []Consumer {
	byPID := map[int]*Consumer{}
	var order []int
	for _, t := range s.Tasks {
		if t.Runtime <= 0 {
			continue
		}
		pid := cmp.Or(t.PID, t.TID)
		c := byPID[pid]
		if c == nil {
			c = &Consumer{PID: pid, Comm: t.Comm, Cgroup: t.Cgroup}
			byPID[pid] = c
			order = append(order, pid)
		}
		if t.TID == pid {
			c.Comm = t.Comm // the process's name is its main thread's
		}
		c.Runtime += t.Runtime
		c.Threads++
	}
	out := make([]Consumer, 0, len(order)+len(s.Exited))
	for _, pid := range order {
		out = append(out, *byPID[pid])
	}
	for _, e := range s.Exited {
		out = append(out, Consumer{Comm: e.Comm, Cgroup: e.Cgroup, Runtime: e.Runtime, Threads: int(e.Tasks), Exited: true})
	}
	slices.SortStableFunc(out, func(a, b Consumer) int {
		if c := cmp.Compare(b.Runtime, a.Runtime); c != 0 {
			return c
		}
		return cmp.Compare(a.PID, b.PID)
	})
	return out
}

// capacity is the CPU time the host had in the window.
func (s *Snapshot) capacity() time.Duration { return time.Duration(s.CPUs) * s.Duration }

// used is the CPU time the tasks wolf saw used.
func used(cs []Consumer) time.Duration {
	var u time.Duration
	for _, c := range cs {
		u += c.Runtime
	}
	return u
}

// consumersFinding names who used the CPUs, when they were busy: what a
// person would otherwise run top for.
func consumersFinding(s *Snapshot) (finding.Finding, bool) {
	cs := s.Consumers()
	capa := s.capacity()
	if capa <= 0 || float64(used(cs)) < consumersBusyShare*float64(capa) {
		return finding.Finding{}, false
	}
	var names []string
	var subj []finding.Subject
	var list []map[string]any
	for i, c := range cs {
		share := float64(c.Runtime) / float64(capa)
		if i >= maxConsumerNames || (i > 0 && share < 0.01) {
			break
		}
		names = append(names, fmt.Sprintf("%s %s", c.Label(), human.Percent(100*share)))
		list = append(list, map[string]any{"pid": c.PID, "comm": c.Comm, "cgroup": c.Cgroup, "cpu_s": human.Round(c.Runtime.Seconds(), 3),
			"share_pct": human.Round(100*share, 1), "threads": c.Threads, "exited": c.Exited})
		if c.PID != 0 {
			subj = append(subj, finding.Subject{Role: finding.RoleTask, PID: c.PID, Comm: c.Comm, Cgroup: c.Cgroup,
				Detail: fmt.Sprintf("%s of the CPUs (%s CPU time, %s)", human.Percent(100*share), human.Duration(c.Runtime), human.Plural(c.Threads, "thread", "threads"))})
		}
	}
	u := float64(used(cs)) / float64(capa)
	return finding.Finding{
		ID: "sched.cpu-consumers", Investigator: "sched", Severity: finding.Info,
		Title:   fmt.Sprintf("CPU time over %s on %d CPUs: %s", human.Duration(s.Duration), s.CPUs, strings.Join(names, ", ")),
		Summary: fmt.Sprintf("The tasks wolf saw used %s of the CPUs' time; the biggest consumers are above (CPU time per process, from the scheduler's own accounting of every task).", human.Percent(100*u)),
		Mechanism: "Every task's CPU time is the scheduler's own count (se.sum_exec_runtime), read at both ends of the window: who used the CPUs, " +
			"which is what the tasks that waited for a CPU waited behind.",
		Subjects: subj,
		Evidence: map[string]any{"cpus": s.CPUs, "window_s": human.Round(s.Duration.Seconds(), 3), "used_pct": human.Round(100*u, 1), "consumers": list},
		Remediation: []string{
			"If they should not use the CPUs this much: run fewer threads, lower their priority (nice, SCHED_BATCH), or cap their cgroup (cpu.max); if they should, the host needs more CPUs.",
		},
	}, true
}

// ConcludeFacts is Conclude and the window's facts for the diagnosis
// stage, from the same snapshot: who used the CPUs (per process, cgroup,
// and tasks that exited), each task's time waiting for a CPU and its time
// throttled by its cgroup's quota, the quotas that throttled, and how
// busy the CPUs were by the tasks' own accounting.
func ConcludeFacts(s *Snapshot) ([]finding.Finding, *fact.Set) {
	fs := Conclude(s)
	return fs, s.facts(fs)
}

func (s *Snapshot) facts(fs []finding.Finding) *fact.Set {
	set := &fact.Set{Window: s.Duration}
	host := fact.HostCPUKey()
	set.Resource(fact.Resource{Kind: fact.HostCPU, Key: host, Name: "the host's CPUs", CPU: -1})
	byID := func(id string) *finding.Finding {
		for i := range fs {
			if fs[i].ID == id {
				return &fs[i]
			}
		}
		return nil
	}
	ref := func(f *finding.Finding) (string, string) {
		if f == nil {
			return "", ""
		}
		return f.ID, f.Title
	}
	cs := s.Consumers()
	capa := s.capacity()
	cid, ctitle := ref(byID("sched.cpu-consumers"))
	for i, c := range cs {
		if i >= maxConsumerFacts {
			break
		}
		u := fact.Usage{On: host, By: fact.Task{PID: c.PID, Comm: c.Comm, CPUCgroup: c.Cgroup}, Amount: c.Runtime.Seconds(), Unit: "cpu_s",
			Threads: c.Threads, Finding: cid, FindingTitle: ctitle}
		if capa > 0 {
			u.Share = float64(c.Runtime) / float64(capa)
		}
		set.Usage = append(set.Usage, u)
	}
	byCg := map[string]time.Duration{}
	for _, c := range cs {
		if c.Cgroup != "" {
			byCg[c.Cgroup] += c.Runtime
		}
	}
	cgs := make([]string, 0, len(byCg))
	for cg := range byCg {
		cgs = append(cgs, cg)
	}
	slices.SortFunc(cgs, func(a, b string) int { return cmp.Or(cmp.Compare(byCg[b], byCg[a]), strings.Compare(a, b)) })
	for i, cg := range cgs {
		if i >= maxCgroupFacts {
			break
		}
		u := fact.Usage{On: host, By: fact.Task{CPUCgroup: cg}, Amount: byCg[cg].Seconds(), Unit: "cpu_s"}
		if capa > 0 {
			u.Share = float64(byCg[cg]) / float64(capa)
		}
		set.Usage = append(set.Usage, u)
	}
	if capa > 0 && s.CPUs > 0 && s.Duration > 0 {
		busy := float64(used(cs)) / float64(capa)
		set.Saturations = append(set.Saturations, fact.Saturation{On: host, Level: busy, Limit: float64(s.CPUs), Used: busy * float64(s.CPUs), Unit: "cpus",
			AtLimit: busy >= saturatedShare, Numbers: map[string]float64{"cpus": float64(s.CPUs), "tasks_busy_pct": human.Round(100*busy, 1)},
			Finding: cid, FindingTitle: ctitle})
		if s.SelfCPU > 0 {
			// wolf's own share, for the stage to tell CPUs the host's tasks
			// saturated from CPUs wolf's own work made short.
			set.Saturations[len(set.Saturations)-1].Numbers["wolf_busy_pct"] = human.Round(100*float64(s.SelfCPU)/float64(capa), 1)
		}
		if s.CPUsBusy > 0 {
			// The CPUs' busy time over the same window as wolf's share
			// (the checklist's busy_pct is over a window of its own).
			set.Saturations[len(set.Saturations)-1].Numbers["cpus_busy_pct"] = human.Round(100*s.CPUsBusy, 1)
		}
		if r := s.runnableMean(); r > 0 {
			set.Saturations[len(set.Saturations)-1].Numbers["tasks_runnable_mean"] = human.Round(r, 2)
		}
	}
	// The CPU quotas, and which tasks they throttled.
	quotaOf := func(cg string) *Bandwidth {
		for p := cg; ; p = path.Dir(p) {
			for i := range s.Bandwidth {
				if s.Bandwidth[i].Path == p {
					return &s.Bandwidth[i]
				}
			}
			if p == "/" || p == "." || p == "" {
				return nil
			}
		}
	}
	for _, b := range s.Bandwidth {
		k := fact.CPUQuotaKey(b.Path)
		set.Resource(fact.Resource{Kind: fact.CPUQuota, Key: k, Name: "CPU quota of cgroup " + b.Path, Cgroup: b.Path, CgroupID: b.ID, CPU: -1})
		if b.QuotaUs <= 0 || b.PeriodUs <= 0 {
			continue
		}
		pct := b.ThrottledPct()
		x := fact.Saturation{On: k, Level: pct / 100, Limit: float64(b.QuotaUs) / float64(b.PeriodUs), Unit: "cpus",
			AtLimit: b.Periods >= throttleMinPer && pct >= throttleWarnPct,
			Numbers: map[string]float64{"quota_us": float64(b.QuotaUs), "period_us": float64(b.PeriodUs), "quota_cpus": human.Round(float64(b.QuotaUs)/float64(b.PeriodUs), 3),
				"nr_periods": float64(b.Periods), "nr_throttled": float64(b.Throttled), "throttled_pct": human.Round(pct, 1), "throttled_s": human.Round(b.ThrottledTime.Seconds(), 3)}}
		if s.Duration > 0 {
			var u time.Duration
			for cg, rt := range byCg {
				if cg == b.Path || strings.HasPrefix(cg, strings.TrimSuffix(b.Path, "/")+"/") {
					u += rt
				}
			}
			x.Used = u.Seconds() / s.Duration.Seconds()
			x.Numbers["used_cpus"] = human.Round(x.Used, 3)
		}
		for _, p := range b.Procs {
			x.Members = append(x.Members, p.PID)
		}
		if f, ok := throttleFinding(b, s.Duration); ok {
			x.Finding, x.FindingTitle = f.ID, f.Title
			if f.Severity >= finding.Warning {
				x.Remediation = f.Remediation
			}
		}
		set.Saturations = append(set.Saturations, x)
	}
	// Who waited: for a CPU, or throttled.
	rid, rtitle := ref(byID("sched.runq-latency"))
	tasks := slices.Clone(s.Tasks)
	slices.SortStableFunc(tasks, func(a, b *Task) int {
		return cmp.Compare(b.Runq.Sum+uint64(b.Throttled), a.Runq.Sum+uint64(a.Throttled))
	})
	n := 0
	for _, t := range tasks {
		if n >= maxWaitFacts {
			break
		}
		task := fact.Task{PID: t.PID, TID: t.TID, Comm: t.Comm, CPUCgroup: t.Cgroup}
		if t.Runq.Count > 0 && !t.lowPriority() && !idleExplained(&t.Runq, t.IdleLong) {
			set.Waits = append(set.Waits, fact.Wait{Task: task, Kind: fact.WaitRunQueue, On: host, Total: time.Duration(t.Runq.Sum),
				Max: time.Duration(t.Runq.Max), Count: int(t.Runq.Count), Finding: rid, FindingTitle: rtitle,
				Numbers: map[string]any{"on_cpu_ms": human.Round(float64(t.Runtime)/1e6, 1)}})
			n++
		}
		if t.Throttled > 0 {
			cg := t.Cgroup
			var tid, ttitle string
			if b := quotaOf(t.Cgroup); b != nil {
				cg = b.Path
				if f, ok := throttleFinding(*b, s.Duration); ok {
					tid, ttitle = f.ID, f.Title
				}
			}
			set.Resource(fact.Resource{Kind: fact.CPUQuota, Key: fact.CPUQuotaKey(cg), Name: "CPU quota of cgroup " + cg, Cgroup: cg, CPU: -1})
			task.CPUCgroup = cg
			set.Waits = append(set.Waits, fact.Wait{Task: task, Kind: fact.WaitThrottled, On: fact.CPUQuotaKey(cg), Total: t.Throttled,
				Count: int(t.ThrottledWaits), Finding: tid, FindingTitle: ttitle})
			n++
		}
	}
	return set
}
