// Package sched is wolf's scheduler investigator (after "The Network Is Slow", Eric's Place): which tasks
// the scheduler moves between CPUs, how often, whether they bounce straight
// back, who moves them (the wake-up path, the load balancer, the migration
// stopper, an affinity change), how long woken tasks wait for a CPU, and
// whether the scheduler's idea of which CPUs share a cache matches the
// hardware. The BPF side is sched.bpf.c; Conclude turns what it saw into
// findings; Audit checks the topology and kernel configuration statically.
package sched

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
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
	"github.com/wolf-investigator/wolf/internal/overhead"
	"github.com/wolf-investigator/wolf/internal/perfsample"
	"github.com/wolf-investigator/wolf/internal/probekit"
	"github.com/wolf-investigator/wolf/internal/procfs"
	"github.com/wolf-investigator/wolf/internal/virt"
)

// DefaultBounceWindow is how soon a move back must follow a move away to
// count as a bounce (A->B->A).
const DefaultBounceWindow = 50 * time.Millisecond

// Investigator watches migrations and run-queue latency. Use New.
type Investigator struct {
	BounceWindow time.Duration
	Thresholds   Thresholds
	Proc         procfs.Reader
	// SysCPU is /sys/devices/system/cpu (tests point it elsewhere).
	SysCPU string
	// attached and dumped, when set, are called once every program is
	// attached and right after the task counters were read: tests compare
	// the kernel's own counts over exactly that window.
	attached func()
	dumped   func()
	// watchSelf counts wolf's own process too, which is otherwise left
	// out: the Go cost workload runs in it.
	watchSelf bool
	// noTaskStorage takes the path of kernels without task-local storage
	// (before 5.11) on any kernel, for its tests.
	noTaskStorage bool
	// snapshot, when set, sees what Conclude is given; programs, the BPF
	// programs by name before they are closed (the cost benchmark reads
	// their run statistics).
	snapshot func(*Snapshot)
	programs func(map[string]*ebpf.Program)
}

// New returns an investigator with the defaults.
func New() *Investigator {
	return &Investigator{BounceWindow: DefaultBounceWindow, Thresholds: DefaultThresholds, SysCPU: "/sys/devices/system/cpu"}
}

// Name implements investigator.Investigator.
func (*Investigator) Name() string { return "sched" }

// Summary implements investigator.Investigator.
func (*Investigator) Summary() string {
	return "tasks bounced between CPUs and who moves them, run-queue latency, the scheduler's cache topology"
}

// monotonicNow is CLOCK_MONOTONIC, the clock of bpf_ktime_get_ns.
func monotonicNow() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return uint64(ts.Nano())
}

// tgidOf resolves a pid that may be a thread id to its process.
func tgidOf(ctx context.Context, r procfs.Reader, pid int) int {
	st, err := r.Status(ctx, pid, 0)
	if err != nil || st.Tgid == 0 {
		return pid
	}
	return st.Tgid
}

// Start loads and attaches sched's programs.
func (s *Investigator) Start(ctx context.Context, opts investigator.Options) (investigator.Session, error) {
	if s.BounceWindow <= 0 {
		s.BounceWindow = DefaultBounceWindow
	}
	if s.Thresholds == (Thresholds{}) {
		s.Thresholds = DefaultThresholds
	}
	if s.SysCPU == "" {
		s.SysCPU = "/sys/devices/system/cpu"
	}
	ss := &session{inv: *s, opts: opts, prevTasks: map[taskKey]schedTaskRec{}}
	ss.cfg = config{BounceWindowNs: uint64(s.BounceWindow), SelfTGID: uint32(os.Getpid()), NoTaskStorage: s.noTaskStorage, HotNs: uint64(MigrationCost())}
	if s.watchSelf {
		ss.cfg.SelfTGID = 0
	}
	if opts.PID > 0 {
		ss.cfg.TargetTGID = uint32(tgidOf(ctx, s.Proc, opts.PID))
	}
	var err error
	if ss.p, err = openProbe(ss.cfg); err != nil {
		return nil, err
	}
	// Tests read the kernel's own counters here: the programs count from
	// now on, before the /proc and /sys reads below.
	if s.attached != nil {
		s.attached()
	}
	ss.cpuh = findCPUHierarchy(ctx, s.Proc)
	ss.bw = ss.cpuh.readBandwidths()
	ss.start = monotonicNow()
	ss.selfCPU = overhead.CPUTime()
	ss.stat, _ = machineTimes()
	return ss, nil
}

