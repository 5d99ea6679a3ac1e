package investigator

import (
	"context"
	"sync"
	"time"
)

// When doctor runs investigators side by side in one process, one that
// finishes first and closes its BPF objects does kernel work others still
// count: on 5.10 every hash map freed runs rcu_barrier() in a kworker, and
// a dozen of them queued on the RCU barrier mutex read as lock contention
// ("rcu-barrier: 33 s waited by 8 tasks") to a locks investigation still
// watching. So each investigator, once it has read what it saw and before
// it detaches, waits for the others to get as far (Settle): then nobody is
// counting while anybody closes.

// Barrier is shared by the investigators of one run.
type Barrier struct {
	mu      sync.Mutex
	left    int
	done    chan struct{}
	timeout time.Duration
}

// NewBarrier is a barrier for n investigators; none waits longer than
// timeout for the others.
func NewBarrier(n int, timeout time.Duration) *Barrier {
	b := &Barrier{left: n, done: make(chan struct{}), timeout: timeout}
	if n <= 0 {
		close(b.done)
	}
	return b
}

type settleKey struct{}

type settler struct {
	b    *Barrier
	once sync.Once
}

// WithBarrier gives one investigator's Run its place at b.
func WithBarrier(ctx context.Context, b *Barrier) context.Context {
	return context.WithValue(ctx, settleKey{}, &settler{b: b})
}

// Arrived marks ctx's investigator as done with its window, if it was not
// already: doctor calls it when Run returns, whatever it returned.
func Arrived(ctx context.Context) {
	s, ok := ctx.Value(settleKey{}).(*settler)
	if !ok {
		return
	}
	s.once.Do(func() {
		s.b.mu.Lock()
		defer s.b.mu.Unlock()
		s.b.left--
		if s.b.left == 0 {
			close(s.b.done)
		}
	})
}

// Settle is called by an investigator once it has read what it saw and
// before it detaches: it waits, within the barrier's timeout, until every
// investigator of the run has done the same. Without a barrier (one
// investigator alone) it returns at once; a cancelled ctx ends the wait.
func Settle(ctx context.Context) {
	s, ok := ctx.Value(settleKey{}).(*settler)
	if !ok {
		return
	}
	Arrived(ctx)
	t := time.NewTimer(s.b.timeout)
	defer t.Stop()
	select {
	case <-s.b.done:
	case <-t.C:
	case <-ctx.Done():
	}
}
