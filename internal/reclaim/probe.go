package reclaim

import (
	"fmt"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/hist"
	"github.com/wolf-investigator/wolf/internal/kernelbtf"
	"github.com/wolf-investigator/wolf/internal/probekit"
)

// attachTable is everything reclaim puts into the kernel: vmscan
// tracepoints, as tp_btf (typed arguments: direct reads). Required rows
// fail the run; without the others it sees less. A tracepoint this kernel
// lacks (mm_vmscan_throttled came in 5.16, after the 5.15 of "The case of
// the vanishing CPU") leaves its program unloadable, and the kit drops the
// row.
var attachTable = []probekit.Attach{
	{Kind: probekit.BTFTracepoint, Target: "vmscan/mm_vmscan_memcg_reclaim_begin", Program: "on_memcg_begin", Required: true,
		Why: "a task starts reclaiming in its cgroup, at the limit"},
	{Kind: probekit.BTFTracepoint, Target: "vmscan/mm_vmscan_memcg_reclaim_end", Program: "on_memcg_end", Required: true,
		Why: "a memcg reclaim call ends: its duration, CPU time and what it freed"},
	{Kind: probekit.BTFTracepoint, Target: "vmscan/mm_vmscan_lru_shrink_inactive", Program: "on_shrink_inactive", Required: true,
		Why: "pages scanned and reclaimed, and why the rest were kept"},
	{Kind: probekit.BTFTracepoint, Target: "vmscan/mm_vmscan_direct_reclaim_begin", Program: "on_direct_begin",
		Why: "direct reclaim: the host short of memory"},
	{Kind: probekit.BTFTracepoint, Target: "vmscan/mm_vmscan_direct_reclaim_end", Program: "on_direct_end",
		Why: "a direct reclaim call ends"},
	{Kind: probekit.BTFTracepoint, Target: "vmscan/mm_vmscan_lru_shrink_active", Program: "on_shrink_active",
		Why: "pages moved off the active lists", Shed: 3},
	{Kind: probekit.BTFTracepoint, Target: "vmscan/mm_vmscan_memcg_softlimit_reclaim_begin", Program: "on_softlimit_begin",
		Why: "cgroup v1 soft-limit reclaim"},
	{Kind: probekit.BTFTracepoint, Target: "vmscan/mm_vmscan_memcg_softlimit_reclaim_end", Program: "on_softlimit_end",
		Why: "a soft-limit reclaim call ends"},
	{Kind: probekit.BTFTracepoint, Target: "vmscan/mm_vmscan_node_reclaim_begin", Program: "on_node_begin",
		Why: "node reclaim (vm.zone_reclaim_mode)"},
	{Kind: probekit.BTFTracepoint, Target: "vmscan/mm_vmscan_node_reclaim_end", Program: "on_node_end",
		Why: "a node reclaim call ends"},
	{Kind: probekit.BTFTracepoint, Target: "vmscan/mm_vmscan_throttled", Program: "on_throttled",
		Why: "reclaimers put to sleep, and why"},
	{Kind: probekit.BTFTracepoint, Target: "vmscan/mm_vmscan_kswapd_wake", Program: "on_kswapd_wake",
		Why: "kswapd, the background reclaimer, wakes"},
	{Kind: probekit.BTFTracepoint, Target: "vmscan/mm_vmscan_kswapd_sleep", Program: "on_kswapd_sleep",
		Why: "kswapd goes back to sleep: how long it was awake"},
	{Kind: probekit.BTFTracepoint, Target: "vmscan/mm_vmscan_wakeup_kswapd", Program: "on_wakeup_kswapd",
		Why: "allocations that ask kswapd to run"},
	{Kind: probekit.BTFTracepoint, Target: "filemap/mm_filemap_delete_from_page_cache", Program: "on_page_delete", Shed: 2,
		Why: "pages reclaim evicts, a sample of them remembered: re-reads of evicted pages measured, not only the refaults the kernel's shadow entries still show"},
	{Kind: probekit.BTFTracepoint, Target: "filemap/mm_filemap_add_to_page_cache", Program: "on_page_add", Shed: 2,
		Why: "pages read into the page cache: which of the sampled ones reclaim had evicted"},
	{Kind: probekit.PerfSample, Program: "on_sample", Hz: sampleHz,
		Why: "CPU time of each memory cgroup's tasks in reclaim and in the page-cache miss path, sampled: what a limit costs its readers' CPUs"},
}

// perCPUBudget bounds the memory of each per-CPU map (cgroups, hists):
// their entries are lowered on hosts with many CPUs so that none takes
// more than this.
const perCPUBudget = 16 << 20

// probe owns everything reclaim attaches to the kernel, through the kit.
type probe struct {
	kit  *probekit.Probe
	maps reclaimMaps
}

