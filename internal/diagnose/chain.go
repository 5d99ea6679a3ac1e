package diagnose

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wolf-investigator/wolf/internal/fact"
	"github.com/wolf-investigator/wolf/internal/finding"
)

// branch is one way a victim's time traces to a root, with the share of
// that time it carries.
type branch struct {
	share    float64
	hops     []finding.Hop
	root     string // the root's key: a resource, or "holder:TID" for a holder's own work
	kind     string // the diagnosis kind it makes: memcg-limit, cpu-quota, host-cpu, …
	rootSubj finding.Subject
	likely   bool
	refs     []ref
	confirm  []string
	remedy   []string
	// For the words: the first lock the chain runs through and its hold,
	// the consumers a saturated root names, and, for a root reached
	// through a saturated resource's consumers, that resource and the
	// share of its time the root's activity took.
	lock      string
	hold      *fact.Hold
	consumers []*fact.Usage
	via       string
	viaFrac   float64
	viaWhat   string // the activity: "memory reclaim", "memory reclaim and page-cache misses"
}

// fork copies b for a sub-branch carrying part of its share.
func (b *branch) fork(part float64) *branch {
	c := *b
	c.share = b.share * part
	c.hops = slices.Clone(b.hops)
	c.refs = slices.Clone(b.refs)
	c.confirm = slices.Clone(b.confirm)
	c.remedy = slices.Clone(b.remedy)
	return &c
}

func (b *branch) hop(h finding.Hop, refs ...ref) {
	b.hops = append(b.hops, h)
	b.refs = append(b.refs, refs...)
	for _, r := range refs {
		if r.id != "" && !slices.Contains(h.Findings, r.id) {
			h.Findings = append(h.Findings, r.id)
		}
	}
	b.hops[len(b.hops)-1].Findings = h.Findings
}

// end makes b end at a root.
func (b *branch) end(root, kind string, subj finding.Subject) []*branch {
	b.root, b.kind, b.rootSubj = root, kind, subj
	return []*branch{b}
}

// fromVictim traces a victim's wait to its roots.
func (e *engine) fromVictim(v *victim) []*branch {
	w := v.w
	b := &branch{share: 1}
	from := e.victimSubject(v)
	wr := refOf(w.Finding, w.FindingTitle)
	switch w.Kind {
	case fact.WaitRunQueue:
		hostSubj := e.subjectOf(fact.HostCPUKey())
		b.hop(e.waitHop(w, from, hostSubj, "for a CPU"), wr)
		return e.runnable(b, w.Task, hostSubj, 0)
	case fact.WaitThrottled:
		k := e.on(w)
		to := e.subjectOf(k)
		b.hop(e.intoHop(from, finding.ConstrainedBy, k, fmt.Sprintf("%s was throttled %s in %d waits by the CPU quota of cgroup %s", label(from), ms(msOf(w.Total)), w.Count, to.Cgroup), waitNumbers(w)), wr)
		return e.resolve(b, k, 0, nil)
	case fact.WaitReclaim:
		k := e.on(w)
		to := e.subjectOf(k)
		text := fmt.Sprintf("%s spent %s in memory reclaim", label(from), ms(msOf(w.Total)))
		if w.Count > 0 {
			text += fmt.Sprintf(" in %d calls, the longest %s", w.Count, ms(msOf(w.Max)))
		}
		if k == fact.MemoryKey("/") || to.Cgroup == "" {
			text += ", for the host's memory"
		} else {
			text += ", charging memory cgroup " + to.Cgroup
		}
		b.hop(e.intoHop(from, finding.ConstrainedBy, k, text, waitNumbers(w)), wr)
		return e.resolve(b, k, 0, nil)
	}
	k := e.on(w)
	to := e.subjectOf(k)
	hop := e.waitHop(w, from, to, "")
	switch e.resource(k).Kind {
	case fact.Lock, fact.FUSE, fact.Site:
	default:
		// A limit or a device: the hop into it carries its numbers too
		// (an I/O limit's rate, a device's busy time).
		if s := e.saturation(k); s != nil {
			for n, v := range s.Numbers {
				if _, ok := hop.Evidence[n]; !ok {
					hop.Evidence[n] = v
				}
			}
		}
	}
	b.hop(hop, wr)
	return e.resolve(b, k, 0, map[string]bool{k: true})
}

// resolve follows a resource to its roots; b has reached it.
func (e *engine) resolve(b *branch, k string, depth int, seen map[string]bool) []*branch {
	r := e.resource(k)
	if s := e.saturation(k); s != nil {
		b.refs = append(b.refs, s.refs...)
	}
	switch r.Kind {
	case fact.Lock, fact.FUSE:
		if b.lock == "" && r.Kind == fact.Lock {
			b.lock = k
		}
		return e.held(b, k, depth, seen)
	case fact.HostCPU:
		return e.hostCPU(b, depth)
	case fact.Device:
		return e.device(b, k, depth)
	case fact.CPUQuota:
		b.remedy = append(b.remedy, e.rootRemedy(k)...)
		return b.end(k, "cpu-quota", e.subjectOf(k))
	case fact.Memory:
		b.remedy = append(b.remedy, e.rootRemedy(k)...)
		if k == fact.MemoryKey("/") {
			return b.end(k, "host-memory", e.subjectOf(k))
		}
		return b.end(k, "memcg-limit", e.subjectOf(k))
	case fact.IOLimit:
		return b.end(k, "io-limit", e.subjectOf(k))
	case fact.Dirty:
		return e.dirty(b, k, depth, seen)
	case fact.Journal:
		return e.journal(b, k, depth, seen)
	case fact.Softirq, fact.CPU:
		subj := e.subjectOf(k)
		if k == fact.SoftirqKey(-1) {
			e.softirqContexts(b, k, subj)
		}
		return b.end(k, "softirq", subj)
	case fact.Site:
		return b.end(k, "blocked", e.subjectOf(k))
	}
	return b.end(k, "blocked", e.subjectOf(k))
}