// session is sched attached. Its windows: per-task counters and
// histograms live in task-local storage, cumulative since wolf first saw
// the task; each window is the iterator's reading minus the previous one,
// task by task (a task is its tid and the time wolf first saw it, so a
// reused tid is another task). A task that exits leaves a record, which
// Collect takes out of the map and subtracts the same way; the run-queue
// waits of a task never reported go to its cgroup's histogram in the
// kernel instead. Per-CPU and per-cgroup histograms, migrations by
// initiator and sched_setaffinity calls are cumulative maps, subtracted
// likewise; maxima are per window (wolf.h's struct wolf_max); the
// timelines keep the moves timed inside the window.
type session struct {
	inv   Investigator
	opts  investigator.Options
	cfg   config
	p     *probe
	start uint64 // monotonic ns: the window's start
	// selfCPU is wolf's process CPU time at the window's start, stat the
	// CPUs' busy and idle times in /proc/stat then.
	selfCPU time.Duration
	stat    cpuTime

	prevTasks map[taskKey]schedTaskRec
	prevCPU   []hist.Log2
	prevCg    map[uint64]hist.Log2
	prevKinds [NKinds]uint64
	prevAff   map[uint32]schedAffRec
	prevExit  map[schedExitKey]schedExitCpuVal
	// The cgroup and setaffinity maps are bounded (1024) and keyed by
	// things that come and go: entries unchanged for a few windows are
	// deleted, and count from zero if they come back.
	idleCg   probekit.Idle[uint64]
	idleAff  probekit.Idle[uint32]
	idleExit probekit.Idle[schedExitKey]
	// CPU bandwidth: where the cpu controller's cgroups are, and what
	// their quotas had done when the window opened (one window's after
	// is the next one's before).
	cpuh cpuHierarchy
	bw   map[string]bwReading
}

// taskKey tells tasks apart across windows: a tid can be reused, the time
// wolf first saw the task tells the two.
type taskKey struct {
	tid     uint32
	firstTs uint64
}

func keyOf(r *schedTaskRec) taskKey { return taskKey{r.Tid, r.St.FirstTs} }

// Close detaches and frees everything.
func (ss *session) Close() error {
	ss.p.close()
	return nil
}

// Restart begins the window again (investigator.Restarter): a Collect
// whose conclusions are dropped, which moves every reading to now. Waits
// behind the other investigators' loading are then not the window's.
func (ss *session) Restart(ctx context.Context) error {
	_, err := ss.Collect(ctx)
	return err
}