// openProbe loads the programs, attaches them and opens the gate. refuse
// names tracepoints ("vmscan/…") to treat as missing from the kernel, for
// tests of that path. ranges classify the CPU samples.
func openProbe(useMemcg bool, refuse map[string]bool, ranges sampleRanges) (*probe, error) {
	vars := ranges.vars()
	vars["use_memcg"], vars["task_btf"] = useMemcg, probekit.HaveCurrentTaskBTF()
	vars["evict_shift"] = uint32(evictShift)
	kit, err := probekit.Open(probekit.Object{
		Name: "reclaim",
		Spec: loadReclaim,
		Vars: vars,
		Prepare: func(spec *ebpf.CollectionSpec) error {
			if n, err := ebpf.PossibleCPU(); err == nil && n > 0 {
				ms := spec.Maps["cgroups"]
				per := uint32(perCPUBudget / (int(unsafe.Sizeof(reclaimCgStats{})) * n))
				ms.MaxEntries = max(min(ms.MaxEntries, per), 64)
				hs := spec.Maps["hists"]
				per = uint32(perCPUBudget / (int(unsafe.Sizeof(reclaimCallHists{})) * n))
				hs.MaxEntries = max(min(hs.MaxEntries, per), 64)
				ss := spec.Maps["samples"]
				per = uint32(perCPUBudget / (int(unsafe.Sizeof(reclaimCpuSamples{})) * n))
				ss.MaxEntries = max(min(ss.MaxEntries, per), 64)
				rs := spec.Maps["rereads"]
				per = uint32(perCPUBudget / (8 * n))
				rs.MaxEntries = max(min(rs.MaxEntries, per), 64)
			}
			return nil
		},
		Table:  attachTable,
		Refuse: refuse,
		BTF:    kernelbtf.External(),
		// Its per-thread totals, which locks reads when it runs in this
		// process too (a hold's reclaim), instead of following every
		// reclaim batch itself.
		Share: map[string]probekit.ShareRole{"reclaim_tasks": probekit.Writes},
		// Batches, summed one in N per CPU once the budget is spent
		// with the gates at their longest (WOLF_STORM in reclaim.bpf.c).
		Storm: "reclaim batches",
	})
	if err != nil {
		return nil, err
	}
	p := &probe{kit: kit}
	if err := kit.AssignMaps(&p.maps); err != nil {
		kit.Close()
		return nil, err
	}
	// The programs count only once the gate is open, so the session starts
	// at one moment however long attaching took; it stays open until Close.
	if err := p.maps.Gate.Update(uint32(0), uint32(1), ebpf.UpdateAny); err != nil {
		kit.Close()
		return nil, fmt.Errorf("reclaim: open the counting gate: %w", err)
	}
	return p, nil
}

func (p *probe) close() { p.kit.Close() }

// Kinds of reclaim, as the BPF side numbers them.
const (
	kindMemcg = iota
	kindDirect
	kindSoftlimit
	kindNode
	numKinds
	// histScanned+kind keys a kind's calls' histogram of pages scanned
	// (the map keeps it in the kind's value, beside their durations).
	histScanned = 8
)

var kindNames = [numKinds]string{"memcg", "direct", "softlimit", "node"}

// cgRead is one cgroup's entry: its counters summed over CPUs
// (cumulative), and the window's maxima.
type cgRead struct {
	sum            reclaimCgStats // maxima fields unused: see below
	max            [numKinds]uint64
	maxCallScanned uint64
	worst          *Call // the window's longest completed call
}

// raw is what the maps held at one Collect: cumulative counts, the ended
// window's maxima, the calls in flight.
type raw struct {
	cgroups  map[uint64]*cgRead
	tasks    map[uint32]reclaimWolfReclaimTask
	taskMax  map[uint32]uint64 // the window's longest call per thread
	inflight map[uint32]reclaimInflight
	before   map[uint32]flight // windows: what earlier windows counted of a call in flight
	hists    map[reclaimHistKey]hist.Log2
	kswapd   hist.Log2
	now      time.Duration // CLOCK_MONOTONIC (bpf_ktime_get_ns) when read
}