// held follows a lock or FUSE connection to whoever holds it.
func (e *engine) held(b *branch, k string, depth int, seen map[string]bool) []*branch {
	h := e.bestHold(k)
	res := e.subjectOf(k)
	if h == nil {
		if e.resource(k).Kind == fact.FUSE {
			return b.end(k, "fuse-daemon", res)
		}
		return b.end(k, "lock", res)
	}
	if b.hold == nil {
		b.hold = h
	}
	holder := e.holderSubject(h, k)
	hr := refOf(h.Finding, h.FindingTitle)
	if e.resource(k).Kind == fact.FUSE {
		holder.Role = finding.RoleDaemon
		text := fmt.Sprintf("the request waits for FUSE daemon %s, which has not answered it", label(holder))
		if e.endedOn(k) {
			text = fmt.Sprintf("the request waited for FUSE daemon %s, which answered it late or not at all (the wait has ended)", label(holder))
		}
		b.hop(finding.Hop{From: res, Relation: finding.HeldBy, To: holder, Mechanism: mechFuseDaemon, Likely: !h.Exact, Text: text}, hr)
		if !h.Exact {
			b.likely = true
			b.confirm = append(b.confirm, "cat /sys/fs/fuse/connections/*/waiting shows the requests each FUSE connection has waiting for its daemon.")
		}
		conn := e.resource(k).Conn
		if conn == "" {
			conn = "<N>"
		}
		b.remedy = append(b.remedy,
			fmt.Sprintf("Make the FUSE daemon answer (restart or debug it); its pending requests are in /sys/fs/fuse/connections/%s/waiting.", conn),
			fmt.Sprintf("To unblock the host now: echo 1 > /sys/fs/fuse/connections/%s/abort fails the pending requests (the mount then returns ENOTCONN); umount -l detaches it.", conn))
		return b.end("daemon:"+strconv.Itoa(h.Holder.PID), "fuse-daemon", holder)
	}
	b.hop(e.heldHop(res, h, holder, k), hr)
	if !h.Exact {
		b.likely = true
		b.confirm = append(b.confirm, fmt.Sprintf("%s is the latest reader the lock word recorded: cat /proc/%d/task/%d/stack shows whether it is still inside a path that holds %s.",
			label(holder), holder.PID, holder.TID, res.Lock))
	}
	return e.holder(b, h, holder, k, depth, seen)
}

