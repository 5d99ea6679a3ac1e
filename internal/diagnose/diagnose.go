// Package diagnose joins findings into diagnoses: root-cause chains from
// the tasks that suffer to the cause a person can act on, across
// investigators. "cat (pid 9) waits 600 ms for the mmap_lock of x (pid 5),
// held by x's thread 7, which spends 80% of the hold reclaiming memory,
// because its cgroup /x sits at its 192 MiB limit."
//
// Investigators observe; this stage only reads what they report (the
// findings' subjects and evidence: see facts.go for the keys each kind of
// finding carries) and draws four relations between facts that share a key
// (a tid, a lock address or mm, a pid inside a cgroup, a FUSE request's
// sender): waits_on, held_by, spends_hold and constrained_by. Each relation
// has the kernel mechanism that makes it a cause written beside it
// (relations.go); nothing is joined because two numbers look alike.
//
// A report with nothing that chains (a healthy host, or a busy one whose
// tasks wait for nobody in particular) has no diagnosis.
package diagnose

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/wolf-investigator/wolf/internal/finding"
)

// Thresholds of what is worth a diagnosis.
const (
	// A waiter whose longest wait reaches this, or whose waits add up to
	// totalWaitMs, is a victim; hung tasks always are.
	victimMaxWaitMs   = 200
	victimTotalWaitMs = 1000
	// A component of a hold's wall time that explains it.
	dominantShare = 0.4
	maxVictimHops = 4 // victims drawn as hops; the rest are subjects
	maxDepth      = 6
)

// Apply diagnoses the report's findings: it sets r.Diagnoses and marks each
// finding a diagnosis explains (Finding.ExplainedBy).
func Apply(r *finding.Report) {
	for i := range r.Findings {
		r.Findings[i].ExplainedBy = nil
	}
	ds, explained := diagnose(r.Findings)
	for i, refs := range explained {
		r.Findings[i].ExplainedBy = refs
	}
	r.Diagnoses = ds
}

// Diagnose returns the diagnoses of findings, worst first, without
// changing them.
func Diagnose(fs []finding.Finding) []finding.Diagnosis {
	ds, _ := diagnose(fs)
	return ds
}

func diagnose(fs []finding.Finding) ([]finding.Diagnosis, map[int][]string) {
	x := newFacts(fs)
	byLock := map[string][]*waitFact{}
	var order []string
	for _, w := range x.waits {
		if !significant(w) {
			continue
		}
		if _, ok := byLock[w.lock]; !ok {
			order = append(order, w.lock)
		}
		byLock[w.lock] = append(byLock[w.lock], w)
	}
	var built []*draft
	for _, lk := range order {
		d := x.chainFrom(lk, byLock[lk])
		if d == nil || !d.worthIt() {
			continue
		}
		// Two locks whose chains end at the same root are one problem.
		merged := false
		for _, o := range built {
			if o.rootKey == d.rootKey && d.rootKey != "" {
				o.merge(d)
				merged = true
				break
			}
		}
		if !merged {
			built = append(built, d)
		}
	}
	slices.SortStableFunc(built, func(a, b *draft) int {
		if c := cmp.Compare(b.severity, a.severity); c != 0 {
			return c
		}
		return cmp.Compare(b.weight(), a.weight())
	})
	var out []finding.Diagnosis
	explained := map[int][]string{}
	for i, d := range built {
		ref := "D" + strconv.Itoa(i+1)
		diag := d.finish(x, ref)
		out = append(out, diag)
		for fi := range d.explains {
			explained[fi] = append(explained[fi], ref)
		}
	}
	return out, explained
}

// significant says whether a wait makes its task a victim.
func significant(w *waitFact) bool {
	return w.hung || w.maxMs >= victimMaxWaitMs || w.totalMs >= victimTotalWaitMs
}

// draft is a diagnosis being built.
type draft struct {
	kind     string // memcg-limit, cpu-quota, fuse-daemon, host-cpu, holder-work, …
	rootKey  string
	root     finding.Subject
	lock     *lockFact
	victims  []*waitFact
	hops     []finding.Hop
	subjects []finding.Subject
	explains map[int]bool
	severity finding.Severity
	likely   bool
	confirm  []string
	remedy   []string
	// For the title.
	holder   *holdFact
	cgroup   *cgroupFact
	activity string
	extra    []*draft // merged chains
}

