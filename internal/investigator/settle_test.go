package investigator

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Nobody leaves Settle before the last one arrives; one that fails early
// (Arrived without Settle) does not hold the others.
func TestSettleWaitsForAll(t *testing.T) {
	b := NewBarrier(3, 10*time.Second)
	var arrived atomic.Int32
	var wg sync.WaitGroup
	left := make(chan int32, 2)
	for i := range 2 {
		ctx := WithBarrier(context.Background(), b)
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i*20) * time.Millisecond)
			arrived.Add(1)
			Settle(ctx)
			left <- arrived.Load()
		}()
	}
	failed := WithBarrier(context.Background(), b)
	time.Sleep(100 * time.Millisecond)
	arrived.Add(1)
	Arrived(failed)
	Arrived(failed) // twice is once
	wg.Wait()
	close(left)
	for n := range left {
		if n != 3 {
			t.Errorf("an investigator left the barrier when %d of 3 had arrived", n)
		}
	}
	Settle(context.Background()) // no barrier: returns
}

func TestSettleTimesOut(t *testing.T) {
	b := NewBarrier(2, 50*time.Millisecond)
	t0 := time.Now()
	Settle(WithBarrier(context.Background(), b))
	if d := time.Since(t0); d < 50*time.Millisecond || d > 5*time.Second {
		t.Errorf("waited %v, want the 50 ms timeout", d)
	}
}