// holder splits a holder's time by where it went and follows each part.
func (e *engine) holder(b *branch, h *fact.Hold, holder finding.Subject, k string, depth int, seen map[string]bool) []*branch {
	own := "holder:" + strconv.Itoa(h.Holder.TID)
	lockName := nameOf(e.subjectOf(k)) // a lock, or a journal its committer holds
	sp := h.Split
	if sp == nil || (sp.Span <= 0 && sp.State == "") {
		if o := e.ongoing[h.Holder.TID]; o != nil {
			sp = o
		}
	}
	if sp == nil {
		return b.end(own, "holder-unknown", holder)
	}
	b.refs = append(b.refs, refOf(sp.Finding, sp.FindingTitle))
	if sp.SleepsOn != "" {
		next := e.canon(sp.SleepsOn)
		if seen[next] || depth >= maxDepth {
			return b.end("deadlock:"+k, "deadlock", holder)
		}
		seen[next] = true
		to := e.subjectOf(next)
		hop := finding.Hop{From: holder, Relation: finding.WaitsOn, To: to, Mechanism: mechWaitsOnLock,
			Text: fmt.Sprintf("%s, while holding %s, itself waits for %s", label(holder), lockName, nameOf(to))}
		if e.resource(next).Kind == fact.FUSE {
			hop.Mechanism = mechFuseRequest
			hop.Text = fmt.Sprintf("%s, while holding %s, sleeps waiting for the FUSE daemon's reply", label(holder), lockName)
		}
		if w := e.waitOf(h.Holder.TID, next); w != nil {
			if w.Numbers["sleeps_on"] == "folio" && e.resource(next).Kind == fact.FUSE {
				hop.Text = fmt.Sprintf("%s, while holding %s, sleeps (D) on a page-cache folio that a FUSE read is filling", label(holder), lockName)
			}
			hop.Evidence = waitNumbers(w)
			if w.Detail != "" {
				hop.Text += ": " + w.Detail
			}
			if w.Likely {
				hop.Likely, b.likely = true, true
			}
			b.hop(hop, refOf(w.Finding, w.FindingTitle))
		} else {
			hop.Evidence = map[string]any{"state": sp.State}
			b.hop(hop)
		}
		return e.resolve(b, next, depth+1, seen)
	}
	if sp.Span <= 0 {
		// Only what it is doing now.
		if sp.State == "R" {
			b.hop(finding.Hop{From: holder, Relation: finding.SpendsHold, To: activity("on CPU", "running while holding "+lockName),
				Evidence: map[string]any{"state": "R"}, Mechanism: mechOnCPUHold, Text: fmt.Sprintf("%s is running (R) while holding %s", label(holder), lockName)})
			return b.end(own, "holder-work", holder)
		}
		b.hop(finding.Hop{From: holder, Relation: finding.SpendsHold, To: activity("blocked", fmt.Sprintf("asleep (%s) in %s while holding %s", sp.State, orDash(sp.Site), lockName)),
			Evidence: map[string]any{"state": sp.State}, Mechanism: mechBlockedHold,
			Text: fmt.Sprintf("%s is asleep (%s) in %s while holding %s", label(holder), sp.State, orDash(sp.Site), lockName)})
		return b.end(own, "holder-blocked", holder)
	}
	var out []*branch
	for _, p := range splitParts(sp) {
		c := b.fork(p.share)
		switch p.what {
		case "reclaim":
			act := activity("memory reclaim", "reclaiming memory while holding "+lockName)
			c.hop(e.spendHop(holder, act, sp, p.what, mechReclaimUnderLock))
			if cg := e.cgroupOf(h.Holder, fact.Memory); cg != "" {
				mk := fact.MemoryKey(cg)
				c.hop(e.intoHop(act, finding.ConstrainedBy, mk, "", nil))
				out = append(out, e.resolve(c, mk, depth, seen)...)
				continue
			}
			out = append(out, c.end("reclaim:"+strconv.Itoa(h.Holder.PID), "reclaim-under-lock", holder)...)
		case "throttled":
			act := activity("throttled", "throttled by its cgroup's CPU quota while holding "+lockName)
			c.hop(e.spendHop(holder, act, sp, p.what, mechThrottledHold))
			if cg := e.cgroupOf(h.Holder, fact.CPUQuota); cg != "" {
				qk := fact.CPUQuotaKey(cg)
				c.hop(e.intoHop(act, finding.ConstrainedBy, qk, "", nil))
				out = append(out, e.resolve(c, qk, depth, seen)...)
				continue
			}
			out = append(out, c.end("throttled:"+strconv.Itoa(h.Holder.TID), "throttled-holder", holder)...)
		case "runnable":
			act := activity("waiting for a CPU", "runnable, waiting for a CPU, while holding "+lockName)
			c.hop(e.spendHop(holder, act, sp, p.what, mechRunnableHold))
			if cg := e.cgroupOf(h.Holder, fact.CPUQuota); cg != "" && !sp.ThrottleKnown && e.throttled(cg) {
				// The kernel did not let wolf see whether the holder itself
				// was throttled: the quota is a likely cause, said so.
				qk := fact.CPUQuotaKey(cg)
				hop := e.intoHop(act, finding.ConstrainedBy, qk, "", nil)
				hop.Likely = true
				c.hop(hop)
				c.likely = true
				c.confirm = append(c.confirm, "This kernel does not show per task whether the holder was throttled; the attribution is over the window: its cgroup was throttled while the holder waited for a CPU.")
				out = append(out, e.resolve(c, qk, depth, seen)...)
				continue
			}
			if s := e.saturation(fact.HostCPUKey()); s == nil || !s.AtLimit {
				// Not a saturated host: the holder's own scheduling, but
				// for the part of the CPUs' time another resource's work
				// took when the CPUs were contended all the same (more
				// tasks runnable than CPUs: a memory cgroup's reclaimers
				// that sleep on its lock between runs keep the CPUs just
				// under saturation while the holder queues behind them).
				if e.cpusContended() && depth < maxDepth {
					host := e.subjectOf(fact.HostCPUKey())
					total, unit := e.used(fact.HostCPUKey())
					if total > 0 {
						d := c.fork(1)
						d.hop(e.intoHop(act, finding.ConstrainedBy, fact.HostCPUKey(), "", nil))
						routedOut, routed := e.routeDirected(d, fact.HostCPUKey(), host, e.directedUse(fact.HostCPUKey()), total, unit, 0, depth)
						out = append(out, routedOut...)
						c.share *= max(0, 1-routed)
					}
				}
				if c.share > 0 {
					out = append(out, c.end(own, "holder-runnable", holder)...)
				}
				continue
			}
			host := e.subjectOf(fact.HostCPUKey())
			c.hop(e.intoHop(act, finding.ConstrainedBy, fact.HostCPUKey(), "", nil))
			out = append(out, e.runnable(c, h.Holder, host, depth)...)
		case "oncpu":
			act := activity("on CPU", "working on a CPU while holding "+lockName)
			c.hop(e.spendHop(holder, act, sp, p.what, mechOnCPUHold))
			out = append(out, c.end(own, "holder-work", holder)...)
		case "io":
			act := activity("I/O", "waiting for I/O while holding "+lockName)
			c.hop(e.spendHop(holder, act, sp, p.what, mechBlockedHold))
			if dk := e.ioWaitOf(h.Holder.TID); dk != "" {
				c.hop(e.intoHop(act, finding.WaitsOn, dk, "", nil))
				out = append(out, e.resolve(c, dk, depth, seen)...)
				continue
			}
			out = append(out, c.end(own, "holder-blocked", holder)...)
		default:
			act := activity("blocked", "asleep while holding "+lockName)
			c.hop(e.spendHop(holder, act, sp, p.what, mechBlockedHold))
			out = append(out, c.end(own, "holder-blocked", holder)...)
		}
	}
	return out
}

