package diagnose

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/wolf-investigator/wolf/internal/fact"
)

func plural(n int) string {
	if n == 1 {
		return "s"
	}
	return ""
}

// shownVictims are the victims said as such: not the holders in the chain.
func (d *draft) shownVictims() []*victim {
	var out []*victim
	for _, v := range d.victims {
		if !d.holders[v.w.Task.TID] {
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		return d.victims
	}
	return out
}

func (d *draft) victimWords() string {
	var names []string
	seen := map[string]bool{}
	vs := d.shownVictims()
	for _, v := range vs {
		n := label(taskSubject(v.w.Task, ""))
		if seen[n] {
			continue
		}
		seen[n] = true
		if len(names) == 3 {
			names = append(names, fmt.Sprintf("%d more", len(vs)-3))
			break
		}
		names = append(names, n)
	}
	return strings.Join(names, ", ")
}

// ended says every victim's wait began before wolf attached and ended
// while it watched (fact.Wait.AtLeast): the stall is over, and its times
// are lower bounds.
func (d *draft) ended() bool {
	for _, v := range d.victims {
		if !v.w.AtLeast {
			return false
		}
	}
	return len(d.victims) > 0
}

func (d *draft) worst() time.Duration {
	var w time.Duration
	for _, v := range d.victims {
		w = max(w, v.w.Max)
	}
	return w
}

// lostBy sums the victims' lost time by how they waited.
func (d *draft) lostBy() (map[fact.WaitKind]time.Duration, []fact.WaitKind) {
	m := map[fact.WaitKind]time.Duration{}
	for _, v := range d.victims {
		m[v.w.Kind] += v.lost()
	}
	kinds := make([]fact.WaitKind, 0, len(m))
	for k := range m {
		kinds = append(kinds, k)
	}
	slices.SortStableFunc(kinds, func(a, b fact.WaitKind) int {
		if c := cmp.Compare(m[b], m[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	return m, kinds
}

// quotaDemand says what a throttled cgroup's tasks got and how long they
// waited for more: "stress-ng-cpu (pid 50, 4 threads) got 0.1 CPU and
// waited 36 s throttled".
func (d *draft) quotaDemand(e *engine, rs *sat) string {
	var throttled time.Duration
	for _, v := range d.victims {
		if v.w.Kind == fact.WaitThrottled {
			throttled += v.w.Total
		}
	}
	if throttled == 0 || rs == nil || rs.Used <= 0 {
		return d.victimsPhrase()
	}
	return fmt.Sprintf("%s got %.2g CPU and waited %s throttled", d.whoWords(fact.WaitThrottled), rs.Used, ms(msOf(throttled)))
}

// whoWords names the victims of one kind of wait by process: one process
// with its threads, a few by name, many by count.
func (d *draft) whoWords(kind fact.WaitKind) string {
	return d.whoWordsWhere(kind, nil)
}

// whoWordsWhere is whoWords for the victims keep keeps (nil: all). The
// processes of one name are said once ("stress-ng-cpu (8 processes)"):
// a pool of workers waits as one.
func (d *draft) whoWordsWhere(kind fact.WaitKind, keep func(*victim) bool) string {
	type proc struct {
		pids    []int
		threads int
	}
	byComm := map[string]*proc{}
	var order []string
	for _, v := range d.shownVictims() {
		if v.w.Kind != kind || (keep != nil && !keep(v)) {
			continue
		}
		pid := cmp.Or(v.w.Task.PID, v.w.Task.TID)
		p := byComm[v.w.Task.Comm]
		if p == nil {
			p = &proc{}
			byComm[v.w.Task.Comm] = p
			order = append(order, v.w.Task.Comm)
		}
		if !slices.Contains(p.pids, pid) {
			p.pids = append(p.pids, pid)
		}
		p.threads++
	}
	var parts []string
	for i, comm := range order {
		if i == 3 {
			rest := 0
			for _, c := range order[3:] {
				rest += len(byComm[c].pids)
			}
			parts = append(parts, fmt.Sprintf("%d more %s", rest, map[bool]string{true: "process", false: "processes"}[rest == 1]))
			break
		}
		p := byComm[comm]
		switch {
		case len(p.pids) > 1:
			parts = append(parts, fmt.Sprintf("%s (%d processes)", comm, len(p.pids)))
		case p.threads > 1:
			parts = append(parts, fmt.Sprintf("%s (pid %d, %d threads)", comm, p.pids[0], p.threads))
		default:
			parts = append(parts, fmt.Sprintf("%s (pid %d)", comm, p.pids[0]))
		}
	}
	return strings.Join(parts, ", ")
}

// victimsPhrase says what the victims lost, the largest kind of wait
// first: "stress-ng (pid 5) and 3 more waited 38 s for a CPU".
func (d *draft) victimsPhrase() string {
	m, kinds := d.lostBy()
	if len(kinds) == 0 {
		return ""
	}
	n := 0
	for _, v := range d.victims {
		if v.w.Kind == kinds[0] {
			n++
		}
	}
	who := d.whoWords(kinds[0])
	if who == "" {
		who = fmt.Sprintf("%d tasks", n)
	}
	total := ms(msOf(m[kinds[0]]))
	switch kinds[0] {
	case fact.WaitRunQueue:
		return fmt.Sprintf("%s waited %s for a CPU", who, total)
	case fact.WaitThrottled:
		return fmt.Sprintf("%s were throttled %s in all", who, total)
	case fact.WaitReclaim:
		return fmt.Sprintf("%s spent %s in reclaim, calls up to %s", who, total, ms(msOf(d.worstOf(fact.WaitReclaim))))
	case fact.WaitIO:
		return fmt.Sprintf("%s waited %s for I/O", who, total)
	case fact.WaitDirty:
		return fmt.Sprintf("%s were paused %s writing dirty pages", who, total)
	case fact.WaitJournal:
		return fmt.Sprintf("%s waited %s for journal commits", who, total)
	case fact.WaitSoftirq:
		if worst := d.worstOf(fact.WaitSoftirq); worst > 0 {
			return fmt.Sprintf("%s lost %s to it, in runs of up to %s", who, total, ms(msOf(worst)))
		}
		// Time taken a short run at a time (the runs' longest unknown).
		return fmt.Sprintf("%s lost %s to it", who, total)
	}
	return fmt.Sprintf("%s wait%s up to %s", who, plural(n), ms(msOf(d.worst())))
}

func (d *draft) worstOf(k fact.WaitKind) time.Duration {
	var w time.Duration
	for _, v := range d.victims {
		if v.w.Kind == k {
			w = max(w, v.w.Max)
		}
	}
	return w
}

// consumersWords names a saturated resource's top consumers with their
// shares: "stress-ng (pid 5, 8 threads) 96%".
func consumersWords(cs []*fact.Usage) string {
	var parts []string
	for _, u := range cs {
		share := u.Share
		parts = append(parts, fmt.Sprintf("%s %s", consumerLabel(u), pct1(share)))
	}
	return strings.Join(parts, ", ")
}

// words writes the title and the summary.
func (d *draft) words(e *engine) (title, summary string) {
	b := d.best
	lockName := ""
	holder := ""
	if b.lock != "" {
		lockName = nameOf(e.subjectOf(b.lock))
	}
	if b.hold != nil {
		holder = label(taskSubject(b.hold.Holder, ""))
	}
	rs := e.saturation(d.root)
	victims, n := d.victimWords(), len(d.shownVictims())
	lockTail := fmt.Sprintf("%s wait%s up to %s", victims, plural(n), ms(msOf(d.worst())))
	switch d.kind {
	case "memcg-limit":
		cg := e.resource(d.root).Cgroup
		lim := ""
		if v, _ := satNum(rs, "limit_bytes"); v > 0 {
			lim = " (" + mib(v) + ")"
		}
		switch {
		case lockName != "" && holder != "":
			title = fmt.Sprintf("Memory cgroup %s at its limit%s: its reclaim runs under %s, held by %s; %s", cg, lim, lockName, holder, lockTail)
		default:
			title = fmt.Sprintf("Memory cgroup %s at its limit%s: %s", cg, lim, d.victimsPhrase())
		}
		switch {
		case d.via == fact.HostCPUKey() && d.viaFrac > 0:
			title += fmt.Sprintf("; its %s took %s of the CPUs' busy time", d.activityWhat(), pct1(d.viaFrac))
		case d.via != "" && kindOfKey(d.via) == fact.Device && d.viaFrac > 0:
			title += fmt.Sprintf("; %s of what %s read were refaults of pages the limit evicted", pct1(d.viaFrac), e.resource(d.via).Device)
		}
	case "cpu-quota":
		cg := e.resource(d.root).Cgroup
		if lockName != "" && holder != "" {
			title = fmt.Sprintf("CPU quota of cgroup %s (%s): %s held %s while throttled; %s", cg, quotaShort(rs), holder, lockName, lockTail)
		} else {
			title = fmt.Sprintf("CPU quota of cgroup %s (%s): %s", cg, quotaShort(rs), d.quotaDemand(e, rs))
		}
	case "host-cpu":
		who := consumersWords(b.consumers)
		cpus := ""
		if rs != nil && rs.Limit > 0 {
			cpus = fmt.Sprintf(" %.0f", rs.Limit)
		}
		if who == "" {
			who = "tasks wolf could not name"
		}
		if lockName != "" && holder != "" {
			title = fmt.Sprintf("Saturated CPUs (%s of the%s CPUs): %s waited for a CPU while holding %s; %s", who, cpus, holder, lockName, lockTail)
		} else {
			title = fmt.Sprintf("Saturated CPUs: %s of the%s CPUs; %s", who, cpus, d.victimsPhrase())
		}
	case "fuse-daemon":
		switch {
		case lockName != "" && holder != "" && d.ended():
			title = fmt.Sprintf("FUSE daemon %s was slow to answer: %s held %s while it waited, and %s waited behind it, at least %s", label(b.rootSubj), holder, lockName, victims, ms(msOf(d.worst())))
		case lockName != "" && holder != "":
			title = fmt.Sprintf("FUSE daemon %s has not answered: %s holds %s while it waits, and %s hang behind it", label(b.rootSubj), holder, lockName, victims)
		default:
			title = fmt.Sprintf("FUSE daemon %s has not answered: %s", label(b.rootSubj), lockTail)
		}
	case "reclaim-under-lock":
		title = fmt.Sprintf("%s reclaims memory while holding %s; %s", holder, lockName, lockTail)
	case "deadlock":
		title = fmt.Sprintf("Deadlock: the holders of %s wait for each other; %s hang", lockName, victims)
	case "device":
		who := consumersWords(b.consumers)
		title = fmt.Sprintf("Device %s is the bottleneck%s%s: %s", e.resource(d.root).Device, deviceNumbers(rs), ifSome(" (used by "+who+")", who), d.victimsPhrase())
	case "io-limit":
		title = d.ioLimitTitle(e, rs)
	case "dirty-throttle":
		title = fmt.Sprintf("Dirty-page throttling on %s%s: %s", cmp.Or(e.resource(d.root).Device, "the host"), satShort(rs), d.victimsPhrase())
	case "journal":
		title = fmt.Sprintf("Journal commits on %s%s: %s", e.resource(d.root).Device, satShort(rs), d.victimsPhrase())
	case "softirq":
		name := cmp.Or(e.resource(d.root).Name, nameOf(b.rootSubj))
		title = fmt.Sprintf("%s%s: %s", strings.ToUpper(name[:1]), name[1:], d.victimsPhrase())
		if d.via == fact.HostCPUKey() && d.viaFrac > 0 {
			title += fmt.Sprintf("; it took %s of the CPUs' busy time", pct1(d.viaFrac))
		}
	case "host-memory":
		title = "The host is short of memory: " + d.victimsPhrase()
	default:
		doing := map[string]string{"holder-work": " working on a CPU", "holder-runnable": " waiting for a CPU", "holder-blocked": " asleep", "throttled-holder": " throttled"}[d.kind]
		if lockName != "" {
			title = fmt.Sprintf("%s holds %s%s; %s", holder, lockName, doing, lockTail)
		} else {
			title = d.victimsPhrase()
		}
	}
	var parts []string
	for _, hp := range d.hops {
		parts = append(parts, hp.Text)
	}
	summary = strings.Join(parts, "; ") + "."
	return title, summary
}

func ifSome(s, cond string) string {
	if cond == "" {
		return ""
	}
	return s
}

func quotaShort(s *sat) string {
	q, _ := satNum(s, "quota_us")
	p, _ := satNum(s, "period_us")
	out := "quota"
	if q > 0 && p > 0 {
		out = fmt.Sprintf("%s per %s", ms(q/1000), ms(p/1000))
	}
	if v, ok := satNum(s, "throttled_pct"); ok {
		out += fmt.Sprintf(", throttled in %.0f%% of periods", v)
	}
	return out
}

func satShort(s *sat) string {
	if s == nil || s.Level <= 0 {
		return ""
	}
	return fmt.Sprintf(" (%.0f%% of its limit)", 100*s.Level)
}

// rivalText says in one line why a rival is not the root.
func (d *draft) rivalText(e *engine, r *branch, share float64) string {
	name := rivalName(e, r)
	head := fmt.Sprintf("not %s (%s of the victims' time)", name, pct1(share))
	b := d.best
	switch {
	case r.kind == "host-cpu" && d.via == fact.HostCPUKey() && d.viaFrac > 0:
		return fmt.Sprintf("not the host's CPUs: %s of their busy time went to %s", pct1(d.viaFrac), d.viaWhat(e))
	case r.kind == "device" && d.via == r.root && d.viaFrac > 0:
		return fmt.Sprintf("not device %s: %s of what it read were refaults of pages %s", e.resource(r.root).Device, pct1(d.viaFrac), d.evictedBy(e))
	case d.kind == "host-cpu" && r.via == fact.HostCPUKey() && r.viaFrac > 0:
		what := "it"
		if r.viaWhat != "" && kindOfKey(r.root) == fact.Memory {
			what = "its " + strings.TrimPrefix(r.viaWhat, "memory ")
		}
		return fmt.Sprintf("%s: %s took only %s of the CPUs' busy time", head, what, pct1(r.viaFrac))
	case strings.HasPrefix(r.kind, "holder-") && r.hold != nil:
		return fmt.Sprintf("%s: most of %s's holds went elsewhere", head, label(taskSubject(r.hold.Holder, "")))
	}
	return fmt.Sprintf("%s, against %s to %s", head, pct1(d.weight/d.lost), rivalName(e, b))
}

// evictedBy says who evicted the pages a device read back.
func (d *draft) evictedBy(e *engine) string {
	r := e.resource(d.root)
	if r.Kind == fact.Memory && r.Cgroup != "/" {
		return "the memory limit of cgroup " + r.Cgroup + " evicted"
	}
	return "evicted for lack of memory"
}

// viaWhat names what a root's activity on the saturated resource was.
func (d *draft) viaWhat(e *engine) string {
	r := e.resource(d.root)
	switch r.Kind {
	case fact.Softirq:
		return nameOf(e.subjectOf(d.root))
	case fact.Memory:
		if r.Cgroup == "/" {
			return strings.Replace(d.viaActivity(), "memory reclaim", "reclaim", 1) + " for the host's memory"
		}
		return d.viaActivity() + " in memory cgroup " + r.Cgroup
	}
	return nameOf(e.subjectOf(d.root))
}

// viaActivity is what the root's use of the saturated resource was:
// "memory reclaim", "memory reclaim and page-cache misses".
func (d *draft) viaActivity() string {
	if d.viaAct == "" {
		return "memory reclaim"
	}
	return d.viaAct
}

// activityWhat is viaActivity said of a memory cgroup: "reclaim",
// "reclaim and page-cache misses".
func (d *draft) activityWhat() string {
	return strings.TrimPrefix(d.viaActivity(), "memory ")
}

func rivalName(e *engine, b *branch) string {
	switch b.kind {
	case "host-cpu":
		return "the host's CPUs"
	case "memcg-limit":
		return "the memory limit of cgroup " + b.rootSubj.Cgroup
	case "cpu-quota":
		return "the CPU quota of cgroup " + b.rootSubj.Cgroup
	case "holder-work", "holder-runnable", "holder-blocked", "holder-unknown", "throttled-holder":
		return label(b.rootSubj) + "'s own work under the lock"
	case "fuse-daemon":
		return "FUSE daemon " + label(b.rootSubj)
	case "wolf":
		return "wolf's own work on the CPUs"
	}
	return nameOf(b.rootSubj)
}

// rootRemedy is what the investigator that measured a limit says to do
// about it.
func (e *engine) rootRemedy(k string) []string {
	if s := e.saturation(k); s != nil {
		return s.Remediation
	}
	return nil
}

func (d *draft) rootRemedy(e *engine) []string {
	b := d.best
	lockName := ""
	if b.lock != "" {
		lockName = nameOf(e.subjectOf(b.lock))
	}
	switch d.kind {
	case "memcg-limit":
		if len(d.remedy) > 0 {
			return nil // the cgroup's own finding says what to do about its limit
		}
		cg := e.resource(d.root).Cgroup
		if lockName != "" {
			return []string{fmt.Sprintf("Give cgroup %s memory headroom (v1 memory.limit_in_bytes, v2 memory.max) or shrink what it keeps in memory: its tasks reclaim on every charge, and the one holding %s makes everyone behind the lock wait for that reclaim.", cg, lockName)}
		}
		return []string{fmt.Sprintf("Give cgroup %s memory headroom (v1 memory.limit_in_bytes, v2 memory.max) or shrink its working set: its tasks reclaim on every charge and read back what the limit evicted.", cg)}
	case "cpu-quota":
		cg := e.resource(d.root).Cgroup
		if lockName == "" && len(d.remedy) > 0 {
			return nil // the quota's own finding says what to do about it
		}
		if lockName != "" {
			return []string{fmt.Sprintf("Raise the CPU quota of cgroup %s (v1 cpu.cfs_quota_us, v2 cpu.max) or run fewer busy threads in it: a lock holder throttled with its cgroup keeps the lock until the next period.", cg)}
		}
		return []string{fmt.Sprintf("Raise the CPU quota of cgroup %s (v1 cpu.cfs_quota_us, v2 cpu.max) if its tasks should run faster, or run fewer busy threads in it: its tasks wait because the cgroup used up its quota, not because the host is busy.", cg)}
	case "host-cpu":
		who := consumersWords(b.consumers)
		if who == "" {
			who = "the tasks above"
		}
		r := fmt.Sprintf("The CPUs are busy with %s: run less of it at once (fewer threads, a lower priority with nice or SCHED_BATCH, a cap with cpu.max in its cgroup), or give the tasks that wait more weight (cpu.weight of their cgroup).", who)
		if lockName != "" {
			r += fmt.Sprintf(" The holder of %s waits for a CPU like everyone else and makes the lock's waiters wait with it.", lockName)
		}
		return []string{r}
	case "holder-work", "reclaim-under-lock", "holder-blocked", "holder-runnable":
		h := b.hold.Holder
		return []string{fmt.Sprintf("Look at what %s does under the lock: cat /proc/%d/task/%d/stack, or wolf locks --pid %d for its holds and a profile under the lock.", label(taskSubject(h, "")), h.PID, h.TID, h.PID)}
	case "deadlock":
		return []string{"A lock-order deadlock does not resolve by itself: the tasks in the chain must be killed (if killable) or the host rebooted; report the stacks upstream."}
	case "io-limit":
		r := e.resource(d.root)
		if rs := e.saturation(d.root); rs != nil && len(rs.Remediation) > 0 {
			return rs.Remediation
		}
		return []string{fmt.Sprintf("Raise the I/O limit of cgroup %s on %s (v1 blkio.throttle.*_device, v2 io.max) if its tasks should go faster, or reduce what they read and write: they wait for the throttle, not for the device.", r.Cgroup, r.Device)}
	case "device":
		who := consumersWords(b.consumers)
		return []string{fmt.Sprintf("Device %s is at its capacity%s: spread the I/O over more devices, cap the heaviest users (io.max, blkio.throttle), or move latency-sensitive work elsewhere.", e.resource(d.root).Device, ifSome(" (busiest users: "+who+")", who))}
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
