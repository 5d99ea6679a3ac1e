package locks

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"

	"github.com/wolf-investigator/wolf/internal/bpfrec"
	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/perfsample"
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

// commonProgs are loaded on every kernel.
type commonProgs struct {
	OnMmAcquired *ebpf.Program `ebpf:"on_mm_acquired"`
	OnMmReleased *ebpf.Program `ebpf:"on_mm_released"`
	OnSample     *ebpf.Program `ebpf:"on_sample"`
	// Reclaim done while holding an mmap_lock.
	OnMemcgReclaimBegin  *ebpf.Program `ebpf:"on_memcg_reclaim_begin"`
	OnMemcgReclaimEnd    *ebpf.Program `ebpf:"on_memcg_reclaim_end"`
	OnDirectReclaimBegin *ebpf.Program `ebpf:"on_direct_reclaim_begin"`
	OnDirectReclaimEnd   *ebpf.Program `ebpf:"on_direct_reclaim_end"`
	OnShrinkInactive     *ebpf.Program `ebpf:"on_shrink_inactive"`
}

// The contention programs come in two builds: BTF tracepoints (owner
// stacks through kfuncs) and raw tracepoints for older kernels.
type btfProgs struct {
	Begin *ebpf.Program `ebpf:"btf_contention_begin"`
	End   *ebpf.Program `ebpf:"btf_contention_end"`
	// Switch times how long mmap_lock holders are throttled by their
	// cgroup's CPU quota while holding (BTF tracepoint only).
	Switch *ebpf.Program `ebpf:"on_switch"`
}

type rawProgs struct {
	Begin *ebpf.Program `ebpf:"raw_contention_begin"`
	End   *ebpf.Program `ebpf:"raw_contention_end"`
}

type probe struct {
	maps    locksMaps
	common  commonProgs
	begin   *ebpf.Program
	end     *ebpf.Program
	sw      *ebpf.Program // sched_switch, nil without BTF tracepoints
	btf     bool          // contention via BTF tracepoints, with owner stacks
	links   []link.Link
	sampler *perfsample.Sampler
	rd      *ringbuf.Reader
	done    chan struct{}

	mu       sync.Mutex
	events   []locksHoldEvent
	lost     uint64 // hold events wolf could not keep (its own cap)
	warnings []string
	attached map[string]bool
}

// maxHoldEvents bounds what user space keeps of the ring buffer.
const maxHoldEvents = 10000

func openProbe(cfg config) (*probe, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("locks: loading BPF programs needs root: %w", investigator.ErrPrivilege)
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("locks: raise memlock limit: %w", err)
	}
	p := &probe{attached: map[string]bool{}, done: make(chan struct{})}
	if err := p.load(cfg); err != nil {
		return nil, err
	}
	attach := func(name string, prog *ebpf.Program, typed bool, required bool) error {
		var l link.Link
		var err error
		if typed {
			l, err = link.AttachTracing(link.TracingOptions{Program: prog})
		} else {
			l, err = link.AttachRawTracepoint(link.RawTracepointOptions{Name: name, Program: prog})
		}
		if err != nil {
			if required {
				return fmt.Errorf("locks: attach tracepoint %s (%v): %w", name, err, investigator.ErrUnsupported)
			}
			p.warnings = append(p.warnings, fmt.Sprintf("tracepoint %s unavailable: %v", name, err))
			return nil
		}
		p.links = append(p.links, l)
		p.attached[name] = true
		return nil
	}
	steps := []struct {
		name     string
		prog     *ebpf.Program
		typed    bool
		required bool
	}{
		{"contention_begin", p.begin, p.btf, true},
		{"contention_end", p.end, p.btf, true},
		{"mmap_lock_acquire_returned", p.common.OnMmAcquired, false, false},
		{"mmap_lock_released", p.common.OnMmReleased, false, false},
		{"mm_vmscan_memcg_reclaim_begin", p.common.OnMemcgReclaimBegin, false, false},
		{"mm_vmscan_memcg_reclaim_end", p.common.OnMemcgReclaimEnd, false, false},
		{"mm_vmscan_direct_reclaim_begin", p.common.OnDirectReclaimBegin, false, false},
		{"mm_vmscan_direct_reclaim_end", p.common.OnDirectReclaimEnd, false, false},
		{"mm_vmscan_lru_shrink_inactive", p.common.OnShrinkInactive, false, false},
	}
	if p.sw != nil {
		steps = append(steps, struct {
			name     string
			prog     *ebpf.Program
			typed    bool
			required bool
		}{"sched_switch", p.sw, true, false})
	}
	for _, s := range steps {
		if err := attach(s.name, s.prog, s.typed, s.required); err != nil {
			p.close()
			return nil, err
		}
	}
	if cfg.ProfileHz > 0 && p.attached["mmap_lock_released"] {
		s, err := perfsample.Attach(p.common.OnSample, cfg.ProfileHz)
		if err != nil {
			p.warnings = append(p.warnings, fmt.Sprintf("no profile under lock: %v", err))
		} else {
			p.sampler = s
			p.attached["perf_event"] = true
		}
	}
	rd, err := ringbuf.NewReader(p.maps.Holds)
	if err != nil {
		p.close()
		return nil, fmt.Errorf("locks: open ring buffer: %w", err)
	}
	p.rd = rd
	go p.readHolds()
	return p, nil
}