// cpusContended says whether the host's CPUs, though not saturated, had
// more tasks runnable than CPUs on average (the checklist's run queue, or
// sched's count of the host's threads on a CPU or waiting for one): a task
// that waited for a CPU then waited behind the others' work.
func (e *engine) cpusContended() bool {
	s := e.saturation(fact.HostCPUKey())
	if s == nil || s.Numbers["cpus"] <= 0 {
		return false
	}
	run := max(s.Numbers["runnable_mean"], s.Numbers["tasks_runnable_mean"])
	return run > s.Numbers["cpus"]
}

// ioWaitOf is the device or I/O limit a task waited on most, "" when no
// fact says.
func (e *engine) ioWaitOf(tid int) string {
	var best *fact.Wait
	for _, w := range e.waitsOf[tid] {
		if w.Kind == fact.WaitIO && (best == nil || w.Total > best.Total) {
			best = w
		}
	}
	if best == nil {
		return ""
	}
	return e.canon(best.On)
}

// throttled says whether a cgroup's CPU quota held it back in the window.
func (e *engine) throttled(cg string) bool {
	s := e.saturation(fact.CPUQuotaKey(cg))
	return s != nil && s.AtLimit
}

// part is a share of a holder's time and what it went to.
type part struct {
	what  string // reclaim, throttled, runnable, oncpu, io, sleep
	share float64
}

// minPart is the least share of a hold worth following.
const minPart = 0.02

// splitParts divides a holder's span between what its time went to, the
// parts normalised to add up to one. Reclaim is wall time inside reclaim
// calls, so it overlaps with on-CPU and run-queue time; what it covers is
// taken off those in proportion. Throttled time is part of run-queue
// time.
func splitParts(sp *fact.Split) []part {
	span := float64(sp.Span)
	r, c, u, t, io := float64(sp.Reclaim), float64(sp.OnCPU), float64(sp.Runnable), float64(sp.Throttled), float64(sp.IO)
	t = min(t, u)
	u -= t
	if over := r + c + u + t + io - span; over > 0 && c+u > 0 {
		cut, cu := min(over, r, c+u), c+u
		c -= cut * c / cu
		u -= cut * u / cu
	}
	sleep := max(0, span-(r+c+u+t+io))
	if sp.Sleep > 0 {
		sleep = min(sleep, float64(sp.Sleep))
	}
	raw := []part{{"reclaim", r}, {"throttled", t}, {"runnable", u}, {"oncpu", c}, {"io", io}, {"sleep", sleep}}
	sum := 0.0
	for _, p := range raw {
		sum += max(p.share, 0)
	}
	if sum <= 0 {
		return []part{{"oncpu", 1}}
	}
	var out []part
	for _, p := range raw {
		if s := p.share / sum; s >= minPart {
			out = append(out, part{p.what, s})
		}
	}
	return out
}

// runnable follows time spent waiting for a CPU: the task's CPU quota
// when its cgroup was throttled and the host's CPUs were not saturated
// (a kernel that does not say per wait which were throttled), else the
// host's CPUs and who used them.
func (e *engine) runnable(b *branch, t fact.Task, host finding.Subject, depth int) []*branch {
	hs := e.saturation(fact.HostCPUKey())
	if hs == nil || !hs.AtLimit {
		if cg := e.cgroupOf(t, fact.CPUQuota); cg != "" && e.throttled(cg) {
			qk := fact.CPUQuotaKey(cg)
			hop := e.intoHop(host, finding.ConstrainedBy, qk, fmt.Sprintf("the CPUs were not saturated, but cgroup %s, where %s runs, was throttled by its CPU quota", cg, label(taskSubject(t, ""))), nil)
			hop.Likely = true
			b.hop(hop)
			b.likely = true
			b.confirm = append(b.confirm, "This kernel does not say per wait whether the task was throttled; the wait is put down to its cgroup's quota because the host's CPUs had room.")
			return e.resolve(b, qk, depth, nil)
		}
		return b.end(fact.HostCPUKey(), "host-cpu", host)
	}
	return e.hostCPU(b, depth)
}

// hostCPU follows the host's saturated CPUs to what their time went to:
// activities done for another resource (reclaim for a memory limit) lead
// there, in proportion to the CPU time they took; the rest ends at the
// CPUs with their top consumers.
func (e *engine) hostCPU(b *branch, depth int) []*branch {
	host := e.subjectOf(fact.HostCPUKey())
	return e.consumed(b, fact.HostCPUKey(), host, "host-cpu", depth)
}

// device follows a device to what its time went to, like the CPUs: reads
// that are refaults lead to the memory limit that evicted the pages.
func (e *engine) device(b *branch, k string, depth int) []*branch {
	return e.consumed(b, k, e.subjectOf(k), "device", depth)
}

// softirqContexts names the tasks the CPUs' softirq work ran in the
// context of (its Usage), largest first: who raised it, for work a task
// raises itself (loopback traffic it sends, I/O it completes).
func (e *engine) softirqContexts(b *branch, k string, subj finding.Subject) {
	b.consumers = e.topConsumers(k)
	for _, u := range b.consumers {
		cs := taskSubject(u.By, finding.RoleConsumer)
		cs.Detail = fmt.Sprintf("%s ran in its context", u.Activity)
		ev := map[string]any{"softirq_s": round3(u.Amount), "share_pct": round1(100 * u.Share)}
		b.hop(finding.Hop{From: subj, Relation: finding.UsedBy, To: cs, Evidence: ev, Mechanism: mechSoftirqContext,
			Text: fmt.Sprintf("%s ran on top of %s for %s (%s of the softirq time)", u.Activity, consumerLabel(u), ms(u.Amount*1000), pct1(u.Share))}, refOf(u.Finding, u.FindingTitle))
	}
}

