package locks

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/kernelbtf"
	"github.com/wolf-investigator/wolf/internal/lockslow"
	"github.com/wolf-investigator/wolf/internal/probekit"
)

// config is what the BPF side is told before load.
type config struct {
	TargetTGID    uint32
	TargetLock    uint64
	TypeMask      uint32
	HoldThreshold uint64 // ns
	ProfileHz     int    // 0: no profile under lock
	// ReclaimShared: the reclaim investigator runs in this process and
	// shares its per-thread reclaim totals; locks attaches no vmscan
	// program of its own.
	ReclaimShared bool
	rawOnly       bool // tests: behave like a kernel without BTF tracepoints
}

// mode is how locks sees lock waits on this kernel.
type mode int

const (
	// btfMode: BTF tracepoints on lock:contention_*, which take the
	// owner's stack through kfuncs (6.2+).
	btfMode mode = iota
	// rawMode: raw tracepoints on lock:contention_* (5.19+), no owner
	// stacks.
	rawMode
	// kprobeMode: before 5.19 there are no contention tracepoints;
	// kprobes on the sleeping locks' slow paths begin a wait, and
	// sched_switch ends it when the waiter that slept there runs again
	// (no kretprobes: their trampoline would cut every waiter's stack
	// short).
	kprobeMode
)

// attachTable is everything locks attaches in mode; with reclaimShared,
// no vmscan program (the reclaim investigator's shared map stands in).
// The object is configured for the mode too (owner_stacks, slow_ranges,
// reclaim_shared).
func attachTable(m mode, profileHz int, reclaimShared bool) []probekit.Attach {
	kind, prefix := probekit.RawTracepoint, "raw_"
	if m == btfMode {
		kind, prefix = probekit.BTFTracepoint, "btf_"
	}
	var t []probekit.Attach
	if m == kprobeMode {
		t = append(t, probekit.Attach{Kind: probekit.RawTracepoint, Target: "sched/sched_switch", Program: "kp_switch", Required: true,
			Why: "the end of a lock wait: its waiter, asleep in a lock's slow path, runs again"})
		progs := map[lockslow.Kind]string{lockslow.Mutex: "kp_mutex_begin", lockslow.RWSemRead: "kp_rwsem_read_begin", lockslow.RWSemWrite: "kp_rwsem_write_begin"}
		for _, k := range []lockslow.Kind{lockslow.Mutex, lockslow.RWSemRead, lockslow.RWSemWrite} {
			for _, fn := range lockslow.Funcs[k] {
				t = append(t, probekit.Attach{Kind: probekit.Kprobe, Target: fn, Program: progs[k],
					Why: "waits on a " + k.String() + " as they begin (no lock:contention_begin before Linux 5.19)"})
			}
		}
	} else {
		// Under a lock storm whose waits are timed as sparsely as
		// storm sampling goes and still cost over the budget, the budget
		// runs the begin part of the time (probekit.Attach.Duty): its
		// runs, tens of thousands a second, are then most of what locks
		// costs. The end stays: a wait begun in the on-time ends seen
		// however long it lasts (the long waits are the findings; an end
		// detached with the begin would lose every wait longer than
		// what is left of the on-time), and with no wait pending it costs
		// a lookup.
		//
		// The end is attached first: a wait begun before its end program
		// would keep its thread's entry awaiting an end (the awaited
		// count in locks.bpf.c) until the thread's next wait.
		t = append(t, probekit.Attach{Kind: kind, Target: "lock/contention_end", Program: prefix + "contention_end", Required: true,
			Why: "every lock wait as it ends"},
			probekit.Attach{Kind: kind, Target: "lock/contention_begin", Program: prefix + "contention_begin", Required: true,
				Why: "every lock wait as it begins (Linux 5.19+)", Shed: dutyContention, Duty: true})
	}
	t = append(t, []probekit.Attach{
		{Kind: probekit.RawTracepoint, Target: "mmap_lock/mmap_lock_acquire_returned", Program: "on_mm_acquired",
			Why: "mmap_lock holds and waits per thread",
			// Before 5.11 (no bpf_get_current_task_btf): probe reads.
			Or: []probekit.Attach{{Kind: probekit.RawTracepoint, Target: "mmap_lock/mmap_lock_acquire_returned", Program: "on_mm_acquired_probe"}}},
		{Kind: probekit.RawTracepoint, Target: "mmap_lock/mmap_lock_released", Program: "on_mm_released",
			Why: "mmap_lock hold times and long holds",
			Or:  []probekit.Attach{{Kind: probekit.RawTracepoint, Target: "mmap_lock/mmap_lock_released", Program: "on_mm_released_probe"}}},
	}...)
	if !reclaimShared {
		t = append(t, reclaimRows...)
	}
	// Since 6.18 a task is throttled on its way back to user space,
	// holding no mmap_lock: no holder is ever throttled, which the
	// findings say as they are (Snapshot.TaskThrottle), and a program at
	// every context switch (tens of thousands a second under a storm)
	// would find nothing.
	if m == btfMode && !taskBasedThrottle() {
		t = append(t, probekit.Attach{Kind: probekit.BTFTracepoint, Target: "sched/sched_switch", Program: "on_switch",
			Why: "how long mmap_lock holders wait throttled by their cgroup's CPU quota"})
	}
	if profileHz > 0 {
		t = append(t, probekit.Attach{Kind: probekit.PerfSample, Program: "on_sample", Hz: profileHz,
			Why: "profile what runs while a thread holds its mmap_lock"})
	}
	return t
}

