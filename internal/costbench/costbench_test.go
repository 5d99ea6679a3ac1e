package costbench

import (
	"context"
	"errors"
	"math"
	"testing"
)

// A fake workload whose throughput depends only on whether "wolf" is
// attached: Compare must see exactly the configured slowdown, and must
// have alternated the order.
func TestCompareAlternatesAndComputes(t *testing.T) {
	attached := false
	var order []bool
	work := func(context.Context) (float64, error) {
		order = append(order, attached)
		if attached {
			return 90, nil
		}
		return 100, nil
	}
	attach := func(context.Context) (func() error, error) {
		attached = true
		return func() error { attached = false; return nil }, nil
	}
	r, err := Compare(context.Background(), 4, work, attach)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(r.SlowdownPct-10) > 1e-9 || r.NoisePct != 0 {
		t.Fatalf("slowdown %v noise %v", r.SlowdownPct, r.NoisePct)
	}
	want := []bool{false, true, true, false, false, true, true, false}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("order %v, want %v", order, want)
		}
	}
	if attached {
		t.Fatal("left attached")
	}
}

func TestCompareErrors(t *testing.T) {
	ok := func(context.Context) (float64, error) { return 1, nil }
	boom := errors.New("boom")
	failAttach := func(context.Context) (func() error, error) { return nil, boom }
	if _, err := Compare(context.Background(), 1, ok, failAttach); !errors.Is(err, boom) {
		t.Fatalf("attach error lost: %v", err)
	}
	if _, err := Compare(context.Background(), 0, ok, failAttach); err == nil {
		t.Fatal("0 rounds accepted")
	}
	attach := func(context.Context) (func() error, error) {
		return func() error { return nil }, nil
	}
	failWork := func(context.Context) (float64, error) { return 0, boom }
	if _, err := Compare(context.Background(), 1, failWork, attach); !errors.Is(err, boom) {
		t.Fatalf("work error lost: %v", err)
	}
	if Median([]float64{3, 1, 2, 10}) != 2.5 || !math.IsNaN(Median(nil)) {
		t.Fatal("median")
	}
}

// The sign-test interval's ranks and coverage, against values worked out
// by hand from the binomial distribution.
func TestMedianCI(t *testing.T) {
	seq := func(n int) []float64 {
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = float64(n - i) // descending: MedianCI must sort
		}
		return xs
	}
	for _, c := range []struct {
		n       int
		lo, hi  float64
		cover   float64
		noRoomF bool
	}{
		{n: 5, noRoomF: true},                       // P(B<=0) = 1/32 > 2.5 %
		{n: 6, lo: 1, hi: 6, cover: 62.0 / 64},      // k = 1
		{n: 10, lo: 2, hi: 9, cover: 1 - 22.0/1024}, // k = 2
		{n: 20, lo: 6, hi: 15, cover: 0.9586105},    // k = 6
	} {
		lo, hi, cover := MedianCI(seq(c.n), 0.95)
		if c.noRoomF {
			if !math.IsNaN(lo) || !math.IsNaN(hi) || cover != 0 {
				t.Errorf("n=%d: got %v..%v (%v), want none", c.n, lo, hi, cover)
			}
			continue
		}
		if lo != c.lo || hi != c.hi || math.Abs(cover-c.cover) > 1e-6 {
			t.Errorf("n=%d: got %v..%v (%.7f), want %v..%v (%.7f)", c.n, lo, hi, cover, c.lo, c.hi, c.cover)
		}
	}
}

func TestSummarizeBlocks(t *testing.T) {
	// Rounds swing 3x between blocks, and the round run second in a pair
	// is always 10 % faster: per block of A B B A, wolf costs exactly 2 %.
	var base, with []float64
	for i := range 16 {
		level := float64(100 * (1 + (i/2)%3)) // changes between blocks
		b, w := level, 0.98*level
		if i%2 == 0 {
			w *= 1.1 // A B: with ran second
		} else {
			b *= 1.1 // B A: without ran second
		}
		base, with = append(base, b), append(with, w)
	}
	r := Summarize(base, append(with, 5)) // an extra round is ignored
	if r.Rounds != 16 || len(r.BlockPct) != 8 {
		t.Fatalf("rounds %d blocks %d", r.Rounds, len(r.BlockPct))
	}
	for _, v := range []float64{r.MedianBlockPct, r.CILowPct, r.CIHighPct} {
		if math.Abs(v-2) > 0.5 {
			t.Fatalf("block slowdown %v (%v..%v), want about 2", r.MedianBlockPct, r.CILowPct, r.CIHighPct)
		}
	}
	if !r.Below(3) || r.Below(1) {
		t.Fatal("Below")
	}
	if e := Summarize(nil, nil); !math.IsNaN(e.SlowdownPct) || e.Below(100) {
		t.Fatal("empty summary claims something")
	}
	if r := Summarize(base[:10], with[:10]); r.Below(100) {
		t.Fatal("5 blocks give no 95 % interval, yet Below is true")
	}
}