// directed is a saturated resource's use on behalf of another resource.
type directed struct {
	on string // the other resource
	// amount is the use as measured, in unit: the seconds of CPU samples
	// over the sampler's own window, of reclaim's calls over its own.
	amount float64
	// shared is the share of the resource's busy time of the uses
	// measured as one (BusyShare) or over a window of their own
	// (Usage.Window), and sharedAmount their part of amount.
	shared, sharedAmount float64
	unit                 string
	what                 string // activity
	by                   fact.Task
	refs                 []ref
}

// frac is the use's share of the resource's total in the engine's window:
// the shares as measured, and the rest's amount of that total. A share
// holds whichever window it was measured over; an amount of seconds
// sampled over a shorter window than the total's would be too small a
// share, and a share times the total would print seconds nobody measured.
func (d *directed) frac(total float64) float64 {
	f := d.shared
	if total > 0 {
		f += max(0, d.amount-d.sharedAmount) / total
	}
	return f
}

// selfRoot is the root of the part of a wait that went to wolf's own
// work on the CPUs.
const selfRoot = "wolf:self"

// consumed splits a saturated resource by its consumers.
func (e *engine) consumed(b *branch, k string, subj finding.Subject, kind string, depth int) []*branch {
	if s := e.saturation(k); s != nil {
		b.refs = append(b.refs, s.refs...)
	}
	total, unit := e.used(k)
	dirs := e.directedUse(k)
	var out []*branch
	routed := 0.0
	if kindOfKey(k) == fact.HostCPU && e.selfFrac >= minPart {
		// wolf's own share of the busy time: the victims waited for wolf
		// that much, a root of no diagnosis (discountSelf).
		frac := e.selfFrac
		routed += frac
		c := b.fork(frac)
		c.via, c.viaFrac, c.viaWhat = k, frac, "wolf's own work"
		self := finding.Subject{Role: finding.RoleConsumer, Comm: "wolf", PID: e.set.Self, Detail: "wolf itself, measuring"}
		c.hop(finding.Hop{From: subj, Relation: finding.UsedBy, To: self, Evidence: map[string]any{"share_pct": round1(100 * frac)}, Mechanism: mechConsumer(fact.HostCPU),
			Text: fmt.Sprintf("%s of %s went to wolf itself", pct1(frac), timeOf(subj))})
		out = append(out, c.end(selfRoot, "wolf", self)...)
	}
	if total > 0 && depth < maxDepth {
		o, r := e.routeDirected(b, k, subj, dirs, total, unit, routed, depth)
		out, routed = append(out, o...), r
	}
	if len(out) > 0 && kind == "device" && !e.deviceBusy(k) {
		// A device neither slow nor busy was not what the rest of the
		// wait was for: that rest is the task's own reading, no root.
		return out
	}
	if rest := 1 - routed; rest >= minPart || len(out) == 0 {
		c := b.fork(max(rest, 0))
		if len(out) == 0 {
			c.share = b.share
		}
		c.consumers = e.topConsumers(k)
		for _, u := range c.consumers {
			cs := taskSubject(u.By, finding.RoleConsumer)
			share := u.Share
			if share == 0 && total > 0 {
				share = u.Amount / total
			}
			ev := map[string]any{unitKey(unit, u.Unit): round3(u.Amount), "share_pct": round1(100 * share)}
			if u.Threads > 1 {
				ev["threads"] = u.Threads
			}
			cs.Detail = fmt.Sprintf("used %s of %s", pct1(share), nameOf(subj))
			if len(u.PIDs) > 1 {
				ev["processes"] = len(u.PIDs)
				ev["pids"] = u.PIDs[:min(len(u.PIDs), maxPoolPIDs)]
				cs.Detail += fmt.Sprintf(" with %d other processes named %s", len(u.PIDs)-1, u.By.Comm)
			}
			c.hop(finding.Hop{From: subj, Relation: finding.UsedBy, To: cs, Evidence: ev, Mechanism: mechConsumer(kindOfKey(k)),
				Text: fmt.Sprintf("%s used %s of %s (%s)", consumerLabel(u), pct1(share), nameOf(subj), amountText(u.Amount, u.Unit))}, refOf(u.Finding, u.FindingTitle))
		}
		out = append(out, c.end(k, kind, subj)...)
	}
	return out
}