// dutyContention is the contention rows' rank among the budget's sheds
// (budget.go): the highest, so that a budget well under its spend again
// runs them all the time first, before what it detached for good.
const dutyContention = 8

// reclaimRows follow memory reclaim under an mmap_lock, when the reclaim
// investigator does not run alongside.
var reclaimRows = []probekit.Attach{
	{Kind: probekit.RawTracepoint, Target: "vmscan/mm_vmscan_memcg_reclaim_begin", Program: "on_memcg_reclaim_begin",
		Why: "memory cgroup reclaim done while holding an mmap_lock"},
	{Kind: probekit.RawTracepoint, Target: "vmscan/mm_vmscan_memcg_reclaim_end", Program: "on_memcg_reclaim_end",
		Why: "the end of reclaim under an mmap_lock"},
	{Kind: probekit.RawTracepoint, Target: "vmscan/mm_vmscan_direct_reclaim_begin", Program: "on_direct_reclaim_begin",
		Why: "direct reclaim done while holding an mmap_lock"},
	{Kind: probekit.RawTracepoint, Target: "vmscan/mm_vmscan_direct_reclaim_end", Program: "on_direct_reclaim_end",
		Why: "the end of direct reclaim under an mmap_lock"},
	{Kind: probekit.RawTracepoint, Target: "vmscan/mm_vmscan_lru_shrink_inactive", Program: "on_shrink_inactive",
		Why: "pages scanned and reclaimed under an mmap_lock"},
}

// reclaimSharedMap is the reclaim investigator's per-thread totals
// (WOLF_RECLAIM_TASKS in wolf.h), which locks reads when it runs
// alongside.
const reclaimSharedMap = "reclaim_tasks"

// probe is locks' object, loaded and attached through the kit.
type probe struct {
	kit   *probekit.Probe
	table []probekit.Attach
	maps  locksMaps
	holds *probekit.Ring[locksHoldEvent]
	btf   bool // contention via BTF tracepoints, with owner stacks
	// slowpath: waits seen through kprobes on the slow paths, where a
	// wait that never slept has no end by design (said in the notes).
	slowpath bool
	// reclaimShared: a hold's reclaim comes from the reclaim
	// investigator's map (reclaimSharedMap), not locks' own programs.
	reclaimShared bool
	notes         []string
}

// maxHoldEvents bounds what user space keeps of the ring buffer per window.
const maxHoldEvents = 10000

// openProbe loads and attaches, preferring BTF tracepoints and falling back
// to raw ones, in an object configured without owner stacks, when this
// kernel refuses them.
func openProbe(cfg config) (*probe, error) {
	if !hasContentionTracepoints() {
		return openKprobes(cfg)
	}
	var btfErr error
	if !cfg.rawOnly {
		p, err := open(cfg, btfMode)
		if err == nil {
			return p, nil
		}
		if errors.Is(err, investigator.ErrPrivilege) {
			return nil, err
		}
		btfErr = err
	}
	p, err := open(cfg, rawMode)
	if err != nil {
		return nil, err
	}
	if btfErr != nil {
		why := btfErr.Error()
		if !kernelHasFunc("bpf_task_from_pid") {
			why = "the kernel has no bpf_task_from_pid kfunc (Linux 6.2+)"
		}
		p.notes = append(p.notes, "owners' stacks not captured: "+why)
	}
	return p, nil
}

