package investigator

import (
	"context"
	"fmt"
	"time"

	"github.com/wolf-investigator/wolf/internal/pace"
)

// Run watches one window: it starts inv, waits opts.Duration (or until ctx
// ends) telling opts.Progress how far along it is, collects and closes.
// Commands that write a report use Start and Collect themselves, so that
// the report is written before Close waits for the kernel.
func Run(ctx context.Context, inv Investigator, opts Options) (*Result, error) {
	if opts.Duration <= 0 {
		return nil, fmt.Errorf("%s: duration must be positive, got %v", inv.Name(), opts.Duration)
	}
	s, err := inv.Start(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	Wait(ctx, opts, time.Now(), 250*time.Millisecond, nil)
	// The window is over, possibly because ctx was cancelled (Ctrl-C): the
	// reads that complete the report get a context of their own.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pace.Scaled(CollectTimeout))
	defer cancel()
	return s.Collect(cctx)
}

// CollectTimeout bounds the reads that complete a report after a window,
// on an ordinary machine (stretched on a slower one: pace.Scaled).
const CollectTimeout = 10 * time.Second

// Wait sleeps until opts.Duration has passed since start, or until ctx
// ends, telling opts.Progress how far along it is every interval and
// calling tick (when not nil) with the time left after each interval.
// Live investigators call it between attaching and reading their maps.
func Wait(ctx context.Context, opts Options, start time.Time, interval time.Duration, tick func(left time.Duration)) {
	deadline := start.Add(opts.Duration)
	for {
		left := time.Until(deadline)
		if opts.Progress != nil {
			opts.Progress(1 - max(left, 0).Seconds()/opts.Duration.Seconds())
		}
		if left <= 0 {
			return
		}
		t := time.NewTimer(min(left, interval))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if left := time.Until(deadline); tick != nil && left > 0 {
			tick(left)
		}
	}
}