// read collects every map, with window w's maxima. Per-CPU cgroup values
// are summed, their maxima and longest calls taken across CPUs.
func (p *probe) read(w uint32) (*raw, error) {
	r := &raw{
		cgroups:  map[uint64]*cgRead{},
		tasks:    map[uint32]reclaimWolfReclaimTask{},
		taskMax:  map[uint32]uint64{},
		inflight: map[uint32]reclaimInflight{},
		hists:    map[reclaimHistKey]hist.Log2{},
	}
	var (
		cgid uint64
		per  []reclaimCgStats
	)
	it := p.maps.Cgroups.Iterate()
	for it.Next(&cgid, &per) {
		r.cgroups[cgid] = mergeCPUs(per, w)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("reclaim: read cgroups map: %w", err)
	}
	var (
		tid uint32
		ts  reclaimWolfReclaimTask
	)
	it = p.maps.ReclaimTasks.Iterate()
	for it.Next(&tid, &ts) {
		r.tasks[tid] = ts
		r.taskMax[tid] = probekit.WindowMax(ts.MaxNs.V, ts.MaxNs.Win, w)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("reclaim: read tasks map: %w", err)
	}
	// In flight after the completed calls: a call that ends in between
	// is in neither reading, and counted in the next window.
	r.now = monotonic()
	var f reclaimInflight
	it = p.maps.Inflights.Iterate()
	for it.Next(&tid, &f) {
		if f.StartNs != 0 { // 0: the thread's last call is over
			r.inflight[tid] = f
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("reclaim: read inflight map: %w", err)
	}
	var (
		hk reclaimHistKey
		hv reclaimWolfHist
	)
	var hvs []reclaimCallHists
	it = p.maps.Hists.Iterate()
	for it.Next(&hk, &hvs) {
		var h, sc hist.Log2
		for i := range hvs {
			x := hist.FromBPF(&hvs[i].Ns, w)
			h.Merge(&x)
			x = hist.FromBPF(&hvs[i].Scanned, w)
			sc.Merge(&x)
		}
		r.hists[hk] = h
		r.hists[reclaimHistKey{Cgid: hk.Cgid, Kind: histScanned + hk.Kind}] = sc
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("reclaim: read histograms: %w", err)
	}
	if err := p.maps.KswapdHist.Lookup(uint32(0), &hv); err == nil {
		r.kswapd = hist.FromBPF(&hv, w)
	}
	return r, nil
}

// cgFields applies op to every cumulative field of a cgroup's stats:
// adding CPUs up, or subtracting an earlier reading.
func cgFields(dst *reclaimCgStats, a, b *reclaimCgStats, op func(x, y uint64) uint64) {
	for k := range numKinds {
		dst.Calls[k] = op(a.Calls[k], b.Calls[k])
		dst.Ns[k] = op(a.Ns[k], b.Ns[k])
		dst.CpuNs[k] = op(a.CpuNs[k], b.CpuNs[k])
	}
	dst.Csw = op(a.Csw, b.Csw)
	dst.EndReclaimed = op(a.EndReclaimed, b.EndReclaimed)
	dst.UnmatchedEnds = op(a.UnmatchedEnds, b.UnmatchedEnds)
	dst.Batches = op(a.Batches, b.Batches)
	dst.Scanned = op(a.Scanned, b.Scanned)
	dst.Reclaimed = op(a.Reclaimed, b.Reclaimed)
	dst.RefKeep = op(a.RefKeep, b.RefKeep)
	dst.ActivateAnon = op(a.ActivateAnon, b.ActivateAnon)
	dst.ActivateFile = op(a.ActivateFile, b.ActivateFile)
	dst.Dirty = op(a.Dirty, b.Dirty)
	dst.Writeback = op(a.Writeback, b.Writeback)
	dst.Congested = op(a.Congested, b.Congested)
	dst.Immediate = op(a.Immediate, b.Immediate)
	dst.UnmapFail = op(a.UnmapFail, b.UnmapFail)
	dst.FileScanned = op(a.FileScanned, b.FileScanned)
	dst.ActiveTaken = op(a.ActiveTaken, b.ActiveTaken)
	dst.ActiveKept = op(a.ActiveKept, b.ActiveKept)
	dst.Deactivated = op(a.Deactivated, b.Deactivated)
	dst.ActiveReferenced = op(a.ActiveReferenced, b.ActiveReferenced)
	for k := range dst.Throttled {
		dst.Throttled[k] = op(a.Throttled[k], b.Throttled[k])
	}
	dst.ThrottledUs = op(a.ThrottledUs, b.ThrottledUs)
}

func add(x, y uint64) uint64 { return x + y }

// mergeCPUs adds one cgroup's per-CPU entries up and takes window w's
// maxima and longest call across CPUs.
func mergeCPUs(per []reclaimCgStats, w uint32) *cgRead {
	out := &cgRead{}
	s := &out.sum
	var worstNs uint64
	for i := range per {
		c := &per[i]
		cgFields(s, s, c, add)
		s.UnmatchedLastNs = max(s.UnmatchedLastNs, c.UnmatchedLastNs)
		for k := range numKinds {
			out.max[k] = max(out.max[k], probekit.WindowMax(c.MaxNs[k].V, c.MaxNs[k].Win, w))
		}
		out.maxCallScanned = max(out.maxCallScanned, probekit.WindowMax(c.MaxCallScanned.V, c.MaxCallScanned.Win, w))
		ns, tid := probekit.WindowMaxTag(c.Worst.Ns.V, c.Worst.Ns.Win, c.Worst.Ns.Tag, w)
		if ns > worstNs && c.Worst.Kind[w&1] < numKinds {
			worstNs = ns
			out.worst = &Call{TID: int(tid), Kind: kindNames[c.Worst.Kind[w&1]], Duration: time.Duration(ns),
				Scanned: c.Worst.Scanned[w&1], Reclaimed: c.Worst.Reclaimed[w&1]}
		}
	}
	return out
}

// monotonic is bpf_ktime_get_ns's clock.
func monotonic() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}