// openKprobes opens locks on a kernel without contention tracepoints
// (before 5.19): kprobes on the lock slow paths, where the kernel has
// kprobes; at least one of them must attach.
func openKprobes(cfg config) (*probe, error) {
	// The slow paths' text: a waiter asleep there is still waiting.
	ranges, err := lockslow.Ranges(context.Background(), maxSlowRanges)
	if err != nil {
		return nil, fmt.Errorf("locks: no lock:contention_begin/end tracepoints (Linux 5.19+), and the lock slow paths are not in kallsyms (%v): %w", err, investigator.ErrUnsupported)
	}
	var rs [maxSlowRanges]struct{ Start, End uint64 }
	for i, r := range ranges {
		rs[i].Start, rs[i].End = r.Start, r.End
	}
	p, err := open(cfg, kprobeMode, map[string]any{"slow_ranges": rs})
	if err != nil {
		return nil, err
	}
	var fns []string
	for _, row := range p.table {
		if row.Kind == probekit.Kprobe && p.kit.Attached(row.Target) {
			fns = append(fns, row.Target)
		}
	}
	if len(fns) == 0 {
		p.close()
		return nil, fmt.Errorf("locks: this kernel has no lock:contention_begin/end tracepoints (Linux 5.19+), and no kprobe on the lock slow paths attached: %w", investigator.ErrUnsupported)
	}
	p.slowpath = true
	p.notes = append(p.notes,
		fmt.Sprintf("no lock:contention_* tracepoints (Linux 5.19+): waits on mutexes and rw-semaphores seen through kprobes on %s, timed until the waiter that slept there runs again; spin locks, semaphores, per-CPU rw-semaphores and waits that never sleep are not seen", strings.Join(fns, ", ")),
		// Owners' stacks need kfuncs in BTF-tracepoint programs (6.2+);
		// kernels without contention tracepoints are older still.
		"owners' stacks not captured: the kernel has no bpf_task_from_pid kfunc (Linux 6.2+)")
	return p, nil
}

// maxSlowRanges is the size of slow_ranges in locks.bpf.c.
const maxSlowRanges = 8

// oldKernel is what a test that behaves like a kernel without BTF
// tracepoints (before 5.5) refuses besides: the programs that need
// bpf_get_current_task_btf (5.11), so that their probe-read twins load.
func oldKernel(rawOnly bool) map[string]bool {
	if !rawOnly {
		return nil
	}
	return map[string]bool{"on_mm_acquired": true, "on_mm_released": true}
}

func open(cfg config, m mode, extra ...map[string]any) (*probe, error) {
	p := &probe{table: attachTable(m, cfg.ProfileHz, cfg.ReclaimShared), btf: m == btfMode, reclaimShared: cfg.ReclaimShared}
	vars := map[string]any{
		"reclaim_shared":      cfg.ReclaimShared,
		"target_tgid":         cfg.TargetTGID,
		"self_tgid":           uint32(os.Getpid()),
		"target_lock":         cfg.TargetLock,
		"type_mask":           cfg.TypeMask,
		"hold_threshold_ns":   cfg.HoldThreshold,
		"owner_stacks":        m == btfMode,
		"mmap_has_memcg_path": mmapHasMemcgPath(),
	}
	for _, e := range extra {
		for k, v := range e {
			vars[k] = v
		}
	}
	var share map[string]probekit.ShareRole
	prepare := fitPerCPU
	if cfg.ReclaimShared {
		share = map[string]probekit.ShareRole{reclaimSharedMap: probekit.Reads}
	} else {
		// Its own copy, never read: as small as a map can be.
		prepare = func(spec *ebpf.CollectionSpec) error {
			spec.Maps[reclaimSharedMap].MaxEntries = 1
			return fitPerCPU(spec)
		}
	}
	kit, err := probekit.Open(probekit.Object{
		Name:    "locks",
		Spec:    loadLocks,
		Vars:    vars,
		Prepare: prepare,
		Share:   share,
		Table:   p.table,
		Refuse:  oldKernel(cfg.rawOnly),
		BTF:     kernelbtf.External(),
		// A wait's stack walk costs microseconds; under contention
		// the stacks are a sample (see spin_stack in locks.bpf.c).
		Detail:       "stacks of lock waiters, owners and long mmap_lock holds",
		DetailEvents: "begin",
		// Lock waits, timed one in N per CPU once the budget is spent
		// with the gates at their longest (WOLF_STORM in locks.bpf.c):
		// spin waits, and sleeping waits with their owners and queues.
		Storm: "lock waits",
	})
	if err != nil {
		return nil, err
	}
	p.kit = kit
	if err := kit.AssignMaps(&p.maps); err != nil {
		kit.Close()
		return nil, err
	}
	if p.holds, err = probekit.OpenRing[locksHoldEvent](kit, "holds", maxHoldEvents); err != nil {
		kit.Close()
		return nil, err
	}
	return p, nil
}