// load loads the object, preferring BTF tracepoints and falling back to
// raw ones when this kernel refuses them.
func (p *probe) load(cfg config) error {
	tryLoad := func(typed bool) error {
		spec, err := loadLocks()
		if err != nil {
			return fmt.Errorf("locks: read BPF object: %w", err)
		}
		vars := map[string]any{
			"target_tgid":         cfg.TargetTGID,
			"self_tgid":           uint32(os.Getpid()),
			"target_lock":         cfg.TargetLock,
			"type_mask":           cfg.TypeMask,
			"hold_threshold_ns":   cfg.HoldThreshold,
			"owner_stacks":        typed,
			"mmap_has_memcg_path": mmapHasMemcgPath(),
		}
		for name, v := range vars {
			if err := spec.Variables[name].Set(v); err != nil {
				return fmt.Errorf("locks: configure %s: %w", name, err)
			}
		}
		if err := fitPerCPU(spec); err != nil {
			return err
		}
		if typed {
			var o struct {
				locksMaps
				commonProgs
				btfProgs
			}
			if err := spec.LoadAndAssign(&o, nil); err != nil {
				return err
			}
			p.maps, p.common, p.begin, p.end, p.btf = o.locksMaps, o.commonProgs, o.btfProgs.Begin, o.btfProgs.End, true
			p.sw = o.btfProgs.Switch
			return nil
		}
		var o struct {
			locksMaps
			commonProgs
			rawProgs
		}
		if err := spec.LoadAndAssign(&o, nil); err != nil {
			return err
		}
		p.maps, p.common, p.begin, p.end = o.locksMaps, o.commonProgs, o.rawProgs.Begin, o.rawProgs.End
		return nil
	}
	var btfErr error
	if !cfg.rawOnly {
		if btfErr = tryLoad(true); btfErr == nil {
			return nil
		}
	}
	if err := tryLoad(false); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return fmt.Errorf("locks: the kernel's BPF verifier rejected the program (%v): %w", ve, investigator.ErrUnsupported)
		}
		return fmt.Errorf("locks: load BPF objects: %w", err)
	}
	if btfErr != nil {
		why := btfErr.Error()
		if !kernelHasFunc("bpf_task_from_pid") {
			why = "the kernel has no bpf_task_from_pid kfunc (Linux 6.2+)"
		}
		p.warnings = append(p.warnings, "owners' stacks not captured: "+why)
	}
	return nil
}

// perCPUBudget bounds the memory of the per-CPU aggregation maps: their
// entries are multiplied by the number of possible CPUs, so on big hosts
// fewer entries fit (drops are counted when they fill).
const perCPUBudget = 96 << 20

func fitPerCPU(spec *ebpf.CollectionSpec) error {
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return fmt.Errorf("locks: possible CPUs: %w", err)
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

func (p *probe) readHolds() {
	defer close(p.done)
	for {
		rec, err := p.rd.Read()
		if err != nil {
			if !errors.Is(err, ringbuf.ErrClosed) {
				p.mu.Lock()
				p.warnings = append(p.warnings, fmt.Sprintf("ring buffer: %v", err))
				p.mu.Unlock()
			}
			return
		}
		e, err := bpfrec.Decode[locksHoldEvent](rec.RawSample)
		if err != nil {
			continue
		}
		p.mu.Lock()
		if len(p.events) < maxHoldEvents {
			p.events = append(p.events, e)
		} else {
			p.lost++
		}
		p.mu.Unlock()
	}
}

// holdEvents returns the long holds received so far.
func (p *probe) holdEvents() ([]locksHoldEvent, uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]locksHoldEvent(nil), p.events...), p.lost
}

func (p *probe) programs() []*ebpf.Program {
	c := &p.common
	return []*ebpf.Program{p.begin, p.end, c.OnMmAcquired, c.OnMmReleased, c.OnSample,
		c.OnMemcgReclaimBegin, c.OnMemcgReclaimEnd, c.OnDirectReclaimBegin, c.OnDirectReclaimEnd, c.OnShrinkInactive, p.sw}
}

// close detaches first (no new events), then drains and closes.
func (p *probe) close() {
	if p.sampler != nil {
		p.sampler.Close()
		p.sampler = nil
	}
	for _, l := range p.links {
		_ = l.Close()
	}
	p.links = nil
	if p.rd != nil {
		_ = p.rd.Close()
		<-p.done
		p.rd = nil
	}
	for _, prog := range p.programs() {
		if prog != nil {
			_ = prog.Close()
		}
	}
	_ = p.maps.Close()
}
