package sched

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/bpfrec"
	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/kallsyms"
	"github.com/wolf-investigator/wolf/internal/kernelbtf"
	"github.com/wolf-investigator/wolf/internal/perfsample"
	"github.com/wolf-investigator/wolf/internal/tracefs"
)

// config is what the BPF side is told before it loads.
type config struct {
	BounceWindowNs uint64
	TargetTGID     uint32 // 0: every process
	SelfTGID       uint32 // wolf itself, ignored unless it is the target
	// NoTaskStorage keeps per-task state in the hash used on kernels
	// without task-local storage (tests of that path on newer kernels).
	NoTaskStorage bool
}

// probe owns everything sched attaches to the kernel. close detaches it all;
// nothing is pinned, so a kill -9 of wolf detaches it all too.
type probe struct {
	objs schedObjects
	// ticker samples every CPU's clock (on_tick) from tickStart on.
	ticker    *perfsample.Sampler
	tickStart time.Time
	links     []link.Link
	iter      *link.Iter
	attached  map[string]bool
	warnings  []string
	// percpu says whether the per-CPU variable offsets were found in the
	// kernel's BTF (the scheduler's LLC view and the softirq test need them).
	percpu bool
}

// maxHashTasks bounds the per-task hash used where the kernel has no
// task-local storage (before 5.11): ~700 bytes a task, allocated as used.
const maxHashTasks = 16384

// btfTracepoints are attached with tp_btf: typed arguments, direct reads.
var btfTracepoints = []struct {
	name     string
	prog     func(*schedObjects) *ebpf.Program
	required bool
}{
	{"sched_migrate_task", func(o *schedObjects) *ebpf.Program { return o.OnMigrate }, true},
	{"sched_switch", func(o *schedObjects) *ebpf.Program { return o.OnSwitch }, true},
	{"sched_wakeup", func(o *schedObjects) *ebpf.Program { return o.OnWakeup }, true},
	{"sched_wakeup_new", func(o *schedObjects) *ebpf.Program { return o.OnWakeupNew }, false},
	{"sched_process_exit", func(o *schedObjects) *ebpf.Program { return o.OnExit }, false},
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
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
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("sched: loading BPF programs needs root: %w", investigator.ErrPrivilege)
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("sched: raise memlock limit: %w", err)
	}
	p := &probe{attached: map[string]bool{}}
	spec, err := loadSched()
	if err != nil {
		return nil, fmt.Errorf("sched: read BPF object: %w", err)
	}
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("sched: possible CPUs: %w", err)
	}
	spec.Maps["topo"].MaxEntries = uint32(ncpu)
	offs, err := percpuOffsets()
	if err != nil {
		p.warnings = append(p.warnings, fmt.Sprintf("per-CPU variables not located (%v): the scheduler's LLC view is read from its domains only, and softirq balancing is told from newidle balancing by a heuristic", err))
	}
	p.percpu = offs["runqueues"] != 0
	set := map[string]any{
		"bounce_window_ns":  cfg.BounceWindowNs,
		"target_tgid":       cfg.TargetTGID,
		"self_tgid":         cfg.SelfTGID,
		"timeline_len":      uint32(DefaultTimelineLen),
		"off_runqueues":     offs["runqueues"],
		"off_preempt_count": offs["__preempt_count"],
		"off_sd_llc_size":   offs["sd_llc_size"],
		"off_sd_llc_id":     offs["sd_llc_id"],
	}
	// Task-local storage came in 5.11; before, per-task state lives in a
	// bounded hash by thread id, and tstore (still named by the pruned
	// branches) becomes a one-entry hash the kernel can create.
	if cfg.NoTaskStorage || features.HaveMapType(ebpf.TaskStorage) != nil {
		set["use_task_storage"] = false
		ts := spec.Maps["tstore"]
		ts.Type, ts.MaxEntries = ebpf.Hash, 1
		spec.Maps["tstore_hash"].MaxEntries = maxHashTasks
		p.warnings = append(p.warnings, fmt.Sprintf("no task-local storage (Linux 5.11+): per-task state is kept in a hash of at most %d tasks; tasks beyond are not followed (counted)", maxHashTasks))
	}
	for name, v := range set {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("sched: configure BPF object (%s): %w", name, err)
		}
	}
	if err := spec.LoadAndAssign(&p.objs, kernelbtf.Options()); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("sched: the kernel's BPF verifier rejected the program (%v): %w", ve, investigator.ErrUnsupported)
		}
		return nil, fmt.Errorf("sched: load BPF objects (needs BTF and task storage, Linux 5.11+): %v: %w", err, investigator.ErrUnsupported)
	}
	return p, nil
}

