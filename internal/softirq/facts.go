package softirq

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/wolf-investigator/wolf/internal/fact"
	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/human"
)

// ConcludeFacts is Conclude and the window's facts for the diagnosis
// stage, from the same snapshot: each CPU's softirq time by vector (what
// used it), whether a run stalled the CPU (its saturation), and the
// tasks a stall ran on top of (the time they lost to it). Stalls a
// finding puts down to wolf itself or to a CPU that was not executing are
// left out.
func ConcludeFacts(s *Snapshot) ([]finding.Finding, *fact.Set) {
	fs := Conclude(s)
	return fs, s.facts(fs)
}

func (s *Snapshot) facts(fs []finding.Finding) *fact.Set {
	set := &fact.Set{Window: s.Window}
	// The stall findings by vector: their verdict on the stalls.
	byVec := map[string]*finding.Finding{}
	for i := range fs {
		if fs[i].ID == "softirq.stall" {
			if v, ok := fs[i].Evidence["vector"].(string); ok {
				byVec[v] = &fs[i]
			}
		}
	}
	// Softirq time per CPU and vector.
	perCPU := map[int]map[string]time.Duration{}
	for vec := 0; vec < NrVectors; vec++ {
		for cpu := range s.Run[vec] {
			h := &s.Run[vec][cpu]
			if h.Count == 0 {
				continue
			}
			if perCPU[cpu] == nil {
				perCPU[cpu] = map[string]time.Duration{}
			}
			perCPU[cpu][Vectors[vec]] += time.Duration(h.Sum)
		}
	}
	stalled := map[int]*finding.Finding{}
	type victim struct{ w fact.Wait }
	victims := map[[2]int]*victim{}
	var order [][2]int
	for _, st := range s.Stalls {
		f := byVec[st.Vector]
		if f == nil || f.Severity < finding.Warning || st.Duration < s.Threshold {
			continue
		}
		stalled[st.CPU] = f
		k := [2]int{st.CPU, st.PID}
		v := victims[k]
		if v == nil {
			v = &victim{w: fact.Wait{Task: fact.Task{PID: st.TGID, TID: st.PID, Comm: st.Comm}, Kind: fact.WaitSoftirq, On: fact.SoftirqKey(st.CPU),
				Finding: f.ID, FindingTitle: f.Title, Numbers: map[string]any{"vector": st.Vector}}}
			victims[k] = v
			order = append(order, k)
		}
		v.w.Total += st.Duration
		v.w.Max = max(v.w.Max, st.Duration)
		v.w.Count++
	}
	for _, k := range order {
		v := victims[k]
		if v.w.Task.TID == 0 {
			v.w.Task.Comm = fmt.Sprintf("CPU %d's work", k[0])
		}
		v.w.Detail = fmt.Sprintf("%s ran on top of it in %d runs of up to %s", v.w.Numbers["vector"], v.w.Count, human.Duration(v.w.Max))
		set.Waits = append(set.Waits, v.w)
	}
	// The host's CPUs' time that went to softirq processing, by vector:
	// consumers of the CPUs like any task (softirq work is done for the
	// traffic or the I/O that raised it, whose tasks are consumers too).
	all := fact.SoftirqKey(-1)
	byVector := map[string]time.Duration{}
	var allTotal time.Duration
	for _, vecs := range perCPU {
		for v, d := range vecs {
			byVector[v] += d
			allTotal += d
		}
	}
	if allTotal > 0 {
		capa := time.Duration(len(perCPU)) * s.Window
		if s.CPUs > 0 {
			capa = time.Duration(s.CPUs) * s.Window
		}
		var parts []string
		x := fact.Saturation{On: all, Level: share(allTotal, capa), Used: allTotal.Seconds(), Unit: "s",
			Numbers: map[string]float64{"softirq_ms": human.Round(float64(allTotal)/1e6, 2), "softirq_pct": human.Round(100*share(allTotal, capa), 1)}}
		x.AtLimit = x.Level >= softirqBusyShare
		for _, v := range sortedVectors(byVector) {
			d := byVector[v]
			set.Usage = append(set.Usage, fact.Usage{On: fact.HostCPUKey(), By: fact.Task{Comm: v + " softirq"}, Amount: d.Seconds(), Unit: "cpu_s",
				Activity: "softirq", Share: share(d, capa)})
			x.Numbers[strings.ToLower(v)+"_ms"] = human.Round(float64(d)/1e6, 2)
			if p := share(d, capa); p >= 0.01 {
				parts = append(parts, fmt.Sprintf("%s %s", v, human.Percent(100*p)))
			}
		}
		name := "softirq processing on all CPUs"
		if len(parts) > 0 {
			name += " (" + strings.Join(parts, ", ") + " of their time)"
		}
		set.Resource(fact.Resource{Kind: fact.Softirq, Key: all, Name: name, CPU: -1})
		set.Saturations = append(set.Saturations, x)
		if x.AtLimit {
			s.taskFacts(set, all, allTotal)
		}
	}
	for cpu, vecs := range perCPU {
		k := fact.SoftirqKey(cpu)
		var total time.Duration
		var top string
		for v, d := range vecs {
			total += d
			if top == "" || d > vecs[top] || (d == vecs[top] && v < top) {
				top = v
			}
			set.Usage = append(set.Usage, fact.Usage{On: k, By: fact.Task{Comm: v}, Amount: float64(d), Unit: "ns", Activity: v,
				Share: share(d, s.Window)})
		}
		name := fmt.Sprintf("softirq processing on CPU %d", cpu)
		f := stalled[cpu]
		if f != nil {
			if c, _ := f.Evidence["cause"].(string); c != "" && c != causeUnknown {
				name += fmt.Sprintf(" (%s: %s)", top, strings.ReplaceAll(c, "-", " "))
			}
		}
		set.Resource(fact.Resource{Kind: fact.Softirq, Key: k, Name: name, CPU: cpu})
		x := fact.Saturation{On: k, Level: share(total, s.Window), Used: total.Seconds(), Unit: "s",
			AtLimit: f != nil, Numbers: map[string]float64{"softirq_ms": human.Round(float64(total)/1e6, 2)}}
		for v, d := range vecs {
			x.Numbers[strings.ToLower(v)+"_ms"] = human.Round(float64(d)/1e6, 2)
		}
		if f != nil {
			x.Finding, x.FindingTitle, x.Remediation = f.ID, f.Title, f.Remediation
			if m, ok := finding.Number(f.Evidence["max_us"]); ok {
				x.Numbers["max_run_us"] = m
			}
		}
		set.Saturations = append(set.Saturations, x)
	}
	return set
}

