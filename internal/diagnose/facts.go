package diagnose

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/wolf-investigator/wolf/internal/finding"
)

// The facts the joins work on, read from the findings' subjects and
// evidence. Which finding says what is the investigators' JSON contract;
// the keys each extractor reads are listed on it.

// lockFact is one lock, however the findings named it.
type lockFact struct {
	key      string // canonical: "mm:PID" for an mmap_lock, else "addr:0x…"
	name     string
	addr     string
	mmPID    int
	findings map[int]bool
}

// waitFact is one task waiting for a lock (or, mode "", a hung task whose
// lock is known).
type waitFact struct {
	task    finding.Subject
	lock    string // lock key
	mode    string // "read", "write" or ""
	totalMs float64
	maxMs   float64
	waits   int
	// windowMs is the window the waits were counted over (0: unknown).
	windowMs float64
	blocked  float64 // seconds in D (hung victims)
	hung     bool
	ongoing  bool
	// behindWriter is the tid of the writer this reader queued behind.
	behindWriter int
	finding      int
}

// longest is the wait's worst single stretch, in ms.
func (w *waitFact) longest() float64 { return max(w.maxMs, w.blocked*1000) }

// holdFact is a task holding a lock while others waited.
type holdFact struct {
	lock    string
	holder  finding.Subject
	exact   bool // false: the latest reader of a reader-owned rw-semaphore
	mode    string
	maxMs   float64 // the longest hold measured
	totalMs float64 // all holds measured (over the threshold)
	holds   int
	charged float64 // ms others waited while it held it (contention owners)
	spend   *spendFact
	finding int
}

// spendFact is where a holder's wall time went while it held the lock:
// measured per hold (locks: on CPU, runnable, throttled, in reclaim) or,
// for a hold still going (hung), what it sleeps on now.
type spendFact struct {
	holdMs, onCPUMs, runnableMs, throttledMs, reclaimMs float64
	scanned, reclaimed                                  float64
	throttleKnown                                       bool // the kernel let wolf see throttling per task
	// span: holdMs is the time between the first and the last wait that
	// found the holder owning the lock, not a measured hold.
	span bool
	// An ongoing hold (hung offender).
	state    string // "R", "S", "D"
	sleepsOn string // "lock", "fuse", "folio", "io", "site"
	site     string // the wait site's function
	lockAddr string // sleepsOn == "lock"
	lockName string
	fuse     *fuseFact
	finding  int
}

// fuseFact is a FUSE request the daemon has not answered, and who serves it.
type fuseFact struct {
	daemons []finding.Subject
	opcode  string
	unique  float64
	ageS    float64
	waiting float64 // requests the connection has waiting
	exact   bool    // the request was found on the daemon's /dev/fuse queue, sent by this task
	conn    string  // the connection, its directory under /sys/fs/fuse/connections
}

// cgroupFact is a cgroup the findings say constrains its tasks.
type cgroupFact struct {
	controller string // "memory" or "cpu"
	subject    finding.Subject
	pids       map[int]bool
	severity   finding.Severity
	finding    int
	ev         map[string]any
}

// facts is everything read from one report.
type facts struct {
	fs     []finding.Finding
	locks  map[string]*lockFact
	addrMM map[string]int // lock address -> mm pid, when a finding said both
	waits  []*waitFact
	holds  []*holdFact
	spends map[int]*spendFact // by tid: ongoing holds (hung offenders)
	// hungIn lists, by tid, the hung findings a task is a victim in: a
	// holder that is itself hung is explained with its chain.
	hungIn  map[int][]int
	cgroups []*cgroupFact
	hostCPU []int // findings saying the host's CPUs are saturated
}

