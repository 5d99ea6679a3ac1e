// Package costbench measures what an investigator costs a workload: the
// same workload run with and without wolf attached, interleaved in one run
// (A B B A A B …) so that drift on a shared machine falls on both sides.
// Every investigator's overhead target is checked with it.
package costbench

import (
	"context"
	"fmt"
	"math"
	"slices"
)

// Workload runs one round and returns how much it got done (operations,
// bytes, messages: higher is better). It must take roughly the same time
// every round.
type Workload func(ctx context.Context) (float64, error)

// Attach starts observing and returns the function that stops it.
type Attach func(ctx context.Context) (detach func() error, err error)

// Result compares the throughput of the rounds without and with wolf.
type Result struct {
	Rounds   int       `json:"rounds"`
	Baseline []float64 `json:"baseline"` // per round, without wolf
	With     []float64 `json:"with"`     // per round, wolf attached
	// SlowdownPct is how much slower the workload ran with wolf, from the
	// medians: 100 * (1 - median(with)/median(baseline)). Negative means
	// noise exceeded the cost.
	SlowdownPct float64 `json:"slowdown_pct"`
	// NoisePct is the spread of the baseline rounds (max-min over median),
	// so a reader can tell a 2 % slowdown from 2 % jitter.
	NoisePct float64 `json:"noise_pct"`
}

// Compare runs rounds pairs. Within each pair the order alternates, so
// neither side always runs first (warm caches, a neighbour's burst).
func Compare(ctx context.Context, rounds int, work Workload, attach Attach) (*Result, error) {
	if rounds <= 0 {
		return nil, fmt.Errorf("costbench: rounds must be positive, got %d", rounds)
	}
	r := &Result{Rounds: rounds}
	runWith := func() error {
		detach, err := attach(ctx)
		if err != nil {
			return fmt.Errorf("costbench: attach: %w", err)
		}
		v, werr := work(ctx)
		if err := detach(); err != nil && werr == nil {
			werr = fmt.Errorf("costbench: detach: %w", err)
		}
		if werr != nil {
			return werr
		}
		r.With = append(r.With, v)
		return nil
	}
	runWithout := func() error {
		v, err := work(ctx)
		if err != nil {
			return err
		}
		r.Baseline = append(r.Baseline, v)
		return nil
	}
	for i := range rounds {
		first, second := runWithout, runWith
		if i%2 == 1 {
			first, second = runWith, runWithout
		}
		if err := first(); err != nil {
			return nil, err
		}
		if err := second(); err != nil {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	base, with := Median(r.Baseline), Median(r.With)
	if base > 0 {
		r.SlowdownPct = 100 * (1 - with/base)
		lo, hi := slices.Min(r.Baseline), slices.Max(r.Baseline)
		r.NoisePct = 100 * (hi - lo) / base
	}
	return r, nil
}

// Median of xs (NaN when empty).
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
