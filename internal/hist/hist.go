// Package hist turns the log2 histograms wolf's BPF programs keep (struct
// wolf_hist in bpf/include/wolf.h) into the report's histograms, and reads
// quantiles off them for findings' evidence.
package hist

import (
	"math"

	"github.com/wolf-investigator/wolf/internal/finding"
)

// Slots is WOLF_HIST_SLOTS: one slot per bit length of a u64, plus zero.
const Slots = 65

// Log2 is a histogram as the kernel keeps it: Slots[i] counts values whose
// bit length is i, so slot i holds [2^(i-1), 2^i-1] and slot 0 holds 0.
type Log2 struct {
	Slots [Slots]uint64
	Count uint64
	Sum   uint64
	Max   uint64
}

// Slot is the bit length of v: the slot the BPF side files v under.
func Slot(v uint64) int {
	n := 0
	for v != 0 {
		n++
		v >>= 1
	}
	return n
}

// UpperBound is the largest value slot i holds.
func UpperBound(i int) uint64 {
	if i >= 64 {
		return math.MaxUint64
	}
	return 1<<uint(i) - 1
}

// Add records v, as wolf_hist_add does in the kernel. Tests and user-space
// aggregations use it.
func (h *Log2) Add(v uint64) {
	h.Slots[Slot(v)]++
	h.Count++
	h.Sum += v
	h.Max = max(h.Max, v)
}

// Merge adds o into h: per-CPU copies, or several keys folded together.
func (h *Log2) Merge(o *Log2) {
	for i := range h.Slots {
		h.Slots[i] += o.Slots[i]
	}
	h.Count += o.Count
	h.Sum += o.Sum
	h.Max = max(h.Max, o.Max)
}

// FromSlots builds a histogram from a BPF map value's fields. slots may be
// shorter than Slots (a program that only needs 32).
func FromSlots(slots []uint64, count, sum, maxV uint64) Log2 {
	var h Log2
	copy(h.Slots[:], slots)
	h.Count, h.Sum, h.Max = count, sum, maxV
	if h.Count == 0 {
		for _, c := range h.Slots {
			h.Count += c
		}
	}
	return h
}

// Quantile returns an upper estimate of the q-quantile (0 < q <= 1): the
// upper bound of the slot it falls in, capped at the observed maximum so a
// p99 never exceeds max. It returns 0 for an empty histogram.
func (h *Log2) Quantile(q float64) uint64 {
	total := uint64(0)
	for _, c := range h.Slots {
		total += c
	}
	if total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(total)))
	rank = max(rank, 1)
	seen := uint64(0)
	for i, c := range h.Slots {
		seen += c
		if seen >= rank {
			ub := UpperBound(i)
			if h.Max > 0 && ub > h.Max {
				return h.Max
			}
			return ub
		}
	}
	return h.Max
}

// Mean is Sum/Count, 0 when empty.
func (h *Log2) Mean() float64 {
	if h.Count == 0 {
		return 0
	}
	return float64(h.Sum) / float64(h.Count)
}

// Report converts h to the report's form: cumulative buckets from the first
// to the last non-empty slot, values divided by scale (1000 to turn the
// kernel's nanoseconds into the "us" a histogram is named in; 1 to keep
// them). Bucket bounds are the slots' upper bounds, scaled.
func (h *Log2) Report(name, unit string, labels map[string]string, scale float64) finding.Histogram {
	if scale <= 0 {
		scale = 1
	}
	out := finding.Histogram{
		Name:    name,
		Unit:    unit,
		Labels:  labels,
		Count:   h.Count,
		Sum:     float64(h.Sum) / scale,
		Max:     float64(h.Max) / scale,
		Buckets: []finding.Bucket{},
	}
	first, last := -1, -1
	for i, c := range h.Slots {
		if c != 0 {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first < 0 {
		return out
	}
	cum := uint64(0)
	for i := first; i <= last; i++ {
		cum += h.Slots[i]
		out.Buckets = append(out.Buckets, finding.Bucket{LE: float64(UpperBound(i)) / scale, Count: cum})
	}
	return out
}

// Sub returns h minus an earlier reading of the same cumulative histogram:
// the values added between the two. Max is left to the caller: a maximum
// cannot be subtracted (the BPF side keeps one per window, wolf.h's
// struct wolf_max). A slot that went back (its entry was recreated) counts
// from zero.
func (h *Log2) Sub(earlier *Log2) Log2 {
	out := *h
	for i := range out.Slots {
		out.Slots[i] = sub(h.Slots[i], earlier.Slots[i])
	}
	out.Count = sub(h.Count, earlier.Count)
	out.Sum = sub(h.Sum, earlier.Sum)
	return out
}

func sub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}