func newFacts(fs []finding.Finding) *facts {
	x := &facts{fs: fs, locks: map[string]*lockFact{}, addrMM: map[string]int{}, spends: map[int]*spendFact{}, hungIn: map[int][]int{}}
	// Two passes: first every lock address that some finding ties to an
	// mm, so that the same lock keys the same way whichever finding names
	// it first.
	for i := range fs {
		f := &fs[i]
		if a, mm := str(f.Evidence, "lock_addr"), num(f.Evidence, "mm_pid"); a != "" && mm > 0 {
			x.addrMM[a] = int(mm)
		}
		for _, s := range f.Subjects {
			if mm := num(s.Evidence, "mm_pid"); s.LockAddr != "" && mm > 0 {
				x.addrMM[s.LockAddr] = int(mm)
			}
		}
	}
	for i := range fs {
		x.read(i)
	}
	return x
}

// lock returns the lock fact for an address and/or mm, creating it.
func (x *facts) lock(name, addr string, mmPID int, fi int) *lockFact {
	if mmPID == 0 && addr != "" {
		mmPID = x.addrMM[addr]
	}
	if mmPID == 0 {
		mmPID = mmOfName(name)
	}
	key := ""
	switch {
	case mmPID > 0:
		key = "mm:" + strconv.Itoa(mmPID)
	case addr != "":
		key = "addr:" + addr
	case name != "":
		key = "name:" + name
	default:
		return nil
	}
	l := x.locks[key]
	if l == nil {
		l = &lockFact{key: key, mmPID: mmPID, findings: map[int]bool{}}
		x.locks[key] = l
	}
	if l.addr == "" {
		l.addr = addr
	}
	// The most telling name wins: one that says whose mmap_lock it is.
	if name != "" && (l.name == "" || (strings.HasPrefix(name, "mmap_lock of ") && !strings.HasPrefix(l.name, "mmap_lock of "))) {
		l.name = name
	}
	if l.name == "" && mmPID > 0 {
		l.name = fmt.Sprintf("mmap_lock of pid %d", mmPID)
	}
	l.findings[fi] = true
	return l
}

// mmOfName reads "mmap_lock of comm (pid N)": the names locks and hung
// give a process's mmap_lock.
func mmOfName(name string) int {
	if !strings.HasPrefix(name, "mmap_lock of ") {
		return 0
	}
	i := strings.LastIndex(name, "(pid ")
	if i < 0 {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSuffix(name[i+5:], ")"))
	return n
}

func (x *facts) read(i int) {
	f := &x.fs[i]
	// A finding about wolf's own doing (its start-up, its own memory)
	// says nothing of the host's tasks: it roots no chain and is no hop.
	if f.Evidence["cause"] == "wolf" {
		return
	}
	if strings.HasPrefix(f.ID, "hung.") {
		for _, s := range f.Subjects {
			if s.Role == finding.RoleVictim && s.TID != 0 {
				x.hungIn[s.TID] = append(x.hungIn[s.TID], i)
			}
		}
	}
	switch {
	case f.ID == "locks.contention" || f.ID == "locks.writer-starvation":
		x.readContention(i)
	case f.ID == "locks.mmap-hold":
		x.readMMHold(i)
	case f.ID == "hung.lock-owner" || f.ID == "hung.lock" || f.ID == "hung.deadlock":
		x.readHungLock(i)
	case strings.HasPrefix(f.ID, "hung."):
		x.readHungOther(i)
	case strings.HasPrefix(f.ID, "reclaim.memcg-"):
		x.readCgroup(i, "memory")
	case f.ID == "sched.cpu-throttled":
		x.readCgroup(i, "cpu")
	case f.ID == "system.cpu-saturated" || f.ID == "system.run-queue" || f.ID == "sched.runq-latency" || f.ID == "system.psi-cpu":
		if f.Severity >= finding.Warning {
			x.hostCPU = append(x.hostCPU, i)
		}
	}
}

// waitOf is tid's wait on the lock keyed key, nil when no finding names it.
func (x *facts) waitOf(tid int, key string) *waitFact {
	if tid == 0 {
		return nil
	}
	for _, w := range x.waits {
		if w.task.TID == tid && w.lock == key {
			return w
		}
	}
	return nil
}

