package diagnose

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/wolf-investigator/wolf/internal/fact"
	"github.com/wolf-investigator/wolf/internal/finding"
)

// draft is a diagnosis being built: the victims whose time traces to one
// root most.
type draft struct {
	root    string
	kind    string
	victims []*victim
	// shares sums, per root, the victims' lost seconds that trace there:
	// the root's own and its rivals'.
	shares map[string]float64
	lost   float64 // the victims' lost seconds
	weight float64 // of which traced to the root
	// rivals' kinds and subjects, for the words.
	others   map[string]*branch
	severity finding.Severity
	// The chain: the best branch to the root, and every branch that
	// reached it.
	best *branch
	// via and viaFrac: the saturated resource some victims' time reached
	// the root through, and the share of its time the root's activity
	// took (70% of the CPUs' time in a memory cgroup's reclaim).
	via      string
	viaFrac  float64
	viaAct   string
	holders  map[int]bool
	hops     []finding.Hop
	subjects []finding.Subject
	refs     map[ref]bool
	likely   bool
	confirm  []string
	remedy   []string
}

func (d *draft) add(v *victim, shares map[string]float64) {
	d.victims = append(d.victims, v)
	lost := v.lost().Seconds()
	d.lost += lost
	for r, s := range shares {
		d.shares[r] += s * lost
	}
	d.weight += shares[d.root] * lost
	if d.others == nil {
		d.others = map[string]*branch{}
	}
	for _, b := range v.branches {
		if o := d.others[b.root]; o == nil || b.share > o.share {
			d.others[b.root] = b
		}
	}
}

// settle picks the chain to show and grades the diagnosis.
func (d *draft) settle(e *engine) {
	// A victim that holds what others wait for in the chain is said as a
	// holder, not a victim.
	d.holders = map[int]bool{}
	for _, v := range d.victims {
		for _, b := range v.branches {
			if b.root != d.root {
				continue
			}
			for _, h := range b.hops {
				if h.Relation == finding.HeldBy && h.To.TID != 0 {
					d.holders[h.To.TID] = true
				}
			}
			if b.via != "" && b.viaFrac > d.viaFrac {
				d.via, d.viaFrac, d.viaAct = b.via, b.viaFrac, b.viaWhat
			}
		}
	}
	// The best branch: the largest share to the root among the first
	// victim's that is not a holder, preferring one that runs through a
	// lock (its holder and what held it say the most); the others' paths
	// to the root join it.
	for _, v := range d.victims {
		if d.holders[v.w.Task.TID] {
			continue
		}
		for _, b := range v.branches {
			if b.root == d.root && b.lock != "" && (d.best == nil || b.share > d.best.share) {
				d.best = b
			}
		}
		if d.best != nil {
			break
		}
	}
	for _, v := range d.victims {
		if d.best != nil {
			break
		}
		if d.holders[v.w.Task.TID] {
			continue
		}
		for _, b := range v.branches {
			if b.root == d.root && (d.best == nil || b.share > d.best.share) {
				d.best = b
			}
		}
		if d.best != nil {
			break
		}
	}
	if d.best == nil {
		for _, b := range d.victims[0].branches {
			if b.root == d.root && (d.best == nil || b.share > d.best.share) {
				d.best = b
			}
		}
	}
	d.kind = d.best.kind
	// Victims' own hops first (the first few), then the paths.
	var victimHops, paths []finding.Hop
	shown := 0
	for _, v := range d.victims {
		d.refs[refOf(v.w.Finding, v.w.FindingTitle)] = true
		var mine []*branch
		for _, b := range v.branches {
			if b.root == d.root {
				mine = append(mine, b)
			}
		}
		slices.SortStableFunc(mine, func(a, b *branch) int { return cmp.Compare(b.share, a.share) })
		for j, b := range mine {
			for _, r := range b.refs {
				d.refs[r] = true
			}
			d.likely = d.likely || b.likely
			d.confirm = append(d.confirm, b.confirm...)
			d.remedy = append(d.remedy, b.remedy...)
			if len(b.hops) == 0 || (d.holders[v.w.Task.TID] && len(d.victims) > 1) {
				continue // a holder's own path is part of its waiters'
			}
			if j == 0 && shown < maxVictimHops && !d.holders[v.w.Task.TID] {
				shown++
				victimHops = append(victimHops, b.hops[0])
				d.subjects = append(d.subjects, e.victimSubject(v))
			}
			paths = append(paths, b.hops[1:]...)
		}
	}
	d.hops = dedupeHops(append(victimHops, paths...))
	for _, h := range d.hops {
		for _, s := range []finding.Subject{h.From, h.To} {
			if s.Role != finding.RoleVictim && s.Role != "" && !(s.Role == finding.RoleTask && s.PID == 0 && s.TID == 0 && s.Cgroup == "") {
				d.subjects = append(d.subjects, s)
			}
		}
	}
	for _, v := range d.victims {
		if !d.holders[v.w.Task.TID] {
			d.subjects = append(d.subjects, e.victimSubject(v))
		}
	}
	d.subjects = append(d.subjects, d.best.rootSubj)
	d.subjects = dedupeSubjects(d.subjects)
	d.severity = d.grade(e)
}

