package diagnose

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/wolf-investigator/wolf/internal/fact"
)

// ref names a finding a fact came from: its id and, when several share
// the id, its title.
type ref struct{ id, title string }

func refOf(id, title string) ref { return ref{id, title} }

// engine indexes one window's facts for the joins.
type engine struct {
	set    *fact.Set
	window time.Duration
	// alias maps a key to the canonical key of the same resource (a lock
	// named by address in one fact and as a process's mmap_lock in
	// another).
	alias     map[string]string
	resources map[string]*fact.Resource
	holds     map[string][]*fact.Hold
	usage     map[string][]*fact.Usage
	sats      map[string]*sat
	waitsOf   map[int][]*fact.Wait // by tid
	// ongoing is what a task that holds something is doing right now (a
	// hung lock owner), by tid.
	ongoing map[int]*fact.Split
	// seenIn is a process's cgroup per controller as any fact named it:
	// a process that exited before the window's end is no longer in
	// /proc, but the investigator that saw it in reclaim said where.
	seenIn map[fact.Kind]map[int]string
	// selfFrac is wolf's own share of the CPUs' busy time; selfShort
	// says the CPUs were saturated only with it (discountSelf).
	selfFrac  float64
	selfShort bool
}

// sat is a resource's saturation, merged across the investigators that
// measured it.
type sat struct {
	fact.Saturation
	refs []ref
}

func newEngine(s *fact.Set) *engine {
	e := &engine{set: s, window: s.Window, alias: map[string]string{}, resources: map[string]*fact.Resource{},
		holds: map[string][]*fact.Hold{}, usage: map[string][]*fact.Usage{}, sats: map[string]*sat{},
		waitsOf: map[int][]*fact.Wait{}, ongoing: map[int]*fact.Split{}}
	if e.window <= 0 {
		e.window = defaultWindow
	}
	// A lock known both by its address and as a process's mmap_lock keys
	// as the mmap_lock, whichever fact named it first.
	for _, r := range s.Resources {
		if r.Kind == fact.Lock && r.LockAddr != "" && r.MMPID > 0 {
			e.alias[fact.LockKey(r.LockAddr)] = fact.MMLockKey(r.MMPID)
		}
	}
	for _, k := range sortedKeys(s.Resources) {
		r := *s.Resources[k]
		ck := e.canon(k)
		if old, ok := e.resources[ck]; ok {
			mergeResource(old, &r)
			continue
		}
		r.Key = ck
		if ck != k && r.Kind == fact.Lock {
			r.MMPID = mmOfKey(ck)
		}
		e.resources[ck] = &r
	}
	for i := range s.Holds {
		h := &s.Holds[i]
		k := e.canon(h.On)
		e.holds[k] = append(e.holds[k], h)
		if h.Split != nil && h.Split.State != "" && h.Holder.TID != 0 {
			e.ongoing[h.Holder.TID] = h.Split
		}
	}
	for i := range s.Usage {
		u := &s.Usage[i]
		k := e.canon(u.On)
		e.usage[k] = append(e.usage[k], u)
	}
	e.indexCgroups(s)
	for i := range s.Saturations {
		x := &s.Saturations[i]
		k := e.canon(x.On)
		m := e.sats[k]
		if m == nil {
			m = &sat{Saturation: *x}
			m.Numbers = map[string]float64{}
			m.Members = nil
			e.sats[k] = m
		} else {
			m.AtLimit = m.AtLimit || x.AtLimit
			if x.Level > m.Level {
				m.Level, m.Used, m.Limit, m.Unit = x.Level, x.Used, x.Limit, x.Unit
			}
			if len(m.Remediation) == 0 {
				m.Remediation = x.Remediation
			}
		}
		for n, v := range x.Numbers {
			if _, ok := m.Numbers[n]; !ok {
				m.Numbers[n] = v
			}
		}
		for _, p := range x.Members {
			if !slices.Contains(m.Members, p) {
				m.Members = append(m.Members, p)
			}
		}
		if x.Finding != "" {
			m.refs = append(m.refs, refOf(x.Finding, x.FindingTitle))
		}
	}
	e.discountSelf()
	for i := range s.Waits {
		w := &s.Waits[i]
		if w.Task.TID != 0 {
			e.waitsOf[w.Task.TID] = append(e.waitsOf[w.Task.TID], w)
		}
	}
	return e
}