func (d *draft) worthIt() bool {
	if len(d.victims) == 0 || d.holder == nil {
		return false
	}
	// A holder that is only busy or waiting for a CPU on a busy host is a
	// diagnosis only when somebody waited long: a second at once, hung, or
	// a third of the window in shorter waits (a convoy behind holders
	// starved of CPU: 25 readers queued, each wait half a second).
	if d.kind == "host-cpu" || d.kind == "holder-work" || d.kind == "holder-runnable" {
		for _, v := range d.victims {
			if v.hung || v.longest() >= 1000 || v.totalMs >= convoyTotalMs(v) {
				return true
			}
		}
		return false
	}
	return true
}

// convoyTotalMs is how long a victim must have waited in all, in waits
// shorter than a second, for a CPU-starved holder to be a diagnosis: a
// third of the window (3 s of doctor's 10 s, 20 s of watch's minute).
func convoyTotalMs(v *waitFact) float64 {
	if v.windowMs > 0 {
		return v.windowMs / 3
	}
	return 3000
}

func (d *draft) weight() float64 {
	w := 0.0
	for _, v := range d.victims {
		w += max(v.totalMs, v.blocked*1000)
	}
	for _, e := range d.extra {
		w += e.weight()
	}
	return w
}

func (d *draft) merge(o *draft) {
	d.extra = append(d.extra, o)
	for k := range o.explains {
		d.explains[k] = true
	}
	d.severity = max(d.severity, o.severity)
	d.likely = d.likely || o.likely
}

func (d *draft) explain(fi int) {
	if fi < 0 {
		return
	}
	d.explains[fi] = true
}

// chainFrom follows the lock victims wait on to its root.
func (x *facts) chainFrom(lockKey string, victims []*waitFact) *draft {
	l := x.locks[lockKey]
	if l == nil {
		return nil
	}
	d := &draft{lock: l, explains: map[int]bool{}}
	slices.SortStableFunc(victims, func(a, b *waitFact) int {
		// Hung tasks first, then waiters from other processes (a ps, a
		// monitoring agent reading /proc), then the longest waits.
		if a.hung != b.hung {
			if a.hung {
				return -1
			}
			return 1
		}
		ao, bo := l.mmPID > 0 && a.task.PID != l.mmPID, l.mmPID > 0 && b.task.PID != l.mmPID
		if ao != bo {
			if ao {
				return -1
			}
			return 1
		}
		return cmp.Compare(b.longest(), a.longest())
	})
	victims = dedupeWaits(victims)
	d.victims = victims
	for fi := range l.findings {
		d.explain(fi)
	}
	lockSubj := lockSubject(l)
	for i, v := range victims {
		d.explain(v.finding)
		d.severity = max(d.severity, x.fs[v.finding].Severity)
		if i >= maxVictimHops {
			continue
		}
		d.hops = append(d.hops, waitHop(v, lockSubj, x))
		d.subjects = append(d.subjects, victimSubject(v, x))
	}
	d.subjects = append(d.subjects, lockSubj)
	seen := map[string]bool{lockKey: true}
	x.follow(d, l, lockSubj, seen, 0)
	d.dropHolderFromVictims()
	return d
}

// dropHolderFromVictims: a holder may itself have waited for the lock
// between its holds; in the diagnosis it is the holder, not a victim.
func (d *draft) dropHolderFromVictims() {
	if d.holder == nil || d.holder.holder.TID == 0 {
		return
	}
	tid := d.holder.holder.TID
	keep := d.victims[:0]
	for _, v := range d.victims {
		if v.task.TID != tid {
			keep = append(keep, v)
		}
	}
	d.victims = keep
	hops := d.hops[:0]
	for _, h := range d.hops {
		if !(h.Relation == waitsOn && h.From.TID == tid && h.To.Role == finding.RoleLock && h.To.Lock == d.lock.name) {
			hops = append(hops, h)
		}
	}
	d.hops = hops
	subs := d.subjects[:0]
	for _, s := range d.subjects {
		if !(s.Role == finding.RoleVictim && s.TID == tid) {
			subs = append(subs, s)
		}
	}
	d.subjects = subs
}

