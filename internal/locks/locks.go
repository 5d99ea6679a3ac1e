// Package locks is wolf's lock investigator: kernel lock contention with
// owners (what `perf lock contention -o` shows, aggregated in the kernel),
// rw-semaphore wait queues, and mmap_lock holds with what the holder does
// under the lock. The BPF side is locks.bpf.c; Conclude turns a Snapshot
// into findings.
package locks

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/kallsyms"
	"github.com/wolf-investigator/wolf/internal/pace"
	"github.com/wolf-investigator/wolf/internal/probekit"
	"github.com/wolf-investigator/wolf/internal/procfs"
)

// DefaultHoldThreshold is the mmap_lock hold worth reporting one by one.
const DefaultHoldThreshold = 20 * time.Millisecond

// DefaultProfileHz is perf's usual off-by-one-from-100 sampling rate, so
// samples do not beat with timer-driven work.
const DefaultProfileHz = 99

// Investigator watches lock contention and mmap_lock holds.
type Investigator struct {
	HoldThreshold time.Duration
	ProfileHz     int    // 0 turns the profile under lock off
	Top           int    // locks and holders reported
	Lock          string // "", a symbol, or a hex address
	Types         string // --type list, "" for all
	Proc          procfs.Reader

	rawOnly    bool      // tests: no BTF tracepoints, as on old kernels
	last       *Snapshot // tests: what the last Run concluded from
	lastSleeps uint64    // tests: the sleeping waits the last Run's window began
}

// New returns an investigator with the defaults.
func New() *Investigator {
	return &Investigator{HoldThreshold: DefaultHoldThreshold, ProfileHz: DefaultProfileHz, Top: DefaultTop}
}

// Name implements investigator.Investigator.
func (*Investigator) Name() string { return "locks" }

// Summary implements investigator.Investigator.
func (*Investigator) Summary() string {
	return "kernel lock contention with owners, and mmap_lock holds"
}

// Requirements implements investigator.Requirer: the attach table's (the
// BTF build's, which takes owners' stacks; the raw build needs the same
// tracepoints), and what the programs use inside.
func (*Investigator) Requirements() []investigator.Requirement {
	reqs := []investigator.Requirement{
		{Feature: "btf", Why: "CO-RE: decode mutex and rw-semaphore owners on any kernel layout"},
		{Feature: "tp_btf", Why: "typed tracepoints, so the owner's stack can be taken (bpf_task_from_pid)", Optional: true},
	}
	reqs = append(reqs, probekit.Requirements(attachTable(btfMode, DefaultProfileHz, false))...)
	return append(reqs, investigator.Requirement{Feature: "ringbuf", Why: "long mmap_lock holds to user space", Optional: true})
}

// resolveLock turns --lock into an address for the kernel filter, or a
// name to keep in user space when no symbol resolves it (kernels without
// CONFIG_KALLSYMS_ALL name no data).
func resolveLock(spec string, syms *kallsyms.Table) (addr uint64, name string, err error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return 0, "", nil
	}
	if strings.HasPrefix(spec, "0x") || strings.HasPrefix(spec, "ffff") {
		v, err := strconv.ParseUint(strings.TrimPrefix(spec, "0x"), 16, 64)
		if err != nil {
			return 0, "", fmt.Errorf("--lock %q: not a hex address: %w", spec, err)
		}
		return v, "", nil
	}
	if syms != nil {
		if a, ok := syms.Lookup(spec); ok && a != 0 {
			return a, "", nil
		}
	}
	return 0, spec, nil
}

// ParseLock validates a --lock value without a symbol table: a hex address
// or a symbol-like name.
func ParseLock(spec string) error {
	_, name, err := resolveLock(spec, nil)
	if err != nil {
		return err
	}
	for _, r := range name {
		if !(r == '_' || r == ' ' || r == '(' || r == ')' || r == '.' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return fmt.Errorf("--lock %q: want a symbol (rtnl_mutex), a name wolf printed, or a hex address", spec)
		}
	}
	return nil
}

