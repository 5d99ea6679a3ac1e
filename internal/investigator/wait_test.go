package investigator

import (
	"context"
	"testing"
	"time"
)

// Progress climbs to exactly 1 when the window ends; ticks come while it
// runs; a cancelled context ends the wait at once, without the final 1.
func TestWait(t *testing.T) {
	var last float64
	ticks := 0
	opts := Options{Duration: 60 * time.Millisecond, Progress: func(f float64) {
		if f < last {
			t.Errorf("progress went back: %v after %v", f, last)
		}
		last = f
	}}
	Wait(context.Background(), opts, time.Now(), 10*time.Millisecond, func(left time.Duration) {
		if left <= 0 || left > opts.Duration {
			t.Errorf("tick with %v left", left)
		}
		ticks++
	})
	if last != 1 || ticks == 0 {
		t.Errorf("final progress %v, %d ticks", last, ticks)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	last = 0
	opts.Duration = time.Hour
	Wait(ctx, opts, time.Now(), time.Minute, nil)
	if last >= 1 {
		t.Errorf("cancelled wait reported progress %v", last)
	}
}
