package hunglog

// The subjects and evidence of a finding: who is involved and the numbers
// behind the verdict, in the units the JSON contract asks for.

import (
	"fmt"
	"sort"
	"strings"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/kstack"
)

func subjects(g *Group) []finding.Subject {
	var out []finding.Subject
	if o := g.Owner; o != nil {
		out = append(out, ownerSubject(finding.RoleOffender, o, lockName(g)))
	}
	for i, v := range g.Victims {
		if i == maxSubjects {
			break
		}
		detail := "D"
		if v.BlockedS > 0 {
			detail += fmt.Sprintf(" for more than %d s", v.BlockedS)
		} else {
			detail += " (in a dump of blocked tasks)"
		}
		detail += ": " + v.Site.Describe
		if v.Workqueue != "" {
			detail += fmt.Sprintf("; workqueue %s, %s", v.Workqueue, v.WorkFunc)
		}
		out = append(out, finding.Subject{
			Role: finding.RoleVictim, PID: tgidOr(v.TGID, v.PID), TID: v.PID, Comm: v.Comm,
			State: v.State, Detail: detail, Stack: reliable(v.Stack),
		})
	}
	for _, h := range g.Holders {
		out = append(out, ownerSubject(finding.RoleHolder, h, lockName(g)))
	}
	return out
}

func ownerSubject(role string, o *Owner, lock string) finding.Subject {
	verb := "holds"
	if !o.Certain {
		verb = "likely holds"
	}
	detail := fmt.Sprintf("%s %s, per %s", verb, lock, o.Source)
	if o.Site != nil && (o.Site.Func != "" || o.Site.Kind != kstack.Other) {
		detail += "; itself " + o.Site.Describe
	}
	// Victims and owners are shown alike: the process (tgid, when the log
	// gives it) and the thread id the kernel printed.
	return finding.Subject{Role: role, PID: tgidOr(o.TGID, o.PID), TID: o.PID, Comm: o.Comm, State: o.State,
		Detail: detail, Stack: reliable(o.Stack)}
}

func tgidOr(tgid, pid int) int {
	if tgid > 0 {
		return tgid
	}
	return pid
}

// reliable drops the unwinder's "?" guesses: noise for the reader, and the
// reports keep the full stacks for whoever wants them.
func reliable(stack []string) []string {
	var out []string
	for _, f := range stack {
		if !kstack.Unreliable(f) {
			out = append(out, f)
		}
	}
	return out
}

func evidence(g *Group, a *Analysis) map[string]any {
	reports, truncated, firstLine := 0, 0, 0
	first, last := "", ""
	sources := map[string]bool{}
	for _, v := range g.Victims {
		reports += v.Reports
		if v.Truncated {
			truncated++
		}
		if first == "" {
			first = v.Stamp
		}
		if v.FirstLine > 0 && (firstLine == 0 || v.FirstLine < firstLine) {
			firstLine = v.FirstLine
		}
		if v.LastStamp != "" {
			last = v.LastStamp
		}
		sources[v.Source] = true
	}
	ev := map[string]any{
		"blocked_s": maxBlocked(g),
		"victims":   len(g.Victims),
		"reports":   reports,
		"wait":      g.Site.Describe,
		"wait_kind": string(g.Site.Kind),
		"group_key": g.Key,
	}
	put := func(k, v string) {
		if v != "" {
			ev[k] = v
		}
	}
	if firstLine > 0 {
		// Where to look in the file: the first report's line.
		ev["first_report_line"] = firstLine
	}
	if g.Site.Kind.IsLock() {
		put("lock", lockName(g))
	}
	put("lockdep_class", g.LockName)
	put("kernel", firstKernel(g, a))
	put("first_seen", first)
	put("last_seen", last)
	if v := g.Victims[0]; v.Workqueue != "" {
		put("workqueue", v.Workqueue)
		put("work_func", v.WorkFunc)
	}
	if o := g.Owner; o != nil {
		ev["owner_pid"] = o.PID
		put("owner_comm", o.Comm)
		put("owner_source", o.Source)
	}
	if len(g.Holders) > 0 {
		ev["holder_candidates"] = len(g.Holders)
	}
	if truncated > 0 {
		ev["truncated_stacks"] = truncated
	}
	if a.Suppressed {
		ev["later_reports_suppressed"] = true
	}
	if g.Site.Kind == kstack.RCU && a.RCUStalls > 0 {
		ev["rcu_stall_lines"] = a.RCUStalls
	}
	keys := make([]string, 0, len(sources))
	for s := range sources {
		keys = append(keys, s)
	}
	sort.Strings(keys)
	ev["sources"] = strings.Join(keys, ",")
	return ev
}

func firstKernel(g *Group, a *Analysis) string {
	for _, v := range g.Victims {
		if v.Kernel != "" {
			return v.Kernel
		}
	}
	return a.Kernel
}
