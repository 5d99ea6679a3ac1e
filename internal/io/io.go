// Package io is wolf's block I/O investigator: per disk, cgroup and
// process, how many requests, how many bytes, how long they waited before
// the device and on it; who waited for them (a process waiting for its
// own reads, a journal thread waiting for another cgroup's data); and
// what held I/O back before the device: blk-throttle (v1
// blkio.throttle.*, v2 io.max), writeback throttling, iocost and
// io.latency, a full tag set, dirty throttling, a journal commit stuck
// behind someone else's data. Storage is where most hung tasks in the
// logs people paste come from (the XFS log-grant example of Cloudflare's
// "Searching for the cause of hung tasks in the Linux kernel"): this is
// the eye that says which device, how slow, who waits, and whether the
// device is slow or something in front of it holds the I/O back.
//
// The BPF side is io.bpf.c; Conclude (analyze.go) turns a Snapshot into
// findings and Facts (facts.go) into the diagnosis stage's facts, both
// tested without BPF.
package io

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/kallsyms"
	"github.com/wolf-investigator/wolf/internal/probekit"
	"github.com/wolf-investigator/wolf/internal/procfs"
	"github.com/wolf-investigator/wolf/internal/sysstat"
)

// Defaults.
const (
	DefaultSlowRequest = 50 * time.Millisecond
	DefaultLongWait    = 20 * time.Millisecond
	statReaderTimeout  = 500 * time.Millisecond
	collectTimeout     = 5 * time.Second
	armPoll            = 100 * time.Millisecond
	ongoingMin         = 500 * time.Millisecond // a wait still going this long is reported
	maxCgroupsWalked   = 4096
)

// Waiter modes (--waiters).
const (
	WaitersAuto = "auto" // armed when the request programs see something a waiter explains
	WaitersOn   = "on"   // armed from the start
	WaitersOff  = "off"  // never
)

// Investigator watches block I/O. The zero value is ready to use; New
// sets the defaults explicitly.
type Investigator struct {
	// Device, when set, limits the report to this disk ("vda", "254:0").
	Device string
	// Cgroup, when set, limits the report to requests charged to this
	// cgroup (a path in the I/O controller's hierarchy) and its
	// descendants, and to their waiters.
	Cgroup string
	// Waiters says when the waiter programs run (WaitersAuto, On, Off).
	Waiters string
	// SlowRequest and LongWait are the bounds above which single requests
	// and waits are reported one by one.
	SlowRequest, LongWait time.Duration
	Proc                  procfs.Reader

	// Test hooks: attached runs once the programs are attached; refuse
	// makes targets look missing; snapshot sees each window's snapshot.
	attached func()
	refuse   map[string]bool
	snapshot func(*Snapshot)
}

// New returns an investigator with the defaults.
func New() *Investigator {
	return &Investigator{Waiters: WaitersAuto, SlowRequest: DefaultSlowRequest, LongWait: DefaultLongWait,
		Proc: procfs.Reader{Timeout: statReaderTimeout}}
}

// Name implements investigator.Investigator.
func (*Investigator) Name() string { return "io" }

// Summary implements investigator.Investigator.
func (*Investigator) Summary() string {
	return "block I/O per disk, cgroup and process: latency before and on the device, who waits, throttles, dirty pages, journals"
}

func (iv *Investigator) config() (config, error) {
	c := config{SlowRequest: iv.SlowRequest, LongWait: iv.LongWait}
	if c.SlowRequest <= 0 {
		c.SlowRequest = DefaultSlowRequest
	}
	if c.LongWait <= 0 {
		c.LongWait = DefaultLongWait
	}
	if iv.Device != "" {
		maj, mnr, err := devNumber(iv.Device)
		if err != nil {
			return c, err
		}
		c.Device = kdev(maj, mnr)
	}
	return c, nil
}