// Collect concludes the window since Start or the previous Collect.
func (ss *session) Collect(ctx context.Context) (*investigator.Result, error) {
	s, p, opts, cfg, start := &ss.inv, ss.p, ss.opts, ss.cfg, ss.start
	// The window's maxima stop here; the maps are read after.
	w, err := p.kit.EndWindow()
	if err != nil {
		return nil, err
	}
	live, err := p.tasks()
	if err != nil {
		return nil, err
	}
	end := monotonicNow()
	selfCPU := overhead.CPUTime()
	selfUsed := selfCPU - ss.selfCPU
	stat, statOK := machineTimes()
	if s.watchSelf {
		selfUsed = 0 // wolf's tasks are among the others then
	}
	bwAfter := ss.cpuh.readBandwidths()
	bwBefore := ss.bw
	ss.bw = bwAfter // the next window starts here
	if s.dumped != nil {
		s.dumped()
	}
	// Exited after the iterator's reading, or before: the exit record
	// has everything, and wins.
	exited := p.takeExited()
	snap := &Snapshot{
		Duration:     time.Duration(end - start),
		CPURunq:      map[int]hist.Log2{},
		CgroupRunq:   map[string]hist.Log2{},
		Thresholds:   s.Thresholds,
		BounceWindow: s.BounceWindow,
		HotWindow:    time.Duration(cfg.HotNs),
		CPUIdleLong:  p.cpuIdleLong(),
		CPUCoverage:  p.cpuCoverage(),
		Virtual:      virt.Detect(),
		SelfCPU:      max(selfUsed, 0),
	}
	if statOK {
		snap.CPUsBusy = busyShare(ss.stat, stat)
	}
	if kinds, err := p.kinds(); err == nil {
		for k := range kinds {
			snap.Kinds[k] = probekit.Sub(kinds[k], ss.prevKinds[k])
		}
		ss.prevKinds = kinds
	}
	if hs, err := p.cpuHists(w); err == nil {
		for cpu := range hs {
			h := hs[cpu]
			if cpu < len(ss.prevCPU) {
				h = h.Sub(&ss.prevCPU[cpu])
			}
			snap.CPURunq[cpu] = h
		}
		ss.prevCPU = hs
	}
	aff := p.affinityCalls()
	exits := p.exitCPU()
	cgHists := p.cgroupHists(w)
	// Cgroup ids to paths, for the tasks and the exited tasks' histograms.
	want := map[uint64]bool{}
	for id := range cgHists {
		want[id] = true
	}
	for k := range exits {
		want[k.CgroupId] = true
	}
	for _, recs := range [][]schedTaskRec{live, exited} {
		for i := range recs {
			want[recs[i].CgroupId] = true
		}
	}
	paths := cgroupPaths(cpuCgroupRoot(ctx, s.Proc), want)
	cgName := func(id uint64) string {
		if p, ok := paths[id]; ok {
			return p
		}
		return fmt.Sprintf("id:%d", id)
	}
	for id, h := range cgHists {
		prev := ss.prevCg[id]
		d := h.Sub(&prev)
		merge(snap.CgroupRunq, cgName(id), d)
		if ss.idleCg.Step(id, d.Count > 0) {
			_ = p.maps.CgroupRunq.Delete(id)
			delete(cgHists, id)
		}
	}
	ss.idleCg.End()
	ss.prevCg = cgHists

	next := map[taskKey]schedTaskRec{}
	add := func(r *schedTaskRec) {
		k := keyOf(r)
		if _, done := next[k]; done {
			return // exited and iterated both: the exit record came first
		}
		next[k] = *r
		prev, seen := ss.prevTasks[k]
		if opts.PID > 0 && int(r.Tgid) != int(cfg.TargetTGID) && int(r.Tid) != opts.PID {
			return
		}
		t := taskWindow(r, &prev, seen, start, w)
		if t.Migrations == 0 && t.Runq.Count == 0 && t.Runtime == 0 && t.Throttled == 0 {
			return // nothing in this window
		}
		t.Cgroup = cgName(r.CgroupId)
		if a, ok := aff[r.Tid]; ok {
			b := ss.prevAff[r.Tid]
			self, other := probekit.Sub(uint64(a.SelfCalls), uint64(b.SelfCalls)), probekit.Sub(uint64(a.OtherCalls), uint64(b.OtherCalls))
			if self+other > 0 {
				t.Affinity = &AffinityCalls{Self: self, Other: other,
					LastCallerTID: int(a.LastCallerTid), LastCallerPID: int(a.LastCallerTgid), LastCallerComm: bpfrec.CString(a.LastCallerComm[:])}
			}
		}
		// The kernel folded the waits of a task it never reported into
		// its cgroup (cgHists); the others' are the task's own.
		if !t.Exited || r.St.Dumped != 0 {
			merge(snap.CgroupRunq, t.Cgroup, t.Runq)
		}
		snap.Tasks = append(snap.Tasks, t)
	}
	for i := range exited {
		add(&exited[i])
	}
	for i := range live {
		add(&live[i])
	}
	for k, r := range next {
		if r.Exited != 0 {
			delete(next, k) // gone: nothing more will come of it
		}
	}
	for k, v := range exits {
		b := ss.prevExit[k]
		d := probekit.Sub(v.RuntimeNs, b.RuntimeNs)
		if d > 0 {
			snap.Exited = append(snap.Exited, ExitedCPU{Comm: bpfrec.CString(k.Comm[:]), Cgroup: cgName(k.CgroupId), Runtime: time.Duration(d),
				Tasks: probekit.Sub(uint64(v.Tasks), uint64(b.Tasks)), LastTGID: int(v.LastTgid)})
		}
		if ss.idleExit.Step(k, d > 0) {
			_ = p.maps.ExitCpu.Delete(k)
			delete(exits, k)
		}
	}
	ss.idleExit.End()
	ss.prevExit = exits
	sort.Slice(snap.Exited, func(i, j int) bool { return snap.Exited[i].Runtime > snap.Exited[j].Runtime })
	for tid, a := range aff {
		b := ss.prevAff[tid]
		if ss.idleAff.Step(tid, a.SelfCalls != b.SelfCalls || a.OtherCalls != b.OtherCalls) {
			_ = p.maps.Setaff.Delete(tid)
			delete(aff, tid)
		}
	}
	ss.idleAff.End()
	ss.prevTasks, ss.prevAff = next, aff
	sort.Slice(snap.Tasks, func(i, j int) bool { return snap.Tasks[i].TID < snap.Tasks[j].TID })

	// Topology: the hardware's caches and the scheduler's own view.
	if hw, err := ReadHardware(s.SysCPU); err == nil {
		snap.Hardware = hw
	}
	if p.topoErr == nil && len(p.topo) > 0 {
		snap.Sched = schedViewFromBPF(p.topo, p.percpu)
	}
	snap.SchedMCOff = schedMCOff(snap.Hardware)
	snap.CPUs = len(p.tickCPUs)
	if snap.CPUs == 0 {
		if cpus, err := perfsample.OnlineCPUs(); err == nil {
			snap.CPUs = len(cpus)
		}
	}
	for _, b := range bandwidthDeltas(bwBefore, bwAfter, ss.cpuh.version) {
		if b.Periods < throttleMinPer || b.ThrottledPct() < throttleInfoPct {
			continue // only the throttled ones are reported: read their processes
		}
		b.Procs = ss.cpuh.procsOf(ctx, s.Proc, b.Path)
		if opts.PID > 0 && !slices.ContainsFunc(b.Procs, func(p Proc) bool { return p.PID == int(cfg.TargetTGID) }) {
			continue
		}
		snap.Bandwidth = append(snap.Bandwidth, b)
	}
	s.describeMovers(ctx, snap)
	if s.snapshot != nil {
		s.snapshot(snap)
	}

	findings, facts := ConcludeFacts(snap)
	named := map[int]bool{}
	for _, f := range findings {
		for _, sub := range f.Subjects {
			if sub.TID != 0 {
				named[sub.TID] = true
			}
		}
	}
	res := &investigator.Result{
		Findings:     findings,
		Facts:        facts,
		Histograms:   Histograms(snap, named),
		Timelines:    Timelines(snap.Tasks, p.migrations(start, end), named),
		Capabilities: p.kit.Capabilities(attachTable),
		Notes:        p.notesNow(),
	}
	res.Capabilities["sched_llc_view"] = snap.Sched != nil
	res.Capabilities["softirq_context"] = p.percpu
	c, _ := p.kit.WindowCounters()
	var dropped uint64
	if c != nil {
		dropped = c[schedStatIndexSTAT_NO_STORAGE] + c[schedStatIndexSTAT_EXITED_FULL] + c[schedStatIndexSTAT_CGROUP_FULL] + c[schedStatIndexSTAT_SETAFF_FULL]
	}
	// Events are the programs' runs (estimated from the sampled run
	// statistics); without statistics, wolf's own counters.
	res.Overhead = p.kit.Overhead(0, dropped)
	if res.Overhead.Events == 0 && c != nil {
		res.Overhead.Events = c[schedStatIndexSTAT_MIGRATIONS] + c[schedStatIndexSTAT_RUNQ_SAMPLES]
	}
	if s.programs != nil {
		s.programs(p.programsByName())
	}
	ss.start, ss.selfCPU, ss.stat = end, selfCPU, stat
	return res, nil
}