// discountSelf notes wolf's own share of the CPUs' busy time, and whether
// the CPUs were short only with it. /proc/stat's busy time counts wolf's
// too, and where wolf is costly (an emulated machine, where its programs
// and its own work took half of two CPUs) that can be most of it. A task
// that waited for a CPU then waited partly for wolf: that part of its
// wait traces to wolf (consumed), a root that is no diagnosis. When the
// tasks sched saw (all but wolf) used less than a saturation, and the
// busy time without wolf's share is less too, nothing says the host's
// tasks would have waited without wolf: the CPUs are no root of their own
// (worthIt), though what their time went to for another resource (reclaim
// for a memory limit) still counts for it.
func (e *engine) discountSelf() {
	s := e.sats[fact.HostCPUKey()]
	if s == nil || !s.AtLimit {
		return
	}
	self, ok1 := s.Numbers["wolf_busy_pct"]
	tasks, ok2 := s.Numbers["tasks_busy_pct"]
	if !ok1 || !ok2 || self <= 0 {
		return
	}
	// The CPUs' busy time over sched's window, the same as wolf's share;
	// else the checklist's, over a window of its own.
	busy, ok := s.Numbers["cpus_busy_pct"]
	if !ok || busy <= 0 {
		busy, ok = s.Numbers["busy_pct"]
	}
	if !ok || busy <= 0 {
		busy = tasks + self
	}
	e.selfFrac = min(1, self/max(busy, tasks+self))
	e.selfShort = tasks < fact.HostCPUSaturatedPct && busy-self < fact.HostCPUSaturatedPct
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// mergeResource fills what old lacks from r; the most telling name wins
// (one that says whose mmap_lock it is).
func mergeResource(old, r *fact.Resource) {
	if old.Name == "" || (strings.HasPrefix(r.Name, "mmap_lock of ") && !strings.HasPrefix(old.Name, "mmap_lock of ")) {
		if r.Name != "" {
			old.Name = r.Name
		}
	}
	if old.Cgroup == "" {
		old.Cgroup = r.Cgroup
	}
	if old.CgroupID == 0 {
		old.CgroupID = r.CgroupID
	}
	if old.Device == "" {
		old.Device = r.Device
	}
	if old.LockAddr == "" {
		old.LockAddr = r.LockAddr
	}
	if old.MMPID == 0 {
		old.MMPID = r.MMPID
	}
	if old.LockType == "" {
		old.LockType = r.LockType
	}
	if old.Conn == "" {
		old.Conn = r.Conn
	}
	if len(old.Under) == 0 {
		old.Under = r.Under
	}
}

// canon is the canonical key of a resource key.
func (e *engine) canon(k string) string {
	if c, ok := e.alias[k]; ok {
		return c
	}
	return k
}

// resource is the resource a key names; one made up from the key when no
// fact described it.
func (e *engine) resource(k string) *fact.Resource {
	if r, ok := e.resources[k]; ok {
		return r
	}
	r := &fact.Resource{Key: k, Kind: kindOfKey(k), CPU: -1}
	switch r.Kind {
	case fact.Lock:
		r.MMPID = mmOfKey(k)
		if r.MMPID == 0 {
			r.LockAddr = strings.TrimPrefix(k, "lock:addr:")
		}
	case fact.CPUQuota:
		r.Cgroup = strings.TrimPrefix(k, "cpu-quota:")
	case fact.Memory:
		r.Cgroup = strings.TrimPrefix(k, "memory:")
	case fact.Device:
		r.Device = strings.TrimPrefix(k, "device:")
	case fact.FUSE:
		r.Conn = strings.TrimPrefix(k, "fuse:")
	case fact.IOLimit:
		rest := strings.TrimPrefix(k, "io-limit:")
		if i := strings.LastIndex(rest, ":"); i > 0 {
			r.Cgroup, r.Device = rest[:i], rest[i+1:]
			r.Name = fmt.Sprintf("the I/O limit of cgroup %s on %s", r.Cgroup, r.Device)
		}
	}
	e.resources[k] = r
	return r
}

// kindOfKey reads a key's kind off its prefix (the *Key functions of
// internal/fact).
func kindOfKey(k string) fact.Kind {
	prefix, _, _ := strings.Cut(k, ":")
	switch prefix {
	case "host-cpu":
		return fact.HostCPU
	case "cpu":
		return fact.CPU
	case "cpu-quota":
		return fact.CPUQuota
	case "memory":
		return fact.Memory
	case "lock":
		return fact.Lock
	case "fuse":
		return fact.FUSE
	case "device":
		return fact.Device
	case "io-limit":
		return fact.IOLimit
	case "dirty":
		return fact.Dirty
	case "journal":
		return fact.Journal
	case "softirq":
		return fact.Softirq
	case "site":
		return fact.Site
	}
	return fact.Kind(prefix)
}

// mmOfKey is the process of an mmap_lock key, 0 for other keys.
func mmOfKey(k string) int {
	s, ok := strings.CutPrefix(k, "lock:mm:")
	if !ok {
		return 0
	}
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// on is the resource a wait was on, canonical. A wait on a device by a
// task whose own I/O cgroup (or an ancestor) was held back by its limit
// on that device in the window is a wait on that limit: blk-throttle
// holds the task's bios before they become requests, so the device is
// not what it waited for, whatever the request that woke it said.
func (e *engine) on(w *fact.Wait) string {
	k := e.canon(w.On)
	if w.Kind != fact.WaitIO || kindOfKey(k) != fact.Device || w.Task.IOCgroup == "" {
		return k
	}
	if lk := e.limitUnder(w.Task.IOCgroup, e.resource(k).Device, 0); lk != "" {
		return lk
	}
	return k
}

// limitUnder is the limit of cgroup cg (or an ancestor) that held back
// its I/O on dev, or on a device under dev (a loop device's backing
// disk, a device-mapper member: the upper device's I/O goes on to it,
// issued by the kernel for the same cgroup), "" when none did.
func (e *engine) limitUnder(cg, dev string, depth int) string {
	for c := cg; ; c = path.Dir(c) {
		if s := e.sats[fact.IOLimitKey(c, dev)]; s != nil && s.AtLimit {
			return fact.IOLimitKey(c, dev)
		}
		if c == "/" || c == "." || c == "" {
			break
		}
	}
	if depth >= maxDepth {
		return ""
	}
	for _, u := range e.resource(fact.DeviceKey(dev)).Under {
		if lk := e.limitUnder(cg, u, depth+1); lk != "" {
			return lk
		}
	}
	return ""
}

// saturation is the resource's merged saturation, nil when none was
// measured.
func (e *engine) saturation(k string) *sat { return e.sats[k] }

// cgroupOf is the cgroup of a controller's kind (CPUQuota, Memory,
// IOLimit) that a task is in: its own fact's path, else a resource of
// that kind whose members include its process.
func (e *engine) cgroupOf(t fact.Task, kind fact.Kind) string {
	own := map[fact.Kind]string{fact.CPUQuota: t.CPUCgroup, fact.Memory: t.MemCgroup, fact.IOLimit: t.IOCgroup}[kind]
	if own != "" {
		// The limit may be set on an ancestor: the nearest one measured.
		for p := own; ; p = path.Dir(p) {
			var k string
			switch kind {
			case fact.CPUQuota:
				k = fact.CPUQuotaKey(p)
			case fact.Memory:
				k = fact.MemoryKey(p)
			}
			if k != "" && e.sats[k] != nil {
				return p
			}
			if p == "/" || p == "." || p == "" {
				return own
			}
		}
	}
	if t.PID == 0 {
		return ""
	}
	best, bestLevel := "", -1.0
	for _, k := range sortedKeys(e.sats) {
		s := e.sats[k]
		if kindOfKey(k) != kind || !slices.Contains(s.Members, t.PID) {
			continue
		}
		lvl := s.Level
		if s.AtLimit {
			lvl += 10
		}
		if lvl > bestLevel {
			best, bestLevel = e.resource(k).Cgroup, lvl
		}
	}
	if best == "" {
		if cg := e.seenIn[kind][t.PID]; cg != "" {
			return e.cgroupOf(fact.Task{CPUCgroup: cg, MemCgroup: cg, IOCgroup: cg}, kind)
		}
	}
	return best
}

// indexCgroups notes each process's cgroups from the facts that name a
// process and its cgroup together. Only a process named with one cgroup
// of a controller is noted (pids are reused; two cgroups for one pid in
// one window say nothing).
func (e *engine) indexCgroups(s *fact.Set) {
	e.seenIn = map[fact.Kind]map[int]string{}
	conflict := map[fact.Kind]map[int]bool{}
	note := func(t fact.Task) {
		pid := t.PID
		if pid == 0 {
			return
		}
		for kind, cg := range map[fact.Kind]string{fact.CPUQuota: t.CPUCgroup, fact.Memory: t.MemCgroup, fact.IOLimit: t.IOCgroup} {
			if cg == "" {
				continue
			}
			if e.seenIn[kind] == nil {
				e.seenIn[kind], conflict[kind] = map[int]string{}, map[int]bool{}
			}
			if old, ok := e.seenIn[kind][pid]; ok && old != cg {
				conflict[kind][pid] = true
			}
			e.seenIn[kind][pid] = cg
		}
	}
	for i := range s.Usage {
		note(s.Usage[i].By)
	}
	for i := range s.Waits {
		note(s.Waits[i].Task)
	}
	for i := range s.Holds {
		note(s.Holds[i].Holder)
	}
	for kind, pids := range conflict {
		for pid := range pids {
			delete(e.seenIn[kind], pid)
		}
	}
}

// bestHold picks the fact that best says who holds a resource: a
// measured or exactly decoded holder before a latest reader, one that
// says where its time went before one that does not, then the one others
// waited on longest.
func (e *engine) bestHold(k string) *fact.Hold {
	var best *fact.Hold
	score := func(h *fact.Hold) (int, time.Duration) {
		s := 0
		if h.Exact {
			s += 2
		}
		if h.Split != nil || e.ongoing[h.Holder.TID] != nil {
			s++
		}
		return s, max(h.Total, h.Charged)
	}
	for _, h := range e.holds[k] {
		if h.Holder.TID == 0 && h.Holder.PID == 0 {
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

// waitOf is a task's own wait on a resource, nil when no fact names it.
func (e *engine) waitOf(tid int, k string) *fact.Wait {
	for _, w := range e.waitsOf[tid] {
		if e.on(w) == k {
			return w
		}
	}
	return nil
}

// endedOn says every wait on k began before wolf attached and ended while
// it watched (fact.Wait.AtLeast): whoever held it up has let go since.
func (e *engine) endedOn(k string) bool {
	n := 0
	for i := range e.set.Waits {
		w := &e.set.Waits[i]
		if e.on(w) != k {
			continue
		}
		if !w.AtLeast {
			return false
		}
		n++
	}
	return n > 0
}