// grade: a diagnosis is critical when a task hung, a single wait that
// blocks a task (a lock, a FUSE reply, I/O, reclaim) lasted a second, or
// tasks queued on a lock or FUSE connection lost more than the window
// between them (a convoy); otherwise a warning. Tasks waiting for a CPU
// or throttled by their quota are a warning however long: a saturated
// machine or a capped batch job is not an emergency by itself.
func (d *draft) grade(e *engine) finding.Severity {
	var convoy time.Duration
	for _, v := range d.victims {
		w := v.w
		if w.Hung {
			return finding.Critical
		}
		switch w.Kind {
		case fact.WaitSoftirq:
			if w.Max >= softirqStall {
				return finding.Critical
			}
			continue
		case fact.WaitRunQueue, fact.WaitThrottled, fact.WaitRefault:
			continue
		}
		if w.Max >= criticalWait {
			return finding.Critical
		}
		if w.Kind == fact.WaitLock || w.Kind == fact.WaitFUSE {
			convoy += w.Total
		}
	}
	if d.kind == "deadlock" || convoy >= e.window {
		return finding.Critical
	}
	return finding.Warning
}

// worthIt: a chain that ends at a resource or a holder's activity is a
// diagnosis; one that ends at a lock whose holder is unknown, or at a
// wait site, says no more than the findings. A holder that is only busy,
// or waiting for a CPU, is a diagnosis only when somebody waited long: a
// second at once, hung, or a third of the window in shorter waits (a
// convoy behind holders starved of CPU: 25 readers queued, each wait half
// a second). The host's CPUs are a root only when they were saturated.
func (d *draft) worthIt(e *engine) bool {
	switch d.kind {
	case "lock", "holder-unknown", "blocked", "wolf":
		return false
	case "host-cpu":
		if s := e.saturation(fact.HostCPUKey()); s == nil || !s.AtLimit || e.selfShort {
			return false
		}
	}
	if d.best.lock == "" {
		return true
	}
	if d.kind == "host-cpu" || d.kind == "holder-work" || d.kind == "holder-runnable" {
		for _, v := range d.victims {
			if v.w.Kind != fact.WaitLock && v.w.Kind != fact.WaitFUSE {
				return true
			}
			if v.w.Hung || v.w.Max >= time.Second || v.w.Total >= e.window/3 {
				return true
			}
		}
		return false
	}
	return true
}

// explainsFinding says whether a finding is one the chain was read from.
func (d *draft) explainsFinding(f *finding.Finding) bool {
	for r := range d.refs {
		if r.id == f.ID && (r.title == "" || r.title == f.Title) {
			return true
		}
	}
	return false
}

// finish turns the draft into the diagnosis.
func (d *draft) finish(e *engine, ref string) finding.Diagnosis {
	diag := finding.Diagnosis{Ref: ref, ID: "diagnose." + d.kind, Severity: d.severity, Root: d.best.rootSubj, Chain: d.hops, Subjects: d.subjects}
	diag.Confidence = "certain"
	if d.likely {
		diag.Confidence = "likely"
	}
	diag.Confirm = dedupeStrings(d.confirm)
	if d.lost > 0 {
		diag.Attribution = round3(d.weight / d.lost)
	}
	diag.Rivals = d.rivals(e)
	diag.Title, diag.Summary = d.words(e)
	if len(diag.Rivals) > 0 {
		diag.Summary += " " + strings.ToUpper(diag.Rivals[0].Text[:1]) + diag.Rivals[0].Text[1:] + "."
	}
	diag.Remediation = dedupeStrings(append(d.rootRemedy(e), d.remedy...))
	if mm := mmOfKey(d.best.lock); mm > 0 {
		diag.Remediation = append(diag.Remediation, fmt.Sprintf("Until it is fixed, keep ps, top and monitoring agents from reading /proc/%d/cmdline, environ or maps: each read waits for this mmap_lock.", mm))
	}
	diag.References = d.references()
	return diag
}

// rivals are the other roots the victims' time traces to, largest first.
func (d *draft) rivals(e *engine) []finding.Rival {
	var out []finding.Rival
	if d.lost <= 0 {
		return nil
	}
	for _, r := range sortedKeys(d.shares) {
		share := d.shares[r] / d.lost
		if r == d.root || share < rivalMinShare {
			continue
		}
		b := d.others[r]
		if b == nil {
			continue
		}
		out = append(out, finding.Rival{ID: "diagnose." + b.kind, Root: b.rootSubj, Share: round3(share), Text: d.rivalText(e, b, share)})
	}
	slices.SortStableFunc(out, func(a, b finding.Rival) int { return cmp.Compare(b.Share, a.Share) })
	return out
}

func dedupeSubjects(ss []finding.Subject) []finding.Subject {
	seen := map[string]bool{}
	var out []finding.Subject
	for _, s := range ss {
		k := fmt.Sprintf("%s|%d|%d|%s|%s|%s|%s", s.Role, s.PID, s.TID, s.Cgroup, s.Lock, s.Comm, s.Device)
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, s)
	}
	return out
}

// dedupeHops drops a hop already said: victims of the same resource share
// the path below it, and a lock's holder that itself waits on the next
// lock is, in that lock's own chain, its victim.
func dedupeHops(hs []finding.Hop) []finding.Hop {
	key := func(s finding.Subject) string {
		if s.PID != 0 || s.TID != 0 {
			return fmt.Sprintf("task|%d|%d|%s", s.PID, s.TID, s.Comm)
		}
		return fmt.Sprintf("%s|%s|%s|%s|%s|%s", s.LockAddr, s.Lock, s.Cgroup, s.Comm, s.Detail, s.Device)
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
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
