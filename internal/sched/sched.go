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
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/bpfrec"
	"github.com/wolf-investigator/wolf/internal/hist"
	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/overhead"
	"github.com/wolf-investigator/wolf/internal/procfs"
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
	ss := &session{inv: *s, opts: opts, meter: overhead.Start()}
	ss.cfg = config{BounceWindowNs: uint64(s.BounceWindow), SelfTGID: uint32(os.Getpid())}
	if s.watchSelf {
		ss.cfg.SelfTGID = 0
	}
	if opts.PID > 0 {
		ss.cfg.TargetTGID = uint32(tgidOf(ctx, s.Proc, opts.PID))
	}
	var err error
	if ss.p, err = openProbe(ss.cfg); err != nil {
		ss.meter.Close()
		return nil, err
	}
	ss.topo, ss.topoErr = ss.p.readTopology()
	if err := ss.p.attach(); err != nil {
		ss.Close()
		return nil, err
	}
	ss.meter.Track(ss.p.programs()...)
	ss.cpuh = findCPUHierarchy(ctx, s.Proc)
	ss.bw = ss.cpuh.readBandwidths()
	ss.start = monotonicNow()
	if s.attached != nil {
		s.attached()
	}
	return ss, nil
}

// session is sched attached.
type session struct {
	inv     Investigator
	opts    investigator.Options
	cfg     config
	meter   *overhead.Meter
	p       *probe
	topo    map[int]schedCpuTopo
	topoErr error
	start   uint64 // monotonic ns when attached
	// CPU bandwidth: where the cpu controller's cgroups are, and what
	// their quotas had done when the window opened.
	cpuh cpuHierarchy
	bw   map[string]bwReading
}

// Close detaches and frees everything.
func (ss *session) Close() error {
	// The meter's duty cycle reads the programs' statistics in the
	// background: stop it before the programs close under it.
	ss.meter.Close()
	ss.p.close()
	return nil
}

