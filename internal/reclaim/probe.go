package reclaim

import (
	"errors"
	"fmt"
	"os"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/bpfrec"
	"github.com/wolf-investigator/wolf/internal/hist"
	"github.com/wolf-investigator/wolf/internal/investigator"
)

// probe owns everything reclaim attaches to the kernel. close detaches it
// all; nothing is pinned, so a kill -9 of wolf detaches it all too.
type probe struct {
	maps     reclaimMaps
	progs    map[string]*ebpf.Program // by tracepoint name; absent tracepoints have none
	links    []link.Link
	attached map[string]bool
	warnings []string
}

// tracepoints wolf reclaim attaches to, by the name `wolf check` probes.
// Required ones fail the run; without the others it sees less.
var tracepoints = []struct {
	name     string
	prog     string // the BPF program's name
	required bool
	why      string
}{
	{"mm_vmscan_memcg_reclaim_begin", "on_memcg_begin", true, "a task starts reclaiming in its cgroup, at the limit"},
	{"mm_vmscan_memcg_reclaim_end", "on_memcg_end", true, "a memcg reclaim call ends: its duration, CPU time and what it freed"},
	{"mm_vmscan_lru_shrink_inactive", "on_shrink_inactive", true, "pages scanned and reclaimed, and why the rest were kept"},
	{"mm_vmscan_direct_reclaim_begin", "on_direct_begin", false, "direct reclaim: the host short of memory"},
	{"mm_vmscan_direct_reclaim_end", "on_direct_end", false, "a direct reclaim call ends"},
	{"mm_vmscan_lru_shrink_active", "on_shrink_active", false, "pages moved off the active lists"},
	{"mm_vmscan_memcg_softlimit_reclaim_begin", "on_softlimit_begin", false, "cgroup v1 soft-limit reclaim"},
	{"mm_vmscan_memcg_softlimit_reclaim_end", "on_softlimit_end", false, "a soft-limit reclaim call ends"},
	{"mm_vmscan_node_reclaim_begin", "on_node_begin", false, "node reclaim (vm.zone_reclaim_mode)"},
	{"mm_vmscan_node_reclaim_end", "on_node_end", false, "a node reclaim call ends"},
	{"mm_vmscan_throttled", "on_throttled", false, "reclaimers put to sleep, and why"},
	{"mm_vmscan_kswapd_wake", "on_kswapd_wake", false, "kswapd, the background reclaimer, wakes"},
	{"mm_vmscan_kswapd_sleep", "on_kswapd_sleep", false, "kswapd goes back to sleep: how long it was awake"},
	{"mm_vmscan_wakeup_kswapd", "on_wakeup_kswapd", false, "allocations that ask kswapd to run"},
}

// perCPUBudget bounds the memory of the per-CPU cgroup map: its entries are
// lowered on hosts with many CPUs so that it never takes more than this.
const perCPUBudget = 16 << 20

