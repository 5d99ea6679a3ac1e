package hunglog

import (
	"fmt"
	"sort"
	"strings"

	"github.com/wolf-investigator/wolf/internal/finding"
)

// buildChains follows owners that are blocked themselves: A waits for X
// held by B, B waits for Y held by C. The chain ends at a task that is not
// blocked, at one whose lock the log does not resolve, or back at a victim:
// then it is a deadlock and is said as such.
func buildChains(a *Analysis, byPID map[int]*Report) {
	groupOf := map[int]*Group{}
	for i := range a.Groups {
		for _, v := range a.Groups[i].Victims {
			if v.PID > 0 {
				groupOf[v.PID] = &a.Groups[i]
			}
		}
	}
	for i := range a.Groups {
		g := &a.Groups[i]
		if g.Owner == nil {
			continue
		}
		seen := map[int]bool{}
		for _, v := range g.Victims {
			seen[v.PID] = true
		}
		cur := g
		for step := 0; step < maxChain && cur != nil && cur.Owner != nil; step++ {
			o := cur.Owner
			g.Chain = append(g.Chain, ChainLink{Holder: o, Lock: lockName(cur), group: cur})
			if seen[o.PID] {
				g.Deadlock = true
				break
			}
			seen[o.PID] = true
			next := groupOf[o.PID]
			if next == cur {
				break
			}
			cur = next
		}
	}
}

// maxChain bounds a wait chain: real ones are two or three long.
const maxChain = 8

// chainSentence tells the wait chain behind a group's owner.
func chainSentence(g *Group) string {
	if len(g.Chain) == 0 {
		return ""
	}
	var b strings.Builder
	for i := 1; i < len(g.Chain); i++ {
		prev, l := g.Chain[i-1].Holder, g.Chain[i]
		if i == 1 {
			fmt.Fprintf(&b, " %s (pid %d) is itself blocked: it waits for %s held by %s (pid %d)", prev.Comm, prev.PID, l.Lock, l.Holder.Comm, l.Holder.PID)
		} else {
			fmt.Fprintf(&b, ", which waits for %s held by %s (pid %d)", l.Lock, l.Holder.Comm, l.Holder.PID)
		}
	}
	end := g.Chain[len(g.Chain)-1]
	switch {
	case g.Deadlock && len(g.Chain) == 1:
		// Self-deadlock: said in the title.
	case g.Deadlock:
		b.WriteString(", one of the tasks waiting: a deadlock, which only a reboot clears.")
	case end.Holder.hung && end.Holder.Site != nil && end.Holder.Site.Kind.IsLock():
		if b.Len() == 0 {
			fmt.Fprintf(&b, " %s (pid %d) is itself blocked", end.Holder.Comm, end.Holder.PID)
		}
		b.WriteString("; the log does not show who holds what it waits for.")
	case b.Len() > 0:
		b.WriteString(".")
	}
	return b.String()
}

// cycle is a set of groups whose owners wait for each other.
type cycle struct {
	groups []*Group
	links  []ChainLink
}

// deadlocks returns the wait cycles that span two or more tasks.
func deadlocks(a *Analysis) []cycle {
	var out []cycle
	seen := map[string]bool{}
	for i := range a.Groups {
		g := &a.Groups[i]
		if !g.Deadlock || len(g.Chain) < 2 {
			continue
		}
		var pids []int
		for _, l := range g.Chain {
			pids = append(pids, l.Holder.PID)
		}
		sort.Ints(pids)
		key := fmt.Sprint(pids)
		if seen[key] {
			continue
		}
		seen[key] = true
		c := cycle{links: g.Chain}
		c.groups = append(c.groups, g)
		for _, l := range g.Chain {
			if l.group != nil && l.group != g {
				c.groups = append(c.groups, l.group)
			}
		}
		out = append(out, c)
	}
	return out
}

// deadlockFinding says a closed wait chain as what it is. The groups it
// covers are marked used, so they are not reported again one by one.
func deadlockFinding(a *Analysis, c cycle, used map[int]bool) (finding.Finding, bool) {
	merged := &Group{Key: "deadlock", Site: c.groups[0].Site, Owner: c.groups[0].Owner}
	for _, g := range c.groups {
		for i := range a.Groups {
			if &a.Groups[i] == g {
				used[i] = true
			}
		}
		merged.Victims = append(merged.Victims, g.Victims...)
	}
	var names, steps []string
	for _, l := range c.links {
		names = append(names, fmt.Sprintf("%s (pid %d)", l.Holder.Comm, l.Holder.PID))
	}
	for i, l := range c.links {
		waiter := c.links[(i+len(c.links)-1)%len(c.links)].Holder
		steps = append(steps, fmt.Sprintf("%s (pid %d) waits for %s held by %s (pid %d)", waiter.Comm, waiter.PID, l.Lock, l.Holder.Comm, l.Holder.PID))
	}
	t := "Deadlock: " + strings.Join(names, " and ") + " wait for each other"
	if len(names) > 2 {
		t = fmt.Sprintf("Deadlock among %d tasks: %s", len(names), strings.Join(names, ", "))
	}
	var subs []finding.Subject
	for _, l := range c.links {
		subs = append(subs, ownerSubject(finding.RoleOffender, l.Holder, l.Lock))
	}
	for _, s := range subjects(merged) {
		if s.Role == finding.RoleVictim {
			subs = append(subs, s)
		}
	}
	ev := evidence(merged, a)
	ev["chain"] = steps
	ev["deadlock_tasks"] = len(c.links)
	return finding.Finding{
		ID:           IDDeadlock,
		Investigator: "hung",
		Severity:     finding.Critical,
		Title:        t,
		Summary:      strings.Join(steps, "; ") + ". Each holds what the next one waits for, so none can proceed; " + fmt.Sprintf("%d task(s) are blocked in all.", len(merged.Victims)),
		Mechanism:    "Two or more tasks each hold a lock and wait for one another's, in a cycle. Sleeping locks have no timeout, so the cycle never breaks by itself and every task that needs one of the locks joins the hang.",
		Subjects:     subs,
		Evidence:     ev,
		Remediation: []string{
			"Only a reboot clears a kernel deadlock: the tasks cannot be killed.",
			"The stacks above are the two lock orders that conflict; search the kernel's fixes for the functions they name (lockdep, when enabled, reports the order before it deadlocks).",
		},
		References: []string{refHungTasks},
	}, true
}