// Start loads and attaches the programs.
func (iv *Investigator) Start(ctx context.Context, opts investigator.Options) (investigator.Session, error) {
	c, err := iv.config()
	if err != nil {
		return nil, err
	}
	s := &session{iv: *iv, opts: opts, stop: make(chan struct{})}
	if c.Device != 0 {
		s.devName = deviceName(splitKdev(c.Device))
	}
	s.h, s.herr = findHierarchy(ctx, iv.Proc)
	if iv.Cgroup != "" {
		if s.herr != nil {
			return nil, fmt.Errorf("io: --cgroup %s: %v: %w", iv.Cgroup, s.herr, investigator.ErrUnsupported)
		}
		s.under = filepath.Clean("/" + iv.Cgroup)
		if st, err := os.Stat(s.h.Dir(s.under)); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("io: no cgroup %s under %s", s.under, s.h.Mount)
		}
	}
	if opts.PID != 0 {
		if _, err := iv.Proc.Stat(ctx, opts.PID, 0); err != nil {
			return nil, fmt.Errorf("io: process %d: %w", opts.PID, err)
		}
	}
	s.disks0, _ = readDisks()
	if s.p, err = openProbe(ctx, c, iv.refuse); err != nil {
		return nil, err
	}
	s.started = time.Now()
	switch iv.Waiters {
	case WaitersOff:
		s.armErr = errors.New("--waiters off")
	case WaitersOn:
		s.doArm()
	default:
		s.wg.Add(1)
		go s.watchArm()
	}
	// --pid asks about one process's requests: all of them are followed.
	if opts.PID == 0 {
		s.wg.Add(2)
		go s.watchRate()
		go s.issueDuty()
	}
	if iv.attached != nil {
		iv.attached()
	}
	return s, nil
}

// session is io attached. Its windows: the maps only add, and each window
// is the reading at its Collect minus the previous one; maxima are kept
// per window by the programs (wolf.h's struct wolf_max). A wait counts in
// the window it ends in, whole; one still going when a window ends is
// shown in that window as ongoing, with its time so far. /proc/diskstats
// is read at each Collect: one window's after is the next one's before.
type session struct {
	iv      Investigator
	opts    investigator.Options
	h       hierarchy
	herr    error
	under   string // --cgroup
	devName string // --device, by its name
	p       *probe

	started time.Time
	disks0  map[string]sysstat.DiskStat

	procs    probekit.Since[ioIoKey, procRead]
	waits    probekit.Since[ioWaitKey, waitRead]
	journals probekit.Since[uint32, journalRead]
	qos      probekit.Since[string, ioQos]
	idle     probekit.Idle[ioIoKey]
	widle    probekit.Idle[ioWaitKey]

	ids     map[uint64]string // cgroup ids to paths
	syms    *kallsyms.Table
	symsErr error

	mu     sync.Mutex
	sample uint32 // the window's sparsest attribution: 1 in 2^sample requests followed
	shift  uint32 // the programs' attribution shift now
	// The same for I/O sleeps (waiters).
	waitSample, waitShift uint32
	armed                 time.Time // when the waiter programs attached (zero: not yet)
	// firstDuty: the first sights (insert, issue) run one 2^firstDuty-th
	// of each dutyPeriod (0: all the time); firstDutyWindow: the largest
	// this window. firstFull: they run all the time for good.
	firstDuty, firstDutyWindow uint32
	firstFull                  bool
	// duty: the waiter programs run dutyOn of each dutyPeriod (a disk
	// merely busy); dutyWindow: they did at some time in this window.
	duty, dutyWindow bool
	armErr           error
	stop             chan struct{}
	wg               sync.WaitGroup
	stopped          bool
}

// watchArm polls the programs' wish for waiters and arms them once. A
// device busy and slow by itself asks too: the kernel's own accounting
// (/proc/diskstats), read each second, says so.
func (s *session) watchArm() {
	defer s.wg.Done()
	t := time.NewTicker(armPoll)
	defer t.Stop()
	prev, _ := readDisks()
	last := time.Now()
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			if s.p.wanted() {
				s.doArm()
				return
			}
			if now.Sub(last) < time.Second {
				continue
			}
			cur, _ := readDisks()
			if slowDisk(prev, cur, now.Sub(last), s.devName) {
				s.doArm()
				return
			}
			if busyDisk(prev, cur, now.Sub(last), s.devName) {
				s.dutyArm(cur, now)
				return
			}
			prev, last = cur, now
		}
	}
}