// hostCPUKeys are the numbers of the findings that say the host's CPUs
// are saturated (system.cpu-saturated, system.run-queue,
// sched.runq-latency, system.psi-cpu) that the hop to the host carries;
// not their per-CPU keys, of which a large host has hundreds.
var hostCPUKeys = []string{"cpus", "busy_pct", "steal_pct", "runnable_mean", "runnable_max", "worst_p99_us", "threshold_p99_us", "some_pct", "full_pct"}

// hostCPUNumbers are those numbers, each from the first finding that has
// it.
func (x *facts) hostCPUNumbers() map[string]any {
	ev := map[string]any{}
	for _, i := range x.hostCPU {
		for k, v := range pick(x.fs[i].Evidence, hostCPUKeys...) {
			if _, ok := ev[k]; !ok {
				ev[k] = v
			}
		}
	}
	if len(ev) == 0 {
		return nil
	}
	return ev
}

// readContention: locks.contention and locks.writer-starvation. Evidence
// lock, lock_addr, mm_pid; subjects waiter (evidence wait_ms_total,
// wait_ms_max, waits, mode, ongoing), owner (evidence owner: "exact" or
// "latest_reader", waited_ms: others' wait charged to it) and holder (a
// measured long read hold: hold_ms).
func (x *facts) readContention(i int) {
	f := &x.fs[i]
	l := x.lock(str(f.Evidence, "lock"), str(f.Evidence, "lock_addr"), int(num(f.Evidence, "mm_pid")), i)
	if l == nil || f.ID != "locks.contention" {
		return
	}
	for _, s := range f.Subjects {
		switch s.Role {
		case finding.RoleWaiter:
			x.waits = append(x.waits, &waitFact{task: s, lock: l.key, mode: str(s.Evidence, "mode"),
				totalMs: num(s.Evidence, "wait_ms_total"), maxMs: num(s.Evidence, "wait_ms_max"), waits: int(num(s.Evidence, "waits")),
				windowMs: 1000 * num(f.Evidence, "window_s"), ongoing: boolean(s.Evidence, "ongoing"), finding: i})
		case finding.RoleOwner:
			if s.TID == 0 && s.PID == 0 {
				continue // exited before wolf could name it
			}
			h := &holdFact{lock: l.key, holder: s, exact: str(s.Evidence, "owner") == "exact",
				charged: num(s.Evidence, "waited_ms"), mode: str(s.Evidence, "mode"), finding: i}
			if span := num(s.Evidence, "span_ms"); span > 0 {
				// Between the first and the last wait that found it
				// owning the lock: where its time went meanwhile.
				h.spend = &spendFact{holdMs: span, onCPUMs: num(s.Evidence, "on_cpu_ms"), runnableMs: num(s.Evidence, "runnable_ms"), span: true, finding: i,
					throttledMs: num(s.Evidence, "throttled_ms"), throttleKnown: has(s.Evidence, "throttled_ms")}
			}
			x.holds = append(x.holds, h)
		case finding.RoleHolder:
			x.holds = append(x.holds, &holdFact{lock: l.key, holder: s, exact: true, mode: "read",
				maxMs: num(s.Evidence, "hold_ms"), totalMs: num(s.Evidence, "hold_ms"), holds: 1, spend: holderSpend(s, i), finding: i})
		}
	}
}

// holderSpend reads a holder subject's own split of its hold: hold_ms,
// on_cpu_ms, runnable_ms, throttled_ms, reclaim_ms (locks).
func holderSpend(s finding.Subject, i int) *spendFact {
	if num(s.Evidence, "hold_ms") <= 0 {
		return nil
	}
	return &spendFact{holdMs: num(s.Evidence, "hold_ms"), onCPUMs: num(s.Evidence, "on_cpu_ms"), runnableMs: num(s.Evidence, "runnable_ms"),
		throttledMs: num(s.Evidence, "throttled_ms"), reclaimMs: num(s.Evidence, "reclaim_ms"), throttleKnown: has(s.Evidence, "throttled_ms"),
		scanned: num(s.Evidence, "pages_scanned"), reclaimed: num(s.Evidence, "pages_reclaimed"), finding: i}
}

