package sched

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/bpfrec"
	"github.com/wolf-investigator/wolf/internal/hist"
	"github.com/wolf-investigator/wolf/internal/kallsyms"
	"github.com/wolf-investigator/wolf/internal/kernelbtf"
	"github.com/wolf-investigator/wolf/internal/perfsample"
	"github.com/wolf-investigator/wolf/internal/probekit"
	"github.com/wolf-investigator/wolf/internal/tracefs"
)

// config is what the BPF side is told before it loads.
type config struct {
	BounceWindowNs uint64
	// HotNs: a task that ran this recently is cache-hot (MigrationCost).
	HotNs      uint64
	TargetTGID uint32 // 0: every process
	SelfTGID   uint32 // wolf itself, ignored unless it is the target
	// NoTaskStorage keeps per-task state in the hash used on kernels
	// without task-local storage (tests of that path on newer kernels).
	NoTaskStorage bool
}

// attachTable is everything sched attaches: tp_btf for typed arguments
// and direct reads, the classic syscall tracepoint (tracefs) for who
// changes affinities, and the task iterator that reads the per-task
// counters kept in task-local storage.
var attachTable = []probekit.Attach{
	{Kind: probekit.BTFTracepoint, Target: "sched/sched_migrate_task", Program: "on_migrate", Required: true,
		Why: "every migration, on the CPU that makes it: rates, bounces, initiators"},
	{Kind: probekit.BTFTracepoint, Target: "sched/sched_switch", Program: "on_switch", Required: true,
		Why: "run-queue latency: when a waiting task gets the CPU; preempted tasks start waiting"},
	{Kind: probekit.BTFTracepoint, Target: "sched/sched_wakeup", Program: "on_wakeup", Required: true,
		Why: "run-queue latency: when a task becomes runnable"},
	{Kind: probekit.BTFTracepoint, Target: "sched/sched_wakeup_new", Program: "on_wakeup_new",
		Why: "run-queue latency of new tasks"},
	{Kind: probekit.BTFTracepoint, Target: "sched/sched_process_exit", Program: "on_exit",
		Why: "keep what was seen of tasks that exit during the window"},
	{Kind: probekit.Tracepoint, Target: "syscalls/sys_enter_sched_setaffinity", Program: "on_setaffinity",
		Why: "who changes a task's affinity (itself or another task)"},
	{Kind: probekit.Iter, Target: "task", Program: "dump_tasks", Required: true,
		Why: "read the per-task counters kept in task-local storage"},
	{Kind: probekit.PerfSample, Program: "on_tick", Hz: tickHz,
		Why: "whether each CPU executed: a wait on a CPU that was not executing (a vCPU descheduled) is not contention"},
}

// DefaultMigrationCost is the kernel's default migration_cost_ns.
const DefaultMigrationCost = 500 * time.Microsecond

// MigrationCost is this kernel's migration_cost_ns: task_hot() calls a task
// that ran this recently cache-hot, and the load balancer leaves it where
// it is. debugfs since 5.13, a sysctl before; the default when neither can
// be read.
func MigrationCost() time.Duration {
	for _, f := range []string{"/sys/kernel/debug/sched/migration_cost_ns", "/proc/sys/kernel/sched_migration_cost_ns"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 {
			return time.Duration(n)
		}
	}
	return DefaultMigrationCost
}

// maxHashTasks bounds the per-task hash used where the kernel has no
// task-local storage (before 5.11): ~700 bytes a task, allocated as used.
const maxHashTasks = 16384

// probe owns everything sched attaches to the kernel, through the kit.
type probe struct {
	kit  *probekit.Probe
	maps schedMaps
	// topo is each CPU's topology as read_cpu found it, before the
	// tracepoints attached.
	topo    map[int]schedCpuTopo
	topoErr error
	// percpu says whether the per-CPU variable offsets were found in the
	// kernel's BTF (the scheduler's LLC view and the softirq test need them).
	percpu bool
	notes  []string
	// tickCPUs are the CPUs on_tick samples (nil when it did not attach);
	// tickPrev and idlePrev are the per-CPU counters at the previous
	// window's end, tickAt its time.
	tickCPUs []int
	tickAt   time.Time
	tickPrev []uint64
	idlePrev []uint64
	// cpuTimes are /proc/stat's per-CPU busy and idle times at tickAt.
	cpuTimes map[int]cpuTime
}

