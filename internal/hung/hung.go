// Package hung is wolf's hung-task investigator: it finds tasks sleeping in
// D state before khungtaskd would, groups them by what they wait on, names
// the owner of the lock they wait for and follows that owner's own wait.
// The BPF side is hung.bpf.c; Conclude turns what it saw into findings;
// the hunglog subpackage does the same for a saved kernel log.
package hung

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/kallsyms"
	"github.com/wolf-investigator/wolf/internal/kconfig"
	"github.com/wolf-investigator/wolf/internal/overhead"
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
	// first is each task's first record of the current run.
	first map[int]*Task
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

// mark keeps the first record of each task seen in the window: deltas
// from it to the last say where the task's time went meanwhile.
func (h *Investigator) mark(t *Task) {
	if h.first == nil {
		h.first = map[int]*Task{}
	}
	if _, ok := h.first[t.TID]; !ok && len(h.first) < maxMarked {
		h.first[t.TID] = t
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

// tracked is one task seen blocked during the window.
type tracked struct {
	last       *Task
	maxBlocked time.Duration
	lastScan   int
}

// Run watches for opts.Duration, walking the task list every Interval, and
// concludes from the last walk: tasks still blocked are victims; tasks
// that were blocked long but ran again are reported as recovered.
func (h *Investigator) Run(ctx context.Context, opts investigator.Options) (*investigator.Result, error) {
	if opts.Duration <= 0 {
		return nil, fmt.Errorf("hung: duration must be positive, got %v", opts.Duration)
	}
	if h.Threshold <= 0 {
		h.Threshold = DefaultThreshold
	}
	if h.Interval <= 0 {
		h.Interval = time.Second
	}
	meter := overhead.Start()
	defer meter.Close()
	syms, err := kallsyms.Load(ctx)
	if err != nil {
		return nil, fmt.Errorf("hung: %w", err)
	}
	p, err := openProbe(!h.ignoreBlocker)
	if err != nil {
		return nil, err
	}
	defer p.close()
	meter.Track(p.programs()...)

	seen := map[int]*tracked{}
	var owners map[int]*Task
	h.first = map[int]*Task{}
	scanNo := 0
	deadline := time.Now().Add(opts.Duration)
	tick := time.NewTicker(h.Interval)
	defer tick.Stop()
	for {
		scanNo++
		owners, err = h.walk(ctx, p, syms, seen, scanNo)
		if err != nil {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				break
			}
			return nil, err
		}
		left := time.Until(deadline)
		if opts.Progress != nil {
			opts.Progress(1 - max(left, 0).Seconds()/opts.Duration.Seconds())
		}
		if left <= 0 {
			break
		}
		wait := time.NewTimer(min(left, h.Interval))
		select {
		case <-ctx.Done():
			wait.Stop()
		case <-wait.C:
		}
		if ctx.Err() != nil {
			break
		}
	}

	// The requests FUSE daemons owe, read once at the end, and only when
	// some blocked task could be waiting for one.
	var fuseReqs []FuseReq
	fuseExact := false
	if h.needFuse(seen, owners, scanNo) {
		if recs, err := p.scanFuse(ctx); err == nil && p.fuse != nil {
			fuseExact = true
			hz := kernelHZ()
			for i := range recs {
				fuseReqs = append(fuseReqs, decodeFuse(&recs[i], hz))
			}
		}
	}
	snap := &Snapshot{
		Fuse:        fuseReqs,
		FuseExact:   fuseExact,
		FirstSeen:   h.first,
		Owners:      owners,
		Hangs:       p.hangReports(),
		Threshold:   h.Threshold,
		HungTimeout: hungTimeout(),
		CorePattern: corePattern(),
		FuseDaemons: func() []Proc { return fuseDaemons(context.Background(), h.Proc) },
		Comm: func(tid int) string {
			c, _ := h.Proc.Comm(context.Background(), tid, tid)
			return c
		},
	}
	for _, tr := range seen {
		switch {
		case tr.lastScan == scanNo && tr.last.Blocked >= h.Threshold && matchPID(tr.last, opts.PID):
			snap.Victims = append(snap.Victims, tr.last)
		case tr.lastScan != scanNo && tr.maxBlocked >= h.Threshold && matchPID(tr.last, opts.PID):
			t := *tr.last
			t.Blocked = tr.maxBlocked
			snap.Recovered = append(snap.Recovered, &t)
		}
	}
	res := &investigator.Result{
		Findings:     Conclude(snap),
		Capabilities: map[string]bool{},
		Notes:        p.warnings,
	}
	if prof := snap.Profile(); prof != nil {
		res.Profiles = append(res.Profiles, *prof)
	}
	for _, tp := range tracepoints {
		res.Capabilities["tracepoint:"+tp.name] = p.attached[tp.name]
	}
	var events, dropped uint64
	if st, err := p.stats(); err == nil {
		events = st["d_sleeps"] + st["contentions"] + st["hang_events"] + st["wq_starts"]
		dropped = st["hang_drops"] + st["map_full"]
	}
	res.Overhead = meter.Finish(events, dropped, p.programs()...)
	return res, nil
}

// walk runs the task iterator, then again for the owners of the locks the
// blocked tasks wait on (and their owners, up to maxHops), and records
// what it saw in seen.
func (h *Investigator) walk(ctx context.Context, p *probe, syms Symbolizer, seen map[int]*tracked, scanNo int) (map[int]*Task, error) {
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
	for _, t := range tasks {
		tr := seen[t.TID]
		if tr == nil {
			tr = &tracked{}
			seen[t.TID] = tr
		}
		tr.last, tr.lastScan = t, scanNo
		tr.maxBlocked = max(tr.maxBlocked, t.Blocked)
		h.mark(t)
		if t.Blocked >= h.Threshold {
			addOwner(t)
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
			h.mark(t)
			addOwner(t)
		}
	}
	for tid, t := range owners {
		if t == nil {
			delete(owners, tid) // exited between walks
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
