// Package hung is wolf's hung-task investigator: it finds tasks sleeping in
// D state before khungtaskd would, groups them by what they wait on, names
// the owner of the lock they wait for and follows that owner's own wait.
// The BPF side is hung.bpf.c; Conclude turns what it saw into findings;
// the hunglog subpackage does the same for a saved kernel log.
package hung

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/kallsyms"
	"github.com/wolf-investigator/wolf/internal/kconfig"
	"github.com/wolf-investigator/wolf/internal/procfs"
	"github.com/wolf-investigator/wolf/internal/sysctl"
)

// DefaultThreshold is how long a task must have been in D to count: well
// under khungtaskd's 120 s default, above ordinary I/O waits.
const DefaultThreshold = 5 * time.Second

// Investigator finds hung tasks. The zero value is not ready; use New.
type Investigator struct {
	Threshold time.Duration // report tasks blocked at least this long
	Interval  time.Duration // how often to walk the task list
	Proc      procfs.Reader

	// ignoreBlocker makes the BPF side ignore task->blocker, as on
	// kernels before 6.14, so tests can exercise that path here.
	ignoreBlocker bool
}

// New returns an investigator with the defaults.
func New() *Investigator {
	return &Investigator{Threshold: DefaultThreshold, Interval: time.Second}
}

// Name implements investigator.Investigator.
func (*Investigator) Name() string { return "hung" }

// Summary implements investigator.Investigator.
func (*Investigator) Summary() string {
	return "tasks blocked in D state, what they wait on, and who holds it"
}

// tracked is one task seen blocked during the window.
type tracked struct {
	last       *Task
	maxBlocked time.Duration
	lastScan   int
	// preAttach: the task was blocked at the session's first walk and
	// every walk since has found it in that same sleep (since: when the
	// sleep began, ktime). Its wait began before wolf attached, so the
	// lock investigator, which times waits from their begin, never sees
	// it; this walker is the only witness when it ends in the window.
	preAttach bool
	since     time.Duration
	// owner is the record of the lock's owner at the last walk that found
	// a preAttach task waiting, for the facts when the wait has ended.
	owner *Task
	// pre is its mark in pre_ends, and ended the lock that mark named
	// once the wait ended (kernels without task->blocker: preend.go).
	pre   *preEnd
	ended *Lock
}

// sameSleep is how far apart two walks may place the start of one sleep:
// a start read off the scheduler's clock (a sleep wolf did not stamp)
// moves by its slice rounding and by that clock's drift from ktime.
const sameSleep = 20 * time.Millisecond

// track records a walk's record of a task in its tracked entry (made if
// new), and keeps preAttach true only while the task stays in the sleep
// the first walk found it in.
func track(seen map[int]*tracked, t *Task, scanNo int) *tracked {
	tr := seen[t.TID]
	if tr == nil {
		tr = &tracked{}
		seen[t.TID] = tr
	}
	since := t.At - t.Blocked
	switch {
	case scanNo == 1:
		tr.preAttach, tr.since = true, since
	case tr.preAttach && (tr.lastScan != scanNo-1 || (since-tr.since).Abs() > sameSleep):
		// It ran in between (missed by a walk) or sleeps anew.
		tr.preAttach, tr.owner = false, nil
	}
	tr.last, tr.lastScan = t, scanNo
	tr.maxBlocked = max(tr.maxBlocked, t.Blocked)
	return tr
}

// endedEarly are the lock waits that began before wolf attached and ended
// in the window: tasks the first walk found waiting on a lock that ran
// again before the last walk. Blocked is the longest the walks saw, a
// lower bound (the wait went on until some time after that walk).
func endedEarly(seen map[int]*tracked, scanNo int, pid int) (waits []*Task, owners map[int]*Task) {
	for _, tr := range seen {
		lock := tr.last.Lock
		if lock == nil {
			lock = tr.ended // named by its contention_end (preend.go)
		}
		if tr.lastScan == scanNo || !tr.preAttach || lock == nil || !matchPID(tr.last, pid) {
			continue
		}
		t := *tr.last
		t.Lock = lock
		t.Blocked = tr.maxBlocked
		waits = append(waits, &t)
		if tr.owner != nil {
			if owners == nil {
				owners = map[int]*Task{}
			}
			owners[tr.owner.TID] = tr.owner
		}
	}
	slices.SortFunc(waits, func(a, b *Task) int { return cmp.Compare(a.TID, b.TID) })
	return waits, owners
}

