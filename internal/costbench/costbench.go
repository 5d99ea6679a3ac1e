// Package costbench measures what an investigator costs a workload: the
// same workload run with and without wolf attached, interleaved in one run
// (A B B A A B …) so that drift on a shared machine falls on both sides.
// Every investigator's overhead target is checked with it.
//
// On a small shared VM a round's throughput swings by tens of percent
// (hypervisor steal, where the scheduler happens to put the threads), far
// more than the few percent being measured. So besides the ratio of the
// medians, a result carries the slowdown of each block of four adjacent
// rounds (without, with, with, without: the order Compare runs them in) and
// a distribution-free confidence interval for their median: a target is
// met only when the interval's upper end is below it, not when a noisy
// point estimate happens to be. Blocks rather than pairs, because a round
// run second (just after an attach or a detach, or on a warmer cache) can
// differ from one run first by more than wolf costs: within an A B B A
// block that order effect, and any linear drift, cancel exactly.
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

// Level is the confidence of the intervals Summarize computes.
const Level = 0.95

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
	// BlockPct is the slowdown of each block of two consecutive pairs,
	// 100 * (1 - (with[2k]+with[2k+1]) / (baseline[2k]+baseline[2k+1])):
	// the block ran A B B A, so order effects and linear drift cancel.
	BlockPct []float64 `json:"block_pct"`
	// MedianBlockPct is the median of BlockPct, and CILowPct..CIHighPct a
	// confidence interval for it (order statistics of the blocks, no
	// assumption about their distribution) covering at least Coverage.
	// The interval is NaN with fewer than 6 blocks (12 pairs).
	MedianBlockPct float64 `json:"median_block_pct"`
	CILowPct       float64 `json:"ci_low_pct"`
	CIHighPct      float64 `json:"ci_high_pct"`
	Coverage       float64 `json:"coverage"`
}

// Below reports whether the slowdown is shown to be under target: the
// upper end of the confidence interval is.
func (r *Result) Below(target float64) bool {
	return !math.IsNaN(r.CIHighPct) && r.CIHighPct < target
}

// String is the one-line summary benchmarks log.
func (r *Result) String() string {
	ci := "too few blocks for an interval"
	if !math.IsNaN(r.CIHighPct) {
		ci = fmt.Sprintf("%.0f%% CI %.2f%% .. %.2f%%", 100*r.Coverage, r.CILowPct, r.CIHighPct)
	}
	return fmt.Sprintf("slowdown %.2f%% (median of %d ABBA blocks; %s); medians' ratio %.2f%%; baseline noise %.1f%%",
		r.MedianBlockPct, len(r.BlockPct), ci, r.SlowdownPct, r.NoisePct)
}

// Compare runs rounds pairs. Within each pair the order alternates, so
// neither side always runs first (warm caches, a neighbour's burst).
func Compare(ctx context.Context, rounds int, work Workload, attach Attach) (*Result, error) {
	if rounds <= 0 {
		return nil, fmt.Errorf("costbench: rounds must be positive, got %d", rounds)
	}
	var base, with []float64
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
		with = append(with, v)
		return nil
	}
	runWithout := func() error {
		v, err := work(ctx)
		if err != nil {
			return err
		}
		base = append(base, v)
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
	return Summarize(base, with), nil
}

// Summarize compares paired measurements (higher is better; baseline[i]
// and with[i] ran back to back, in alternating order as Compare runs
// them). Pairs beyond the shorter slice are ignored, and so is a last pair
// that completes no block; a block whose baselines sum to zero is skipped.
func Summarize(baseline, with []float64) *Result {
	n := min(len(baseline), len(with))
	r := &Result{Rounds: n, Baseline: baseline[:n], With: with[:n],
		SlowdownPct: math.NaN(), NoisePct: math.NaN(), MedianBlockPct: math.NaN(),
		CILowPct: math.NaN(), CIHighPct: math.NaN()}
	if n == 0 {
		return r
	}
	if b := Median(r.Baseline); b > 0 {
		r.SlowdownPct = 100 * (1 - Median(r.With)/b)
		r.NoisePct = 100 * (slices.Max(r.Baseline) - slices.Min(r.Baseline)) / b
	}
	for i := 0; i+1 < n; i += 2 {
		if b := baseline[i] + baseline[i+1]; b > 0 {
			r.BlockPct = append(r.BlockPct, 100*(1-(with[i]+with[i+1])/b))
		}
	}
	r.MedianBlockPct = Median(r.BlockPct)
	r.CILowPct, r.CIHighPct, r.Coverage = MedianCI(r.BlockPct, Level)
	return r
}

// MedianCI is a confidence interval for the median of the population xs
// was drawn from, at least level (for example 0.95): the k-th smallest
// and k-th largest of xs, with k the largest rank for which the chance
// that fewer than k draws fall below the median, 2^-n * sum C(n,i) for
// i < k, is at most (1-level)/2 (the sign test's interval). It returns
// the interval and its exact coverage, or NaNs when xs is too small for
// the level.
func MedianCI(xs []float64, level float64) (lo, hi, coverage float64) {
	n := len(xs)
	alpha := (1 - level) / 2
	// tail accumulates P(B <= i) for B ~ Binomial(n, 1/2), each term
	// computed in log space so that large n does not overflow.
	lc, _ := math.Lgamma(float64(n + 1))
	k, tail := 0, 0.0
	for i := 0; i <= n; i++ {
		a, _ := math.Lgamma(float64(i + 1))
		b, _ := math.Lgamma(float64(n - i + 1))
		p := math.Exp(lc - a - b - float64(n)*math.Ln2)
		if tail+p > alpha {
			break
		}
		tail += p
		k = i + 1 // P(B <= i) <= alpha: the (i+1)-th order statistic is a bound
	}
	if k == 0 || 2*k > n {
		return math.NaN(), math.NaN(), 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[k-1], s[n-k], 1 - 2*tail
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