// openProbe loads the programs and attaches them. absent names tracepoints
// to treat as missing from the kernel, for tests of that path.
func openProbe(useMemcg bool, absent map[string]bool) (*probe, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("reclaim: loading BPF programs needs root: %w", investigator.ErrPrivilege)
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("reclaim: raise memlock limit: %w", err)
	}
	spec, err := loadReclaim()
	if err != nil {
		return nil, fmt.Errorf("reclaim: read BPF object: %w", err)
	}
	if err := spec.Variables["use_memcg"].Set(useMemcg); err != nil {
		return nil, fmt.Errorf("reclaim: configure BPF object: %w", err)
	}
	if n, err := ebpf.PossibleCPU(); err == nil && n > 0 {
		ms := spec.Maps["cgroups"]
		per := uint32(perCPUBudget / (int(unsafe.Sizeof(reclaimCgStats{})) * n))
		ms.MaxEntries = max(min(ms.MaxEntries, per), 64)
	}
	// A tp_btf program whose tracepoint the kernel lacks does not load,
	// and would take the whole collection down with it: leave out the
	// optional ones this kernel does not have (mm_vmscan_throttled came in
	// 5.16, after the 5.15 of "The case of the vanishing CPU").
	kernel, err := btf.LoadKernelSpec()
	if err != nil {
		return nil, fmt.Errorf("reclaim: kernel BTF: %v: %w", err, investigator.ErrUnsupported)
	}
	p := &probe{progs: map[string]*ebpf.Program{}, attached: map[string]bool{}}
	for _, tp := range tracepoints {
		if _, err := kernel.AnyTypeByName("btf_trace_" + tp.name); err == nil && !absent[tp.name] {
			continue
		}
		if tp.required {
			return nil, fmt.Errorf("reclaim: this kernel has no tracepoint vmscan/%s (%s): %w", tp.name, tp.why, investigator.ErrUnsupported)
		}
		delete(spec.Programs, tp.prog)
		p.warnings = append(p.warnings, fmt.Sprintf("this kernel has no tracepoint vmscan/%s: %s not seen", tp.name, tp.why))
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("reclaim: the kernel's BPF verifier rejected the program (%v): %w", ve, investigator.ErrUnsupported)
		}
		return nil, fmt.Errorf("reclaim: load BPF objects: %w", err)
	}
	defer coll.Close() // whatever was not taken below
	if err := coll.Assign(&p.maps); err != nil {
		return nil, fmt.Errorf("reclaim: BPF maps: %w", err)
	}
	for _, tp := range tracepoints {
		if prog := coll.DetachProgram(tp.prog); prog != nil {
			p.progs[tp.name] = prog
		}
	}
	for _, tp := range tracepoints {
		prog := p.progs[tp.name]
		if prog == nil {
			continue
		}
		l, err := link.AttachTracing(link.TracingOptions{Program: prog, AttachType: ebpf.AttachTraceRawTp})
		if err != nil {
			if tp.required {
				p.close()
				return nil, fmt.Errorf("reclaim: attach BTF tracepoint vmscan/%s (%v): %w", tp.name, err, investigator.ErrUnsupported)
			}
			p.warnings = append(p.warnings, fmt.Sprintf("tracepoint vmscan/%s unavailable (%v): %s not seen", tp.name, err, tp.why))
			continue
		}
		p.links = append(p.links, l)
		p.attached[tp.name] = true
	}
	return p, nil
}

// setGate opens or shuts the window: the programs count only while it is
// open, so its edges do not depend on how long attaching takes.
func (p *probe) setGate(open bool) error {
	v := uint32(0)
	if open {
		v = 1
	}
	if err := p.maps.Gate.Update(uint32(0), v, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("reclaim: open/shut the counting window: %w", err)
	}
	return nil
}

// detach stops every program; the maps stay readable.
func (p *probe) detach() {
	for _, l := range p.links {
		_ = l.Close()
	}
	p.links = nil
}

func (p *probe) close() {
	p.detach()
	for _, prog := range p.progs {
		_ = prog.Close()
	}
	_ = p.maps.Close()
}

func (p *probe) programs() []*ebpf.Program {
	out := make([]*ebpf.Program, 0, len(p.progs))
	for _, prog := range p.progs {
		out = append(out, prog)
	}
	return out
}

// Kinds of reclaim, as the BPF side numbers them.
const (
	kindMemcg = iota
	kindDirect
	kindSoftlimit
	kindNode
	numKinds
	histScanned = 8
)

var kindNames = [numKinds]string{"memcg", "direct", "softlimit", "node"}

// raw is what the maps held when the window closed.
type raw struct {
	cgroups  map[uint64]*reclaimCgStats
	tasks    map[uint32]reclaimTaskStats
	inflight map[uint32]reclaimInflight
	hists    map[reclaimHistKey]hist.Log2
	kswapd   hist.Log2
	stats    [statMax]uint64
	now      time.Duration // CLOCK_MONOTONIC (bpf_ktime_get_ns) when read
}

// Indices of the stats array (enum stat_index).
const (
	statEvents = iota
	statCgFull
	statTaskFull
	statInflightFull
	statHistFull
	statKswapdWakes
	statKswapdSleeps
	statWakeupKswapd
	statKswapdScanned
	statKswapdReclaimed
	statKswapdNs
	statNestedBegin
	statMax
)

