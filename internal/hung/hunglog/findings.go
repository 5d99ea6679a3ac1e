package hunglog

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/kstack"
)

// Finding ids. "log-" marks conclusions drawn from a saved log, as opposed
// to the live investigator's, so scripts can tell how much to trust them
// (a log cannot be asked a second question).
const (
	IDLockOwner = "hung.log-lock-owner"
	IDCoredump  = "hung.log-coredump"
	IDKworker   = "hung.log-kworker"
	IDIO        = "hung.log-io"
	IDRCU       = "hung.log-rcu"
	IDFuse      = "hung.log-fuse"
	IDGroup     = "hung.log-group"
	IDJournal   = "hung.log-journal"
	IDFreeze    = "hung.log-queue-freeze"
	IDNFS       = "hung.log-nfs"
	IDDeadlock  = "hung.log-deadlock"
	IDLimits    = "hung.log-limits" // info: the log was bigger than the caps
)

// The public write-ups the explanations rest on, cited by title and link.
const (
	refHungTasks = `Cloudflare, "Searching for the cause of hung tasks in the Linux kernel" (2025), https://blog.cloudflare.com/searching-for-the-cause-of-hung-tasks-in-the-linux-kernel/`
	refFentryRCU = `Usama Saqib (Datadog), "Performance and reliability pitfalls of eBPF", FOSDEM 2026: "An Fentry and RCU bug"`
)

// buildFindings turns groups into findings: one per group, except that the
// two halves of an RCU-tasks/do_exit deadlock become one.
func buildFindings(a *Analysis, p *parser) []finding.Finding {
	var out []finding.Finding
	used := map[int]bool{}
	if f, groups, ok := rcuTasksDeadlock(a, p); ok {
		out = append(out, f)
		for _, i := range groups {
			used[i] = true
		}
	}
	for _, d := range deadlocks(a) {
		if f, ok := deadlockFinding(a, d, used); ok {
			out = append(out, f)
		}
	}
	// owned maps an owner's pid to the groups it blocks, so that a hung
	// owner's own finding can say whom it blocks.
	owned := map[int][]*Group{}
	for i := range a.Groups {
		if o := a.Groups[i].Owner; o != nil && len(owned[o.PID]) < 4 {
			owned[o.PID] = append(owned[o.PID], &a.Groups[i])
		}
	}
	for i := range a.Groups {
		if !used[i] {
			out = append(out, groupFinding(a, &a.Groups[i], owned))
		}
	}
	if f, ok := limitsFinding(a); ok {
		out = append(out, f)
	}
	return out
}

// limitsFinding says when the log was bigger than what wolf keeps, so that
// nobody reads a partial analysis as a complete one.
func limitsFinding(a *Analysis) (finding.Finding, bool) {
	if a.ReportsDropped == 0 && !a.MemoryCapHit {
		return finding.Finding{}, false
	}
	var parts []string
	if a.ReportsDropped > 0 {
		parts = append(parts, fmt.Sprintf("%d hung tasks beyond the first %d were counted but not analysed", a.ReportsDropped, MaxReports))
	}
	if a.MemoryCapHit {
		parts = append(parts, fmt.Sprintf("stacks beyond %d MiB of kept text were dropped", MaxStoredBytes>>20))
	}
	return finding.Finding{
		ID:           IDLimits,
		Investigator: "hung",
		Severity:     finding.Info,
		Title:        "The log exceeds what wolf analyses; the findings cover part of it",
		Summary:      strings.Join(parts, "; ") + ".",
		Evidence: map[string]any{"reports_dropped": a.ReportsDropped, "memory_cap_hit": a.MemoryCapHit,
			"reports_kept": len(a.Reports), "lines": a.Lines},
		Remediation: []string{"Split the log by time (one boot, one incident) and analyse the pieces."},
	}, true
}