// percpuOffsets reads, from the kernel's BTF, where the per-CPU variables
// the BPF side needs sit in the per-CPU area. A missing one reads as 0.
func percpuOffsets() (map[string]uint64, error) {
	want := map[string]bool{"runqueues": true, "__preempt_count": true, "sd_llc_size": true, "sd_llc_id": true}
	spec, err := kernelbtf.Spec()
	if err != nil {
		return nil, fmt.Errorf("kernel BTF: %w", err)
	}
	var ds *btf.Datasec
	if err := spec.TypeByName(".data..percpu", &ds); err != nil {
		// Kernels whose BTF has no variables (5.10's pahole) still list
		// them in kallsyms.
		out, kerr := percpuFromKallsyms(want)
		if kerr != nil {
			return nil, fmt.Errorf("kernel BTF has no .data..percpu section (%v), and kallsyms: %w", err, kerr)
		}
		return out, nil
	}
	out := map[string]uint64{}
	for _, v := range ds.Vars {
		if vv, ok := v.Type.(*btf.Var); ok && want[vv.Name] {
			out[vv.Name] = uint64(v.Offset)
		}
	}
	return out, nil
}

// percpuFromKallsyms finds per-CPU variables' offsets in the per-CPU area
// from /proc/kallsyms: their addresses less __per_cpu_start (zero on
// x86-64, where per-CPU symbols are offsets already).
func percpuFromKallsyms(want map[string]bool) (map[string]uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), kallsyms.ReadTimeout())
	defer cancel()
	syms, err := kallsyms.Load(ctx)
	if err != nil {
		return nil, err
	}
	base, _ := syms.Lookup("__per_cpu_start")
	out := map[string]uint64{}
	for name := range want {
		if a, ok := syms.Lookup(name); ok && a >= base && a != 0 {
			out[name] = a - base
		}
	}
	if out["runqueues"] == 0 {
		return nil, fmt.Errorf("no runqueues symbol (addresses hidden by kptr_restrict?)")
	}
	return out, nil
}

func openProbe(cfg config) (*probe, error) {
	p := &probe{}
	offs, err := percpuOffsets()
	if err != nil {
		p.notes = append(p.notes, fmt.Sprintf("per-CPU variables not located (%v): the scheduler's LLC view is read from its domains only, and softirq balancing is told from newidle balancing by a heuristic", err))
	}
	p.percpu = offs["runqueues"] != 0
	// Task-local storage came in 5.11; before, per-task state lives in a
	// bounded hash by thread id, and tstore (still named by the pruned
	// branches) becomes a one-entry hash the kernel can create.
	noTaskStorage := cfg.NoTaskStorage || features.HaveMapType(ebpf.TaskStorage) != nil
	if noTaskStorage {
		p.notes = append(p.notes, fmt.Sprintf("no task-local storage (Linux 5.11+): per-task state is kept in a hash of at most %d tasks; tasks beyond are not followed (counted)", maxHashTasks))
	}
	// The syscall tracepoint needs tracefs; if it cannot be mounted, that
	// row fails and its note says why.
	_, _ = tracefs.Ensure()
	kit, err := probekit.Open(probekit.Object{
		Name: "sched",
		Spec: loadSched,
		Vars: map[string]any{
			"bounce_window_ns":  cfg.BounceWindowNs,
			"hot_ns":            cmp.Or(cfg.HotNs, uint64(DefaultMigrationCost)),
			"target_tgid":       cfg.TargetTGID,
			"self_tgid":         cfg.SelfTGID,
			"timeline_len":      uint32(DefaultTimelineLen),
			"off_runqueues":     offs["runqueues"],
			"off_preempt_count": offs["__preempt_count"],
			"off_sd_llc_size":   offs["sd_llc_size"],
			"off_sd_llc_id":     offs["sd_llc_id"],
			"use_task_storage":  !noTaskStorage,
		},
		BTF: kernelbtf.External(),
		Prepare: func(spec *ebpf.CollectionSpec) error {
			if noTaskStorage {
				ts := spec.Maps["tstore"]
				ts.Type, ts.MaxEntries = ebpf.Hash, 1
				spec.Maps["tstore_hash"].MaxEntries = maxHashTasks
			}
			ncpu, err := ebpf.PossibleCPU()
			if err != nil {
				return fmt.Errorf("possible CPUs: %w", err)
			}
			spec.Maps["topo"].MaxEntries = uint32(ncpu)
			return nil
		},
		Table: attachTable,
		Load:  []string{"read_cpu"},
		// The topology first: the migration program classifies with what
		// read_cpu leaves in percpu_base and llc_size.
		BeforeAttach: func(k *probekit.Probe) error {
			if err := k.AssignMaps(&p.maps); err != nil {
				return err
			}
			if prog := k.Program("read_cpu"); prog != nil {
				p.topo, p.topoErr = p.readTopology(prog)
			} else {
				p.topoErr = fmt.Errorf("sched: topology program: %s", probekit.Explain(k.LoadError("read_cpu")))
			}
			return nil
		},
	})
	if err != nil {
		return nil, err
	}
	p.kit = kit
	if kit.Attached("perf_event") {
		p.tickCPUs, _ = perfsample.OnlineCPUs()
		p.tickAt = time.Now()
		p.cpuTimes = readCPUTimes()
	}
	return p, nil
}