// Waiters of a disk that is merely busy (nothing held I/O back, nothing
// slow) are watched dutyOn of every dutyPeriod (a sixteenth): the waiter programs run
// on every context switch and wake-up of the host, and on a fast disk
// read as fast as it goes (two or three of each a request) their runs
// alone, empty, would cost more than the budget of everything io does
// (docs/io.md, "Cost"). A sleep noted then counts for 2^dutyShift (the
// waits' counts and totals are estimates, their averages unbiased), and
// the wake-ups' program stays dutyGrace longer than the sleeps', so
// that the waits begun end with it; a wait longer than that, begun late
// in the on-time, is missed. What a waiter explains (a throttle, a slow
// request or disk, a dirty pause, a slow commit) arms them for good.
const (
	dutyPeriod = time.Second
	dutyOn     = dutyPeriod >> dutyShift
	dutyGrace  = 25 * time.Millisecond // a wait this long begun last ends seen
	dutyShift  = 4
)

// dutyArm runs the waiter programs dutyOn of every dutyPeriod until
// something asks for them for good (then they stay), or the session
// stops. prev is /proc/diskstats at last.
func (s *session) dutyArm(prev map[string]sysstat.DiskStat, last time.Time) {
	if err := s.p.setDuty(dutyShift); err != nil {
		s.doArm() // an object without it: armed for good, as before
		return
	}
	s.mu.Lock()
	s.duty, s.dutyWindow = true, true
	s.mu.Unlock()
	full := func() bool {
		if s.p.wanted() {
			return true
		}
		if now := time.Now(); now.Sub(last) >= time.Second {
			cur, _ := readDisks()
			slow := slowDisk(prev, cur, now.Sub(last), s.devName)
			prev, last = cur, now
			return slow
		}
		return false
	}
loop:
	for {
		s.doArm()
		start := time.Now()
		s.mu.Lock()
		failed := s.armErr != nil
		s.mu.Unlock()
		if failed || !s.wait(dutyOn) {
			return
		}
		if full() {
			break
		}
		// The period is the time the sleeps' program really ran, times
		// 2^dutyShift: what a sleep noted counts for stays true.
		on := time.Since(start)
		if err := s.p.disarm(dutyGrace, s.stop); err != nil {
			s.mu.Lock()
			s.armErr = err
			s.mu.Unlock()
			return
		}
		for left := on<<dutyShift - time.Since(start); left > 0; left = on<<dutyShift - time.Since(start) {
			if !s.wait(min(left, armPoll)) {
				return
			}
			if full() {
				s.doArm()
				break loop
			}
		}
	}
	// For good: sleeps noted from now on count for themselves.
	_ = s.p.setDuty(0)
	s.mu.Lock()
	s.duty = false
	s.mu.Unlock()
}

// attrRate is how many requests a second wolf follows one by one from
// their first sight to their completion (io.bpf.c's struct attr): above
// it, one in 2^n of the requests tasks issue is followed, the smallest n
// that keeps them under it. Following a request costs about as much as
// counting it (350 ns of BPF for both on the development VM, 150–200 ns
// for the count alone): 4,000 followed a second are 0.1% of one CPU,
// and the issue's budget is 1% at 50,000 requests a second.
const attrRate = 4000

// attrShift is the shift for rate requests a second.
func attrShift(rate float64) uint32 {
	var n uint32
	for n < 10 && rate/float64(uint64(1)<<n) > attrRate {
		n++
	}
	return n
}

// ratePoll is how often watchRate looks at the rates; firstRatePoll is
// when it first looks: a storm is followed in full until then, which
// costs what following it costs (at 50,000 requests a second, the first
// 250 ms cost the first sights and the slots as much as 2 s of the duty).
const (
	ratePoll      = 250 * time.Millisecond
	firstRatePoll = 50 * time.Millisecond
)

// lookPolls is how many polls back LookShift remembers the shifts: a
// request followed that completes later than that, after the shift rose,
// is told as left out (its issuer unknown), not missed.
const lookPolls = 8