func merge(m map[string]hist.Log2, key string, h hist.Log2) {
	if h.Count == 0 {
		return
	}
	cur := m[key]
	cur.Merge(&h)
	m[key] = cur
}

// taskWindow is what a task did in the window starting at start (monotonic
// ns), from its record now and, if seen, its record at the previous
// Collect; maxima are window w's.
func taskWindow(r, prev *schedTaskRec, seen bool, start uint64, w uint32) *Task {
	st, ps := &r.St, &prev.St
	sub := func(a, b uint32) uint64 { return probekit.Sub(uint64(a), uint64(b)) }
	runq := hist.FromBPF(&st.Runq, w)
	if seen {
		p := hist.FromBPF(&ps.Runq, w)
		runq = runq.Sub(&p)
	}
	t := &Task{
		TID: int(r.Tid), PID: int(r.Tgid), Comm: bpfrec.CString(r.Comm[:]), Exited: r.Exited != 0,
		Policy: int(r.Policy), Prio: int(r.Prio), CPU: int(r.Cpu),
		Migrations: sub(st.Migrations, ps.Migrations), Bounces: sub(st.Bounces, ps.Bounces),
		BounceCPUs: [2]int{int(st.BounceA), int(st.BounceB)},
		Remote:     sub(st.Remote, ps.Remote), WakeAffine: sub(st.WakeAffine, ps.WakeAffine), WakeWide: sub(st.WakeWide, ps.WakeWide),
		WakerFlips: probekit.WindowMax(st.WakerFlipsMax.V, st.WakerFlipsMax.Win, w), KernelTotal: r.NrMigrations,
		Runq: runq, IdleLong: sub(st.IdleLong, ps.IdleLong),
		MovedRuns: sub(st.MovedRuns, ps.MovedRuns), HotMoves: sub(st.HotMoves, ps.HotMoves),
		MovedWaits: sub(st.MovedWaits, ps.MovedWaits), MovedWait: time.Duration(probekit.Sub(st.MovedWaitNs, ps.MovedWaitNs)),
		HotMoved: RunStats{N: sub(st.HotMovedUnits, ps.HotMovedUnits), Sum: time.Duration(probekit.Sub(st.HotMovedNs, ps.HotMovedNs)),
			SqUs2: probekit.Sub(st.HotMovedSqUs, ps.HotMovedSqUs)},
		HotStayed: RunStats{N: sub(st.HotStayedUnits, ps.HotStayedUnits), Sum: time.Duration(probekit.Sub(st.HotStayedNs, ps.HotStayedNs)),
			SqUs2: probekit.Sub(st.HotStayedSqUs, ps.HotStayedSqUs)},
		Throttled:      time.Duration(probekit.Sub(st.ThrottledNs, ps.ThrottledNs)),
		ThrottledWaits: sub(st.ThrottledWaits, ps.ThrottledWaits),
	}
	for k := 0; k < NKinds; k++ {
		t.ByKind[k] = sub(st.ByKind[k], ps.ByKind[k])
		t.BounceOut[k] = sub(st.BounceOut[k], ps.BounceOut[k])
		t.BounceBack[k] = sub(st.BounceBack[k], ps.BounceBack[k])
	}
	if wk := t.ByKind[KindWakeup]; wk > 0 {
		t.WakeeFlips = float64(probekit.Sub(st.WakeeFlipsSum, ps.WakeeFlipsSum)) / float64(wk)
	}
	from := max(start, r.StartTs)
	if r.NowTs > from {
		t.Window = time.Duration(r.NowTs - from)
	}
	// CPU share over the part of the window wolf saw it: since its
	// previous reading, else since wolf first saw it.
	t0, run0 := st.FirstTs, st.Runtime0
	if seen {
		t0, run0 = prev.NowTs, prev.RuntimeNow
	}
	if span := r.NowTs - t0; t0 > 0 && r.NowTs > t0 && r.RuntimeNow >= run0 {
		t.CPUPct = 100 * float64(r.RuntimeNow-run0) / float64(span)
	}
	if r.RuntimeNow >= run0 {
		t.Runtime = time.Duration(r.RuntimeNow - run0)
	}
	return t
}