// routeDirected forks b for each use of resource k made on behalf of
// another resource (dirs: CPU time in a memory cgroup's reclaim and
// page-cache misses, reads that are refaults), in proportion to its share
// of k's total, and follows each to that resource. routed is the share
// already given away; it returns the branches and the share routed after.
func (e *engine) routeDirected(b *branch, k string, subj finding.Subject, dirs []directed, total float64, unit string, routed float64, depth int) ([]*branch, float64) {
	var out []*branch
	for _, d := range dirs {
		frac := min(1, d.frac(total))
		if frac < minPart || routed >= 1 {
			continue
		}
		frac = min(frac, 1-routed)
		routed += frac
		c := b.fork(frac)
		c.via, c.viaFrac, c.viaWhat = k, frac, d.what
		act := finding.Subject{Role: finding.RoleConsumer, Comm: d.what, Cgroup: cgroupName(d.by), PID: d.by.PID,
			Detail: strings.TrimSpace(fmt.Sprintf("%s %s", d.what, forWhom(e, d.on)))}
		ev := map[string]any{unitKey(unit, d.unit): round3(d.amount), "share_pct": round1(100 * frac)}
		c.hop(finding.Hop{From: subj, Relation: finding.UsedBy, To: act, Evidence: ev, Mechanism: mechUsedFor(kindOfKey(k), d.what),
			Text: strings.Join(strings.Fields(fmt.Sprintf("%s of %s went to %s %s (%s)", pct1(frac), timeOf(subj), d.what, forWhom(e, d.on), amountText(d.amount, d.unit))), " ")}, d.refs...)
		if kindOfKey(d.on) == fact.Softirq {
			// The activity is the resource itself: the hop ends there.
			c.hops[len(c.hops)-1].To = e.subjectOf(d.on)
		} else {
			c.hop(e.intoHop(act, finding.ConstrainedBy, d.on, "", nil))
		}
		out = append(out, e.resolve(c, d.on, depth+1, nil)...)
	}
	return out, routed
}

// busyOver is the CPUs' busy seconds over a window of w at the busy rate
// their saturation measured, 0 when w or the rate is unknown.
func (e *engine) busyOver(w time.Duration) float64 {
	s := e.saturation(fact.HostCPUKey())
	if w <= 0 || s == nil || s.Unit != "cpus" || s.Used <= 0 {
		return 0
	}
	return s.Used * w.Seconds()
}

// deviceBusy says whether a device held its users back: slow by itself
// (the I/O investigator's verdict) or busy nearly all the window.
func (e *engine) deviceBusy(k string) bool {
	s := e.saturation(k)
	return s != nil && (s.AtLimit || s.Level >= deviceBusy)
}

// used is how much of a resource was used in the window (the busy CPU
// seconds, the bytes a device moved), from its saturation, else from its
// consumers.
func (e *engine) used(k string) (float64, string) {
	if kindOfKey(k) == fact.Device {
		if t := e.deviceBytes(k); t > 0 {
			return t, "bytes"
		}
	}
	if s := e.saturation(k); s != nil && s.Used > 0 {
		switch s.Unit {
		case "cpus":
			return s.Used * e.window.Seconds(), "cpu_s"
		case "bytes_per_s":
			return s.Used * e.window.Seconds(), "bytes"
		}
	}
	sum, unit := 0.0, ""
	for _, u := range e.usage[k] {
		if u.For == "" && (u.By.PID != 0 || u.By.TID != 0) && (u.By.TID == 0 || u.By.TID == u.By.PID || u.Threads == 0) {
			sum += u.Amount
			unit = u.Unit
		}
	}
	return sum, unit
}

// deviceBytes is what a device moved in the window its users' bytes
// were measured in: the I/O investigator gives each user its share of
// the device's bytes, so any one of them says the whole. The checklist's
// rate is over its own window, which need not be the investigators': on
// a slow machine (qemu TCG) doctor's investigators measured 15 s and the
// checklist 8 s of faster reading, and its rate times the longer window
// made vda's bytes twice what its users read, the refaults' share of
// them half what it was.
func (e *engine) deviceBytes(k string) float64 {
	best := 0.0
	for _, u := range e.usage[k] {
		if u.Unit == "bytes" && u.For == "" && u.Share > 0 && u.Share <= 1 && u.Amount > 0 {
			best = max(best, u.Amount/u.Share)
		}
	}
	return best
}

// directedUse is a resource's use on behalf of other resources, largest
// first: what investigators said (CPU time in reclaim for a memory
// limit), and reads of a device by a cgroup that were refaults of pages
// its own memory limit evicted.
func (e *engine) directedUse(k string) []directed {
	total, unit := e.used(k)
	cpuTotal := total > 0 && unit == "cpu_s"
	by := map[string]*directed{}
	add := func(on string, amt float64, unit, what string, t fact.Task, r ref) {
		d := by[on]
		if d == nil {
			d = &directed{on: on, unit: unit, what: what, by: t}
			by[on] = d
		}
		d.amount += amt
		if !strings.Contains(d.what, what) {
			d.what += " and " + what
		}
		if r.id != "" && !slices.Contains(d.refs, r) {
			d.refs = append(d.refs, r)
		}
	}
	for _, u := range e.usage[k] {
		if u.For == "" {
			continue
		}
		amt, share := u.Amount, 0.0 // share: of the busy time, when measured as one
		if u.Activity == fact.ActivityMissPath {
			p := e.missesForLimit(u)
			if p <= 0 {
				continue
			}
			amt *= p
			if u.BusyShare > 0 && cpuTotal {
				share = u.BusyShare * p
			}
		}
		if share == 0 && cpuTotal && u.Unit == "cpu_s" {
			// Seconds measured over a window of their own (reclaim's CPU
			// in its calls, from its attach): of the CPUs' busy seconds
			// over that window, not over the longest one, which on a slow
			// machine began seconds earlier.
			if busy := e.busyOver(u.Window); busy > 0 {
				share = amt / busy
			}
		}
		on := e.canon(u.For)
		add(on, amt, u.Unit, activityName(u.Activity), fact.Task{MemCgroup: u.By.MemCgroup, CPUCgroup: u.By.CPUCgroup, IOCgroup: u.By.IOCgroup}, refOf(u.Finding, u.FindingTitle))
		if share > 0 {
			by[on].shared += share
			by[on].sharedAmount += amt
		}
	}
	if kindOfKey(k) == fact.Device {
		e.refaultReads(k, add)
	}
	out := make([]directed, 0, len(by))
	for _, on := range sortedKeys(by) {
		out = append(out, *by[on])
	}
	slices.SortStableFunc(out, func(a, b directed) int { return cmp.Compare(b.frac(total), a.frac(total)) })
	return out
}