func (p *probe) close() { p.kit.Close() }

// perCPUBudget bounds the memory of the per-CPU aggregation maps: their
// entries are multiplied by the number of possible CPUs, so on big hosts
// fewer entries fit (drops are counted when they fill).
const perCPUBudget = 96 << 20

func fitPerCPU(spec *ebpf.CollectionSpec) error {
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return fmt.Errorf("possible CPUs: %w", err)
	}
	var perEntry uint64
	var maps []*ebpf.MapSpec
	for _, m := range spec.Maps {
		if m.Type == ebpf.PerCPUHash {
			perEntry += uint64(m.ValueSize) * uint64(m.MaxEntries)
			maps = append(maps, m)
		}
	}
	total := perEntry * uint64(ncpu)
	if total <= perCPUBudget {
		return nil
	}
	for _, m := range maps {
		m.MaxEntries = max(64, uint32(uint64(m.MaxEntries)*perCPUBudget/total))
	}
	return nil
}

// hasContentionTracepoints says whether this kernel has lock:contention_begin
// (5.19+), from its BTF: every tracepoint has a btf_trace_ typedef there.
// Without BTF, the tracepoints are assumed (and their attach says if not).
func hasContentionTracepoints() bool {
	spec, err := kernelbtf.Spec()
	if err != nil {
		return true
	}
	var td *btf.Typedef
	return spec.TypeByName("btf_trace_contention_begin", &td) == nil
}

// kernelHasFunc says whether the kernel's BTF has a function by that name
// (kfuncs such as bpf_task_from_pid, 6.2+).
func kernelHasFunc(name string) bool {
	spec, err := kernelbtf.Spec()
	if err != nil {
		return false
	}
	var fn *btf.Func
	return spec.TypeByName(name, &fn) == nil
}

// taskBasedThrottle says whether this kernel throttles a task only on its
// way back to user space (6.18+: task_struct has a throttled flag), so that
// a task holding a kernel lock is never throttled while it holds it.
//
// Once per process: every Collect asks, and loading the kernel's BTF
// costs milliseconds and megabytes each time.
var taskBasedThrottle = sync.OnceValue(readTaskBasedThrottle)

func readTaskBasedThrottle() bool {
	spec, err := kernelbtf.Spec()
	if err != nil {
		return false
	}
	var ts *btf.Struct
	if spec.TypeByName("task_struct", &ts) != nil {
		return false
	}
	for _, m := range ts.Members {
		if m.Name == "throttled" {
			return true
		}
	}
	return false
}

// mmapHasMemcgPath says whether this kernel's mmap_lock tracepoints carry
// a memcg path argument before write (5.14 to 6.13) or not.
func mmapHasMemcgPath() bool {
	spec, err := kernelbtf.Spec()
	if err != nil {
		return false
	}
	var td *btf.Typedef
	if err := spec.TypeByName("btf_trace_mmap_lock_released", &td); err != nil {
		return false
	}
	ptr, ok := td.Type.(*btf.Pointer)
	if !ok {
		return false
	}
	proto, ok := ptr.Target.(*btf.FuncProto)
	return ok && len(proto.Params) == 4
}