// describeMovers reads, for the tasks that findings may name, their
// affinity and cpuset (procfs, with timeouts).
func (s *Investigator) describeMovers(ctx context.Context, snap *Snapshot) {
	th := snap.Thresholds
	for _, t := range snap.Tasks {
		if t.Exited || t.Migrations < th.MinMigrations || t.Rate(t.Migrations) < th.MigrationsPerSec {
			continue
		}
		if st, err := s.Proc.Status(ctx, t.PID, t.TID); err == nil {
			t.CPUsAllowed = st.Fields["Cpus_allowed_list"]
		}
		t.Cpuset = effectiveCpuset(ctx, s.Proc, t.PID, t.TID)
	}
}

// schedViewFromBPF builds the scheduler's view from read_cpu's records.
func schedViewFromBPF(topo map[int]schedCpuTopo, percpu bool) *SchedView {
	names := domainFlagNames()
	v := &SchedView{LLCSize: map[int]int{}, LLCID: map[int]int{}, Domains: map[int][]Domain{}, Source: "bpf"}
	for cpu, t := range topo {
		if percpu && t.RqCpu == uint32(cpu) && t.LlcSize > 0 {
			v.LLCSize[cpu] = int(t.LlcSize)
			v.LLCID[cpu] = int(t.LlcId)
		}
		var doms []Domain
		for i := 0; i < int(t.Ndomains) && i < len(t.Dom); i++ {
			d := t.Dom[i]
			var span []int
			for w, word := range d.Span {
				for b := 0; b < 64; b++ {
					if word&(1<<b) != 0 {
						span = append(span, w*64+b)
					}
				}
			}
			doms = append(doms, Domain{Name: bpfrec.CString(d.Name[:]), Level: int(d.Level), Flags: DecodeFlags(uint32(d.Flags), names), Span: span})
		}
		v.Domains[cpu] = doms
	}
	return v
}