func groupFinding(a *Analysis, g *Group, owned map[int][]*Group) finding.Finding {
	id := findingID(g)
	sev := finding.Warning
	if g.Site.Kind.IsLock() && (len(g.Victims) >= 2 || g.Owner != nil) {
		sev = finding.Critical
	}
	before := precedingEvents(g, a)
	f := finding.Finding{
		ID:           id,
		Investigator: "hung",
		Severity:     sev,
		Title:        title(id, g),
		Summary:      summary(id, g, a, owned) + eventSentence(g, before),
		Mechanism:    mechanism(id, g),
		Subjects:     subjects(g),
		Evidence:     evidence(g, a),
		Remediation:  append(remediation(id, g, a), eventAdvice(before)...),
		References:   []string{refHungTasks},
	}
	if len(before) > 0 {
		var evs []string
		for _, ev := range before {
			evs = append(evs, ev.describe()+" from "+ev.where()+": "+ev.Sample)
		}
		f.Evidence["preceding_events"] = evs
	}
	return f
}

func findingID(g *Group) string {
	k := g.Site.Kind
	switch {
	case k == kstack.Coredump:
		return IDCoredump
	case k.IsLock() && g.Owner != nil:
		return IDLockOwner
	case k.IsLock():
		return IDGroup
	case k == kstack.RCU:
		return IDRCU
	case allKworkers(g):
		// The workqueue names the subsystem (xfs-sync/dm-6 runs
		// xfs_log_worker), which says more than the wait's kind.
		return IDKworker
	case k == kstack.Journal:
		return IDJournal
	case k == kstack.QueueFreeze:
		return IDFreeze
	case k == kstack.NFS:
		return IDNFS
	case k == kstack.IO || k == kstack.PageLock || k == kstack.Writeback:
		return IDIO
	case k == kstack.Fuse:
		return IDFuse
	}
	return IDGroup
}

func allKworkers(g *Group) bool {
	for _, v := range g.Victims {
		if v.Workqueue == "" {
			return false
		}
	}
	return len(g.Victims) > 0
}

// who names the victims for a title: the task itself when alone.
func who(g *Group) string {
	if len(g.Victims) == 1 {
		v := g.Victims[0]
		s := fmt.Sprintf("%s (pid %d) hung", v.Comm, v.PID)
		if v.BlockedS > 0 {
			s += fmt.Sprintf(" %d s", v.BlockedS)
		}
		return s
	}
	noun := "tasks"
	if allKworkers(g) {
		noun = "kworkers"
	}
	return fmt.Sprintf("%d %s hung", len(g.Victims), noun)
}

// callers lists the distinct functions the victims wait in, the detail
// that let the engineers of the Cloudflare write-up see that three stacks
// were one problem.
func callers(g *Group, max int) string {
	seen := map[string]bool{}
	var names []string
	for _, v := range g.Victims {
		f := v.Site.Func
		if f == "" || seen[f] {
			continue
		}
		seen[f] = true
		names = append(names, f)
	}
	if len(names) > max {
		names = append(names[:max], fmt.Sprintf("+%d more", len(names)-max))
	}
	return strings.Join(names, ", ")
}

// lockName names the lock a group waits on as precisely as the log allows.
func lockName(g *Group) string {
	switch {
	case g.Site.Object != "":
		return g.Site.Object
	case g.LockName != "":
		return g.LockName
	}
	noun := map[kstack.Kind]string{
		kstack.Mutex: "a mutex", kstack.RwsemRead: "an rw-semaphore", kstack.RwsemWrite: "an rw-semaphore",
		kstack.RTMutex: "an rt-mutex", kstack.Semaphore: "a semaphore",
	}[g.Site.Kind]
	if noun == "" {
		noun = "a lock"
	}
	if g.Site.Func != "" && !strings.HasPrefix(g.Key, "owned:") {
		noun += " in " + g.Site.Func
	}
	return noun
}

// waitPhrase is the site's description without its " in FUNC" tail, for
// titles that list the callers separately.
func waitPhrase(s kstack.Site) string {
	if s.Func != "" {
		return strings.TrimSuffix(s.Describe, " in "+s.Func)
	}
	return s.Describe
}