// attach attaches the tracepoints and creates the task iterator.
func (p *probe) attach() error {
	for _, tp := range btfTracepoints {
		l, err := link.AttachTracing(link.TracingOptions{Program: tp.prog(&p.objs)})
		if err != nil {
			if tp.required {
				return fmt.Errorf("sched: attach BTF tracepoint %s (%v): %w", tp.name, err, investigator.ErrUnsupported)
			}
			p.warnings = append(p.warnings, fmt.Sprintf("tracepoint %s unavailable (%v)", tp.name, err))
			continue
		}
		p.links = append(p.links, l)
		p.attached[tp.name] = true
	}
	// Who changes affinities: optional, needs syscall tracepoints (tracefs).
	if _, err := tracefs.Ensure(); err == nil {
		l, err := link.Tracepoint("syscalls", "sys_enter_sched_setaffinity", p.objs.OnSetaffinity, nil)
		if err == nil {
			p.links = append(p.links, l)
			p.attached["sys_enter_sched_setaffinity"] = true
		} else {
			p.warnings = append(p.warnings, fmt.Sprintf("syscalls:sys_enter_sched_setaffinity unavailable (%v): affinity changes are seen, not who made them", err))
		}
	} else {
		p.warnings = append(p.warnings, fmt.Sprintf("tracefs unavailable (%v): affinity changes are seen, not who made them", err))
	}
	it, err := link.AttachIter(link.IterOptions{Program: p.objs.DumpTasks})
	if err != nil {
		return fmt.Errorf("sched: create task iterator (needs Linux 5.8+ with BTF: %v): %w", err, investigator.ErrUnsupported)
	}
	p.iter = it
	// Whether the CPUs executed: optional (without perf events, waits on
	// a CPU that was not executing read as contention).
	if s, err := perfsample.Attach(p.objs.OnTick, tickHz); err == nil {
		p.ticker, p.tickStart = s, time.Now()
	} else {
		p.warnings = append(p.warnings, fmt.Sprintf("no clock samples (%v): a wait on a CPU that was not executing is not told from contention", err))
	}
	return nil
}

// tickHz is on_tick's rate: enough samples in a few seconds to tell a CPU
// that ran from one that did not, at one program run per 10 ms per CPU.
const tickHz = 100

// cpuCoverage returns, per CPU, the share of on_tick's samples that
// landed since attach: under 1 where the CPU was not executing. nil when
// it was not measured.
func (p *probe) cpuCoverage() map[int]float64 {
	if p.ticker == nil {
		return nil
	}
	span := time.Since(p.tickStart).Seconds()
	if span < 1 {
		return nil
	}
	var vals []uint64
	if err := p.objs.Stats.Lookup(uint32(statTicks), &vals); err != nil {
		return nil
	}
	out := map[int]float64{}
	for _, cpu := range p.ticker.CPUs {
		if cpu < len(vals) {
			out[cpu] = min(float64(vals[cpu])/(span*tickHz), 1)
		}
	}
	return out
}