// tickHz is on_tick's rate: enough samples in a few seconds to tell a CPU
// that ran from one that did not, at one program run per 10 ms per CPU.
const tickHz = 100

// cpuCoverage returns, per CPU, the share of on_tick's samples that
// landed in the window that ends now: under 1 where the CPU was not
// executing. nil when it was not measured.
func (p *probe) cpuCoverage() map[int]float64 {
	if p.tickCPUs == nil {
		return nil
	}
	now := time.Now()
	span := now.Sub(p.tickAt).Seconds()
	cur, ok := p.perCPUStat(schedStatIndexSTAT_TICKS)
	if !ok {
		return nil
	}
	prev, times := p.tickPrev, readCPUTimes()
	prevTimes := p.cpuTimes
	p.tickPrev, p.tickAt, p.cpuTimes = cur, now, times
	if span < 1 {
		return nil
	}
	out := map[int]float64{}
	for _, cpu := range p.tickCPUs {
		// A CPU idle most of the window is left out: some kernels (6.18)
		// take almost no cpu-clock samples on an idle CPU, which would
		// read as a CPU that did not execute.
		if mostlyIdle(prevTimes[cpu], times[cpu]) {
			continue
		}
		if cpu < len(cur) {
			out[cpu] = min(float64(cur[cpu]-at(prev, cpu))/(span*tickHz), 1)
		}
	}
	return out
}

// cpuTime is one CPU's line of /proc/stat: busy and idle (idle and
// iowait) time, in the kernel's USER_HZ ticks.
type cpuTime struct{ busy, idle uint64 }

// readCPUTimes reads every CPU's times from /proc/stat; nil if it cannot.
func readCPUTimes() map[int]cpuTime {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return nil
	}
	return parseCPUTimes(string(b))
}

func parseCPUTimes(stat string) map[int]cpuTime {
	out := map[int]cpuTime{}
	for _, line := range strings.Split(stat, "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || !strings.HasPrefix(f[0], "cpu") || f[0] == "cpu" {
			continue
		}
		cpu, err := strconv.Atoi(f[0][3:])
		if err != nil {
			continue
		}
		var t cpuTime
		for i, v := range f[1:] {
			n, _ := strconv.ParseUint(v, 10, 64)
			switch i {
			case 3, 4: // idle, iowait
				t.idle += n
			case 8, 9: // guest, guest_nice: already in user and nice
			default:
				t.busy += n
			}
		}
		out[cpu] = t
	}
	return out
}

// machineTimes sums every CPU's times in /proc/stat.
func machineTimes() (cpuTime, bool) {
	ts := readCPUTimes()
	var t cpuTime
	for _, c := range ts {
		t.busy += c.busy
		t.idle += c.idle
	}
	return t, len(ts) > 0
}

// busyShare is the share of the CPUs' time busy between two readings; 0
// when they are missing or went back (a CPU taken offline).
func busyShare(a, b cpuTime) float64 {
	if b.busy < a.busy || b.idle < a.idle || a.busy+a.idle == 0 {
		return 0
	}
	busy, idle := b.busy-a.busy, b.idle-a.idle
	if busy+idle == 0 {
		return 0
	}
	return float64(busy) / float64(busy+idle)
}