func title(id string, g *Group) string {
	single := len(g.Victims) == 1
	// Plural titles list the callers, the detail that showed the
	// Cloudflare write-up's engineers that three stacks were one problem; a single
	// victim's title names its caller in the phrase itself.
	list, in := "", ""
	if c := callers(g, 3); !single && c != "" {
		list = " (" + c + ")"
	} else if single && g.Site.Func != "" {
		in = " in " + g.Site.Func
	}
	switch id {
	case IDLockOwner:
		o := g.Owner
		held := "held by"
		if !o.Certain {
			held = "likely held by"
		}
		t := fmt.Sprintf("%s behind %s %s %s (pid %d)", who(g), lockName(g), held, o.Comm, o.PID)
		switch {
		case o.PID > 0 && victimPID(g, o.PID):
			t += ": the task waits for a lock it holds itself"
		case len(g.Chain) > 1:
			end := g.Chain[len(g.Chain)-1].Holder
			t += fmt.Sprintf(", which waits for %s held by %s (pid %d)", g.Chain[1].Lock, g.Chain[1].Holder.Comm, g.Chain[1].Holder.PID)
			if len(g.Chain) > 2 {
				t += fmt.Sprintf(" … held by %s (pid %d)", end.Comm, end.PID)
			}
		case o.Site != nil && o.Site.Func != "":
			t += "; the owner itself " + o.Site.Describe
		}
		return t
	case IDGroup:
		if g.Site.Kind.IsLock() {
			name := lockName(g)
			if strings.Contains(name, " in ") {
				in = ""
			}
			return fmt.Sprintf("%s behind %s%s%s", who(g), name, in, list)
		}
	case IDCoredump:
		if single {
			return who(g) + ": blocked by its process's core dump, not by the application"
		}
		return fmt.Sprintf("%s while their process dumps core (%s)", who(g), comms(g, 3))
	case IDKworker:
		v := g.Victims[0]
		sub := subsystem(v.Workqueue, v.WorkFunc)
		t := fmt.Sprintf("%s in workqueue %s (%s)", who(g), v.Workqueue, v.WorkFunc)
		if sub.name != "" {
			t += ": " + sub.name + " is slow"
			if dev := wqDevice(v.Workqueue); dev != "" {
				t += " on " + dev
			}
		}
		return t
	case IDIO:
		switch g.Site.Kind {
		case kstack.PageLock:
			return fmt.Sprintf("%s waiting for a page lock%s%s", who(g), in, list)
		case kstack.Writeback:
			return fmt.Sprintf("%s waiting for page writeback%s%s", who(g), in, list)
		}
		return fmt.Sprintf("%s waiting for I/O%s%s", who(g), in, list)
	case IDJournal:
		return fmt.Sprintf("%s waiting for %s%s%s", who(g), journalName(g), in, list)
	case IDFreeze:
		t := fmt.Sprintf("%s on a frozen block queue%s%s", who(g), in, list)
		if fz := freezer(g); fz != nil {
			t += fmt.Sprintf("; %s (pid %d) froze it and waits for its I/O to drain", fz.Comm, fz.PID)
		}
		return t
	case IDNFS:
		return fmt.Sprintf("%s waiting for the NFS server%s%s", who(g), in, list)
	case IDFuse:
		return fmt.Sprintf("%s waiting for a FUSE daemon%s%s", who(g), in, list)
	}
	if single {
		return fmt.Sprintf("%s: %s", who(g), g.Site.Describe)
	}
	return fmt.Sprintf("%s: %s%s", who(g), groupPhrase(g), list)
}

// groupPhrase is what every victim of a group waits for, without the
// callers: their common site phrase, or the lock when they differ (readers
// and writers behind one owner).
func groupPhrase(g *Group) string {
	p := waitPhrase(g.Victims[0].Site)
	for _, v := range g.Victims[1:] {
		if waitPhrase(v.Site) != p {
			if g.Site.Kind.IsLock() {
				return "waits for " + lockName(g)
			}
			return waitPhrase(g.Site)
		}
	}
	return p
}

func victimPID(g *Group, pid int) bool {
	for _, v := range g.Victims {
		if v.PID == pid {
			return true
		}
	}
	return false
}