// read collects every map. Per-CPU cgroup values are summed, their maxima
// and longest calls taken across CPUs.
func (p *probe) read() (*raw, error) {
	r := &raw{
		cgroups:  map[uint64]*reclaimCgStats{},
		tasks:    map[uint32]reclaimTaskStats{},
		inflight: map[uint32]reclaimInflight{},
		hists:    map[reclaimHistKey]hist.Log2{},
		now:      monotonic(),
	}
	var (
		cgid uint64
		per  []reclaimCgStats
	)
	it := p.maps.Cgroups.Iterate()
	for it.Next(&cgid, &per) {
		r.cgroups[cgid] = mergeCPUs(per)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("reclaim: read cgroups map: %w", err)
	}
	var (
		tid uint32
		ts  reclaimTaskStats
	)
	it = p.maps.Tasks.Iterate()
	for it.Next(&tid, &ts) {
		r.tasks[tid] = ts
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("reclaim: read tasks map: %w", err)
	}
	var f reclaimInflight
	it = p.maps.Inflights.Iterate()
	for it.Next(&tid, &f) {
		r.inflight[tid] = f
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("reclaim: read inflight map: %w", err)
	}
	var (
		hk reclaimHistKey
		hv reclaimWolfHist
	)
	it = p.maps.Hists.Iterate()
	for it.Next(&hk, &hv) {
		r.hists[hk] = hist.FromSlots(hv.Slots[:], hv.Count, hv.Sum, hv.Max)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("reclaim: read histograms: %w", err)
	}
	if err := p.maps.KswapdHist.Lookup(uint32(0), &hv); err == nil {
		r.kswapd = hist.FromSlots(hv.Slots[:], hv.Count, hv.Sum, hv.Max)
	}
	for i := range statMax {
		v, err := bpfrec.SumPerCPU(p.maps.Stats, uint32(i))
		if err != nil {
			return nil, fmt.Errorf("reclaim: %w", err)
		}
		r.stats[i] = v
	}
	return r, nil
}

func mergeCPUs(per []reclaimCgStats) *reclaimCgStats {
	var s reclaimCgStats
	for i := range per {
		c := &per[i]
		for k := range numKinds {
			s.Calls[k] += c.Calls[k]
			s.Ns[k] += c.Ns[k]
			s.CpuNs[k] += c.CpuNs[k]
			s.MaxNs[k] = max(s.MaxNs[k], c.MaxNs[k])
		}
		s.Csw += c.Csw
		s.EndReclaimed += c.EndReclaimed
		s.UnmatchedEnds += c.UnmatchedEnds
		s.UnmatchedLastNs = max(s.UnmatchedLastNs, c.UnmatchedLastNs)
		s.Batches += c.Batches
		s.Scanned += c.Scanned
		s.Reclaimed += c.Reclaimed
		s.RefKeep += c.RefKeep
		s.ActivateAnon += c.ActivateAnon
		s.ActivateFile += c.ActivateFile
		s.Dirty += c.Dirty
		s.Writeback += c.Writeback
		s.Congested += c.Congested
		s.Immediate += c.Immediate
		s.UnmapFail += c.UnmapFail
		s.FileScanned += c.FileScanned
		s.ActiveTaken += c.ActiveTaken
		s.ActiveKept += c.ActiveKept
		s.Deactivated += c.Deactivated
		s.ActiveReferenced += c.ActiveReferenced
		for k := range s.Throttled {
			s.Throttled[k] += c.Throttled[k]
		}
		s.ThrottledUs += c.ThrottledUs
		if c.WorstNs > s.WorstNs {
			s.WorstNs, s.WorstScanned, s.WorstReclaimed, s.WorstTid, s.WorstKind = c.WorstNs, c.WorstScanned, c.WorstReclaimed, c.WorstTid, c.WorstKind
		}
		s.MaxCallScanned = max(s.MaxCallScanned, c.MaxCallScanned)
	}
	return &s
}

// monotonic is bpf_ktime_get_ns's clock.
func monotonic() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}