// mostlyIdle says whether a CPU was idle for more than half the time
// between two readings; false when they are missing.
func mostlyIdle(a, b cpuTime) bool {
	if b.busy < a.busy || b.idle < a.idle {
		return false
	}
	busy, idle := b.busy-a.busy, b.idle-a.idle
	return busy+idle > 0 && idle > busy
}

// cpuIdleLong returns, per CPU, the long waits that ended on it while it
// was idle (or behind wolf) in the window that ends now.
func (p *probe) cpuIdleLong() map[int]uint64 {
	cur, ok := p.perCPUStat(schedStatIndexSTAT_IDLE_LONG)
	if !ok {
		return nil
	}
	prev := p.idlePrev
	p.idlePrev = cur
	out := map[int]uint64{}
	for cpu, v := range cur {
		if d := v - at(prev, cpu); d > 0 {
			out[cpu] = d
		}
	}
	return out
}

// perCPUStat reads one counter of the stats map, CPU by CPU.
func (p *probe) perCPUStat(idx schedStatIndex) ([]uint64, bool) {
	var vals []uint64
	if err := p.maps.Stats.Lookup(uint32(idx), &vals); err != nil {
		return nil, false
	}
	return vals, true
}

func at(vals []uint64, i int) uint64 {
	if i < len(vals) {
		return vals[i]
	}
	return 0
}

// readTopology runs read_cpu on every online CPU, from a thread pinned to
// each in turn, and then gives the thread its affinity back. (Letting the
// runtime end the thread instead would be simpler, but a thread's exit
// fires the parent-death signal of every child it forked: labs' children
// in the same process would die.) If the affinity cannot be restored, the
// thread stays locked and ends with its goroutine.
func (p *probe) readTopology(readCPU *ebpf.Program) (map[int]schedCpuTopo, error) {
	cpus, err := perfsample.OnlineCPUs()
	if err != nil {
		return nil, fmt.Errorf("sched: online CPUs: %w", err)
	}
	type result struct {
		topo map[int]schedCpuTopo
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		var orig unix.CPUSet
		if err := unix.SchedGetaffinity(0, &orig); err != nil {
			ch <- result{nil, fmt.Errorf("sched: read affinity: %w", err)}
			return // still locked: the thread ends with the goroutine
		}
		defer func() {
			if unix.SchedSetaffinity(0, &orig) == nil {
				runtime.UnlockOSThread()
			}
		}()
		out := map[int]schedCpuTopo{}
		var firstErr error
		for _, cpu := range cpus {
			var set unix.CPUSet
			set.Set(cpu)
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				continue // not in wolf's cpuset: that CPU stays unknown
			}
			var ret uint32
			for try := 0; try < 3; try++ {
				ret, err = readCPU.Run(&ebpf.RunOptions{Context: schedTopoArgs{Cpu: uint64(cpu)}})
				if err != nil || ret != 1 {
					break
				}
			}
			if err != nil {
				if firstErr == nil {
					firstErr = fmt.Errorf("sched: run topology program on CPU %d: %w", cpu, err)
				}
				continue
			}
			if ret != 0 {
				continue
			}
			var t schedCpuTopo
			if err := p.maps.Topo.Lookup(uint32(cpu), &t); err == nil {
				out[cpu] = t
			}
		}
		ch <- result{out, firstErr}
	}()
	r := <-ch
	if len(r.topo) == 0 && r.err != nil {
		return nil, r.err
	}
	return r.topo, nil
}

// tasks runs the iterator once: every task wolf has state for, its
// counters cumulative since wolf first saw it.
func (p *probe) tasks() ([]schedTaskRec, error) {
	rc, err := p.kit.Iter("dump_tasks").Open()
	if err != nil {
		return nil, fmt.Errorf("sched: run task iterator: %w", err)
	}
	defer rc.Close()
	return bpfrec.ReadAll[schedTaskRec](rc)
}