// Start loads and attaches locks' programs and samples the rw-semaphore
// queues every 100 ms until Close.
func (l *Investigator) Start(ctx context.Context, opts investigator.Options) (investigator.Session, error) {
	if l.HoldThreshold <= 0 {
		l.HoldThreshold = DefaultHoldThreshold
	}
	mask, err := ParseTypes(l.Types)
	if err != nil {
		return nil, fmt.Errorf("locks: %w", err)
	}
	s := &session{l: l, opts: opts, samples: map[uint64][]QueueSample{}}
	if s.syms, err = kallsyms.Load(ctx); err != nil {
		return nil, fmt.Errorf("locks: %w", err)
	}
	addr, lockName, err := resolveLock(l.Lock, s.syms)
	if err != nil {
		return nil, fmt.Errorf("locks: %w", err)
	}
	s.lockName = lockName
	if opts.PID > 0 {
		// A tid names its process: filter on the thread group.
		s.tgid = opts.PID
		if st, err := l.Proc.Status(ctx, opts.PID, opts.PID); err == nil && st.Tgid > 0 {
			s.tgid = st.Tgid
		}
	}
	s.p, err = openProbe(config{
		TargetTGID:    uint32(s.tgid),
		TargetLock:    addr,
		TypeMask:      mask,
		HoldThreshold: uint64(l.HoldThreshold),
		ProfileHz:     l.ProfileHz,
		ReclaimShared: slices.Contains(opts.Alongside, "reclaim"),
		rawOnly:       l.rawOnly,
	})
	if err != nil {
		return nil, err
	}
	s.start = time.Now()
	s.stop, s.done = make(chan struct{}), make(chan struct{})
	go s.sampleQueues()
	return s, nil
}

// session is locks attached; windows (windows.go) says how each Collect
// concludes the window since the previous one.
type session struct {
	l        *Investigator
	opts     investigator.Options
	syms     *kallsyms.Table
	lockName string
	tgid     int
	p        *probe
	stop     chan struct{}
	done     chan struct{}
	win      windows

	mu      sync.Mutex
	start   time.Time // the window's
	samples map[uint64][]QueueSample
}

// Queue sampling periods: every 100 ms while a task waits in a modelled
// rw-semaphore queue, every 500 ms while none does. The programs keep each
// window's deepest queue themselves; the samples draw its depth over time,
// and an idle host (wolf watch's usual day) is sampled a fifth as often.
const (
	queueSampleBusy = 100 * time.Millisecond
	queueSampleIdle = 500 * time.Millisecond
)

// sampleQueues records the rw-semaphore queues until Close, and keeps
// the programs' count of waits awaiting their end exact (awaited.go).
func (s *session) sampleQueues() {
	defer close(s.done)
	t := time.NewTimer(queueSampleIdle)
	defer t.Stop()
	var aw awaitedCheck
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			aw.maybe(s.p, time.Now())
			s.mu.Lock()
			busy := s.p.sampleQueues(time.Since(s.start), s.samples)
			s.mu.Unlock()
			if busy {
				t.Reset(queueSampleBusy)
			} else {
				t.Reset(queueSampleIdle)
			}
		}
	}
}

// Close detaches and frees everything.
func (s *session) Close() error {
	if s.stop != nil {
		close(s.stop)
		<-s.done
		s.stop = nil
	}
	// The kit stops its cost meter before it closes the programs.
	if s.p != nil {
		s.p.close()
	}
	return nil
}

