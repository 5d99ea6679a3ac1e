package probekit

import (
	"fmt"
	"strings"
	"sync"

	"github.com/cilium/ebpf/btf"

	"github.com/wolf-investigator/wolf/internal/bpfrec"
)

// Counters are an object's event and drop counters, indexed by its enum
// stat_index (bpf2go generates the Go constants with -type stat_index).
// wolf.h's WOLF_STATS declares the per-CPU array "stats" keyed by that
// enum, so the names come from the object's own BTF: adding a counter is
// adding an enumerator, and nothing in Go is kept in step by hand.
type Counters []uint64

// Sub is c minus an earlier reading: what was counted between the two.
func (c Counters) Sub(earlier Counters) Counters {
	out := make(Counters, len(c))
	for i := range c {
		out[i] = c[i]
		if i < len(earlier) && earlier[i] <= c[i] {
			out[i] -= earlier[i]
		}
	}
	return out
}

// counterWindow remembers the reading Window last returned.
type counterWindow struct {
	mu   sync.Mutex
	last Counters
}

// CounterNames lists the counters' names, lower case without the STAT_
// prefix ("d_sleeps"), from enum stat_index in the object's BTF; the
// enum's last entry (STAT_MAX, the array's size) is not a counter.
func (p *Probe) CounterNames() ([]string, error) {
	ms, ok := p.spec.Maps["stats"]
	if !ok {
		return nil, ErrNoCounters
	}
	var e *btf.Enum
	if err := p.spec.Types.TypeByName("stat_index", &e); err != nil {
		return nil, fmt.Errorf("%s: enum stat_index not in the object's BTF (declare the stats map with WOLF_STATS): %w", p.name, err)
	}
	names := make([]string, 0, len(e.Values))
	for _, v := range e.Values {
		if uint32(v.Value) >= ms.MaxEntries {
			continue
		}
		for len(names) <= int(v.Value) {
			names = append(names, "")
		}
		names[v.Value] = strings.ToLower(strings.TrimPrefix(v.Name, "STAT_"))
	}
	return names, nil
}

// Counters reads the stats map, every CPU's copy added up: the totals
// since Open.
func (p *Probe) Counters() (Counters, error) {
	m := p.maps["stats"]
	if m == nil {
		return nil, ErrNoCounters
	}
	out := make(Counters, m.MaxEntries())
	for i := range out {
		v, err := bpfrec.SumPerCPU(m, uint32(i))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
		out[i] = v
	}
	return out, nil
}

// WindowCounters reads the counters and returns what they counted since
// the previous call (since Open, the first time).
func (p *Probe) WindowCounters() (Counters, error) {
	now, err := p.Counters()
	if err != nil {
		return nil, err
	}
	p.counters.mu.Lock()
	defer p.counters.mu.Unlock()
	w := now.Sub(p.counters.last)
	p.counters.last = now
	return w, nil
}

// Named turns counters into a map by name, for evidence and tests.
func (p *Probe) Named(c Counters) (map[string]uint64, error) {
	names, err := p.CounterNames()
	if err != nil {
		return nil, err
	}
	out := make(map[string]uint64, len(names))
	for i, n := range names {
		if n != "" && i < len(c) {
			out[n] = c[i]
		}
	}
	return out, nil
}