// readTopology runs read_cpu on every online CPU, from a thread pinned to
// each in turn, and then gives the thread its affinity back. (Letting the
// runtime end the thread instead would be simpler, but a thread's exit
// fires the parent-death signal of every child it forked: labs' children
// in the same process would die.) If the affinity cannot be restored, the
// thread stays locked and ends with its goroutine.
func (p *probe) readTopology() (map[int]schedCpuTopo, error) {
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
				ret, err = p.objs.ReadCpu.Run(&ebpf.RunOptions{Context: schedTopoArgs{Cpu: uint64(cpu)}})
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
			if err := p.objs.Topo.Lookup(uint32(cpu), &t); err == nil {
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

// tasks runs the iterator once: every task wolf has state for.
func (p *probe) tasks() ([]schedTaskRec, error) {
	rc, err := p.iter.Open()
	if err != nil {
		return nil, fmt.Errorf("sched: run task iterator: %w", err)
	}
	defer rc.Close()
	return bpfrec.ReadAll[schedTaskRec](rc)
}

// exitedTasks returns the records of tasks that migrated and exited.
func (p *probe) exitedTasks() []schedTaskRec {
	var out []schedTaskRec
	var tid uint32
	var rec schedTaskRec
	it := p.objs.Exited.Iterate()
	for it.Next(&tid, &rec) {
		out = append(out, rec)
	}
	return out
}

// migrations reads the timeline rings: each task's kept moves, timed from
// start (bpf_ktime_get_ns, the same clock).
func (p *probe) migrations(start uint64) map[int][]Migration {
	out := map[int][]Migration{}
	var k schedMigKey
	var e schedMigEvent
	it := p.objs.Migs.Iterate()
	for it.Next(&k, &e) {
		if e.Ts < start {
			continue // moved between attaching and the window's start
		}
		out[int(k.Tid)] = append(out[int(k.Tid)], Migration{At: time.Duration(e.Ts - start), From: int(e.From), To: int(e.To), Kind: Kind(e.Kind)})
	}
	return out
}

// cpuHists returns each CPU's run-queue histogram.
func (p *probe) cpuHists() ([]schedWolfHist, error) {
	var vals []schedWolfHist
	if err := p.objs.CpuRunq.Lookup(uint32(0), &vals); err != nil {
		return nil, fmt.Errorf("sched: read per-CPU histograms: %w", err)
	}
	return vals, nil
}

// cgroupHists returns the run-queue histograms of exited tasks by cgroup id.
func (p *probe) cgroupHists() map[uint64]schedWolfHist {
	out := map[uint64]schedWolfHist{}
	var id uint64
	var h schedWolfHist
	it := p.objs.CgroupRunq.Iterate()
	for it.Next(&id, &h) {
		out[id] = h
	}
	return out
}

// affinityCalls returns who called sched_setaffinity on whom.
func (p *probe) affinityCalls() map[uint32]schedAffRec {
	out := map[uint32]schedAffRec{}
	var tid uint32
	var a schedAffRec
	it := p.objs.Setaff.Iterate()
	for it.Next(&tid, &a) {
		out[tid] = a
	}
	return out
}

// kinds sums the host-wide migrations by initiator.
func (p *probe) kinds() ([NKinds]uint64, error) {
	var out [NKinds]uint64
	for k := range NKinds {
		var vals []uint64
		if err := p.objs.Kinds.Lookup(uint32(k), &vals); err != nil {
			return out, fmt.Errorf("sched: read migration kinds: %w", err)
		}
		for _, v := range vals {
			out[k] += v
		}
	}
	return out, nil
}

// statNames follow enum stat_index in sched.bpf.c.
var statNames = []string{"migrations", "same_cpu", "no_storage", "exited_full", "exited_saved", "cgroup_full", "setaffinity", "setaffinity_full", "records", "runq_samples", "big_cpu", "idle_long", "ticks"}

// statIdleLong and statTicks index STAT_IDLE_LONG and STAT_TICKS: kept
// per CPU.
const (
	statIdleLong = 11
	statTicks    = 12
)

// cpuIdleLong returns, per CPU, the long waits that ended on it while idle.
func (p *probe) cpuIdleLong() map[int]uint64 {
	var vals []uint64
	if err := p.objs.Stats.Lookup(uint32(statIdleLong), &vals); err != nil {
		return nil
	}
	out := map[int]uint64{}
	for cpu, v := range vals {
		if v > 0 {
			out[cpu] = v
		}
	}
	return out
}

func (p *probe) stats() (map[string]uint64, error) {
	out, err := bpfrec.Counters(p.objs.Stats, statNames)
	if err != nil {
		return nil, fmt.Errorf("sched: %w", err)
	}
	return out, nil
}

// programs lists the hot programs, for the overhead meter.
func (p *probe) programs() []*ebpf.Program {
	return []*ebpf.Program{p.objs.OnMigrate, p.objs.OnSwitch, p.objs.OnWakeup, p.objs.OnWakeupNew, p.objs.OnExit, p.objs.OnSetaffinity, p.objs.DumpTasks, p.objs.OnTick}
}

// programsByName names the programs as sched.bpf.c does.
func (p *probe) programsByName() map[string]*ebpf.Program {
	return map[string]*ebpf.Program{
		"on_migrate": p.objs.OnMigrate, "on_switch": p.objs.OnSwitch, "on_wakeup": p.objs.OnWakeup,
		"on_wakeup_new": p.objs.OnWakeupNew, "on_exit": p.objs.OnExit, "on_setaffinity": p.objs.OnSetaffinity,
		"dump_tasks": p.objs.DumpTasks, "on_tick": p.objs.OnTick,
	}
}

func (p *probe) close() {
	if p.ticker != nil {
		p.ticker.Close()
		p.ticker = nil
	}
	for _, l := range p.links {
		_ = l.Close()
	}
	p.links = nil
	if p.iter != nil {
		_ = p.iter.Close()
		p.iter = nil
	}
	_ = p.objs.Close()
}
