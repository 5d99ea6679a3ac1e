package diagnose

import (
	"cmp"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/wolf-investigator/wolf/internal/fact"
	"github.com/wolf-investigator/wolf/internal/finding"
)

// label names a subject the way the findings do.
func label(s finding.Subject) string {
	switch {
	case s.PID != 0 && s.TID != 0 && s.TID != s.PID:
		return fmt.Sprintf("%s (pid %d, tid %d)", s.Comm, s.PID, s.TID)
	case s.PID != 0:
		return fmt.Sprintf("%s (pid %d)", s.Comm, s.PID)
	case s.TID != 0:
		return fmt.Sprintf("%s (tid %d)", s.Comm, s.TID)
	case s.Lock != "":
		return s.Lock
	case s.Cgroup != "" && s.Comm == "":
		return "cgroup " + s.Cgroup
	}
	return s.Comm
}

// nameOf names a resource's subject in a sentence.
func nameOf(s finding.Subject) string {
	switch {
	case s.Lock != "":
		return s.Lock
	case s.Role == finding.RoleCPU && s.CPU == nil && s.Comm == "all CPUs":
		return "the host's CPUs"
	case s.Role == finding.RoleCPU && s.CPU == nil:
		return s.Detail
	case s.Role == finding.RoleCPU:
		return fmt.Sprintf("CPU %d", *s.CPU)
	case s.Role == finding.RoleCgroup && s.Device != "":
		return fmt.Sprintf("the I/O limit of cgroup %s on %s", s.Cgroup, s.Device)
	case s.Role == finding.RoleCgroup:
		return "cgroup " + s.Cgroup
	case s.Role == finding.RoleDevice:
		if s.Detail != "" && s.Comm != "" {
			return s.Comm
		}
		return s.Device
	}
	return label(s)
}

// taskSubject is a task as a subject.
func taskSubject(t fact.Task, role string) finding.Subject {
	return finding.Subject{Role: role, PID: t.PID, TID: t.TID, Comm: t.Comm, Cgroup: cmp.Or(t.CPUCgroup, t.MemCgroup, t.IOCgroup), CgroupID: t.CgroupID}
}

// subjectOf is a resource as a subject.
func (e *engine) subjectOf(k string) finding.Subject {
	r := e.resource(k)
	switch r.Kind {
	case fact.Lock:
		name := r.Name
		if name == "" && r.MMPID > 0 {
			name = fmt.Sprintf("mmap_lock of pid %d", r.MMPID)
		}
		if name == "" {
			name = "lock " + r.LockAddr
		}
		s := finding.Subject{Role: finding.RoleLock, Lock: name, LockAddr: r.LockAddr}
		if r.MMPID > 0 {
			s.Evidence = map[string]any{"mm_pid": r.MMPID}
		}
		return s
	case fact.HostCPU:
		n := 0.0
		if s := e.saturation(k); s != nil {
			n = s.Limit
		}
		d := "the host's CPUs"
		if n > 0 {
			d = fmt.Sprintf("the host's %.0f CPUs", n)
		}
		return finding.Subject{Role: finding.RoleCPU, Comm: "all CPUs", Detail: d}
	case fact.Softirq:
		if r.CPU < 0 || k == fact.SoftirqKey(-1) {
			return finding.Subject{Role: finding.RoleCPU, Comm: "softirq processing", Detail: "softirq processing on all CPUs"}
		}
		cpu := r.CPU
		return finding.Subject{Role: finding.RoleCPU, CPU: &cpu, Detail: "softirq processing on CPU " + fmt.Sprint(cpu)}
	case fact.CPU:
		cpu := r.CPU
		d := "softirq processing on CPU " + fmt.Sprint(cpu)
		if r.Kind == fact.CPU {
			d = "CPU " + fmt.Sprint(cpu)
		}
		return finding.Subject{Role: finding.RoleCPU, CPU: &cpu, Detail: d}
	case fact.CPUQuota:
		return finding.Subject{Role: finding.RoleCgroup, Cgroup: r.Cgroup, CgroupID: r.CgroupID, Detail: "its CPU quota"}
	case fact.Memory:
		if r.Cgroup == "/" {
			return finding.Subject{Role: finding.RoleCgroup, Cgroup: "/", Detail: "the host's memory"}
		}
		return finding.Subject{Role: finding.RoleCgroup, Cgroup: r.Cgroup, CgroupID: r.CgroupID, Detail: "its memory limit"}
	case fact.FUSE:
		return finding.Subject{Role: finding.RoleTask, Comm: "FUSE connection " + cmp.Or(r.Conn, "?"), Detail: cmp.Or(r.Name, "a FUSE mount's requests to its daemon")}
	case fact.Device:
		return finding.Subject{Role: finding.RoleDevice, Device: r.Device, Detail: cmp.Or(r.Name, "block device "+r.Device)}
	case fact.IOLimit:
		return finding.Subject{Role: finding.RoleCgroup, Cgroup: r.Cgroup, CgroupID: r.CgroupID, Device: r.Device, Detail: cmp.Or(r.Name, "its I/O limit on "+r.Device)}
	case fact.Dirty:
		return finding.Subject{Role: finding.RoleDevice, Device: r.Device, Comm: cmp.Or(r.Name, "dirty-page throttling"), Detail: "dirty-page throttling"}
	case fact.Journal:
		return finding.Subject{Role: finding.RoleDevice, Device: r.Device, Comm: cmp.Or(r.Name, "journal on "+r.Device), Detail: "filesystem journal"}
	case fact.Site:
		fn := strings.TrimPrefix(r.Key, "site:")
		return finding.Subject{Role: finding.RoleTask, Comm: fn, Detail: cmp.Or(r.Name, "a D-state sleep in "+fn)}
	}
	return finding.Subject{Role: finding.RoleTask, Comm: cmp.Or(r.Name, r.Key)}
}