// readMMHold: locks.mmap-hold. Evidence mm_pid, hold_ms_max,
// hold_ms_total, holds_over_threshold, write, and the holds' split summed:
// runtime_ms_total, runnable_ms_total, throttled_ms_total,
// reclaim_ms_total, pages_scanned_total, pages_reclaimed_total. The first
// holder subject is the longest hold's thread.
func (x *facts) readMMHold(i int) {
	f := &x.fs[i]
	mm := int(num(f.Evidence, "mm_pid"))
	if mm == 0 {
		return // an mmap_lock wolf could not tie to a process
	}
	l := x.lock("", "", mm, i)
	var holder *finding.Subject
	for j := range f.Subjects {
		if f.Subjects[j].Role == finding.RoleHolder {
			holder = &f.Subjects[j]
			break
		}
	}
	if holder == nil {
		return
	}
	mode := "read"
	if boolean(f.Evidence, "write") {
		mode = "write"
	}
	h := &holdFact{lock: l.key, holder: *holder, exact: true, mode: mode,
		maxMs: num(f.Evidence, "hold_ms_max"), totalMs: num(f.Evidence, "hold_ms_total"), holds: int(num(f.Evidence, "holds_over_threshold")), finding: i}
	if has(f.Evidence, "runnable_ms_total") {
		h.spend = &spendFact{holdMs: h.totalMs, onCPUMs: num(f.Evidence, "runtime_ms_total"), runnableMs: num(f.Evidence, "runnable_ms_total"),
			throttledMs: num(f.Evidence, "throttled_ms_total"), throttleKnown: has(f.Evidence, "throttled_ms_total"),
			reclaimMs: num(f.Evidence, "reclaim_ms_total"), scanned: num(f.Evidence, "pages_scanned_total"), reclaimed: num(f.Evidence, "pages_reclaimed_total"), finding: i}
	}
	x.holds = append(x.holds, h)
}

// readHungLock: hung.lock-owner, hung.lock, hung.deadlock. Evidence
// lock_addr, lock_mode, mm_pid, lock (its name, when known),
// owner_likely (reader-owned); victims wait on it (evidence blocked_s on
// the finding; per victim the subject's Lock/LockAddr and evidence
// blocked_s, mode, behind_writer_tid); the offender holds it and its
// evidence says what it sleeps on (sleeps_on, wait_site, and for FUSE
// fuse_opcode, fuse_unique, fuse_age_s, fuse_waiting); owners after it
// are the chain's next hops, FUSE daemons among them (evidence
// fuse_daemon).
func (x *facts) readHungLock(i int) {
	f := &x.fs[i]
	l := x.lock(str(f.Evidence, "lock"), str(f.Evidence, "lock_addr"), int(num(f.Evidence, "mm_pid")), i)
	if l == nil {
		return
	}
	var daemons []finding.Subject
	for _, s := range f.Subjects {
		if boolean(s.Evidence, "fuse_daemon") {
			daemons = append(daemons, s)
		}
	}
	for _, s := range f.Subjects {
		switch s.Role {
		case finding.RoleVictim:
			lk := l
			if s.LockAddr != "" && s.LockAddr != l.addr {
				lk = x.lock(s.Lock, s.LockAddr, int(num(s.Evidence, "mm_pid")), i)
			}
			mode := str(s.Evidence, "mode")
			if mode == "" {
				mode = str(f.Evidence, "lock_mode")
			}
			x.waits = append(x.waits, &waitFact{task: s, lock: lk.key, mode: mode, blocked: num(s.Evidence, "blocked_s"),
				hung: true, ongoing: true, behindWriter: int(num(s.Evidence, "behind_writer_tid")), finding: i})
		case finding.RoleOffender:
			h := &holdFact{lock: l.key, holder: s, exact: !boolean(f.Evidence, "owner_likely"), mode: str(s.Evidence, "mode"), finding: i}
			sp := &spendFact{state: s.State, sleepsOn: str(s.Evidence, "sleeps_on"), site: str(s.Evidence, "wait_site"),
				lockAddr: s.LockAddr, lockName: s.Lock, finding: i,
				onCPUMs: num(s.Evidence, "on_cpu_ms"), runnableMs: num(s.Evidence, "runnable_ms"), holdMs: num(s.Evidence, "window_ms")}
			if (sp.sleepsOn == "fuse" || sp.sleepsOn == "folio") && len(daemons) > 0 {
				sp.fuse = &fuseFact{daemons: daemons, opcode: str(s.Evidence, "fuse_opcode"), unique: num(s.Evidence, "fuse_unique"),
					ageS: num(s.Evidence, "fuse_age_s"), waiting: num(s.Evidence, "fuse_waiting"), exact: boolean(s.Evidence, "fuse_request_from_task"),
					conn: str(s.Evidence, "fuse_conn")}
			}
			h.spend = sp
			x.holds = append(x.holds, h)
			if s.TID != 0 {
				x.spends[s.TID] = sp
			}
		}
	}
}