// Start loads and attaches hung's programs and walks the task list every
// Interval until Close.
func (h *Investigator) Start(ctx context.Context, opts investigator.Options) (investigator.Session, error) {
	if h.Threshold <= 0 {
		h.Threshold = DefaultThreshold
	}
	if h.Interval <= 0 {
		h.Interval = time.Second
	}
	syms, err := kallsyms.Load(ctx)
	if err != nil {
		return nil, fmt.Errorf("hung: %w", err)
	}
	p, err := openProbe(!h.ignoreBlocker, opts.BTF)
	if err != nil {
		return nil, err
	}
	s := &session{
		h: *h, opts: opts, p: p, syms: syms,
		seen: map[int]*tracked{}, preMarked: map[int]bool{}, stop: make(chan struct{}), done: make(chan struct{}),
	}
	go s.loop()
	return s, nil
}

// session is hung attached: a walker goroutine keeps seen up to date.
type session struct {
	h    Investigator
	opts investigator.Options
	p    *probe
	syms Symbolizer
	stop chan struct{}
	done chan struct{}

	mu      sync.Mutex // one walk at a time; guards the fields below
	seen    map[int]*tracked
	owners  map[int]*Task
	scanNo  int
	walkErr error // the latest background walk's failure
	// first is each task's first record of the window: with its last,
	// where its time went meanwhile.
	first map[int]*Task
	// endedFuse is what FUSE daemons owed at the latest walk that found a
	// wait from before attach behind an owner asleep in FUSE.
	endedFuse []FuseReq
	// preMarked are the tids in pre_ends, preArmed what pre_armed says,
	// preDropped the marks refused (pre_ends full).
	preMarked  map[int]bool
	preArmed   uint32
	preDropped int
	preErr     error
}

func (s *session) loop() {
	defer close(s.done)
	tick := time.NewTicker(s.h.Interval)
	defer tick.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-s.stop
		cancel()
	}()
	for {
		s.mu.Lock()
		err := s.walkLocked(ctx)
		if err != nil && ctx.Err() == nil {
			s.walkErr = err
		}
		s.mu.Unlock()
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
	}
}

// walkLocked walks once and records the owners it found.
func (s *session) walkLocked(ctx context.Context) error {
	s.scanNo++
	owners, err := s.h.walk(ctx, s.p, s.syms, s.seen, s.scanNo, s.mark)
	if err != nil {
		return err
	}
	s.owners = owners
	s.walkErr = nil
	s.readEndedFuse(ctx)
	s.markPreEnds()
	return nil
}

// readEndedFuse reads what FUSE daemons owe while a wait from before
// attach (tracked.preAttach) is held up by an owner asleep in FUSE: should
// the wait end in the window, the request and its daemon are gone by
// Collect, and this is what names them. Rare (a lock held across a FUSE
// request since before wolf started), so a read at such walks only.
func (s *session) readEndedFuse(ctx context.Context) {
	for _, tr := range s.seen {
		if tr.lastScan != s.scanNo || !tr.preAttach || tr.owner == nil || !fuseWait(tr.owner) {
			continue
		}
		recs, err := s.p.scanFuse(ctx)
		if err != nil || s.p.kit.Iter("dump_fuse") == nil {
			return
		}
		hz := kernelHZ()
		s.endedFuse = s.endedFuse[:0]
		for i := range recs {
			s.endedFuse = append(s.endedFuse, decodeFuse(&recs[i], hz))
		}
		return
	}
}