func activity(name, detail string) finding.Subject {
	return finding.Subject{Role: finding.RoleTask, Comm: name, Detail: detail}
}

// victimSubject is a victim with its wait's numbers.
func (e *engine) victimSubject(v *victim) finding.Subject {
	w := v.w
	s := taskSubject(w.Task, finding.RoleVictim)
	s.Evidence = waitNumbers(w)
	to := e.subjectOf(v.key)
	switch {
	case w.Kind == fact.WaitRunQueue:
		s.Detail = "waits for a CPU"
	case w.Kind == fact.WaitThrottled:
		s.Detail = "throttled by its cgroup's CPU quota"
	case w.Kind == fact.WaitReclaim:
		s.Detail = "reclaims memory"
	case w.Mode == "write":
		s.Detail = "writer queued on " + nameOf(to)
	case w.BehindWriter != 0:
		s.Detail = fmt.Sprintf("reader of %s, queued behind writer tid %d", nameOf(to), w.BehindWriter)
	case to.Role == finding.RoleLock && mmOfKey(v.key) > 0 && w.Task.PID != mmOfKey(v.key):
		m := mmOfKey(v.key)
		s.Detail = fmt.Sprintf("another process waiting for %s (reading /proc/%d: ps, top, a monitoring agent)", nameOf(to), m)
	default:
		s.Detail = "waits for " + nameOf(to)
	}
	if to.Role == finding.RoleLock {
		s.Lock, s.LockAddr = to.Lock, to.LockAddr
	}
	if to.Device != "" {
		s.Device = to.Device
	}
	return s
}

