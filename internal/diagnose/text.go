package diagnose

import (
	"fmt"
	"maps"
	"slices"
	"strings"

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
	case s.Cgroup != "":
		return "cgroup " + s.Cgroup
	}
	return s.Comm
}

func lockSubject(l *lockFact) finding.Subject {
	s := finding.Subject{Role: finding.RoleLock, Lock: l.name, LockAddr: l.addr}
	if l.mmPID > 0 {
		s.PID = 0
		s.Evidence = map[string]any{"mm_pid": l.mmPID}
	}
	return s
}

func activity(name, detail string) finding.Subject {
	return finding.Subject{Role: finding.RoleTask, Comm: name, Detail: detail}
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

func waitHop(w *waitFact, lock finding.Subject, x *facts) finding.Hop {
	ev := map[string]any{}
	var b strings.Builder
	b.WriteString(label(w.task))
	switch {
	case w.hung:
		fmt.Fprintf(&b, " has been blocked (D) %s on %s", ms(w.blocked*1000), lock.Lock)
		ev["blocked_s"] = w.blocked
	default:
		fmt.Fprintf(&b, " waited %s for %s", ms(w.totalMs), lock.Lock)
		if w.waits > 0 {
			fmt.Fprintf(&b, " in %d waits, the longest %s", w.waits, ms(w.maxMs))
		}
		ev["wait_ms_total"], ev["wait_ms_max"] = w.totalMs, w.maxMs
		if w.waits > 0 {
			ev["waits"] = w.waits
		}
	}
	if w.mode != "" {
		fmt.Fprintf(&b, ", for %s", map[string]string{"read": "reading", "write": "writing"}[w.mode])
		ev["mode"] = w.mode
	}
	mech := mechWaitsOnLock
	if w.behindWriter != 0 {
		fmt.Fprintf(&b, ", queued behind writer tid %d", w.behindWriter)
		ev["behind_writer_tid"] = w.behindWriter
		mech = mechBehindWriter
	}
	if w.ongoing && !w.hung {
		b.WriteString(", still waiting when wolf stopped")
	}
	return finding.Hop{From: w.task, Relation: waitsOn, To: lock, Evidence: ev, Text: b.String(), Mechanism: mech, Findings: []string{x.fs[w.finding].ID}}
}

func victimSubject(w *waitFact, x *facts) finding.Subject {
	s := w.task
	s.Role = finding.RoleVictim
	s.Stack = nil
	ev := map[string]any{}
	if s.Evidence != nil {
		ev = maps.Clone(s.Evidence)
	}
	if w.mode != "" {
		ev["mode"] = w.mode
	}
	if w.hung {
		ev["blocked_s"] = w.blocked
	} else {
		ev["wait_ms_total"], ev["wait_ms_max"] = w.totalMs, w.maxMs
	}
	s.Evidence = ev
	l := x.locks[w.lock]
	switch {
	case w.mode == "write":
		s.Detail = "writer queued on " + l.name
	case w.behindWriter != 0:
		s.Detail = fmt.Sprintf("reader of %s, queued behind writer tid %d", l.name, w.behindWriter)
	case l.mmPID > 0 && w.task.PID != l.mmPID:
		s.Detail = fmt.Sprintf("another process waiting for %s (reading /proc/%d: ps, top, a monitoring agent)", l.name, l.mmPID)
	default:
		s.Detail = "waits for " + l.name
	}
	s.Lock, s.LockAddr = l.name, l.addr
	return s
}

func holderSubject(h *holdFact, l *lockFact) finding.Subject {
	s := h.holder
	s.Role = finding.RoleHolder
	s.Lock, s.LockAddr = l.name, l.addr
	ev := map[string]any{}
	if s.Evidence != nil {
		ev = maps.Clone(s.Evidence)
	}
	if h.mode != "" {
		ev["mode"] = h.mode
	}
	if !h.exact {
		ev["likely"] = true
	}
	s.Evidence = ev
	switch {
	case !h.exact:
		s.Detail = "latest reader of " + l.name + ", likely still holding it"
	case h.holds > 0 && h.totalMs > 0:
		s.Detail = fmt.Sprintf("holds %s: %d holds, the longest %s", l.name, h.holds, ms(h.maxMs))
	default:
		s.Detail = "holds " + l.name
	}
	if len(s.Stack) > 8 {
		s.Stack = s.Stack[:8]
	}
	return s
}

func heldHop(lock finding.Subject, h *holdFact, holder finding.Subject, l *lockFact) finding.Hop {
	ev := map[string]any{}
	var b strings.Builder
	mode := ""
	if h.mode != "" {
		mode = " for " + map[string]string{"read": "reading", "write": "writing"}[h.mode]
	}
	switch {
	case !h.exact:
		fmt.Fprintf(&b, "%s is reader-owned; its latest reader, likely still holding it, is %s", l.name, label(holder))
	case h.holds > 0 && h.totalMs > 0:
		fmt.Fprintf(&b, "%s is held%s by %s: %d holds over the threshold, the longest %s, %s in all", l.name, mode, label(holder), h.holds, ms(h.maxMs), ms(h.totalMs))
		ev["holds"], ev["hold_ms_max"], ev["hold_ms_total"] = h.holds, h.maxMs, h.totalMs
	case h.charged > 0:
		fmt.Fprintf(&b, "%s is held%s by %s while others waited %s", l.name, mode, label(holder), ms(h.charged))
		ev["waited_ms"] = h.charged
	default:
		fmt.Fprintf(&b, "%s is held%s by %s", l.name, mode, label(holder))
	}
	mech := mechHeldBy
	if !h.exact {
		mech = mechHeldByReader
	}
	if len(ev) == 0 {
		ev = nil
	}
	return finding.Hop{From: lock, Relation: heldBy, To: holder, Evidence: ev, Text: b.String(), Mechanism: mech, Likely: !h.exact}
}

// spendHop says where a holder's time went, with every component wolf
// measured, not only the one that explains it.
func spendHop(holder, to finding.Subject, sp *spendFact, kind, mech string) finding.Hop {
	ev := map[string]any{}
	var parts []string
	if sp.holdMs > 0 {
		ev["hold_ms"] = sp.holdMs
		add := func(key, what string, v float64, always bool) {
			if v <= 0 && !always {
				return
			}
			ev[key] = v
			parts = append(parts, fmt.Sprintf("%s %s (%s)", what, ms(v), pct(v, sp.holdMs)))
		}
		add("reclaim_ms", "in memory reclaim", sp.reclaimMs, kind == "reclaim")
		add("on_cpu_ms", "on CPU", sp.onCPUMs, true)
		add("runnable_ms", "waiting for a CPU", sp.runnableMs, true)
		switch {
		case sp.throttledMs > 0:
			add("throttled_ms", "throttled", sp.throttledMs, true)
		case sp.throttleKnown:
			ev["throttled_ms"] = 0.0
			parts = append(parts, "never throttled")
		}
		if sp.scanned > 0 {
			ev["pages_scanned"], ev["pages_reclaimed"] = sp.scanned, sp.reclaimed
			parts = append(parts, fmt.Sprintf("%.0f pages scanned, %.0f reclaimed", sp.scanned, sp.reclaimed))
		}
	}
	text := fmt.Sprintf("%s is %s", label(holder), to.Detail)
	switch {
	case len(parts) > 0 && sp.span:
		text += fmt.Sprintf(": over the %s between the first and the last wait that found it owning the lock, %s", ms(sp.holdMs), strings.Join(parts, ", "))
	case len(parts) > 0 && sp.state != "":
		// A hold still going: what wolf saw of it over its window.
		text += fmt.Sprintf(": over the %s wolf watched, %s", ms(sp.holdMs), strings.Join(parts, ", "))
	case len(parts) > 0:
		text += fmt.Sprintf(": of %s held, %s", ms(sp.holdMs), strings.Join(parts, ", "))
	}
	if sp.state != "" && sp.holdMs <= 0 {
		text += fmt.Sprintf(" (state %s)", sp.state)
	}
	if len(ev) == 0 {
		ev = nil
	}
	return finding.Hop{From: holder, Relation: spendsHold, To: to, Evidence: ev, Text: text, Mechanism: mech}
}

func fuseRequestText(f *fuseFact) string {
	var b strings.Builder
	op := f.opcode
	if op == "" {
		op = "a"
	}
	b.WriteString(op + " request")
	if f.unique > 0 {
		fmt.Fprintf(&b, " #%.0f", f.unique)
	}
	if f.ageS > 0 {
		fmt.Fprintf(&b, " unanswered for %s", ms(f.ageS*1000))
	} else {
		b.WriteString(" unanswered")
	}
	if f.exact {
		b.WriteString(", sent by this task and found on the daemon's /dev/fuse queue")
	}
	if f.waiting > 0 {
		fmt.Fprintf(&b, "; %.0f request(s) waiting on the connection", f.waiting)
	}
	return b.String()
}

func memcgNumbers(ev map[string]any) string {
	var parts []string
	if v := num(ev, "limit_bytes"); v > 0 {
		parts = append(parts, fmt.Sprintf("limit %s", mib(v)))
	}
	if v := num(ev, "usage_bytes"); v > 0 {
		parts = append(parts, fmt.Sprintf("usage %s", mib(v)))
	}
	if v := num(ev, "limit_hits"); v > 0 {
		parts = append(parts, fmt.Sprintf("limit hit %.0f times in the window", v))
	}
	if has(ev, "efficiency_pct") {
		parts = append(parts, fmt.Sprintf("reclaim frees %.0f%% of the pages it scans", num(ev, "efficiency_pct")))
	}
	if len(parts) == 0 {
		return ""
	}
	return ": " + strings.Join(parts, ", ")
}

func quotaNumbers(ev map[string]any) string {
	q, p := num(ev, "quota_us"), num(ev, "period_us")
	s := fmt.Sprintf("%s per %s", ms(q/1000), ms(p/1000))
	if p > 0 {
		s += fmt.Sprintf(" (%.2g CPUs)", q/p)
	}
	if has(ev, "throttled_pct") {
		s += fmt.Sprintf("; it was throttled in %.0f%% of its periods (%.0f of %.0f)", num(ev, "throttled_pct"), num(ev, "nr_throttled"), num(ev, "nr_periods"))
	}
	if v := num(ev, "throttled_s"); v > 0 {
		s += fmt.Sprintf(", %s throttled in all", ms(v*1000))
	}
	return s
}

func mib(b float64) string { return fmt.Sprintf("%.0f MiB", b/(1<<20)) }

// finish turns the draft into the diagnosis: title, summary, remediation,
// confidence.
func (d *draft) finish(x *facts, ref string) finding.Diagnosis {
	diag := finding.Diagnosis{Ref: ref, ID: "diagnose." + d.kind, Severity: max(d.severity, finding.Warning), Root: d.root, Chain: d.hops}
	diag.Subjects = dedupeSubjects(d.subjects)
	for _, e := range d.extra {
		diag.Chain = dedupeHops(append(diag.Chain, e.hops...))
		diag.Subjects = dedupeSubjects(append(diag.Subjects, e.subjects...))
	}
	ids := map[string]bool{}
	for _, fi := range slices.Sorted(maps.Keys(d.explains)) {
		if !ids[x.fs[fi].ID] {
			ids[x.fs[fi].ID] = true
			diag.Explains = append(diag.Explains, x.fs[fi].ID)
		}
	}
	diag.Confidence = "certain"
	if d.likely {
		diag.Confidence = "likely"
	}
	diag.Confirm = d.confirm
	diag.Title, diag.Summary = d.words()
	diag.Remediation = dedupeStrings(append(d.rootRemedy(), d.remedy...))
	if d.lock != nil && d.lock.mmPID > 0 {
		diag.Remediation = append(diag.Remediation, fmt.Sprintf("Until it is fixed, keep ps, top and monitoring agents from reading /proc/%d/cmdline, environ or maps: each read waits for this mmap_lock.", d.lock.mmPID))
	}
	diag.References = d.references()
	return diag
}

func (d *draft) victimWords() string {
	var names []string
	for i, v := range d.victims {
		if i == 3 {
			names = append(names, fmt.Sprintf("%d more", len(d.victims)-3))
			break
		}
		names = append(names, label(v.task))
	}
	return strings.Join(names, ", ")
}

func (d *draft) worstWait() string {
	w := 0.0
	for _, v := range d.victims {
		w = max(w, v.longest())
	}
	return ms(w)
}

// words writes the title and the summary.
func (d *draft) words() (title, summary string) {
	l, h := d.lock, d.holder
	holder := label(h.holder)
	victims := d.victimWords()
	switch d.kind {
	case "memcg-limit":
		title = fmt.Sprintf("Memory cgroup %s at its limit%s: its reclaim runs under %s, held by %s; %s wait%s up to %s",
			d.cgroup.subject.Cgroup, limitWords(d.cgroup.ev), l.name, holder, victims, plural(len(d.victims)), d.worstWait())
	case "cpu-quota":
		title = fmt.Sprintf("CPU quota of cgroup %s (%s): %s held %s while throttled; %s wait%s up to %s",
			d.cgroup.subject.Cgroup, quotaShort(d.cgroup.ev), holder, l.name, victims, plural(len(d.victims)), d.worstWait())
	case "fuse-daemon":
		title = fmt.Sprintf("FUSE daemon %s has not answered: %s holds %s while it waits, and %s hang behind it",
			label(d.root), holder, l.name, victims)
	case "host-cpu":
		title = fmt.Sprintf("Saturated CPUs: %s waited for a CPU while holding %s; %s wait%s up to %s", holder, l.name, victims, plural(len(d.victims)), d.worstWait())
	case "reclaim-under-lock":
		title = fmt.Sprintf("%s reclaims memory while holding %s; %s wait%s up to %s", holder, l.name, victims, plural(len(d.victims)), d.worstWait())
	case "deadlock":
		title = fmt.Sprintf("Deadlock: the holders of %s wait for each other; %s hang", l.name, victims)
	default:
		doing := map[string]string{"oncpu": " working on a CPU", "runnable": " waiting for a CPU", "blocked": " asleep", "throttled": " throttled"}[d.activity]
		title = fmt.Sprintf("%s holds %s%s; %s wait%s up to %s", holder, l.name, doing, victims, plural(len(d.victims)), d.worstWait())
	}
	var parts []string
	for _, hp := range d.hops {
		parts = append(parts, hp.Text)
	}
	summary = strings.Join(parts, "; ") + "."
	return title, summary
}

func plural(n int) string {
	if n == 1 {
		return "s"
	}
	return ""
}

func limitWords(ev map[string]any) string {
	if v := num(ev, "limit_bytes"); v > 0 {
		return " (" + mib(v) + ")"
	}
	return ""
}

func quotaShort(ev map[string]any) string {
	q, p := num(ev, "quota_us"), num(ev, "period_us")
	s := fmt.Sprintf("%s per %s", ms(q/1000), ms(p/1000))
	if has(ev, "throttled_pct") {
		s += fmt.Sprintf(", throttled in %.0f%% of periods", num(ev, "throttled_pct"))
	}
	return s
}

func (d *draft) rootRemedy() []string {
	switch d.kind {
	case "memcg-limit":
		if len(d.remedy) > 0 {
			return nil // the cgroup's finding says what to do about its limit
		}
		return []string{fmt.Sprintf("Give cgroup %s memory headroom (v1 memory.limit_in_bytes, v2 memory.max) or shrink what it keeps in memory: its tasks reclaim on every charge, and the one holding %s makes everyone behind the lock wait for that reclaim.", d.cgroup.subject.Cgroup, d.lock.name)}
	case "cpu-quota":
		return []string{fmt.Sprintf("Raise the CPU quota of cgroup %s (v1 cpu.cfs_quota_us, v2 cpu.max) or run fewer busy threads in it: a lock holder throttled with its cgroup keeps the lock until the next period.", d.cgroup.subject.Cgroup)}
	case "host-cpu":
		return []string{"Find what saturates the CPUs (wolf sched, top -H) and give the lock's holder CPU time: its cgroup more cpu.weight, fewer busy threads elsewhere."}
	case "holder-work", "reclaim-under-lock", "holder-blocked", "holder-runnable":
		return []string{fmt.Sprintf("Look at what %s does under the lock: cat /proc/%d/task/%d/stack, or wolf locks --pid %d for its holds and a profile under the lock.", label(d.holder.holder), d.holder.holder.PID, d.holder.holder.TID, d.holder.holder.PID)}
	case "deadlock":
		return []string{"A lock-order deadlock does not resolve by itself: the tasks in the chain must be killed (if killable) or the host rebooted; report the stacks upstream."}
	}
	return nil
}

func (d *draft) references() []string {
	switch d.kind {
	case "memcg-limit", "reclaim-under-lock", "cpu-quota":
		return []string{"https://clickhouse.com/blog/a-case-of-the-vanishing-cpu-a-linux-kernel-debugging-story"}
	case "fuse-daemon", "deadlock":
		return []string{"https://blog.cloudflare.com/searching-for-the-cause-of-hung-tasks-in-the-linux-kernel/"}
	}
	return nil
}

// dedupeSubjects keeps the first subject of each identity.
func dedupeSubjects(ss []finding.Subject) []finding.Subject {
	seen := map[string]bool{}
	var out []finding.Subject
	for _, s := range ss {
		k := fmt.Sprintf("%s|%d|%d|%s|%s|%s", s.Role, s.PID, s.TID, s.Cgroup, s.Lock, s.Comm)
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, s)
	}
	return out
}

// dedupeHops drops a hop already said: merged chains that share their
// root share the hops below where they meet (a lock's holder that itself
// waits on the next lock is, in that lock's own chain, its victim).
func dedupeHops(hs []finding.Hop) []finding.Hop {
	key := func(s finding.Subject) string {
		if s.PID != 0 || s.TID != 0 {
			// A task, whatever role and lock it has in either chain.
			return fmt.Sprintf("task|%d|%d", s.PID, s.TID)
		}
		return fmt.Sprintf("%s|%s|%s|%s|%s", s.LockAddr, s.Lock, s.Cgroup, s.Comm, s.Detail)
	}
	seen := map[string]bool{}
	var out []finding.Hop
	for _, h := range hs {
		k := string(h.Relation) + "|" + key(h.From) + "|" + key(h.To)
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, h)
	}
	return out
}

func dedupeStrings(ss []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