// missesForLimit is the proportion of a memory cgroup's page-cache miss
// path (sampled CPU on the host's CPUs, usage u) its limit caused: the
// proportion of the cgroup's misses that were refaults. At its limit a
// cgroup evicts a page for each page it adds, so its evictions are its
// misses, counted in reclaim's window beside its refaults; otherwise its
// reads of devices stand in for them (the I/O investigator's bytes, over
// a window that begins at its own attach, seconds from reclaim's start on
// a slow machine). A cold read's miss is the task's own work; with
// neither measured the proportion is unknown and nothing goes to the
// limit. The sampled time's share of the CPUs' busy time (BusyShare) is
// what weighs it against the CPUs' other uses (directed.frac).
func (e *engine) missesForLimit(u *fact.Usage) float64 {
	cg := u.By.MemCgroup
	mk := e.canon(fact.MemoryKey(cg))
	refaults, _ := e.refaulted(mk)
	if x := e.saturation(mk); x != nil && x.AtLimit && x.Numbers["evicted_bytes"] > 0 {
		return min(1, refaults/x.Numbers["evicted_bytes"])
	}
	reads := 0.0
	for _, dk := range sortedKeys(e.usage) {
		if kindOfKey(dk) == fact.Device {
			reads += e.readsByMemcg(dk)[cg]
		}
	}
	if reads <= 0 {
		return 0
	}
	return min(1, refaults/reads)
}

// refaulted are the bytes a memory cgroup (by its limit's key) read back
// after reclaim evicted them: the larger of the kernel's refaults with
// the re-reads it missed for the shadow entries it dropped (estimated
// from its counters), and the re-reads of evicted pages wolf measured
// (a sample, which misses what its table or a shed program lost, and
// pages evicted before it attached). The finding is the one that said
// the larger.
func (e *engine) refaulted(mk string) (float64, *fact.Usage) {
	var by [3]float64
	var u [3]*fact.Usage
	for _, mu := range e.usage[mk] {
		if mu.Unit != "bytes" {
			continue
		}
		i := -1
		switch mu.Activity {
		case fact.ActivityRefault:
			i = 0
		case fact.ActivityEvictedReread:
			i = 1
		case fact.ActivityShadowlessReread:
			i = 2
		}
		if i >= 0 {
			by[i] += mu.Amount
			if u[i] == nil {
				u[i] = mu
			}
		}
	}
	kernel, ku := by[0]+by[2], u[0]
	if ku == nil {
		ku = u[2]
	}
	if by[1] > kernel {
		return by[1], u[1]
	}
	return kernel, ku
}

// refaultReads: a cgroup that reads a device and refaults pages its own
// memory limit evicted reads them back for that limit. Refaults are
// counted by the memory controller (workingset_refault_file) or measured
// (refaulted), reads by the block layer per cgroup: the smaller of the
// two is read for the limit.
func (e *engine) refaultReads(k string, add func(on string, amt float64, unit, what string, t fact.Task, r ref)) {
	reads := e.readsByMemcg(k)
	for _, cg := range sortedKeys(reads) {
		mk := e.canon(fact.MemoryKey(cg))
		if amt, mu := e.refaulted(mk); mu != nil {
			add(mk, min(amt, reads[cg]), "bytes", "refault reads", fact.Task{MemCgroup: cg}, refOf(mu.Finding, mu.FindingTitle))
		}
	}
}

// readsByMemcg are the bytes a device's users read, by memory cgroup:
// the user's own, else the one whose processes it is among (on cgroup
// v1 a process's blkio and memory cgroups are different directories).
func (e *engine) readsByMemcg(k string) map[string]float64 {
	reads := map[string]float64{}
	for _, u := range e.usage[k] {
		if u.Unit != "bytes" || u.For != "" || (u.Activity != "" && u.Activity != "read") {
			continue
		}
		cg := u.By.MemCgroup
		if cg == "" {
			cg = e.cgroupOf(fact.Task{PID: u.By.PID}, fact.Memory)
		}
		if cg == "" && u.By.PID == 0 {
			cg = u.By.IOCgroup
		}
		if cg != "" {
			reads[cg] += u.Amount
		}
	}
	return reads
}

// topConsumers are the largest plain consumers of a resource: processes
// (not their threads, not directed use), largest first.
func (e *engine) topConsumers(k string) []*fact.Usage {
	var us []*fact.Usage
	for _, u := range e.usage[k] {
		if u.For != "" || u.Activity == fact.ActivityRefault || u.Activity == fact.ActivityEvictedReread || u.Activity == fact.ActivityShadowlessReread || (u.By.TID != 0 && u.By.TID != u.By.PID && u.Threads == 0) {
			continue
		}
		if kindOfKey(k) == fact.HostCPU && u.Unit != "cpu_s" {
			continue
		}
		if u.By.PID == 0 && u.By.TID == 0 && u.By.Comm == "" {
			continue // a cgroup's total: its processes say more
		}
		us = append(us, u)
	}
	us = poolsOf(us)
	total, _ := e.used(k)
	var out []*fact.Usage
	for i, u := range us {
		c := *u
		if c.Share == 0 && total > 0 {
			c.Share = c.Amount / total
		}
		if i >= maxConsumers || (i > 0 && c.Share < 0.05) {
			break
		}
		out = append(out, &c)
	}
	return out
}