// takeExited returns the records of tasks that exited since the previous
// call, and removes them from the map, which then only needs room for one
// window's exits.
func (p *probe) takeExited() []schedTaskRec {
	var keys []uint32
	var tid uint32
	var rec schedTaskRec
	it := p.maps.Exited.Iterate()
	for it.Next(&tid, &rec) {
		keys = append(keys, tid)
	}
	var out []schedTaskRec
	for _, k := range keys {
		err := p.maps.Exited.LookupAndDelete(k, &rec)
		if errors.Is(err, ebpf.ErrNotSupported) {
			// Before 5.14 hash maps cannot do both at once.
			if err = p.maps.Exited.Lookup(k, &rec); err == nil {
				_ = p.maps.Exited.Delete(k)
			}
		}
		if err == nil {
			out = append(out, rec)
		}
	}
	return out
}

// migrations reads the timeline rings: each task's moves kept from the
// window [start, end), timed from start (bpf_ktime_get_ns, the same clock).
func (p *probe) migrations(start, end uint64) map[int][]Migration {
	out := map[int][]Migration{}
	var k schedMigKey
	var e schedMigEvent
	it := p.maps.Migs.Iterate()
	for it.Next(&k, &e) {
		if e.Ts < start || e.Ts >= end {
			continue // another window's
		}
		out[int(k.Tid)] = append(out[int(k.Tid)], Migration{At: time.Duration(e.Ts - start), From: int(e.From), To: int(e.To), Kind: Kind(e.Kind)})
	}
	return out
}

// cpuHists returns each CPU's run-queue histogram, cumulative, with
// window w's maximum.
func (p *probe) cpuHists(w uint32) ([]hist.Log2, error) {
	var vals []schedWolfHist
	if err := p.maps.CpuRunq.Lookup(uint32(0), &vals); err != nil {
		return nil, fmt.Errorf("sched: read per-CPU histograms: %w", err)
	}
	out := make([]hist.Log2, len(vals))
	for i := range vals {
		out[i] = hist.FromBPF(&vals[i], w)
	}
	return out, nil
}

// cgroupHists returns the run-queue histograms of exited tasks by cgroup
// id, cumulative, with window w's maxima.
func (p *probe) cgroupHists(w uint32) map[uint64]hist.Log2 {
	out := map[uint64]hist.Log2{}
	var id uint64
	var h schedWolfHist
	it := p.maps.CgroupRunq.Iterate()
	for it.Next(&id, &h) {
		out[id] = hist.FromBPF(&h, w)
	}
	return out
}

// exitCPU returns the CPU time of tasks that exited unreported, by
// cgroup and name (cumulative).
func (p *probe) exitCPU() map[schedExitKey]schedExitCpuVal {
	out := map[schedExitKey]schedExitCpuVal{}
	var k schedExitKey
	var v schedExitCpuVal
	it := p.maps.ExitCpu.Iterate()
	for it.Next(&k, &v) {
		out[k] = v
	}
	return out
}

// affinityCalls returns who called sched_setaffinity on whom (counts
// cumulative).
func (p *probe) affinityCalls() map[uint32]schedAffRec {
	out := map[uint32]schedAffRec{}
	var tid uint32
	var a schedAffRec
	it := p.maps.Setaff.Iterate()
	for it.Next(&tid, &a) {
		out[tid] = a
	}
	return out
}

// kinds sums the host-wide migrations by initiator (cumulative).
func (p *probe) kinds() ([NKinds]uint64, error) {
	var out [NKinds]uint64
	for k := range NKinds {
		var vals []uint64
		if err := p.maps.Kinds.Lookup(uint32(k), &vals); err != nil {
			return out, fmt.Errorf("sched: read migration kinds: %w", err)
		}
		for _, v := range vals {
			out[k] += v
		}
	}
	return out, nil
}

// programsByName names the programs as sched.bpf.c does (the cost
// benchmark reads their run statistics).
func (p *probe) programsByName() map[string]*ebpf.Program {
	out := map[string]*ebpf.Program{}
	for _, a := range attachTable {
		if prog := p.kit.Program(a.Program); prog != nil {
			out[a.Program] = prog
		}
	}
	return out
}

func (p *probe) close() { p.kit.Close() }

// notesNow are what sched runs without here: its own notes, the kit's
// (rows that did not attach) and the topology it could not read.
func (p *probe) notesNow() []string {
	out := append(slices.Clone(p.notes), p.kit.Notes()...)
	if p.topoErr != nil {
		out = append(out, fmt.Sprintf("the scheduler's own cache topology not read (%v): only the hardware's is known", p.topoErr))
	}
	return out
}
