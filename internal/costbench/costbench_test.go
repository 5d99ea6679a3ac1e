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
