package io

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/bpfrec"
	"github.com/wolf-investigator/wolf/internal/hist"
	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/kernelbtf"
	"github.com/wolf-investigator/wolf/internal/probekit"
)

// Targets of the attach table that the code refers to.
const (
	tpIssue    = "block/block_rq_issue"
	tpInsert   = "block/block_rq_insert"
	tpComplete = "block/block_rq_complete"
	tpSwitch   = "sched/sched_switch"
	tpWaking   = "sched/sched_waking"
	tpDirty    = "writeback/balance_dirty_pages"
	tpJ2Start  = "jbd2/jbd2_start_commit"
	tpJ2End    = "jbd2/jbd2_end_commit"
	tpFsync    = "syscalls/sys_enter_fsync"
	tpXFSSleep = "xfs/xfs_log_grant_sleep"
	tpWBTStep  = "wbt/wbt_step"
	tpIOCost   = "iocost/iocost_ioc_vrate_adj"
)

// attachTable is everything io puts into the kernel, for a kernel whose
// block_rq_issue and block_rq_insert pass the request first (5.11 on) or
// after its queue (qFirst, before 5.11). The block request events are BTF
// tracepoints (typed: direct reads on the hot path); the rare events
// (writeback, jbd2, syscalls, XFS, wbt, iocost) are classic tracepoints,
// whose record layouts CO-RE relocates. Only the request events are
// required: without the others io sees no waiters, dirty throttling,
// journals or fsyncs, and says so.
//
// taskBTF says whether the kernel has bpf_get_current_task_btf (5.11+):
// without it, programs that read the current task with probe reads.
// Queue-first kernels never have it; some 5.10 stable kernels dropped the
// queue argument and still lack it.
func attachTable(qFirst, taskBTF bool) []probekit.Attach {
	issue, insert := "rq_issue", "rq_insert"
	switch {
	case qFirst:
		issue, insert = "rq_issue_q", "rq_insert_q"
	case !taskBTF:
		issue, insert = "rq_issue_nb", "rq_insert_nb"
	}
	return []probekit.Attach{
		{Kind: probekit.BTFTracepoint, Target: tpComplete, Program: "rq_complete", Required: true,
			Why: "a request completes: counts, bytes, latency per disk, cgroup and issuer"},
		// The first sights: attached at once (openProbe), and run only
		// part of the time under a storm of requests whose issue the
		// kernel stamps (session.issueDuty).
		{Kind: probekit.BTFTracepoint, Target: tpIssue, Program: issue, Required: true, Later: true,
			Why: "a request goes to the driver: queued and on-device time, its issuer and cgroup"},
		{Kind: probekit.BTFTracepoint, Target: tpInsert, Program: insert, Later: true,
			Why: "a request goes to the I/O scheduler or a plug: its issuer, seen in the submitter's context"},
		// The waiter programs run on every context switch and wake-up of
		// the host: attached (armed) only once the request programs see
		// something a waiter explains.
		{Kind: probekit.BTFTracepoint, Target: tpSwitch, Program: "sched_switch", Later: true,
			Why: "a task goes to sleep for I/O: who waits"},
		{Kind: probekit.BTFTracepoint, Target: tpWaking, Program: "sched_waking", Later: true,
			Why: "an I/O sleep ends: how long, and the request whose completion ended it"},
		{Kind: probekit.Tracepoint, Target: tpDirty, Program: "balance_dirty_pages",
			Why: "dirty throttling: writers paused by balance_dirty_pages"},
		{Kind: probekit.Tracepoint, Target: tpJ2Start, Program: "jbd2_start_commit",
			Why: "a jbd2 (ext4) journal commit starts"},
		{Kind: probekit.Tracepoint, Target: "jbd2/jbd2_commit_locking", Program: "jbd2_commit_locking",
			Why: "a jbd2 commit waits for running handles"},
		{Kind: probekit.Tracepoint, Target: "jbd2/jbd2_commit_flushing", Program: "jbd2_commit_flushing",
			Why: "a jbd2 commit writes and waits for ordered data"},
		{Kind: probekit.Tracepoint, Target: "jbd2/jbd2_commit_logging", Program: "jbd2_commit_logging",
			Why: "a jbd2 commit writes the journal"},
		{Kind: probekit.Tracepoint, Target: tpJ2End, Program: "jbd2_end_commit",
			Why: "a jbd2 commit ends: its time, phase by phase"},
		{Kind: probekit.Tracepoint, Target: tpFsync, Program: "sys_enter_fsync",
			Why: "fsync starts: who waits for the journal and writeback"},
		{Kind: probekit.Tracepoint, Target: "syscalls/sys_exit_fsync", Program: "sys_exit_fsync",
			Why: "fsync ends"},
		{Kind: probekit.Tracepoint, Target: "syscalls/sys_enter_fdatasync", Program: "sys_enter_fdatasync",
			Why: "fdatasync starts"},
		{Kind: probekit.Tracepoint, Target: "syscalls/sys_exit_fdatasync", Program: "sys_exit_fdatasync",
			Why: "fdatasync ends"},
		{Kind: probekit.Tracepoint, Target: tpXFSSleep, Program: "xfs_log_grant_sleep",
			Why: "a task sleeps for XFS log space"},
		{Kind: probekit.Tracepoint, Target: "xfs/xfs_log_grant_wake", Program: "xfs_log_grant_wake",
			Why: "a task waiting for XFS log space gets it"},
		{Kind: probekit.Tracepoint, Target: tpWBTStep, Program: "wbt_step",
			Why: "writeback throttling (wbt) scales a device's write depth"},
		{Kind: probekit.Tracepoint, Target: "wbt/wbt_lat", Program: "wbt_lat",
			Why: "wbt sees reads slower than its target"},
		{Kind: probekit.Tracepoint, Target: tpIOCost, Program: "iocost_vrate_adj",
			Why: "the iocost controller adjusts a device's rate"},
	}
}

