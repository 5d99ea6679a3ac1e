package reclaim

import (
	"fmt"

	"github.com/wolf-investigator/wolf/internal/probekit"
)

// evictShift samples the pages whose eviction and re-read the BPF side
// follows: 1 in 2^evictShift, by a hash of the file and the page's index
// (on_page_delete, on_page_add). A re-read counted stands for
// 2^evictShift pages. Its table remembers 2^18 evicted pages, so 2^21
// pages (8 GiB) evicted and not yet read back before one overwrites
// another (counted: STAT_EVICT_OVERWRITTEN).
const evictShift = 3

// The page-cache tracepoints the measure needs, both.
const (
	rereadDelete = "filemap/mm_filemap_delete_from_page_cache"
	rereadAdd    = "filemap/mm_filemap_add_to_page_cache"
)

// readRereads sums the rereads map over CPUs: cumulative sampled re-reads
// of evicted pages per memory cgroup of the reader.
func (p *probe) readRereads() (map[uint64]uint64, error) {
	out := map[uint64]uint64{}
	var (
		id  uint64
		per []uint64
	)
	it := p.maps.Rereads.Iterate()
	for it.Next(&id, &per) {
		var n uint64
		for _, c := range per {
			n += c
		}
		out[id] = n
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("reclaim: read rereads map: %w", err)
	}
	return out, nil
}

// rereadWindows turns the cumulative readings into windows (pages, the
// sample scaled up), and forgets cgroups idle for probekit.IdleAfter
// readings.
type rereadWindows struct {
	prev map[uint64]uint64
	idle probekit.Idle[uint64]
}

func (w *rereadWindows) step(cur map[uint64]uint64) (map[uint64]uint64, []uint64) {
	out := map[uint64]uint64{}
	var evict []uint64
	for id, c := range cur {
		d := probekit.Sub(c, w.prev[id])
		if d > 0 {
			out[id] = d << evictShift
		}
		if w.idle.Step(id, d > 0) {
			evict = append(evict, id)
			delete(cur, id)
		}
	}
	w.idle.End()
	w.prev = cur
	return out, evict
}