// taskFacts are the tasks softirq work ran on top of, when it took a
// good share of the CPUs: each lost that time (the handler ran before the
// task resumed), a wait on the CPUs' softirq processing however short
// each run was, and each is whom that work ran for as far as wolf can
// tell (work raised by a task — loopback or local traffic it sends, I/O
// it completes — runs in its own context; work an interrupt raised runs
// on whichever task it hit): a use of it. ksoftirqd is the work itself
// and wolf's own process is left out.
func (s *Snapshot) taskFacts(set *fact.Set, on string, allTotal time.Duration) {
	procs := map[int]*fact.Usage{}
	var order []int
	for _, t := range s.Tasks {
		total := t.Total()
		if t.TID == 0 || strings.HasPrefix(t.Comm, "ksoftirqd/") || (s.SelfTGID != 0 && t.TGID == s.SelfTGID) {
			continue
		}
		if total < s.Window/100 || total < time.Millisecond {
			break // most first: the rest is less
		}
		nums := map[string]any{"softirq_ms": human.Round(float64(total)/1e6, 1), "runs": t.Runs,
			"window_pct": human.Round(100*share(total, s.Window), 1)}
		var parts []string
		for vec := range NrVectors {
			d := time.Duration(t.NS[vec])
			if d <= 0 {
				continue
			}
			nums[strings.ToLower(Vectors[vec])+"_ms"] = human.Round(float64(d)/1e6, 1)
		}
		top := topVectors(t.NS)
		for _, vec := range top {
			parts = append(parts, fmt.Sprintf("%s %s", Vectors[vec], human.Duration(time.Duration(t.NS[vec]))))
		}
		task := fact.Task{PID: t.TGID, TID: t.TID, Comm: t.Comm}
		set.Waits = append(set.Waits, fact.Wait{Task: task, Kind: fact.WaitSoftirq, On: on, Total: total, Numbers: nums,
			Detail: fmt.Sprintf("softirq work ran on top of it for %s of the %s window (%s, %d runs)", human.Duration(total), human.Duration(s.Window), strings.Join(parts, ", "), t.Runs)})
		act := "softirq"
		if len(top) > 0 {
			act = Vectors[top[0]]
		}
		u := procs[t.TGID]
		if u == nil {
			u = &fact.Usage{On: on, By: fact.Task{PID: t.TGID, Comm: t.Comm}, Unit: "s", Activity: act}
			procs[t.TGID] = u
			order = append(order, t.TGID)
		}
		u.Amount += total.Seconds()
		u.Share += share(total, allTotal)
		u.Threads++
	}
	// Its use, per process (the largest thread's vector names it).
	for _, pid := range order {
		set.Usage = append(set.Usage, *procs[pid])
	}
}

// topVectors are the vectors that took at least a tenth of ns's total,
// largest first (at least the largest).
func topVectors(ns [NrVectors]uint64) []int {
	var sum uint64
	var vs []int
	for v, d := range ns {
		sum += d
		if d > 0 {
			vs = append(vs, v)
		}
	}
	sort.Slice(vs, func(i, j int) bool {
		if ns[vs[i]] != ns[vs[j]] {
			return ns[vs[i]] > ns[vs[j]]
		}
		return vs[i] < vs[j]
	})
	for i, v := range vs {
		if i > 0 && ns[v]*10 < sum {
			return vs[:i]
		}
	}
	return vs
}

// softirqBusyShare is the share of the CPUs' time softirq processing
// takes before it holds the host's tasks back (the checklist's 20% of a
// CPU).
const softirqBusyShare = 0.2

// sortedVectors are the vectors by time, largest first.
func sortedVectors(m map[string]time.Duration) []string {
	vs := make([]string, 0, len(m))
	for v := range m {
		vs = append(vs, v)
	}
	sort.Slice(vs, func(i, j int) bool {
		if m[vs[i]] != m[vs[j]] {
			return m[vs[i]] > m[vs[j]]
		}
		return vs[i] < vs[j]
	})
	return vs
}

func share(d, window time.Duration) float64 {
	if window <= 0 {
		return 0
	}
	return float64(d) / float64(window)
}