// queueFirst reports whether this kernel's block_rq_issue passes the
// request queue before the request (kernels before 5.11), from the
// tracepoint's BTF prototype.
func queueFirst(spec *btf.Spec) bool {
	var td *btf.Typedef
	if err := spec.TypeByName("btf_trace_block_rq_issue", &td); err != nil {
		return false
	}
	ptr, ok := td.Type.(*btf.Pointer)
	if !ok {
		return false
	}
	fp, ok := ptr.Target.(*btf.FuncProto)
	if !ok {
		return false
	}
	// void *__data, then the tracepoint's own arguments.
	return len(fp.Params) == 3
}

// kernelQueueFirst reads queueFirst from the kernel's BTF (or --btf's).
func kernelQueueFirst() bool {
	spec, err := kernelbtf.Spec()
	if err != nil {
		return false
	}
	return queueFirst(spec)
}

// queueStatsBit is the bit of QUEUE_FLAG_STATS in a request queue's flags,
// from an enumerator of the kernel's BTF (5.17 on; a #define before,
// which BTF does not keep): ok false when not found. The enum has no
// name, so the types are scanned, once a process (tens of milliseconds).
func queueStatsBit(spec *btf.Spec) (uint32, bool) {
	for typ, err := range spec.All() {
		if err != nil {
			return 0, false
		}
		e, ok := typ.(*btf.Enum)
		if !ok || e.Name != "" {
			continue
		}
		for _, v := range e.Values {
			if v.Name == "QUEUE_FLAG_STATS" && v.Value < 64 {
				return uint32(v.Value), true
			}
		}
	}
	return 0, false
}

var statsBit = struct {
	sync.Mutex
	spec *btf.Spec
	bit  uint32
	ok   bool
}{}

// kernelQueueStatsBit is queueStatsBit of the kernel's BTF (or --btf's),
// remembered for the spec it was read from.
func kernelQueueStatsBit() (uint32, bool) {
	spec, err := kernelbtf.Spec()
	if err != nil {
		return 0, false
	}
	statsBit.Lock()
	defer statsBit.Unlock()
	if statsBit.spec != spec {
		statsBit.bit, statsBit.ok = queueStatsBit(spec)
		statsBit.spec = spec
	}
	return statsBit.bit, statsBit.ok
}

// config is what the programs are set up with.
type config struct {
	SlowRequest time.Duration // requests this slow are kept one by one
	LongWait    time.Duration // waits this long are kept, with a stack
	Device      uint32        // only this disk (kernel dev_t), 0 for all
}

// probe owns everything io attaches, through the kit.
type probe struct {
	kit      *probekit.Probe
	maps     ioMaps
	table    []probekit.Attach
	slow     *probekit.Ring[ioSlowRq]
	long     *probekit.Ring[ioLongWait]
	throttle bool // blk-throttle's dispatch function was found
	// insertErr: block_rq_insert's program loaded but did not attach.
	insertErr error
}

// Bounds on what crosses the rings in one window.
const (
	keepSlow = 1024
	keepLong = 512
)