// dedupeWaits keeps one wait per task (the worst), hung first.
func dedupeWaits(ws []*waitFact) []*waitFact {
	seen := map[int]bool{}
	var out []*waitFact
	for _, w := range ws {
		id := w.task.TID
		if id == 0 {
			id = -w.task.PID
		}
		if seen[id] {
			continue
		}
		seen[id] = true
		out = append(out, w)
	}
	return out
}

// bestHolder picks the fact that best says who held a lock: a measured or
// exactly decoded holder before a latest reader, with where its time went
// before without, then the one others waited on longest.
func (x *facts) bestHolder(lockKey string) *holdFact {
	var best *holdFact
	score := func(h *holdFact) (int, float64) {
		s := 0
		if h.exact {
			s += 2
		}
		if h.spend != nil {
			s++
		}
		return s, max(h.totalMs, h.charged)
	}
	for _, h := range x.holds {
		if h.lock != lockKey {
			continue
		}
		if best == nil {
			best = h
			continue
		}
		s1, w1 := score(h)
		s2, w2 := score(best)
		if s1 > s2 || (s1 == s2 && w1 > w2) {
			best = h
		}
	}
	return best
}

// cgroupOf finds the cgroup of a controller the findings put pid in.
func (x *facts) cgroupOf(controller string, pid int) *cgroupFact {
	if pid == 0 {
		return nil
	}
	var best *cgroupFact
	for _, c := range x.cgroups {
		if c.controller == controller && c.pids[pid] && (best == nil || c.severity > best.severity) {
			best = c
		}
	}
	return best
}