// Collect walks once more and concludes: tasks blocked now are victims;
// tasks that were blocked long in this window but ran again are reported
// as recovered, once.
func (s *session) Collect(ctx context.Context) (*investigator.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.walkLocked(ctx); err != nil {
		if s.walkErr == nil {
			s.walkErr = err
		}
		return nil, s.walkErr
	}
	s.finishPreEnds()
	hangs, lostHangs := s.p.hangReports()
	fuseReqs, fuseExact := s.fuseRequests(ctx)
	first := s.first
	s.first = nil // the next window starts from its own first records
	snap := &Snapshot{
		Fuse:        fuseReqs,
		FuseExact:   fuseExact,
		FirstSeen:   first,
		Owners:      s.owners,
		Hangs:       hangs,
		Threshold:   s.h.Threshold,
		HungTimeout: hungTimeout(),
		CorePattern: corePattern(),
		FuseDaemons: func() []Proc { return fuseDaemons(ctx, s.h.Proc) },
		Comm: func(tid int) string {
			c, _ := s.h.Proc.Comm(ctx, tid, tid)
			return c
		},
	}
	snap.Ended, snap.EndedOwners = endedEarly(s.seen, s.scanNo, s.opts.PID)
	snap.EndedFuse = s.endedFuse
	for tid, tr := range s.seen {
		switch {
		case tr.lastScan == s.scanNo && tr.last.Blocked >= s.h.Threshold && matchPID(tr.last, s.opts.PID):
			snap.Victims = append(snap.Victims, tr.last)
		case tr.lastScan != s.scanNo:
			if tr.maxBlocked >= s.h.Threshold && matchPID(tr.last, s.opts.PID) {
				t := *tr.last
				t.Blocked = tr.maxBlocked
				snap.Recovered = append(snap.Recovered, &t)
			}
			s.unmarkPreEnd(tid, tr)
			delete(s.seen, tid) // it ran again: reported once, forgotten
		}
	}
	s.armPreEnds()
	fs, facts := ConcludeFacts(snap)
	res := &investigator.Result{
		Findings:     fs,
		Facts:        facts,
		Capabilities: s.p.kit.Capabilities(attachTable),
		Notes:        s.p.Notes(),
	}
	if s.preErr != nil {
		res.Notes = append(res.Notes, s.preErr.Error())
		s.preErr = nil
	}
	if s.preDropped > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d marks of tasks asleep on a lock since before wolf started were refused (pre_ends holds %d): should their waits end in the window, their locks stay unnamed", s.preDropped, maxPreEnds))
	}
	if prof := snap.Profile(); prof != nil {
		res.Profiles = append(res.Profiles, *prof)
	}
	events, dropped := s.p.counts()
	res.Overhead = s.p.kit.Overhead(events, dropped+lostHangs)
	return res, nil
}

// fuseRequests reads the requests FUSE daemons owe, only when some blocked
// task could be waiting for one; exact says they were read.
func (s *session) fuseRequests(ctx context.Context) (reqs []FuseReq, exact bool) {
	if !s.h.needFuse(s.seen, s.owners, s.scanNo) {
		return nil, false
	}
	recs, err := s.p.scanFuse(ctx)
	if err != nil || s.p.kit.Iter("dump_fuse") == nil {
		return nil, false
	}
	hz := kernelHZ()
	for i := range recs {
		reqs = append(reqs, decodeFuse(&recs[i], hz))
	}
	return reqs, true
}

// mark keeps the first record of each task seen in the window.
func (s *session) mark(t *Task) {
	if s.first == nil {
		s.first = map[int]*Task{}
	}
	if _, ok := s.first[t.TID]; !ok && len(s.first) < maxMarked {
		s.first[t.TID] = t
	}
}

// maxMarked bounds the first records kept.
const maxMarked = 4096

// needFuse says whether a task blocked at the last walk (or an owner) may
// wait for a FUSE daemon: asleep in a FUSE request or on a page-cache folio.
func (h *Investigator) needFuse(seen map[int]*tracked, owners map[int]*Task, scanNo int) bool {
	for _, tr := range seen {
		if tr.lastScan == scanNo && tr.last.Blocked >= h.Threshold && fuseWait(tr.last) {
			return true
		}
	}
	for _, o := range owners {
		if fuseWait(o) {
			return true
		}
	}
	return false
}

// kernelHZ is CONFIG_HZ, for the FUSE requests' ages (in jiffies); 0 when
// the kernel's config cannot be read.
func kernelHZ() int {
	c, err := kconfig.Load()
	if err != nil {
		return 0
	}
	v, ok := c.Get("CONFIG_HZ")
	if !ok {
		return 0
	}
	n, _ := strconv.Atoi(v)
	return n
}

// Peek concludes from the walker's latest walk without ending the window:
// tasks blocked now are victims, with their owners followed, as Collect
// would report them. Nothing is forgotten and nothing drained (khungtaskd
// reports and the cost wait for Collect), so the window's report stays
// whole. wolf watch peeks every few seconds, so that a hang that starts
// and clears inside one window is still seen, with its owner, while it
// lasts.
func (s *session) Peek(ctx context.Context) (*investigator.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.walkErr != nil {
		return nil, s.walkErr
	}
	fuseReqs, fuseExact := s.fuseRequests(ctx)
	snap := &Snapshot{
		Fuse:        fuseReqs,
		FuseExact:   fuseExact,
		FirstSeen:   s.first,
		Owners:      s.owners,
		Threshold:   s.h.Threshold,
		HungTimeout: hungTimeout(),
		CorePattern: corePattern(),
		FuseDaemons: func() []Proc { return fuseDaemons(ctx, s.h.Proc) },
		Comm: func(tid int) string {
			c, _ := s.h.Proc.Comm(ctx, tid, tid)
			return c
		},
	}
	for _, tr := range s.seen {
		if tr.lastScan == s.scanNo && tr.last.Blocked >= s.h.Threshold && matchPID(tr.last, s.opts.PID) {
			snap.Victims = append(snap.Victims, tr.last)
		}
	}
	fs, facts := ConcludeFacts(snap)
	res := &investigator.Result{Findings: fs, Facts: facts, Capabilities: s.p.kit.Capabilities(attachTable)}
	if prof := snap.Profile(); prof != nil {
		res.Profiles = append(res.Profiles, *prof)
	}
	return res, nil
}