// haveTaskBTF is probekit.HaveCurrentTaskBTF; tests make it say no, to
// run the programs of kernels without the helper here.
var haveTaskBTF = probekit.HaveCurrentTaskBTF

// openProbe loads and attaches; refuse names targets to treat as missing
// (tests).
func openProbe(ctx context.Context, c config, refuse map[string]bool) (*probe, error) {
	p := &probe{table: attachTable(kernelQueueFirst(), haveTaskBTF())}
	vars := map[string]any{
		"slow_ns":      uint64(c.SlowRequest),
		"long_wait_ns": uint64(c.LongWait),
		"only_dev":     c.Device,
	}
	// Two scans of tens of milliseconds each, side by side.
	type statsBit struct {
		bit uint32
		ok  bool
	}
	sb := make(chan statsBit, 1)
	go func() {
		bit, ok := kernelQueueStatsBit()
		sb <- statsBit{bit, ok}
	}()
	if fn := throttleDispatchFn(ctx); fn != 0 {
		vars["throtl_dispatch_fn"] = fn
		p.throttle = true
	}
	if b := <-sb; b.ok {
		vars["queue_stats_bit"] = b.bit
	}
	kit, err := probekit.Open(probekit.Object{
		Name:   "io",
		Spec:   loadIo,
		Vars:   vars,
		Table:  p.table,
		Refuse: refuse,
		BTF:    kernelbtf.External(),
		Detail: "stacks of long I/O waits, slow requests one by one",
	})
	if err != nil {
		return nil, err
	}
	p.kit = kit
	if err := kit.AssignMaps(&p.maps); err != nil {
		kit.Close()
		return nil, err
	}
	if err := p.armFirst(); err != nil {
		kit.Close()
		return nil, fmt.Errorf("%w: %w", err, investigator.ErrUnsupported)
	}
	if p.slow, err = probekit.OpenRing[ioSlowRq](kit, "slow_rqs", keepSlow); err != nil {
		kit.Close()
		return nil, err
	}
	if p.long, err = probekit.OpenRing[ioLongWait](kit, "long_waits", keepLong); err != nil {
		kit.Close()
		return nil, err
	}
	return p, nil
}

func (p *probe) close() { p.kit.Close() }

// addBatch adds a CPU's batch of completions to the procs reading.
func addBatch(procs map[ioIoKey]procRead, b *ioBatch) {
	if b.Count == 0 {
		return
	}
	pr := procs[b.Key]
	for i := range pr.s.Ops {
		pr.s.Ops[i] += b.Ops[i]
		pr.s.Bytes[i] += b.Bytes[i]
	}
	pr.s.Throttled += b.Throttled
	pr.s.ThrottledBytes += b.ThrottledBytes
	for i := range min(len(b.TotalSlots), len(pr.total.Slots)) {
		pr.total.Slots[i] += uint64(b.TotalSlots[i])
		pr.total.Count += uint64(b.TotalSlots[i])
		pr.device.Slots[i] += uint64(b.DeviceSlots[i])
		pr.device.Count += uint64(b.DeviceSlots[i])
	}
	if b.Timed > 0 {
		pr.total.Sum += b.SumTotalNs
		pr.device.Sum += b.SumDeviceNs
		pr.total.Max = max(pr.total.Max, b.MaxTotalNs)
		pr.device.Max = max(pr.device.Max, b.MaxDeviceNs)
	}
	procs[b.Key] = pr
}

// counter is one of the programs' counters (stats) so far, all CPUs
// together.
func (p *probe) counter(i ioStatIndex) (uint64, error) {
	var per []uint64
	if err := p.maps.Stats.Lookup(uint32(i), &per); err != nil {
		return 0, fmt.Errorf("io: read counter %d: %w", i, err)
	}
	var n uint64
	for _, v := range per {
		n += v
	}
	return n, nil
}

// setAttr sets the programs' sampling (io.bpf.c's struct attr): one
// request in 2^Shift is followed from its first sight, completions tell
// the others by DoneShift, and one I/O sleep in 2^WaitShift is noted.
func (p *probe) setAttr(a ioAttr) error {
	m := p.kit.Map(".data.attr")
	if m == nil {
		return errors.New("io: no attribution sampling in the object")
	}
	if err := m.Update(uint32(0), a, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("io: set attribution sampling: %w", err)
	}
	return nil
}

