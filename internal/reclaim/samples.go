package reclaim

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/wolf-investigator/wolf/internal/kallsyms"
	"github.com/wolf-investigator/wolf/internal/probekit"
)

// sampleHz is how often the CPU sampler (on_sample) looks at each CPU:
// the rate of `perf record -F 99`, off the scheduler tick's multiples. An
// 8 s window on 2 CPUs gives ~1600 samples, a share to a few percent.
const sampleHz = 99

// Classes of a sampled kernel stack, as the BPF side numbers them.
const (
	classMiss    = 1
	classReclaim = 2
	classWait    = 3 // waiting for a folio: a miss when a lookup waits
	classLookup  = 4 // a page-cache lookup: what makes a wait a miss
	maxRanges    = 32
)

// sampledFuncs are the functions whose frames put a CPU sample in a
// class. The miss path is what a read or a fault does for a page that is
// not in the page cache and nothing else: readahead (synchronous, or
// asynchronous on a marked page), allocating the folio, adding it to the
// cache and charging it to the memory cgroup (the charge's reclaim is
// reclaim), noting a refault, building and submitting the read. Cache
// hits (the copy to user space, the lookup) and everything in user space
// are the task's own work. A task that sleeps until a folio's read
// completes pays for the miss on the CPU too, as it switches out and back
// in (under qemu TCG that was 15% of the thrashing readers' CPU): a wait
// for a folio under a page-cache lookup is the miss path; any other wait
// is not. Names from several kernels: those a kernel lacks, or inlined,
// are skipped (their callers are on the list).
var sampledFuncs = []struct {
	name  string
	class uint32
}{
	{"try_to_free_mem_cgroup_pages", classReclaim},
	{"try_to_free_pages", classReclaim},
	{"page_cache_sync_ra", classMiss},
	{"page_cache_async_ra", classMiss},
	{"page_cache_ra_unbounded", classMiss},
	{"page_cache_ra_order", classMiss},
	{"force_page_cache_ra", classMiss},
	{"ondemand_readahead", classMiss}, // before 6.10
	{"do_page_cache_ra", classMiss},
	{"read_pages", classMiss},
	{"filemap_create_folio", classMiss},
	{"filemap_read_folio", classMiss},
	{"filemap_add_folio", classMiss},
	{"__filemap_add_folio", classMiss},
	{"add_to_page_cache_lru", classMiss}, // before 5.16
	{"__add_to_page_cache_locked", classMiss},
	{"do_sync_mmap_readahead", classMiss},
	{"do_async_mmap_readahead", classMiss},
	{"workingset_refault", classMiss},
	{"folio_wait_bit_common", classWait},
	{"__folio_lock", classWait},
	{"__folio_lock_killable", classWait},
	{"filemap_get_pages", classLookup},
	{"filemap_fault", classLookup},
}

// sampleRanges are the address ranges of sampledFuncs in the running
// kernel, for the BPF side's rodata; none when its symbols cannot be read
// (the samples are then counted, not classified: why says so).
type sampleRanges struct {
	n       uint32
	lo, hi  [maxRanges]uint64
	class   [maxRanges]uint32
	missing []string
	why     string
}

func loadSampleRanges(ctx context.Context) sampleRanges {
	ctx, cancel := context.WithTimeout(ctx, kallsyms.ReadTimeout())
	defer cancel()
	t, err := kallsyms.Load(ctx)
	if err != nil {
		return sampleRanges{why: fmt.Sprintf("CPU samples are not classified (no kernel symbols: %v)", err)}
	}
	return rangesFrom(t)
}

func rangesFrom(t *kallsyms.Table) sampleRanges {
	var r sampleRanges
	for _, f := range sampledFuncs {
		lo, hi, ok := t.Extent(f.name)
		if !ok || hi <= lo || r.n >= maxRanges {
			r.missing = append(r.missing, f.name)
			continue
		}
		r.lo[r.n], r.hi[r.n], r.class[r.n] = lo, hi, f.class
		r.n++
	}
	r.sort()
	if r.n == 0 {
		r.why = "CPU samples are not classified (none of the page-cache miss path's functions is in the kernel's symbols: " + strings.Join(r.missing, ", ") + ")"
	}
	return r
}

// sort orders the ranges by their start, as the BPF side's binary search
// needs (functions do not overlap, so their ends are in order too).
func (r *sampleRanges) sort() {
	idx := make([]int, r.n)
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(r.lo[a], r.lo[b]) })
	lo, hi, class := r.lo, r.hi, r.class
	for i, j := range idx {
		r.lo[i], r.hi[i], r.class[i] = lo[j], hi[j], class[j]
	}
}

// vars are the rodata the ranges set.
func (r sampleRanges) vars() map[string]any {
	return map[string]any{"nr_ranges": r.n, "range_lo": r.lo, "range_hi": r.hi, "range_class": r.class}
}

// CPUSamples are a memory cgroup's tasks' CPU samples in a window: each
// is 1/Hz s of one CPU's time.
type CPUSamples struct {
	Busy    uint64 // on a CPU
	Kernel  uint64 // of which in the kernel
	Miss    uint64 // in the page-cache miss path (not in reclaim)
	Reclaim uint64 // in reclaim
}

// Samples is the window's CPU sampling as a whole.
type Samples struct {
	Hz         int    // 0: no sampler attached
	Busy       uint64 // every task's samples, all cgroups
	Classified bool   // the stacks were classified (the kernel's symbols were read)
}

// readSamples sums the samples map over CPUs: cumulative per cgroup.
func (p *probe) readSamples() (map[uint64]reclaimCpuSamples, error) {
	out := map[uint64]reclaimCpuSamples{}
	var (
		id  uint64
		per []reclaimCpuSamples
	)
	it := p.maps.Samples.Iterate()
	for it.Next(&id, &per) {
		var s reclaimCpuSamples
		for _, c := range per {
			s.Busy += c.Busy
			s.Kernel += c.Kernel
			s.Miss += c.Miss
			s.Reclaim += c.Reclaim
		}
		out[id] = s
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("reclaim: read samples map: %w", err)
	}
	return out, nil
}

// sampleWindows turns the cumulative readings into windows, and forgets
// (deletes from the map) cgroups idle for probekit.IdleAfter readings.
type sampleWindows struct {
	prev map[uint64]reclaimCpuSamples
	idle probekit.Idle[uint64]
}

func (w *sampleWindows) step(cur map[uint64]reclaimCpuSamples) (map[uint64]CPUSamples, []uint64) {
	out := map[uint64]CPUSamples{}
	var evict []uint64
	for id, c := range cur {
		b := w.prev[id]
		d := CPUSamples{Busy: probekit.Sub(c.Busy, b.Busy), Kernel: probekit.Sub(c.Kernel, b.Kernel),
			Miss: probekit.Sub(c.Miss, b.Miss), Reclaim: probekit.Sub(c.Reclaim, b.Reclaim)}
		if d != (CPUSamples{}) {
			out[id] = d
		}
		if w.idle.Step(id, d != (CPUSamples{})) {
			evict = append(evict, id)
			delete(cur, id)
		}
	}
	w.idle.End()
	w.prev = cur
	return out, evict
}

// restart begins the window again at reading cur: the next step counts
// from it.
func (w *sampleWindows) restart(cur map[uint64]reclaimCpuSamples) { w.prev = cur }