// readHungOther: hung groups without a lock (FUSE, I/O, wait sites): a
// victim that is also some lock's holder tells what it sleeps on.
func (x *facts) readHungOther(i int) {
	f := &x.fs[i]
	for _, s := range f.Subjects {
		if s.Role != finding.RoleVictim || s.TID == 0 {
			continue
		}
		if _, ok := x.spends[s.TID]; ok {
			continue
		}
		x.spends[s.TID] = &spendFact{state: s.State, sleepsOn: str(s.Evidence, "sleeps_on"), site: str(s.Evidence, "wait_site"), finding: i}
	}
}

// readCgroup: reclaim.memcg-* (controller memory) and sched.cpu-throttled
// (cpu). The cgroup subject carries the path, cgroup_id and its evidence
// (limit_bytes, quota_us, period_us, throttled_pct, …); member processes
// are task subjects and the finding's evidence pids.
func (x *facts) readCgroup(i int, controller string) {
	f := &x.fs[i]
	c := &cgroupFact{controller: controller, pids: map[int]bool{}, severity: f.Severity, finding: i, ev: f.Evidence}
	found := false
	for _, s := range f.Subjects {
		switch {
		case s.Role == finding.RoleCgroup && !found:
			c.subject, found = s, true
		case s.Role == finding.RoleTask && s.PID > 0:
			c.pids[s.PID] = true
		}
	}
	if !found {
		return
	}
	for _, p := range nums(f.Evidence, "pids") {
		c.pids[int(p)] = true
	}
	x.cgroups = append(x.cgroups, c)
}

// ---- evidence readers: values are Go numbers in memory and float64 after a JSON round trip ----

func num(ev map[string]any, k string) float64 {
	switch v := ev[k].(type) {
	case float64:
		return v
	case float32:
		return float64(v)
	case int:
		return float64(v)
	case int64:
		return float64(v)
	case int32:
		return float64(v)
	case uint64:
		return float64(v)
	case uint32:
		return float64(v)
	case uint:
		return float64(v)
	case string:
		f, _ := strconv.ParseFloat(v, 64)
		return f
	}
	return 0
}

func nums(ev map[string]any, k string) []float64 {
	var out []float64
	switch v := ev[k].(type) {
	case []int:
		for _, x := range v {
			out = append(out, float64(x))
		}
	case []any:
		for _, x := range v {
			out = append(out, num(map[string]any{"x": x}, "x"))
		}
	}
	return out
}

func str(ev map[string]any, k string) string {
	s, _ := ev[k].(string)
	return s
}

func boolean(ev map[string]any, k string) bool {
	b, _ := ev[k].(bool)
	return b
}

func has(ev map[string]any, k string) bool {
	_, ok := ev[k]
	return ok
}