// armFirst attaches the first sights (block_rq_issue, and block_rq_insert
// where it loaded): the issue's program is required, the insert's is not
// (without it, a request that waits in a scheduler is followed from its
// issue, in the context of whoever dispatches it).
func (p *probe) armFirst() error {
	if err := p.kit.Arm(tpIssue); err != nil {
		return err
	}
	if p.kit.Armable(tpInsert) {
		if err := p.kit.Arm(tpInsert); err != nil {
			p.insertErr = err
		}
	}
	return nil
}

// disarmFirst detaches the first sights (duty-cycled: see
// session.issueDuty); armFirst attaches them again.
func (p *probe) disarmFirst() error {
	if err := p.kit.Disarm(tpInsert); err != nil {
		return err
	}
	return p.kit.Disarm(tpIssue)
}

// wanted says whether the programs asked for the waiter programs.
func (p *probe) wanted() bool {
	m := p.kit.Map(".data.want")
	if m == nil {
		return false
	}
	var v uint32
	if err := m.Lookup(uint32(0), &v); err != nil {
		return false
	}
	return v != 0
}

// arm attaches the waiter programs (once). Not every kernel can: the
// error says why, and the report's notes say what is then not seen.
func (p *probe) arm() error {
	for _, t := range []string{tpSwitch, tpWaking} {
		if !p.kit.Armable(t) {
			return fmt.Errorf("io: %s did not load", t)
		}
	}
	// The wake-up first: a sleep noted by sched_switch with no program to
	// end it would wait in the map until the next one.
	if err := p.kit.Arm(tpWaking); err != nil {
		return err
	}
	if err := p.kit.Arm(tpSwitch); err != nil {
		return err
	}
	// Completions leave their context for the wake-ups from now on.
	if m := p.kit.Map(".data.armed"); m != nil {
		if err := m.Update(uint32(0), uint32(1), ebpf.UpdateAny); err != nil {
			return fmt.Errorf("io: arm the completions' context: %w", err)
		}
	}
	return nil
}

// disarm detaches the waiter programs again (duty-cycled waiters): the
// sleeps' program first, the wake-ups' after grace, so that the sleeps
// noted meanwhile end with their wake-ups; completions then stop leaving
// their context.
func (p *probe) disarm(grace time.Duration, stop <-chan struct{}) error {
	if err := p.kit.Disarm(tpSwitch); err != nil {
		return err
	}
	select {
	case <-time.After(grace):
	case <-stop:
	}
	if m := p.kit.Map(".data.armed"); m != nil {
		if err := m.Update(uint32(0), uint32(0), ebpf.UpdateAny); err != nil {
			return fmt.Errorf("io: disarm the completions' context: %w", err)
		}
	}
	return p.kit.Disarm(tpWaking)
}

// setDuty tells sched_switch what a sleep it notes stands for: 2^shift
// sleeps, the waiter programs running one 2^shift-th of the time.
func (p *probe) setDuty(shift uint32) error {
	m := p.kit.Map(".data.duty")
	if m == nil {
		return errors.New("io: no duty-cycled waiters in the object")
	}
	if err := m.Update(uint32(0), shift, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("io: set the waiters' duty: %w", err)
	}
	return nil
}

// throttleDispatchFn is the address of blk-throttle's dispatch work
// function: a request born while a worker runs it was held by the
// throttle. 0 when kallsyms does not have it (no CONFIG_BLK_DEV_THROTTLING,
// or addresses hidden). One symbol: /proc/kallsyms is scanned for it, not
// parsed whole (tens of milliseconds, not hundreds, before the window).
func throttleDispatchFn(ctx context.Context) uint64 {
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		return 0
	}
	defer f.Close()
	const name = " blk_throtl_dispatch_work_fn"
	sc := bufio.NewScanner(f)
	for i := 0; sc.Scan(); i++ {
		if i%4096 == 0 && ctx.Err() != nil {
			return 0
		}
		line := sc.Text()
		if !strings.HasSuffix(line, name) {
			continue
		}
		addr, kind, _ := strings.Cut(line, " ")
		if kind == "" || (kind[0] != 't' && kind[0] != 'T') {
			continue
		}
		a, err := strconv.ParseUint(addr, 16, 64)
		if err != nil {
			return 0
		}
		return a // 0 when addresses are hidden
	}
	return 0
}

// raw is what the maps held at one Collect: cumulative counts, window w's
// maxima, and what was in flight.
type raw struct {
	procs    map[ioIoKey]procRead
	waits    map[ioWaitKey]waitRead
	journals map[uint32]journalRead
	qos      map[string]ioQos
	comms    map[uint32]string   // issuers' names, as the programs saw them
	sleeps   map[uint32]ioSleep  // tasks asleep for I/O now
	syncs    map[uint32]ioInSync // tasks in fsync (or asleep for the XFS log) now
	now      time.Duration       // CLOCK_MONOTONIC when the in-flight maps were read
}