// Collect concludes the window since Start.
func (ss *session) Collect(ctx context.Context) (*investigator.Result, error) {
	s, p, opts, cfg, start := &ss.inv, ss.p, ss.opts, ss.cfg, ss.start
	topo, topoErr := ss.topo, ss.topoErr
	recs, err := p.tasks()
	if err != nil {
		return nil, err
	}
	end := monotonicNow()
	bwAfter := ss.cpuh.readBandwidths()
	bwBefore := ss.bw
	ss.bw = bwAfter // the next window starts here
	if s.dumped != nil {
		s.dumped()
	}
	recs = append(recs, p.exitedTasks()...)
	snap := &Snapshot{
		Duration:     time.Duration(end - start),
		CPURunq:      map[int]hist.Log2{},
		CgroupRunq:   map[string]hist.Log2{},
		Thresholds:   s.Thresholds,
		BounceWindow: s.BounceWindow,
	}
	if kinds, err := p.kinds(); err == nil {
		snap.Kinds = kinds
	}
	if hs, err := p.cpuHists(); err == nil {
		for cpu, h := range hs {
			snap.CPURunq[cpu] = hist.FromBPF(&h)
		}
	}
	aff := p.affinityCalls()
	// Cgroup ids to paths, for the tasks and the exited tasks' histograms.
	cgHists := p.cgroupHists()
	want := map[uint64]bool{}
	for id := range cgHists {
		want[id] = true
	}
	for i := range recs {
		want[recs[i].CgroupId] = true
	}
	paths := cgroupPaths(cpuCgroupRoot(ctx, s.Proc), want)
	cgName := func(id uint64) string {
		if p, ok := paths[id]; ok {
			return p
		}
		return fmt.Sprintf("id:%d", id)
	}
	for id, h := range cgHists {
		merge(snap.CgroupRunq, cgName(id), hist.FromBPF(&h))
	}
	seen := map[uint32]bool{}
	for i := range recs {
		r := &recs[i]
		if seen[r.Tid] {
			continue // exited and iterated both: keep the first
		}
		seen[r.Tid] = true
		if opts.PID > 0 && int(r.Tgid) != int(cfg.TargetTGID) && int(r.Tid) != opts.PID {
			continue
		}
		t := taskFromRecord(r, start)
		t.Cgroup = cgName(r.CgroupId)
		if a, ok := aff[r.Tid]; ok {
			t.Affinity = &AffinityCalls{Self: uint64(a.SelfCalls), Other: uint64(a.OtherCalls),
				LastCallerTID: int(a.LastCallerTid), LastCallerPID: int(a.LastCallerTgid), LastCallerComm: bpfrec.CString(a.LastCallerComm[:])}
		}
		if !t.Exited {
			// Only the live tasks' waits: exited ones are in cgHists.
			merge(snap.CgroupRunq, t.Cgroup, t.Runq)
		}
		snap.Tasks = append(snap.Tasks, t)
	}
	sort.Slice(snap.Tasks, func(i, j int) bool { return snap.Tasks[i].TID < snap.Tasks[j].TID })

	// Topology: the hardware's caches and the scheduler's own view.
	if hw, err := ReadHardware(s.SysCPU); err == nil {
		snap.Hardware = hw
	}
	if topoErr == nil && len(topo) > 0 {
		snap.Sched = schedViewFromBPF(topo, p.percpu)
	}
	snap.SchedMCOff = schedMCOff(snap.Hardware)
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

	findings := Conclude(snap)
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
		Histograms:   Histograms(snap, named),
		Timelines:    Timelines(snap.Tasks, p.migrations(start), named),
		Capabilities: map[string]bool{},
	}
	for _, tp := range btfTracepoints {
		res.Capabilities["tracepoint:"+tp.name] = p.attached[tp.name]
	}
	res.Capabilities["tracepoint:sys_enter_sched_setaffinity"] = p.attached["sys_enter_sched_setaffinity"]
	res.Capabilities["sched_llc_view"] = snap.Sched != nil
	res.Capabilities["softirq_context"] = p.percpu
	st, _ := p.stats()
	dropped := st["no_storage"] + st["exited_full"] + st["cgroup_full"] + st["setaffinity_full"]
	// Events are the programs' runs (estimated from the sampled run
	// statistics); without statistics, wolf's own counters.
	res.Overhead = ss.meter.Lap(0, dropped, p.programs()...)
	if res.Overhead.Events == 0 {
		res.Overhead.Events = st["migrations"] + st["runq_samples"]
	}
	if s.programs != nil {
		s.programs(p.programsByName())
	}
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

// taskFromRecord converts the BPF record; start is when wolf attached.
func taskFromRecord(r *schedTaskRec, start uint64) *Task {
	st := &r.St
	t := &Task{
		TID: int(r.Tid), PID: int(r.Tgid), Comm: bpfrec.CString(r.Comm[:]), Exited: r.Exited != 0,
		Policy: int(r.Policy), Prio: int(r.Prio), CPU: int(r.Cpu),
		Migrations: uint64(st.Migrations), Bounces: uint64(st.Bounces),
		BounceCPUs: [2]int{int(st.BounceA), int(st.BounceB)},
		Remote:     uint64(st.Remote), WakeAffine: uint64(st.WakeAffine), WakeWide: uint64(st.WakeWide),
		WakerFlips: uint64(st.WakerFlipsMax), KernelTotal: r.NrMigrations,
		Runq: hist.FromBPF(&st.Runq),
	}
	for k := 0; k < NKinds; k++ {
		t.ByKind[k] = uint64(st.ByKind[k])
		t.BounceOut[k] = uint64(st.BounceOut[k])
		t.BounceBack[k] = uint64(st.BounceBack[k])
	}
	if w := st.ByKind[KindWakeup]; w > 0 {
		t.WakeeFlips = float64(st.WakeeFlipsSum) / float64(w)
	}
	from := max(start, r.StartTs)
	if r.NowTs > from {
		t.Window = time.Duration(r.NowTs - from)
	}
	if span := r.NowTs - st.FirstTs; st.FirstTs > 0 && r.NowTs > st.FirstTs && r.RuntimeNow >= st.Runtime0 {
		t.CPUPct = 100 * float64(r.RuntimeNow-st.Runtime0) / float64(span)
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
func domainFlagNames() []string {
	spec, err := btf.LoadKernelSpec()
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