// follow extends d from a lock held by someone to the root.
func (x *facts) follow(d *draft, l *lockFact, lockSubj finding.Subject, seen map[string]bool, depth int) {
	h := x.bestHolder(l.key)
	if h == nil {
		return
	}
	if d.holder == nil {
		d.holder = h
	}
	d.explain(h.finding)
	for _, fi := range x.hungIn[h.holder.TID] {
		d.explain(fi)
	}
	holder := holderSubject(h, l)
	d.subjects = append(d.subjects, holder)
	d.hops = append(d.hops, heldHop(lockSubj, h, holder, l))
	if !h.exact {
		d.likely = true
		d.confirm = append(d.confirm, fmt.Sprintf("%s is the latest reader the lock word recorded: cat /proc/%d/task/%d/stack shows whether it is still inside a path that holds %s.",
			label(holder), holder.PID, holder.TID, l.name))
	}
	sp := h.spend
	if sp == nil && holder.TID != 0 {
		sp = x.spends[holder.TID]
	}
	// Everything below a holder is where its time went.
	d.rootKey, d.root, d.kind = "holder:"+strconv.Itoa(holder.TID), holder, "holder-work"
	if sp == nil {
		d.kind = "holder-unknown"
		return
	}
	d.explain(sp.finding)
	switch kind := classify(sp); kind {
	case "reclaim":
		act := activity("memory reclaim", fmt.Sprintf("reclaiming memory while holding %s", l.name))
		d.hops = append(d.hops, spendHop(holder, act, sp, "reclaim", mechReclaimUnderLock))
		d.activity, d.kind, d.rootKey, d.root = "reclaim", "reclaim-under-lock", "reclaim:"+strconv.Itoa(holder.PID), act
		if c := x.cgroupOf("memory", holder.PID); c != nil {
			x.constrain(d, holder, c)
			d.kind = "memcg-limit"
		}
	case "throttled":
		act := activity("throttled", fmt.Sprintf("throttled by its cgroup's CPU quota while holding %s", l.name))
		d.hops = append(d.hops, spendHop(holder, act, sp, "throttled", mechThrottledHold))
		d.activity, d.kind, d.rootKey, d.root = "throttled", "throttled-holder", "throttled:"+strconv.Itoa(holder.TID), act
		if c := x.cgroupOf("cpu", holder.PID); c != nil {
			x.constrain(d, holder, c)
			d.kind = "cpu-quota"
		}
	case "runnable":
		act := activity("waiting for a CPU", fmt.Sprintf("runnable, waiting for a CPU, while holding %s", l.name))
		d.hops = append(d.hops, spendHop(holder, act, sp, "runnable", mechRunnableHold))
		d.activity, d.kind, d.rootKey, d.root = "runnable", "holder-runnable", "runnable:"+strconv.Itoa(holder.TID), act
		if c := x.cgroupOf("cpu", holder.PID); c != nil && !sp.throttleKnown {
			// The kernel did not let wolf see whether the holder itself
			// was throttled: the quota is a likely cause, said so.
			x.constrain(d, holder, c)
			d.kind, d.likely = "cpu-quota", true
			d.hops[len(d.hops)-1].Likely = true
			d.confirm = append(d.confirm, "This kernel does not show per task whether the holder was throttled; the attribution is over the window: its cgroup was throttled while the holder waited for a CPU.")
		} else if len(x.hostCPU) > 0 {
			host := finding.Subject{Role: finding.RoleCPU, Comm: "all CPUs", Detail: "the host's CPUs are saturated"}
			hop := finding.Hop{From: holder, Relation: constrainedBy, To: host, Mechanism: mechHostCPU, Evidence: x.hostCPUNumbers(),
				Text: fmt.Sprintf("%s is constrained by the host's CPUs: %s", label(holder), x.fs[x.hostCPU[0]].Title), Findings: []string{x.fs[x.hostCPU[0]].ID}}
			d.hops = append(d.hops, hop)
			for _, fi := range x.hostCPU {
				d.explain(fi)
			}
			d.kind, d.rootKey, d.root = "host-cpu", "host-cpu", host
			d.subjects = append(d.subjects, host)
		}
	case "oncpu":
		act := activity("on CPU", fmt.Sprintf("working on a CPU while holding %s", l.name))
		d.hops = append(d.hops, spendHop(holder, act, sp, "oncpu", mechOnCPUHold))
		d.activity, d.kind = "oncpu", "holder-work"
	case "lock":
		next := x.lock(sp.lockName, sp.lockAddr, 0, sp.finding)
		if next == nil || seen[next.key] || depth >= maxDepth {
			d.kind = "deadlock"
			return
		}
		seen[next.key] = true
		ns := lockSubject(next)
		hop := finding.Hop{From: holder, Relation: waitsOn, To: ns, Mechanism: mechWaitsOnLock,
			Text: fmt.Sprintf("%s, while holding %s, itself waits for %s", label(holder), l.name, next.name), Findings: []string{x.fs[sp.finding].ID}}
		if w := x.waitOf(holder.TID, next.key); w != nil {
			// Its own wait's numbers, said as a holder's.
			hop = waitHop(w, ns, x)
			hop.From = holder
			hop.Text = fmt.Sprintf("%s, while holding %s, itself%s", label(holder), l.name, strings.TrimPrefix(hop.Text, label(w.task)))
		}
		d.hops = append(d.hops, hop)
		d.subjects = append(d.subjects, ns)
		for fi := range next.findings {
			d.explain(fi)
		}
		x.follow(d, next, ns, seen, depth+1)
	case "fuse":
		f := sp.fuse
		req := finding.Subject{Role: finding.RoleTask, Comm: "FUSE request", Detail: fuseRequestText(f)}
		req.Evidence = map[string]any{}
		if f.opcode != "" {
			req.Evidence["fuse_opcode"] = f.opcode
		}
		if f.unique > 0 {
			req.Evidence["fuse_unique"] = f.unique
		}
		if f.ageS > 0 {
			req.Evidence["fuse_age_s"] = f.ageS
		}
		what := "sleeps waiting for the FUSE daemon's reply"
		if sp.sleepsOn == "folio" {
			what = "sleeps (D) on a page-cache folio that a FUSE read is filling"
		}
		text := fmt.Sprintf("%s, while holding %s, %s: %s", label(holder), l.name, what, fuseRequestText(f))
		d.hops = append(d.hops, finding.Hop{From: holder, Relation: spendsHold, To: req, Mechanism: mechFuseRequest, Text: text,
			Evidence: req.Evidence, Likely: !f.exact, Findings: []string{x.fs[sp.finding].ID}})
		if !f.exact {
			d.likely = true
			d.confirm = append(d.confirm, "cat /sys/fs/fuse/connections/*/waiting shows the requests each FUSE connection has waiting for its daemon.")
		}
		for i, dm := range f.daemons {
			dm.Role = finding.RoleDaemon
			d.subjects = append(d.subjects, dm)
			d.hops = append(d.hops, finding.Hop{From: req, Relation: heldBy, To: dm, Mechanism: mechFuseDaemon,
				Text: fmt.Sprintf("the request waits for FUSE daemon %s, which has not answered it", label(dm)), Findings: []string{x.fs[sp.finding].ID}})
			if i == 0 {
				d.root = dm
				d.rootKey = "daemon:" + strconv.Itoa(dm.PID)
			}
		}
		d.activity, d.kind = "fuse", "fuse-daemon"
		conn := "<N>"
		if f.conn != "" {
			conn = f.conn
		}
		d.remedy = append(d.remedy,
			fmt.Sprintf("Make the FUSE daemon answer (restart or debug it); its pending requests are in /sys/fs/fuse/connections/%s/waiting.", conn),
			fmt.Sprintf("To unblock the host now: echo 1 > /sys/fs/fuse/connections/%s/abort fails the pending requests (the mount then returns ENOTCONN); umount -l detaches it.", conn))
	case "blocked":
		act := activity("blocked", fmt.Sprintf("asleep (%s) in %s while holding %s", sp.state, orDash(sp.site), l.name))
		d.hops = append(d.hops, spendHop(holder, act, sp, "blocked", mechBlockedHold))
		d.activity, d.kind = "blocked", "holder-blocked"
	}
}