type procRead struct {
	s             ioIoStats
	total, device hist.Log2 // birth to completion, on the device; cumulative, window w's maxima
}

type waitRead struct {
	s    ioWaitStats
	max  uint64
	comm string
}

type journalRead struct {
	j      ioJournal
	max    uint64
	maxTID uint32
}

// read collects every map, with window w's maxima.
func (p *probe) read(w uint32) (*raw, error) {
	r := &raw{
		procs: map[ioIoKey]procRead{}, waits: map[ioWaitKey]waitRead{},
		journals: map[uint32]journalRead{}, qos: map[string]ioQos{}, comms: map[uint32]string{},
		sleeps: map[uint32]ioSleep{}, syncs: map[uint32]ioInSync{},
	}
	var (
		pk ioIoKey
		pv ioIoStats
	)
	it := p.maps.Procs.Iterate()
	for it.Next(&pk, &pv) {
		r.procs[pk] = procRead{s: pv, total: hist.FromBPF(&pv.Total, w), device: hist.FromBPF(&pv.Device, w)}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("io: read procs: %w", err)
	}
	// What each CPU's batch holds, not folded into procs yet.
	// Two per CPU: followed requests' and the others' (attribution sampled).
	for i := range uint32(2) {
		var bs []ioBatch
		if err := p.maps.Batches.Lookup(i, &bs); err != nil {
			return nil, fmt.Errorf("io: read batches: %w", err)
		}
		for _, b := range bs {
			addBatch(r.procs, &b)
		}
	}
	var (
		wk ioWaitKey
		wv ioWaitStats
	)
	it = p.maps.Waits.Iterate()
	for it.Next(&wk, &wv) {
		r.waits[wk] = waitRead{s: wv, max: probekit.WindowMax(wv.MaxNs.V, wv.MaxNs.Win, w), comm: bpfrec.CString(wv.Comm[:])}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("io: read waits: %w", err)
	}
	var (
		dev uint32
		jv  ioJournal
	)
	it = p.maps.Journals.Iterate()
	for it.Next(&dev, &jv) {
		m, tag := probekit.WindowMaxTag(jv.MaxNs.V, jv.MaxNs.Win, jv.MaxNs.Tag, w)
		r.journals[dev] = journalRead{j: jv, max: m, maxTID: tag}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("io: read journals: %w", err)
	}
	var (
		qk [32]int8
		qv ioQos
	)
	it = p.maps.Qoses.Iterate()
	for it.Next(&qk, &qv) {
		r.qos[bpfrec.CString(qk[:])] = qv
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("io: read qos: %w", err)
	}
	var (
		ck uint32
		cv [16]int8
	)
	it = p.maps.Comms.Iterate()
	for it.Next(&ck, &cv) {
		r.comms[ck] = bpfrec.CString(cv[:])
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("io: read comms: %w", err)
	}
	// In flight after the completed ones: a wait that ends in between is
	// in neither reading, and counted in the next window.
	r.now = monotonic()
	var (
		tid uint32
		sl  ioSleep
	)
	it = p.maps.Sleeps.Iterate()
	for it.Next(&tid, &sl) {
		if sl.StartNs != 0 { // 0: awake, the entry kept for its next sleep
			r.sleeps[tid] = sl
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("io: read sleeps: %w", err)
	}
	var sy ioInSync
	it = p.maps.Syncs.Iterate()
	for it.Next(&tid, &sy) {
		r.syncs[tid] = sy
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("io: read fsyncs: %w", err)
	}
	return r, nil
}

// evictStale deletes in-flight entries whose end the programs cannot have
// seen (a task that died asleep, a wake-up wolf did not attach in time
// for): older than an hour, they only fill the maps.
func (p *probe) evictStale(r *raw) {
	const stale = time.Hour
	var sl, sy []uint32
	for tid, s := range r.sleeps {
		if r.now-time.Duration(s.StartNs) > stale {
			sl = append(sl, tid)
		}
	}
	for tid, s := range r.syncs {
		if r.now-time.Duration(s.StartNs) > stale {
			sy = append(sy, tid)
		}
	}
	probekit.Evict(p.maps.Sleeps, sl)
	probekit.Evict(p.maps.Syncs, sy)
}

// monotonic is bpf_ktime_get_ns's clock.
func monotonic() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}