// Close stops the walker and detaches.
func (s *session) Close() error {
	close(s.stop)
	<-s.done
	s.p.kit.Close()
	return nil
}

// walk runs the task iterator, then again for the owners of the locks the
// blocked tasks wait on (and their owners, up to maxHops), and records
// what it saw in seen; mark is told every record.
func (h *Investigator) walk(ctx context.Context, p *probe, syms Symbolizer, seen map[int]*tracked, scanNo int, mark func(*Task)) (map[int]*Task, error) {
	recs, err := p.scan(ctx, nil)
	if err != nil {
		return nil, err
	}
	owners := map[int]*Task{}
	var want []uint32
	follow := func(tid int) {
		if _, ok := owners[tid]; !ok && tid != 0 {
			owners[tid] = nil
			want = append(want, uint32(tid))
		}
	}
	// The tasks a blocked task waits for: its lock's owner, or the thread
	// writing its process's core dump.
	addOwner := func(t *Task) {
		if t.Lock != nil && t.Lock.Owner != OwnerNone {
			follow(t.Lock.OwnerTID)
		}
		if t.DumperTID != 0 && t.DumperTID != t.TID {
			follow(t.DumperTID)
		}
	}
	// mmap_lock wait lists name the locks of killable waits that set no
	// task->blocker, and the readers queued behind a writer.
	var queues []MMQueue
	if qs, err := p.scanQueues(ctx); err == nil {
		for i := range qs {
			queues = append(queues, decodeQueue(&qs[i]))
		}
	}
	var tasks []*Task
	for i := range recs {
		tasks = append(tasks, decode(&recs[i], syms))
	}
	resolveQueues(tasks, queues)
	nameMMLocks(tasks)
	var early []*tracked
	for _, t := range tasks {
		tr := track(seen, t, scanNo)
		if mark != nil {
			mark(t)
		}
		// A wait that began before wolf attached is followed to its
		// owner whatever its length: should it end in the window, what
		// the owner was doing is all there is to say why it lasted.
		if t.Blocked >= h.Threshold || (tr.preAttach && t.Lock != nil) {
			addOwner(t)
		}
		if tr.preAttach && t.Lock != nil {
			early = append(early, tr)
		}
	}
	for hop := 0; hop < maxHops && len(want) > 0; hop++ {
		recs, err := p.scan(ctx, want)
		if err != nil {
			return nil, err
		}
		want = nil
		var found []*Task
		for i := range recs {
			if recs[i].Wanted == 0 {
				continue
			}
			found = append(found, decode(&recs[i], syms))
		}
		resolveQueues(found, queues)
		nameMMLocks(append(found, tasks...))
		for _, t := range found {
			owners[t.TID] = t
			if mark != nil {
				mark(t)
			}
			addOwner(t)
		}
	}
	for tid, t := range owners {
		if t == nil {
			delete(owners, tid) // exited between walks
		}
	}
	// An owner once seen asleep in FUSE keeps that record against a later
	// one of the same task that is not: the walk just after the daemon's
	// answer finds the owner woken (runnable, its stack still in FUSE) or
	// asleep on its next step, the waiters not yet run, and that record
	// says nothing of what held them.
	inFUSE := func(t *Task) bool { return t.StateLetter() != "R" && fuseWait(t) }
	for _, tr := range early {
		if o := owners[tr.last.Lock.OwnerTID]; o != nil && (tr.owner == nil || tr.owner.TID != o.TID || !inFUSE(tr.owner) || inFUSE(o)) {
			tr.owner = o
		}
	}
	return owners, nil
}

func matchPID(t *Task, pid int) bool { return pid == 0 || t.TGID == pid || t.TID == pid }

// corePattern is where core dumps go, "" when unreadable.
func corePattern() string {
	v, _ := sysctl.Read("kernel.core_pattern")
	return v
}

// hungTimeout is khungtaskd's threshold, 0 when it is off or unreadable.
func hungTimeout() time.Duration {
	v, err := sysctl.ReadInt("kernel.hung_task_timeout_secs")
	if err != nil || v <= 0 {
		return 0
	}
	return time.Duration(v) * time.Second
}