// classify says where a holder's time went: the component that explains
// most of the hold.
func classify(sp *spendFact) string {
	switch sp.sleepsOn {
	case "lock":
		return "lock"
	case "fuse", "folio":
		if sp.fuse != nil {
			return "fuse"
		}
		return "blocked"
	case "io", "site":
		return "blocked"
	}
	if sp.holdMs <= 0 {
		if sp.state == "R" {
			return "oncpu"
		}
		if sp.state != "" {
			return "blocked"
		}
		return ""
	}
	share := func(v float64) float64 { return v / sp.holdMs }
	switch {
	case share(sp.reclaimMs) >= dominantShare:
		return "reclaim"
	case share(sp.throttledMs) >= dominantShare:
		return "throttled"
	case share(sp.runnableMs) >= dominantShare:
		return "runnable"
	case share(sp.onCPUMs) >= dominantShare:
		return "oncpu"
	}
	return "blocked"
}

// constrain adds the hop from a holder to the cgroup that holds it back.
func (x *facts) constrain(d *draft, holder finding.Subject, c *cgroupFact) {
	cg := c.subject
	cg.Role = finding.RoleCgroup
	mech, text := mechMemcgLimit, ""
	switch c.controller {
	case "memory":
		text = fmt.Sprintf("%s is in memory cgroup %s, which sits at its memory limit%s", label(holder), cg.Cgroup, memcgNumbers(c.ev))
	case "cpu":
		mech = mechCPUQuota
		text = fmt.Sprintf("%s is in cgroup %s, whose CPU quota is %s", label(holder), cg.Cgroup, quotaNumbers(c.ev))
	}
	d.hops = append(d.hops, finding.Hop{From: holder, Relation: constrainedBy, To: cg, Evidence: pick(c.ev, cgroupKeys...), Mechanism: mech, Text: text,
		Findings: []string{x.fs[c.finding].ID}})
	d.subjects = append(d.subjects, cg)
	d.explain(c.finding)
	d.severity = max(d.severity, c.severity)
	d.cgroup = c
	d.root = cg
	d.rootKey = "cgroup:" + c.controller + ":" + cg.Cgroup
	d.remedy = append(d.remedy, x.fs[c.finding].Remediation...)
}

var cgroupKeys = []string{"cgroup", "cgroup_version", "limit_bytes", "usage_bytes", "limit_hits", "efficiency_pct", "reclaim_s_total",
	"quota_us", "period_us", "quota_cpus", "nr_periods", "nr_throttled", "throttled_pct", "throttled_s"}

func pick(ev map[string]any, keys ...string) map[string]any {
	out := map[string]any{}
	for _, k := range keys {
		if v, ok := ev[k]; ok {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