func comms(g *Group, max int) string {
	seen := map[string]bool{}
	var names []string
	for _, v := range g.Victims {
		if !seen[v.Comm] {
			seen[v.Comm] = true
			names = append(names, v.Comm)
		}
	}
	if len(names) > max {
		names = append(names[:max], fmt.Sprintf("+%d more", len(names)-max))
	}
	return strings.Join(names, ", ")
}

func maxBlocked(g *Group) int {
	m := 0
	for _, v := range g.Victims {
		if v.BlockedS > m {
			m = v.BlockedS
		}
	}
	return m
}

func summary(id string, g *Group, a *Analysis, owned map[int][]*Group) string {
	var b strings.Builder
	n := len(g.Victims)
	if n == 1 {
		v := g.Victims[0]
		fmt.Fprintf(&b, "%s (pid %d) has been in uninterruptible sleep (D)", v.Comm, v.PID)
	} else {
		fmt.Fprintf(&b, "%d tasks have been in uninterruptible sleep (D)", n)
	}
	switch m := maxBlocked(g); {
	case m > 0 && n == 1:
		fmt.Fprintf(&b, " for more than %d s", m)
	case m > 0:
		fmt.Fprintf(&b, " for up to %d s", m)
	default:
		b.WriteString(" (seen in a dump of blocked tasks, which gives no duration)")
	}
	if n == 1 {
		fmt.Fprintf(&b, "; it %s.", g.Site.Describe)
	} else {
		fmt.Fprintf(&b, "; each %s", groupPhrase(g))
		if c := callers(g, 6); c != "" {
			b.WriteString(", in " + c)
		}
		b.WriteString(".")
	}
	switch o := g.Owner; {
	case o != nil:
		fmt.Fprintf(&b, " %s names %s (pid %d) as the holder", capitalize(o.Source), o.Comm, o.PID)
		if !o.Certain {
			b.WriteString(": it is the one task listing the lock whose own state the log does not show, so it may be waiting for it too")
		}
		if o.Site != nil && (o.Site.Func != "" || o.Site.Kind != kstack.Other) {
			fmt.Fprintf(&b, "; the owner itself %s", o.Site.Describe)
		}
		b.WriteString(".")
		b.WriteString(chainSentence(g))
	case len(g.Holders) > 0:
		fmt.Fprintf(&b, " Lockdep lists %d other tasks with this lock whose own state the log does not show; one of them holds it, the others wait, and the log cannot say which.", len(g.Holders))
	case g.Site.Kind.IsLock():
		b.WriteString(" The log does not say who holds the lock: run `wolf hung` while it happens to decode the owner.")
	}
	for _, v := range g.Victims {
		if v.Blocker != nil && v.Blocker.NotFound {
			fmt.Fprintf(&b, " The kernel could not find the owner of the %s %s waits on: readers of rw-semaphores are not tracked, and an owner may have just released it.", v.Blocker.Lock, v.Comm)
			break
		}
	}
	if id == IDKworker {
		v := g.Victims[0]
		if sub := subsystem(v.Workqueue, v.WorkFunc); sub.name != "" {
			fmt.Fprintf(&b, " The kworker was running %s from workqueue %s: %s.", v.WorkFunc, v.Workqueue, sub.hint)
		}
	}
	for _, v := range g.Victims {
		for _, other := range owned[v.PID] {
			if other != g {
				fmt.Fprintf(&b, " %s (pid %d) holds %s, which %d other hung task(s) wait for.", v.Comm, v.PID, lockName(other), len(other.Victims))
			}
		}
	}
	if id == IDJournal {
		b.WriteString(journalSentence(g, a))
	}
	if g.Site.Kind == kstack.WorkqueueFlush {
		b.WriteString(flushSentence(g, a))
	}
	if a.Suppressed {
		b.WriteString(" The kernel suppressed later hung-task reports (kernel.hung_task_warnings), so the count is a lower bound.")
	}
	return b.String()
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// pidList formats pids for remediation commands.
func pidList(g *Group, max int) string {
	var ps []string
	for i, v := range g.Victims {
		if i == max {
			break
		}
		ps = append(ps, strconv.Itoa(v.PID))
	}
	return strings.Join(ps, " ")
}