// legacyFlagNames are the domain flags before Linux 5.10 generated them
// from include/linux/sched/sd_flags.h.
var legacyFlagNames = []string{"SD_LOAD_BALANCE", "SD_BALANCE_NEWIDLE", "SD_BALANCE_EXEC", "SD_BALANCE_FORK",
	"SD_BALANCE_WAKE", "SD_WAKE_AFFINE", "SD_ASYM_CPUCAPACITY", "SD_SHARE_CPUCAPACITY", "SD_SHARE_POWERDOMAIN",
	"SD_SHARE_PKG_RESOURCES", "SD_SERIALIZE", "SD_ASYM_PACKING", "SD_PREFER_SIBLING", "SD_OVERLAP", "SD_NUMA"}

// domainFlagNames reads the kernel's own domain flag bits from its BTF
// (the enum of __SD_* values, 5.10+), else the legacy table.
//
// It walks every type of the kernel's BTF (the enum has no name), which
// takes tens of megabytes for a moment: once per process, as the kernel
// does not change under it (wolf watch concludes a window every minute).
var domainFlagNames = sync.OnceValue(readDomainFlagNames)

func readDomainFlagNames() []string {
	spec, err := kernelbtf.Spec()
	if err != nil {
		return legacyFlagNames
	}
	for typ, err := range spec.All() {
		if err != nil {
			break
		}
		e, ok := typ.(*btf.Enum)
		if !ok || len(e.Values) == 0 || e.Values[0].Name != "__SD_BALANCE_NEWIDLE" {
			continue
		}
		names := make([]string, 32)
		for _, v := range e.Values {
			if v.Value < 32 && strings.HasPrefix(v.Name, "__SD_") && v.Name != "__SD_FLAG_CNT" {
				names[v.Value] = strings.TrimPrefix(v.Name, "__")
			}
		}
		return names
	}
	return legacyFlagNames
}