// Collect concludes the window since Start or the previous Collect.
func (s *session) Collect(ctx context.Context) (*investigator.Result, error) {
	l, p, opts, syms := s.l, s.p, s.opts, s.syms
	// The window's maxima stop here; the maps are read after.
	w, err := p.kit.EndWindow()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	now := time.Now()
	window := now.Sub(s.start)
	samples := s.samples
	s.samples, s.start = map[uint64][]QueueSample{}, now
	s.mu.Unlock()

	snap := &Snapshot{
		Window:        window,
		HoldThreshold: l.HoldThreshold,
		Slowdown:      pace.Slowdown(),
		SelfTGID:      os.Getpid(),
		Top:           l.Top,
		LockName:      s.lockName,
		Symbol:        syms.Symbolize,
		Comm: func(pid int) string {
			c, _ := l.Proc.Comm(context.Background(), pid, pid)
			return c
		},
		TGID: func(tid int) int {
			st, err := l.Proc.Status(context.Background(), tid, tid)
			if err != nil {
				return 0
			}
			return st.Tgid
		},
	}
	snap.TaskThrottle = taskBasedThrottle()
	// Where tasks are throttled only at their return to user space no
	// holder inside the kernel is: known, without watching.
	snap.ThrottleSeen = p.kit.Attached("sched/sched_switch") || snap.TaskThrottle
	cur, err := p.read(w)
	if err != nil {
		return nil, fmt.Errorf("locks: read maps: %w", err)
	}
	sc := &stackCache{p: p, syms: syms, memo: map[int32][]string{}}
	win, ev := s.win.step(cur)
	win.fill(sc, snap)
	p.evict(ev)
	evs, lost, ringErr := p.holdEvents()
	snap.Holds, snap.HoldsLost = holds(sc, evs), lost
	snap.Holds = append(snap.Holds, p.ongoingHolds(snap.HoldThreshold)...)
	for i := range snap.Queues {
		snap.Queues[i].Samples = samples[snap.Queues[i].Lock]
	}
	if opts.PID > 0 {
		snap.keepPID(opts.PID, s.tgid)
	}
	l.last = snap
	findings, hists, facts := ConcludeFacts(snap)
	res := &investigator.Result{
		Findings:     findings,
		Histograms:   hists,
		Facts:        facts,
		Capabilities: p.kit.Capabilities(p.table),
		Notes:        append(slices.Clone(p.notes), p.kit.Notes()...),
	}
	res.Capabilities["owner_stacks"] = p.btf
	if p.reclaimShared && !probekit.Written(reclaimSharedMap) {
		res.Notes = append(res.Notes, "memory reclaim during mmap_lock holds not measured: locks reads it from the reclaim investigator, which is not running")
	}
	if ringErr != nil {
		res.Notes = append(res.Notes, fmt.Sprintf("ring buffer: %v", ringErr))
	}
	res.Profiles = snap.Profiles(l.ProfileHz)
	var events, dropped uint64
	if c, err := p.kit.WindowCounters(); err == nil {
		l.lastSleeps = c[locksStatIndexSTAT_SLEEP_WAITS]
		events = c[locksStatIndexSTAT_BEGIN] + c[locksStatIndexSTAT_END] + c[locksStatIndexSTAT_MM_EVENTS] + c[locksStatIndexSTAT_SAMPLES]
		dropped = c[locksStatIndexSTAT_PENDING_FULL] + c[locksStatIndexSTAT_NESTED] + c[locksStatIndexSTAT_WAITS_FULL] +
			c[locksStatIndexSTAT_TASKS_FULL] + c[locksStatIndexSTAT_OWNERS_FULL] + c[locksStatIndexSTAT_QUEUE_FULL] +
			c[locksStatIndexSTAT_MM_HOLDS_FULL] + c[locksStatIndexSTAT_MM_STATS_FULL] + c[locksStatIndexSTAT_HOLD_DROPS] +
			c[locksStatIndexSTAT_PROFILE_FULL] + c[locksStatIndexSTAT_MM_STALE_HOLD] + c[locksStatIndexSTAT_MM_LOST_RELEASE]
		// With slow-path kprobes a wait that never slept has no end by
		// design (said in the notes); with the tracepoints a missing end
		// is a loss.
		if !p.slowpath {
			dropped += c[locksStatIndexSTAT_STALE]
		}
	}
	res.Overhead = p.kit.Overhead(events, dropped+snap.HoldsLost)
	return res, nil
}

// keepPID drops what is not about the process: waits by others and holds
// by others. The BPF side already filtered on tgid; a tid narrows further.
func (s *Snapshot) keepPID(pid, tgid int) {
	s.aggs = nil // aggregated before the filter, if at all
	if pid == tgid {
		return
	}
	var ws []Waiter
	for _, w := range s.Waiters {
		if w.TID == pid {
			ws = append(ws, w)
		}
	}
	s.Waiters = ws
	var hs []Hold
	for _, h := range s.Holds {
		if h.TID == pid {
			hs = append(hs, h)
		}
	}
	s.Holds = hs
}
