package locks

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/probekit"
)

// config is what the BPF side is told before load.
type config struct {
	TargetTGID    uint32
	TargetLock    uint64
	TypeMask      uint32
	HoldThreshold uint64 // ns
	ProfileHz     int    // 0: no profile under lock
	rawOnly       bool   // tests: behave like a kernel without BTF tracepoints
}

// attachTable is everything locks attaches. The contention programs come
// in two builds: BTF tracepoints, which take the owner's stack through
// kfuncs (6.2+), and raw tracepoints for older kernels; the object is
// configured for one or the other (owner_stacks), so the table is too.
func attachTable(typed bool, profileHz int) []probekit.Attach {
	kind, prefix := probekit.RawTracepoint, "raw_"
	if typed {
		kind, prefix = probekit.BTFTracepoint, "btf_"
	}
	t := []probekit.Attach{
		{Kind: kind, Target: "lock/contention_begin", Program: prefix + "contention_begin", Required: true,
			Why: "every lock wait as it begins (Linux 5.19+)"},
		{Kind: kind, Target: "lock/contention_end", Program: prefix + "contention_end", Required: true,
			Why: "every lock wait as it ends"},
		{Kind: probekit.RawTracepoint, Target: "mmap_lock/mmap_lock_acquire_returned", Program: "on_mm_acquired",
			Why: "mmap_lock holds and waits per thread"},
		{Kind: probekit.RawTracepoint, Target: "mmap_lock/mmap_lock_released", Program: "on_mm_released",
			Why: "mmap_lock hold times and long holds"},
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
	if typed {
		t = append(t, probekit.Attach{Kind: probekit.BTFTracepoint, Target: "sched/sched_switch", Program: "on_switch",
			Why: "how long mmap_lock holders wait throttled by their cgroup's CPU quota"})
	}
	if profileHz > 0 {
		t = append(t, probekit.Attach{Kind: probekit.PerfSample, Program: "on_sample", Hz: profileHz,
			Why: "profile what runs while a thread holds its mmap_lock"})
	}
	return t
}

// probe is locks' object, loaded and attached through the kit.
type probe struct {
	kit   *probekit.Probe
	table []probekit.Attach
	maps  locksMaps
	holds *probekit.Ring[locksHoldEvent]
	btf   bool // contention via BTF tracepoints, with owner stacks
	notes []string
}

// maxHoldEvents bounds what user space keeps of the ring buffer per window.
const maxHoldEvents = 10000

// openProbe loads and attaches, preferring BTF tracepoints and falling back
// to raw ones, in an object configured without owner stacks, when this
// kernel refuses them.
func openProbe(cfg config) (*probe, error) {
	var btfErr error
	if !cfg.rawOnly {
		p, err := open(cfg, true)
		if err == nil {
			return p, nil
		}
		if errors.Is(err, investigator.ErrPrivilege) {
			return nil, err
		}
		btfErr = err
	}
	p, err := open(cfg, false)
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

func open(cfg config, typed bool) (*probe, error) {
	p := &probe{table: attachTable(typed, cfg.ProfileHz), btf: typed}
	kit, err := probekit.Open(probekit.Object{
		Name: "locks",
		Spec: loadLocks,
		Vars: map[string]any{
			"target_tgid":         cfg.TargetTGID,
			"self_tgid":           uint32(os.Getpid()),
			"target_lock":         cfg.TargetLock,
			"type_mask":           cfg.TypeMask,
			"hold_threshold_ns":   cfg.HoldThreshold,
			"owner_stacks":        typed,
			"mmap_has_memcg_path": mmapHasMemcgPath(),
		},
		Prepare: fitPerCPU,
		Table:   p.table,
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

// kernelHasFunc says whether the kernel's BTF has a function by that name
// (kfuncs such as bpf_task_from_pid, 6.2+).
func kernelHasFunc(name string) bool {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return false
	}
	var fn *btf.Func
	return spec.TypeByName(name, &fn) == nil
}

// taskBasedThrottle says whether this kernel throttles a task only on its
// way back to user space (6.18+: task_struct has a throttled flag), so that
// a task holding a kernel lock is never throttled while it holds it.
func taskBasedThrottle() bool {
	spec, err := btf.LoadKernelSpec()
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
	spec, err := btf.LoadKernelSpec()
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
