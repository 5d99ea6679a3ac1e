package hist

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

func TestSlotBounds(t *testing.T) {
	cases := []struct {
		v    uint64
		slot int
	}{{0, 0}, {1, 1}, {2, 2}, {3, 2}, {4, 3}, {1023, 10}, {1024, 11}, {math.MaxUint64, 64}}
	for _, c := range cases {
		if got := Slot(c.v); got != c.slot {
			t.Errorf("Slot(%d) = %d, want %d", c.v, got, c.slot)
		}
		if c.v > UpperBound(c.slot) {
			t.Errorf("%d above its slot's upper bound %d", c.v, UpperBound(c.slot))
		}
		if c.slot > 0 && c.v <= UpperBound(c.slot-1) {
			t.Errorf("%d also fits slot %d", c.v, c.slot-1)
		}
	}
}

// Quantiles read off the log2 buckets are upper estimates within a factor
// of two of the exact ones, and never above the maximum.
func TestQuantileAgainstExact(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h Log2
	var vals []uint64
	for range 10000 {
		v := uint64(r.ExpFloat64() * 5000)
		vals = append(vals, v)
		h.Add(v)
	}
	sort.Slice(vals, func(i, j int) bool { return vals[i] < vals[j] })
	for _, q := range []float64{0.5, 0.9, 0.99, 1} {
		exact := vals[int(math.Ceil(q*float64(len(vals))))-1]
		got := h.Quantile(q)
		if got < exact || (exact > 0 && got > 2*exact+1) || got > h.Max {
			t.Errorf("q%.2f = %d, exact %d, max %d", q, got, exact, h.Max)
		}
	}
	var empty Log2
	if empty.Quantile(0.99) != 0 {
		t.Error("empty histogram has a quantile")
	}
}

func TestReportCumulativeScaled(t *testing.T) {
	var h Log2
	for _, v := range []uint64{1500, 1800, 3000, 70000} {
		h.Add(v)
	}
	got := h.Report("wait_us", "us", map[string]string{"type": "mutex"}, 1000)
	if got.Count != 4 || got.Sum != 76.3 || got.Max != 70 {
		t.Fatalf("count/sum/max = %d/%v/%v", got.Count, got.Sum, got.Max)
	}
	// Slots 11 (1024..2047), 12 and 17; empty slots in between are kept
	// so the buckets are a plain cumulative series.
	if n := len(got.Buckets); n != 7 {
		t.Fatalf("%d buckets, want 7: %+v", n, got.Buckets)
	}
	if b := got.Buckets[0]; b.LE != 2.047 || b.Count != 2 {
		t.Errorf("first bucket %+v", b)
	}
	if b := got.Buckets[len(got.Buckets)-1]; b.Count != 4 || b.LE != 131.071 {
		t.Errorf("last bucket %+v", b)
	}
	for i := 1; i < len(got.Buckets); i++ {
		if got.Buckets[i].Count < got.Buckets[i-1].Count || got.Buckets[i].LE <= got.Buckets[i-1].LE {
			t.Fatalf("not cumulative: %+v", got.Buckets)
		}
	}
}

func TestMergeAndFromSlots(t *testing.T) {
	var a, b Log2
	a.Add(5)
	b.Add(500)
	b.Add(0)
	a.Merge(&b)
	if a.Count != 3 || a.Sum != 505 || a.Max != 500 || a.Slots[0] != 1 {
		t.Fatalf("merge: %+v", a)
	}
	f := FromSlots(a.Slots[:], 0, a.Sum, a.Max)
	if f.Count != 3 {
		t.Fatalf("FromSlots count %d", f.Count)
	}
}
