package watch

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/wolf-investigator/wolf/internal/finding"
)

// ChangeRatio is how far a key evidence number must move, relative to the
// value last emitted for the finding, to count as a material change: ±50%.
// Comparing with the last emitted value (not the last window) lets a slow
// drift add up to a change instead of hiding under the threshold forever.
const ChangeRatio = 0.5

// keyEvidence are the numbers whose movement is worth a "change" line. The
// rest of the evidence (window lengths, thresholds, shares that wobble
// every window) would only make noise.
var keyEvidence = []string{
	"victims", "tasks", "blocked_s", // hung
	"wait_ns_total", "max_wait_ns", "hold_ms_total", // locks
	"reclaim_s_total", "max_reclaim_ms", "efficiency_pct", "direct_reclaim_calls", "throttled_total", "psi_some_pct", "psi_full_pct", // reclaim
	"migrations_per_s", "bounces_per_s", "runq_max_us", // sched
	"max_us", "stalls_per_s", "time_squeeze_per_s", // softirq
}

// identityEvidence are evidence strings that name what a finding is about
// (a lock, a wait site, a softirq vector, a cgroup): stable across windows
// while the situation lasts.
var identityEvidence = []string{"lock_addr", "lock", "lock_name", "wait_site", "vector", "workqueue", "work_func", "func", "cgroup"}

// transientRoles are subjects that come and go while a situation lasts:
// victims join a hung group, waiters queue on a lock. They identify a
// finding only when nothing else does.
var transientRoles = map[string]bool{finding.RoleVictim: true, finding.RoleWaiter: true}

// Key identifies a finding across windows: its ID, the subjects that
// define it (offender, owner, holder, cgroup, task, CPU: pid, tid, comm,
// cgroup, never a number that moves) and the evidence that names its lock,
// wait site or vector. Victims count only when the finding names nothing
// else, so a hung group keeps its key when a new victim joins.
func Key(f *finding.Finding) string {
	var parts []string
	for _, name := range identityEvidence {
		if v, ok := f.Evidence[name]; ok {
			if s, ok := v.(string); ok && s != "" {
				parts = append(parts, name+"="+s)
			}
		}
	}
	subjects := func(transient bool) []string {
		var out []string
		for _, s := range f.Subjects {
			if transientRoles[s.Role] != transient {
				continue
			}
			out = append(out, subjectKey(&s))
		}
		return out
	}
	subs := subjects(false)
	if len(subs) == 0 && len(parts) == 0 {
		subs = subjects(true)
	}
	sort.Strings(subs)
	subs = dedupe(subs)
	parts = append(parts, subs...)
	if len(parts) == 0 {
		return f.ID
	}
	return f.ID + "|" + strings.Join(parts, "|")
}

func subjectKey(s *finding.Subject) string {
	var b strings.Builder
	b.WriteString(s.Role)
	if s.PID != 0 {
		b.WriteString(":pid=" + strconv.Itoa(s.PID))
	}
	if s.TID != 0 && s.TID != s.PID {
		b.WriteString(":tid=" + strconv.Itoa(s.TID))
	}
	if s.Comm != "" {
		b.WriteString(":comm=" + s.Comm)
	}
	if s.Cgroup != "" {
		b.WriteString(":cgroup=" + s.Cgroup)
	}
	// A task's CPU moves (sched reports where a bouncing task was last);
	// only a CPU subject is identified by its number.
	if s.CPU != nil && s.Role == finding.RoleCPU {
		b.WriteString(":cpu=" + strconv.Itoa(*s.CPU))
	}
	return b.String()
}

func dedupe(sorted []string) []string {
	out := sorted[:0]
	for i, s := range sorted {
		if i == 0 || s != sorted[i-1] {
			out = append(out, s)
		}
	}
	return out
}

