package lab

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrTimeout is what WaitFor wraps when its timeout passes.
var ErrTimeout = errors.New("timed out")

// pollInterval is how often WaitFor checks its condition.
const pollInterval = 5 * time.Millisecond

// WaitFor polls cond every few milliseconds until it holds, ctx ends, or
// timeout (Scaled for a slow machine) passes (then the error wraps
// ErrTimeout). cond may return an error to give up at once. Errors read
// "waiting for <what>: ...".
func WaitFor(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	timeout = Scaled(timeout)
	deadline := time.Now().Add(timeout)
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waiting for %s: %w after %s", what, ErrTimeout, timeout)
		}
		time.Sleep(pollInterval)
	}
}
