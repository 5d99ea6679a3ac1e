package investigator

import (
	"context"
	"time"
)

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