// watchRate sets the sampling every ratePoll: of the requests' attribution
// from the rate of completions, of the waiters from the rate of I/O
// sleeps (the same budget: following a sleep to its wake-up costs about
// what following a request does). The completions keep judging by a
// larger shift for a ratePoll after it is lowered: requests left out
// before are told apart from requests wolf missed.
func (s *session) watchRate() {
	defer s.wg.Done()
	t := time.NewTimer(firstRatePoll)
	defer t.Stop()
	read := func() (uint64, uint64, error) {
		c, err := s.p.counter(ioStatIndexSTAT_COMPLETIONS)
		if err != nil {
			return 0, 0, err
		}
		w, err := s.p.counter(ioStatIndexSTAT_IOWAIT_SLEEPS)
		return c, w, err
	}
	prevC, prevW, err := read()
	if err != nil {
		return
	}
	prevU, err := s.p.counter(ioStatIndexSTAT_UNSTAMPED)
	if err != nil {
		return
	}
	last := time.Now()
	var cur ioAttr
	// The shifts of the last lookPolls polls (0 before the first: every
	// request followed then), for LookShift.
	var past [lookPolls]uint32
	for i := 0; ; i++ {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			t.Reset(ratePoll)
			c, w, err := read()
			if err != nil {
				return
			}
			u, err := s.p.counter(ioStatIndexSTAT_UNSTAMPED)
			if err != nil {
				return
			}
			// The first sights run all the time, for good, once a
			// request's issue was not stamped by the kernel (only they
			// time it) or something held I/O back (every request is worth
			// following then).
			held := u != prevU || s.p.wanted()
			next := cur
			s.mu.Lock()
			duty := s.duty
			if held {
				s.firstFull = true
			}
			full, total := s.firstFull, s.shift
			s.mu.Unlock()
			if el := now.Sub(last).Seconds(); el > 0 {
				total = attrShift(float64(probeSub(c, prevC)) / el)
				switch dw := probeSub(w, prevW); {
				case !duty:
					next.WaitShift = attrShift(float64(dw) / el)
				case dw > 0:
					// Sleeps are counted only while the waiter
					// programs run, dutyOn at a time.
					next.WaitShift = attrShift(float64(dw) / min(el, dutyOn.Seconds()))
				}
			}
			// Of the shift, up to dutyShift is taken by running the
			// first sights part of the time rather than by the hash of
			// each request's birth: a request left out then costs nothing
			// at its first sights. The completions tell those left out
			// by IssueDuty, kept a poll longer than the duty itself.
			var d uint32
			if !full {
				d = min(total, dutyShift)
			}
			next.Shift = total - d
			next.DoneShift = max(next.Shift, cur.Shift) // the previous poll's shift still judges
			// A completion looks for its request's slot only if the
			// hash followed it under some shift of the last lookPolls
			// polls: a look is most of a completion's cost.
			next.LookShift = next.Shift
			for _, p := range past {
				next.LookShift = min(next.LookShift, p)
			}
			past[i%lookPolls] = next.Shift
			s.mu.Lock()
			prevD := s.firstDuty
			s.mu.Unlock()
			next.IssueDuty = 0
			if d > 0 || prevD > 0 {
				next.IssueDuty = 1
			}
			prevC, prevW, prevU, last = c, w, u, now
			s.mu.Lock()
			s.firstDuty = d
			s.firstDutyWindow = max(s.firstDutyWindow, d)
			s.shift = total
			s.sample = max(s.sample, total)
			s.mu.Unlock()
			if next == cur {
				continue
			}
			if err := s.p.setAttr(next); err != nil {
				return
			}
			cur = next
			s.mu.Lock()
			s.waitShift = next.WaitShift
			s.waitSample = max(s.waitSample, next.WaitShift)
			s.mu.Unlock()
		}
	}
}

// wait sleeps d, or less when the session stops (then false).
func (s *session) wait(d time.Duration) bool {
	select {
	case <-s.stop:
		return false
	case <-time.After(d):
		return true
	}
}