// Material says whether cur differs materially from prev, the version last
// emitted, and why: the severity changed, or a key evidence number moved
// by at least ChangeRatio of its previous value (from zero, any move
// counts). It returns "" when the change is not material.
func Material(prev, cur *finding.Finding) string {
	if prev.Severity != cur.Severity {
		return fmt.Sprintf("severity %s -> %s", prev.Severity, cur.Severity)
	}
	for _, k := range keyEvidence {
		a, okA := finding.Number(prev.Evidence[k])
		b, okB := finding.Number(cur.Evidence[k])
		if !okA || !okB || a == b {
			continue
		}
		if a == 0 || math.Abs(b-a) >= ChangeRatio*math.Abs(a) {
			return fmt.Sprintf("%s %v -> %v", k, prev.Evidence[k], cur.Evidence[k])
		}
	}
	return ""
}

// number reads an evidence value as a float: Go numbers as the
// investigators put them, or float64 after a JSON round trip.
// Change is one line of the watch's finding stream, before it is stamped
// with a time.
type Change struct {
	Event   string           // "start", "change" or "clear"
	Key     string           // Key of the finding
	Reason  string           // for "change": what moved
	Finding *finding.Finding // the current version (the last one for "clear")
	Prev    *finding.Finding // for "change": the version emitted before
}

// Active is a finding the watch has reported started and not yet cleared.
type Active struct {
	Finding *finding.Finding // as last emitted
	Missed  int              // consecutive windows without it
}

// Diff compares the findings active after the previous windows (by key,
// as last emitted) with this window's, returns the changes in a stable
// order and updates active in place. A finding clears once it has been
// missing from clearAfter consecutive windows (1: at once), so one that
// shows in most windows but not all does not flap between start and clear.
func Diff(active map[string]*Active, window []finding.Finding, clearAfter int) []Change {
	clearAfter = max(clearAfter, 1)
	seen := map[string]bool{}
	var out []Change
	for i := range window {
		f := &window[i]
		k := Key(f)
		for n := 2; seen[k]; n++ {
			// Two findings this window the key cannot tell apart: keep
			// both, in the investigator's (stable) order.
			k = Key(f) + "#" + strconv.Itoa(n)
		}
		seen[k] = true
		prev, ok := active[k]
		switch {
		case !ok:
			out = append(out, Change{Event: "start", Key: k, Finding: f})
			active[k] = &Active{Finding: f}
		default:
			prev.Missed = 0
			if why := Material(prev.Finding, f); why != "" {
				out = append(out, Change{Event: "change", Key: k, Reason: why, Finding: f, Prev: prev.Finding})
				prev.Finding = f
			}
		}
	}
	var gone []string
	for k, a := range active {
		if seen[k] {
			continue
		}
		if a.Missed++; a.Missed >= clearAfter {
			gone = append(gone, k)
		}
	}
	sort.Strings(gone)
	for _, k := range gone {
		out = append(out, Change{Event: "clear", Key: k, Finding: active[k].Finding})
		delete(active, k)
	}
	return out
}

// DiffPeek compares a look into a window not yet over with the findings
// active: a finding that is new starts, one whose severity rose changes;
// nothing clears and nothing counts as missed (the window is not over),
// and numbers that moved wait for the window's end.
func DiffPeek(active map[string]*Active, window []finding.Finding) []Change {
	seen := map[string]bool{}
	var out []Change
	for i := range window {
		f := &window[i]
		k := Key(f)
		for n := 2; seen[k]; n++ {
			k = Key(f) + "#" + strconv.Itoa(n)
		}
		seen[k] = true
		prev, ok := active[k]
		switch {
		case !ok:
			out = append(out, Change{Event: "start", Key: k, Finding: f})
			active[k] = &Active{Finding: f}
		case f.Severity > prev.Finding.Severity:
			out = append(out, Change{Event: "change", Key: k, Reason: fmt.Sprintf("severity %s -> %s", prev.Finding.Severity, f.Severity), Finding: f, Prev: prev.Finding})
			prev.Finding = f
		}
	}
	return out
}