// poolsOf sorts consumers largest first and folds the processes that
// share a name and a cgroup into one: eight stress-ng workers at 12% each
// are one consumer of 96% of the CPUs, which is what a person acts on
// (one service, one job), and listing three of them at 12% hides it.
// maxPoolPIDs bounds the pids a pool's hop lists.
const maxPoolPIDs = 16

func poolsOf(us []*fact.Usage) []*fact.Usage {
	byAmount := func(a, b *fact.Usage) int {
		if c := cmp.Compare(b.Amount, a.Amount); c != 0 {
			return c
		}
		return cmp.Compare(a.By.PID, b.By.PID)
	}
	slices.SortStableFunc(us, byAmount)
	type key struct{ comm, cpu, mem, io, unit, act string }
	members := map[key][]*fact.Usage{}
	var order []key
	var out []*fact.Usage
	for _, u := range us {
		if u.By.PID == 0 || (u.By.TID != 0 && u.By.TID != u.By.PID) {
			out = append(out, u) // tasks that exited, by name; threads
			continue
		}
		k := key{u.By.Comm, u.By.CPUCgroup, u.By.MemCgroup, u.By.IOCgroup, u.Unit, u.Activity}
		if members[k] == nil {
			order = append(order, k)
		}
		members[k] = append(members[k], u)
	}
	for _, k := range order {
		m := members[k]
		if len(m) == 1 {
			out = append(out, m[0])
			continue
		}
		p := *m[0] // the largest stands for the pool
		p.Threads = 0
		for _, u := range m {
			p.PIDs = append(p.PIDs, u.By.PID)
			p.Threads += max(u.Threads, 1)
			if u != m[0] {
				p.Amount += u.Amount
				p.Share += u.Share
				p.BusyShare += u.BusyShare
			}
		}
		out = append(out, &p)
	}
	slices.SortStableFunc(out, byAmount)
	return out
}

// forWhom names the resource a directed use was for.
func forWhom(e *engine, k string) string {
	r := e.resource(k)
	switch r.Kind {
	case fact.Memory:
		if k == fact.MemoryKey("/") {
			return "for the host's memory"
		}
		return "in memory cgroup " + r.Cgroup
	case fact.CPUQuota:
		return "in cgroup " + r.Cgroup
	case fact.Softirq:
		return ""
	}
	return "for " + nameOf(e.subjectOf(k))
}

// timeOf says a resource's time: "the CPUs' busy time", "vda's time".
func timeOf(s finding.Subject) string {
	switch {
	case s.Role == finding.RoleCPU && s.CPU == nil && s.Comm == "all CPUs":
		return "the CPUs' busy time"
	case s.Role == finding.RoleDevice:
		return nameOf(s) + "'s throughput"
	}
	return nameOf(s) + "'s time"
}

func activityName(a string) string {
	switch a {
	case "reclaim":
		return "memory reclaim"
	case "softirq":
		return "softirq processing"
	case "":
		return "work"
	}
	return a
}

func cgroupName(t fact.Task) string { return cmp.Or(t.MemCgroup, t.CPUCgroup, t.IOCgroup) }

func unitKey(unit, fallback string) string {
	u := cmp.Or(unit, fallback)
	switch u {
	case "cpu_s", "bytes", "pages", "requests", "ns":
		return u
	}
	return "amount_" + u
}

func amountText(v float64, unit string) string {
	switch unit {
	case "cpu_s":
		return fmt.Sprintf("%s CPU", ms(v*1000))
	case "bytes":
		return mib(v)
	case "ns":
		return ms(v / 1e6)
	}
	return fmt.Sprintf("%.0f %s", v, unit)
}

func consumerLabel(u *fact.Usage) string {
	s := label(taskSubject(u.By, ""))
	switch {
	case u.By.PID == 0 && u.By.TID == 0 && u.By.Comm != "" && u.Threads > 0:
		return fmt.Sprintf("%s (%d tasks that exited)", u.By.Comm, u.Threads)
	case u.By.PID == 0 && u.By.TID == 0 && u.By.Comm != "":
		return u.By.Comm
	case u.By.PID == 0 && u.By.TID == 0:
		s = "cgroup " + cgroupName(u.By)
	}
	switch {
	case len(u.PIDs) > 1 && u.Threads > len(u.PIDs):
		return fmt.Sprintf("%s (%d processes, %d threads)", u.By.Comm, len(u.PIDs), u.Threads)
	case len(u.PIDs) > 1:
		return fmt.Sprintf("%s (%d processes)", u.By.Comm, len(u.PIDs))
	case u.Threads > 1:
		s = strings.TrimSuffix(s, ")") + fmt.Sprintf(", %d threads)", u.Threads)
	}
	return s
}

func round1(v float64) float64 { return float64(int64(v*10+0.5)) / 10 }
func round3(v float64) float64 { return float64(int64(v*1000+0.5)) / 1000 }

func pct1(f float64) string {
	p := 100 * f
	if p >= 10 || p == 0 {
		return fmt.Sprintf("%.0f%%", p)
	}
	return fmt.Sprintf("%.1f%%", p)
}