// issueDuty runs the first sights (the insert and issue programs)
// dutyPeriod>>firstDuty of every dutyPeriod while watchRate asks for a
// firstDuty, and all the time otherwise. Detaching and attaching them
// costs this goroutine a wait for the tracepoint's RCU grace period, not
// the requests anything; a request in flight keeps the slot its first
// sight gave it.
func (s *session) issueDuty() {
	defer s.wg.Done()
	duty := func() uint32 {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.firstFull {
			return 0
		}
		return s.firstDuty
	}
	for {
		d := duty()
		if d == 0 {
			if !s.wait(armPoll) {
				return
			}
			continue
		}
		on := dutyPeriod >> d
		if err := s.p.disarmFirst(); err != nil {
			s.mu.Lock()
			s.firstFull = true
			s.mu.Unlock()
		}
		start := time.Now()
		for left := dutyPeriod - on; left > 0 && duty() != 0; left = dutyPeriod - on - time.Since(start) {
			if !s.wait(min(left, armPoll)) {
				return
			}
		}
		// Attached again; should it fail, the next turn tries again.
		for s.p.armFirst() != nil {
			if !s.wait(armPoll) {
				return
			}
		}
		if !s.wait(on) {
			return
		}
	}
}

// slowDisk says whether a disk (only, when set) was busy most of the
// interval with requests that took long: what slowDevices calls slow.
func slowDisk(prev, cur map[string]sysstat.DiskStat, el time.Duration, only string) bool {
	elMs := float64(el) / float64(time.Millisecond)
	for name, c := range cur {
		p, ok := prev[name]
		if !ok || (only != "" && name != only) {
			continue
		}
		ios := probeSub(c.Reads+c.Writes+c.Discards, p.Reads+p.Writes+p.Discards)
		if ios < minRequests || elMs <= 0 {
			continue
		}
		busyPct := 100 * float64(probeSub(c.IOMs, p.IOMs)) / elMs
		waitMs := float64(probeSub(c.ReadMs+c.WriteMs+c.DiscardMs, p.ReadMs+p.WriteMs+p.DiscardMs)) / float64(ios)
		if busyPct >= busyWarnPct && time.Duration(waitMs*float64(time.Millisecond)) >= deviceWarnAvg {
			return true
		}
	}
	return false
}

// armBusyPct: a disk busy this share of a second is worth watching its
// waiters on, however fast each request is: who waits behind whom, and
// for what (a memory cgroup's refaults keep a fast disk busy, and every
// one of its readers waits for them), is what only waiters say.
const armBusyPct = 50

// busyDisk says whether a disk (only, when set) was busy at least
// armBusyPct of the interval by the kernel's own accounting.
func busyDisk(prev, cur map[string]sysstat.DiskStat, el time.Duration, only string) bool {
	elMs := float64(el) / float64(time.Millisecond)
	for name, c := range cur {
		p, ok := prev[name]
		if !ok || (only != "" && name != only) || elMs <= 0 {
			continue
		}
		if probeSub(c.Reads+c.Writes+c.Discards, p.Reads+p.Writes+p.Discards) < minRequests {
			continue
		}
		if 100*float64(probeSub(c.IOMs, p.IOMs))/elMs >= armBusyPct {
			return true
		}
	}
	return false
}

func (s *session) doArm() {
	err := s.p.arm()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.armErr = err
		return
	}
	if s.armed.IsZero() { // duty-cycled, armed again and again: the first time
		s.armed = time.Now()
	}
}

func (s *session) stopArm() {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	s.stopped = true
	close(s.stop)
	s.mu.Unlock()
	s.wg.Wait()
}

// Close detaches and frees everything.
func (s *session) Close() error {
	s.stopArm()
	if s.p != nil {
		s.p.close()
	}
	return nil
}