// waitNumbers are a wait's numbers, keys with units.
func waitNumbers(w *fact.Wait) map[string]any {
	ev := map[string]any{}
	switch {
	case w.Hung:
		ev["blocked_s"] = round3(w.Max.Seconds())
	default:
		ev["wait_ms_total"] = msOf(w.Total)
		if w.Max > 0 || w.Count > 0 {
			// Time taken a little at a time has no longest wait.
			ev["wait_ms_max"] = msOf(w.Max)
		}
		if w.Count > 0 {
			ev["waits"] = w.Count
		}
	}
	if w.Mode != "" {
		ev["mode"] = w.Mode
	}
	if w.BehindWriter != 0 {
		ev["behind_writer_tid"] = w.BehindWriter
	}
	if w.Ongoing && !w.Hung {
		ev["ongoing"] = true
	}
	if w.AtLeast {
		// Began before wolf attached: the times are lower bounds.
		ev["at_least"] = true
	}
	maps.Copy(ev, w.Numbers)
	return ev
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// waitHop is a victim's wait on a resource.
func (e *engine) waitHop(w *fact.Wait, from, to finding.Subject, what string) finding.Hop {
	var b strings.Builder
	b.WriteString(label(from))
	target := nameOf(to)
	if what != "" {
		target = what
	}
	switch {
	case w.Hung:
		fmt.Fprintf(&b, " has been blocked (D) %s on %s", ms(msOf(w.Max)), target)
	case w.Kind == fact.WaitSoftirq && w.Count == 0:
		fmt.Fprintf(&b, " lost %s to %s", ms(msOf(w.Total)), target)
	case w.AtLeast:
		fmt.Fprintf(&b, " waited at least %s %s", ms(msOf(w.Max)), strings.TrimPrefix(forTarget(target), " "))
	default:
		fmt.Fprintf(&b, " waited %s %s", ms(msOf(w.Total)), strings.TrimPrefix(forTarget(target), " "))
		if w.Count > 0 {
			fmt.Fprintf(&b, " in %d waits, the longest %s", w.Count, ms(msOf(w.Max)))
		}
	}
	if w.Mode != "" {
		if m, ok := map[string]string{"read": "reading", "write": "writing"}[w.Mode]; ok {
			fmt.Fprintf(&b, ", for %s", m)
		}
	}
	mech := mechWaitsOn(e.resource(e.on(w)).Kind, w.Kind)
	if w.BehindWriter != 0 {
		fmt.Fprintf(&b, ", queued behind writer tid %d", w.BehindWriter)
		mech = mechBehindWriter
	}
	if w.Detail != "" {
		b.WriteString(": " + w.Detail)
	}
	if w.Ongoing && !w.Hung {
		b.WriteString(", still waiting when wolf stopped")
	}
	if w.AtLeast {
		b.WriteString(" (a wait that began before wolf attached and ended while it watched: at least this long)")
	}
	return finding.Hop{From: from, Relation: finding.WaitsOn, To: to, Evidence: waitNumbers(w), Text: b.String(), Mechanism: mech, Likely: w.Likely}
}

// forTarget puts "for" before a target unless it says it already.
func forTarget(t string) string {
	if strings.HasPrefix(t, "for ") {
		return t
	}
	return "for " + t
}

// intoHop is a hop into a resource that holds something back, with the
// resource's own numbers (its limit, how often it was reached).
func (e *engine) intoHop(from finding.Subject, rel finding.Relation, k string, text string, ev map[string]any) finding.Hop {
	to := e.subjectOf(k)
	r := e.resource(k)
	s := e.saturation(k)
	nums := map[string]any{}
	var words string
	mech := ""
	switch r.Kind {
	case fact.Memory:
		mech = mechMemcgLimit
		words = fmt.Sprintf("%s is in memory cgroup %s, which sits at its memory limit%s", label(from), r.Cgroup, memcgNumbers(s))
		if from.PID == 0 && from.TID == 0 {
			words = fmt.Sprintf("%s: memory cgroup %s sits at its memory limit%s", label(from), r.Cgroup, memcgNumbers(s))
		}
		if r.Cgroup == "/" {
			mech = mechHostMemory
			words = fmt.Sprintf("%s needs memory the host does not have free%s", label(from), memcgNumbers(s))
		}
	case fact.CPUQuota:
		mech = mechCPUQuota
		words = fmt.Sprintf("%s is in cgroup %s, whose CPU quota is %s", label(from), r.Cgroup, quotaNumbers(s))
	case fact.HostCPU:
		mech = mechHostCPU
		words = fmt.Sprintf("%s is constrained by the host's CPUs%s", label(from), hostNumbers(s))
		if from.PID == 0 && from.TID == 0 {
			state := "saturated"
			if s == nil || !s.AtLimit {
				// Reached because more tasks were runnable than CPUs
				// (cpusContended), under the saturation mark.
				state = "contended"
			}
			words = fmt.Sprintf("%s: the host's CPUs were %s%s", label(from), state, hostNumbers(s))
		}
	case fact.IOLimit:
		mech = mechWaitsOn(r.Kind, fact.WaitIO)
		words = fmt.Sprintf("%s waits for %s%s", label(from), nameOf(to), ioLimitNumbers(s))
	case fact.Device, fact.Dirty, fact.Journal:
		mech = mechWaitsOn(r.Kind, fact.WaitIO)
		words = fmt.Sprintf("%s waits for %s%s", label(from), nameOf(to), satNumbers(s))
	default:
		words = fmt.Sprintf("%s waits for %s%s", label(from), nameOf(to), satNumbers(s))
	}
	if s != nil {
		for k, v := range s.Numbers {
			nums[k] = v
		}
	}
	maps.Copy(nums, ev)
	if text == "" {
		text = words
	}
	if len(nums) == 0 {
		nums = nil
	}
	return finding.Hop{From: from, Relation: rel, To: to, Evidence: nums, Text: text, Mechanism: mech}
}

// holderSubject is a lock's holder.
func (e *engine) holderSubject(h *fact.Hold, k string) finding.Subject {
	s := taskSubject(h.Holder, finding.RoleHolder)
	lk := e.subjectOf(k)
	s.Lock, s.LockAddr = lk.Lock, lk.LockAddr
	ev := map[string]any{}
	if h.Mode != "" {
		ev["mode"] = h.Mode
	}
	if !h.Exact {
		ev["likely"] = true
	}
	if h.Max > 0 {
		ev["hold_ms_max"] = msOf(h.Max)
	}
	if sp := h.Split; sp != nil && sp.Span > 0 {
		ev["hold_ms"] = msOf(sp.Span)
		ev["on_cpu_ms"] = msOf(sp.OnCPU)
		ev["runnable_ms"] = msOf(sp.Runnable)
		ev["reclaim_ms"] = msOf(sp.Reclaim)
		if sp.ThrottleKnown {
			ev["throttled_ms"] = msOf(sp.Throttled)
		}
	}
	if sp := e.ongoing[h.Holder.TID]; sp != nil && sp.State != "" {
		s.State = sp.State
	}
	s.Evidence = ev
	switch {
	case !h.Exact:
		s.Detail = "latest reader of " + nameOf(lk) + ", likely still holding it"
	case h.Holds > 0 && h.Total > 0:
		s.Detail = fmt.Sprintf("holds %s: %d holds, the longest %s", nameOf(lk), h.Holds, ms(msOf(h.Max)))
	default:
		s.Detail = "holds " + nameOf(lk)
	}
	return s
}

func (e *engine) heldHop(lock finding.Subject, h *fact.Hold, holder finding.Subject, k string) finding.Hop {
	if e.resource(k).Kind == fact.Journal {
		return journalHop(lock, h, holder)
	}
	ev := map[string]any{}
	var b strings.Builder
	mode := ""
	if m, ok := map[string]string{"read": "reading", "write": "writing"}[h.Mode]; ok {
		mode = " for " + m
	}
	name := nameOf(lock)
	switch {
	case !h.Exact:
		fmt.Fprintf(&b, "%s is reader-owned; its latest reader, likely still holding it, is %s", name, label(holder))
	case h.Holds > 0 && h.Total > 0:
		fmt.Fprintf(&b, "%s is held%s by %s: %d holds over the threshold, the longest %s, %s in all", name, mode, label(holder), h.Holds, ms(msOf(h.Max)), ms(msOf(h.Total)))
		ev["holds"], ev["hold_ms_max"], ev["hold_ms_total"] = h.Holds, msOf(h.Max), msOf(h.Total)
	case h.Charged > 0:
		fmt.Fprintf(&b, "%s is held%s by %s while others waited %s", name, mode, label(holder), ms(msOf(h.Charged)))
		ev["waited_ms"] = msOf(h.Charged)
	default:
		fmt.Fprintf(&b, "%s is held%s by %s", name, mode, label(holder))
	}
	mech := mechHeldBy
	if !h.Exact {
		mech = mechHeldByReader
	}
	if len(ev) == 0 {
		ev = nil
	}
	return finding.Hop{From: lock, Relation: finding.HeldBy, To: holder, Evidence: ev, Text: b.String(), Mechanism: mech, Likely: !h.Exact}
}

// spendHop says where a holder's time went, with every component wolf
// measured, not only the one it follows.
func (e *engine) spendHop(holder, to finding.Subject, sp *fact.Split, kind, mech string) finding.Hop {
	ev := map[string]any{}
	var parts []string
	span := msOf(sp.Span)
	add := func(key, what string, v time.Duration, always bool) {
		if v <= 0 && !always {
			return
		}
		ev[key] = msOf(v)
		parts = append(parts, fmt.Sprintf("%s %s (%s)", what, ms(msOf(v)), pct(msOf(v), span)))
	}
	ev["hold_ms"] = span
	add("reclaim_ms", "in memory reclaim", sp.Reclaim, kind == "reclaim")
	add("on_cpu_ms", "on CPU", sp.OnCPU, true)
	add("runnable_ms", "waiting for a CPU", sp.Runnable, true)
	switch {
	case sp.Throttled > 0:
		add("throttled_ms", "throttled", sp.Throttled, true)
	case sp.ThrottleKnown:
		ev["throttled_ms"] = 0.0
		parts = append(parts, "never throttled")
	}
	add("io_ms", "waiting for I/O", sp.IO, false)
	if sp.PagesScanned > 0 {
		ev["pages_scanned"], ev["pages_reclaimed"] = sp.PagesScanned, sp.PagesReclaimed
		parts = append(parts, fmt.Sprintf("%d pages scanned, %d reclaimed", sp.PagesScanned, sp.PagesReclaimed))
	}
	text := fmt.Sprintf("%s is %s", label(holder), to.Detail)
	switch {
	case sp.Bounded:
		text += fmt.Sprintf(": over the %s between the first and the last wait that found it owning the lock, %s", ms(span), strings.Join(parts, ", "))
	case sp.Still:
		text += fmt.Sprintf(": over the %s wolf watched, %s", ms(span), strings.Join(parts, ", "))
	default:
		text += fmt.Sprintf(": of %s held, %s", ms(span), strings.Join(parts, ", "))
	}
	return finding.Hop{From: holder, Relation: finding.SpendsHold, To: to, Evidence: ev, Text: text, Mechanism: mech}
}

// ms prints milliseconds the way a person reads them.
func ms(v float64) string {
	switch {
	case v >= 10000:
		return fmt.Sprintf("%.0f s", v/1000)
	case v >= 1000:
		return fmt.Sprintf("%.1f s", v/1000)
	case v >= 10:
		return fmt.Sprintf("%.0f ms", v)
	case v >= 1:
		return fmt.Sprintf("%.1f ms", v)
	}
	return fmt.Sprintf("%.2f ms", v)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func pct(part, whole float64) string {
	if whole <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*part/whole)
}

func mib(b float64) string { return fmt.Sprintf("%.0f MiB", b/(1<<20)) }

func satNum(s *sat, k string) (float64, bool) {
	if s == nil {
		return 0, false
	}
	v, ok := s.Numbers[k]
	return v, ok
}

func memcgNumbers(s *sat) string {
	var parts []string
	if v, _ := satNum(s, "limit_bytes"); v > 0 {
		parts = append(parts, "limit "+mib(v))
	}
	if v, _ := satNum(s, "usage_bytes"); v > 0 {
		parts = append(parts, "usage "+mib(v))
	}
	if v, _ := satNum(s, "limit_hits"); v > 0 {
		parts = append(parts, fmt.Sprintf("limit hit %.0f times in the window", v))
	}
	if v, ok := satNum(s, "efficiency_pct"); ok {
		parts = append(parts, fmt.Sprintf("reclaim frees %.0f%% of the pages it scans", v))
	}
	if v, _ := satNum(s, "refaults_per_s"); v > 0 {
		parts = append(parts, fmt.Sprintf("%.0f pages/s refaulted", v))
	}
	if len(parts) == 0 {
		return ""
	}
	return ": " + strings.Join(parts, ", ")
}

func quotaNumbers(s *sat) string {
	q, _ := satNum(s, "quota_us")
	p, _ := satNum(s, "period_us")
	if q <= 0 || p <= 0 {
		return "used up"
	}
	out := fmt.Sprintf("%s per %s (%.2g CPUs)", ms(q/1000), ms(p/1000), q/p)
	if v, ok := satNum(s, "throttled_pct"); ok {
		n, _ := satNum(s, "nr_throttled")
		np, _ := satNum(s, "nr_periods")
		out += fmt.Sprintf("; it was throttled in %.0f%% of its periods (%.0f of %.0f)", v, n, np)
	}
	if v, _ := satNum(s, "throttled_s"); v > 0 {
		out += fmt.Sprintf(", %s throttled in all", ms(v*1000))
	}
	return out
}

func hostNumbers(s *sat) string {
	var parts []string
	if v, _ := satNum(s, "cpus"); v > 0 {
		parts = append(parts, fmt.Sprintf("%.0f CPUs", v))
	}
	if v, ok := satNum(s, "busy_pct"); ok {
		parts = append(parts, fmt.Sprintf("%.0f%% busy", v))
	}
	if v, _ := satNum(s, "runnable_mean"); v > 0 {
		parts = append(parts, fmt.Sprintf("%.1f tasks runnable on average", v))
	}
	if len(parts) == 0 {
		return ""
	}
	return ": " + strings.Join(parts, ", ")
}

// satNumbers says a saturation's level in words, for resources the
// diagnosis stage has no special words for.
func satNumbers(s *sat) string {
	if s == nil {
		return ""
	}
	var parts []string
	for _, k := range sortedKeys(s.Numbers) {
		parts = append(parts, fmt.Sprintf("%s %g", k, s.Numbers[k]))
		if len(parts) == 4 {
			break
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return ": " + strings.Join(parts, ", ")
}