// Collect concludes the window since Start or the previous Collect.
func (s *session) Collect(ctx context.Context) (*investigator.Result, error) {
	p := s.p
	w, err := p.kit.EndWindow()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	window := now.Sub(s.started)
	cur, err := p.read(w)
	if err != nil {
		return nil, err
	}
	p.evictStale(cur)
	c, err := p.kit.WindowCounters()
	if err != nil {
		return nil, fmt.Errorf("io: %w", err)
	}
	slow, slowKept, _ := p.slow.Take()
	long, longKept, _ := p.long.Take()
	disks1, _ := readDisks()

	// The reads that complete the report get a context of their own: the
	// window is over, possibly because ctx was cancelled (Ctrl-C).
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), collectTimeout)
	defer cancel()

	snap := &Snapshot{Window: window, Throttle: p.throttle, CgroupVersion: s.h.Version}
	s.mu.Lock()
	armed, armErr := s.armed, s.armErr
	snap.AttrSample = 1 << s.sample
	s.sample = s.shift // the next window starts where this one ends
	if s.firstDutyWindow > 0 {
		snap.AttrDuty = 1 << s.firstDutyWindow
	}
	s.firstDutyWindow = s.firstDuty
	if !armed.IsZero() {
		snap.WaitSample = 1 << s.waitSample
		if s.dutyWindow {
			snap.WaitSample <<= dutyShift
			snap.WaitDuty = 1 << dutyShift
		}
	}
	s.waitSample = s.waitShift
	s.dutyWindow = s.duty
	s.mu.Unlock()
	switch {
	case !armed.IsZero():
		snap.WaitersArmed = true
		if armed.After(s.started) {
			snap.WaitersFrom = armed.Sub(s.started)
		}
	case armErr != nil:
		snap.WaitersOff = armErr.Error()
	default:
		snap.WaitersOff = "nothing held I/O back: no throttled or slow request, no dirty pause, no slow commit or fsync"
	}
	snap.Lost = Lost{
		Untracked: c[ioStatIndexSTAT_UNTRACKED], SlotTaken: c[ioStatIndexSTAT_SLOT_TAKEN],
		Procs: c[ioStatIndexSTAT_PROC_FULL], Waits: c[ioStatIndexSTAT_WAIT_FULL], Sleeps: c[ioStatIndexSTAT_SLEEP_FULL],
		SlowLost: c[ioStatIndexSTAT_SLOW_LOST], LongLost: c[ioStatIndexSTAT_LONG_LOST], Kept: slowKept + longKept,
		FsyncFull: c[ioStatIndexSTAT_FSYNC_FULL], JournalFull: c[ioStatIndexSTAT_JOURNAL_FULL],
	}
	b := s.builder(cctx, snap, cur)
	b.devices(s.windowProcs(cur), disks1)
	b.waiters(s.windowWaits(cur))
	b.journals(s.windowJournals(cur))
	b.qos(s.windowQoS(cur))
	b.ongoing(cur)
	b.slow(slow, now)
	b.long(long, now, s.symbols(cctx))
	b.limits()
	b.finish()
	s.disks0 = disks1

	if s.iv.snapshot != nil {
		s.iv.snapshot(snap)
	}
	fs := Conclude(snap)
	res := &investigator.Result{
		Findings:     fs,
		Histograms:   snap.Histograms(),
		Capabilities: p.kit.Capabilities(p.table),
		Notes:        append(p.kit.Notes(), snap.Notes()...),
		Facts:        Facts(snap, fs),
	}
	res.Capabilities["waiters"] = snap.WaitersArmed
	res.Capabilities["blk_throttle_dispatch"] = p.throttle
	events := c[ioStatIndexSTAT_EVENTS] + c[ioStatIndexSTAT_COMPLETIONS] + c[ioStatIndexSTAT_IOWAIT_SLEEPS]
	res.Overhead = p.kit.Overhead(events, snap.Lost.Total())
	s.started = now
	return res, nil
}

// symbols loads kallsyms once, for the long waits' stacks.
func (s *session) symbols(ctx context.Context) *kallsyms.Table {
	if s.syms == nil && s.symsErr == nil {
		s.syms, s.symsErr = kallsyms.Load(ctx)
	}
	return s.syms
}

// windowProcs is the window of the per-issuer map; entries idle for a few
// windows are deleted from the map (it is bounded).
func (s *session) windowProcs(cur *raw) map[ioIoKey]procRead {
	d := s.procs.Step(cur.procs, func(c, prev procRead, seen bool) (procRead, procRead) {
		if !seen {
			return c, c
		}
		out := c
		for i := range out.s.Ops {
			out.s.Ops[i] = probekit.Sub(c.s.Ops[i], prev.s.Ops[i])
			out.s.Bytes[i] = probekit.Sub(c.s.Bytes[i], prev.s.Bytes[i])
		}
		out.s.Throttled = probekit.Sub(c.s.Throttled, prev.s.Throttled)
		out.s.ThrottledBytes = probekit.Sub(c.s.ThrottledBytes, prev.s.ThrottledBytes)
		max1, max2 := c.total.Max, c.device.Max
		out.total = c.total.Sub(&prev.total)
		out.device = c.device.Sub(&prev.device)
		out.total.Max, out.device.Max = max1, max2
		return out, c
	})
	var evict []ioIoKey
	for k, v := range d {
		changed := v.s.Ops != [3]uint64{}
		if s.idle.Step(k, changed) {
			evict = append(evict, k)
		}
	}
	s.idle.End()
	probekit.Evict(s.p.maps.Procs, evict)
	return d
}

func (s *session) windowWaits(cur *raw) map[ioWaitKey]waitRead {
	d := s.waits.Step(cur.waits, func(c, prev waitRead, seen bool) (waitRead, waitRead) {
		if !seen {
			return c, c
		}
		out := c
		out.s.Count = probekit.Sub(c.s.Count, prev.s.Count)
		out.s.Ns = probekit.Sub(c.s.Ns, prev.s.Ns)
		out.s.HeldNs = probekit.Sub(c.s.HeldNs, prev.s.HeldNs)
		out.s.QueuedNs = probekit.Sub(c.s.QueuedNs, prev.s.QueuedNs)
		out.s.DeviceNs = probekit.Sub(c.s.DeviceNs, prev.s.DeviceNs)
		return out, c
	})
	var evict []ioWaitKey
	for k, v := range d {
		if s.widle.Step(k, v.s.Count != 0) {
			evict = append(evict, k)
		}
	}
	s.widle.End()
	probekit.Evict(s.p.maps.Waits, evict)
	return d
}

func (s *session) windowJournals(cur *raw) map[uint32]journalRead {
	return s.journals.Step(cur.journals, func(c, prev journalRead, seen bool) (journalRead, journalRead) {
		if !seen {
			return c, c
		}
		out := c
		out.j.Commits = probekit.Sub(c.j.Commits, prev.j.Commits)
		out.j.CommitNs = probekit.Sub(c.j.CommitNs, prev.j.CommitNs)
		out.j.FlushingNs = probekit.Sub(c.j.FlushingNs, prev.j.FlushingNs)
		out.j.LoggingNs = probekit.Sub(c.j.LoggingNs, prev.j.LoggingNs)
		out.j.LockedNs = probekit.Sub(c.j.LockedNs, prev.j.LockedNs)
		out.j.SyncCommits = uint32(probekit.Sub(uint64(c.j.SyncCommits), uint64(prev.j.SyncCommits)))
		return out, c
	})
}

func (s *session) windowQoS(cur *raw) map[string]ioQos {
	return s.qos.Step(cur.qos, func(c, prev ioQos, seen bool) (ioQos, ioQos) {
		if !seen {
			return c, c
		}
		out := c
		out.WbtSteps = probekit.Sub(c.WbtSteps, prev.WbtSteps)
		out.WbtLatEvents = probekit.Sub(c.WbtLatEvents, prev.WbtLatEvents)
		out.IocostAdjusts = probekit.Sub(c.IocostAdjusts, prev.IocostAdjusts)
		return out, c
	})
}

// readDisks reads /proc/diskstats by device name.
func readDisks() (map[string]sysstat.DiskStat, error) {
	b, err := os.ReadFile("/proc/diskstats")
	if err != nil {
		return nil, err
	}
	ds, err := sysstat.ParseDiskstats(b)
	if err != nil {
		return nil, err
	}
	out := make(map[string]sysstat.DiskStat, len(ds))
	for _, d := range ds {
		out[d.Name] = d
	}
	return out, nil
}

// keepsCgroup says whether --cgroup keeps a cgroup path.
func (s *session) keepsCgroup(path string) bool {
	if s.under == "" || s.under == "/" {
		return true
	}
	return path == s.under || strings.HasPrefix(path, s.under+"/")
}
