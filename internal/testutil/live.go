package testutil

import (
	"context"
	"sync"
	"testing"

	"github.com/wolf-investigator/wolf/internal/investigator"
)

// RunLive runs inv with opts and returns its result, failing t if it
// fails. during, if set, runs once every program is attached, so that a
// test can start a pathology wolf must see begin: investigators call
// opts.Progress for the first time only after attaching.
func RunLive(t testing.TB, inv investigator.Investigator, opts investigator.Options, during func()) *investigator.Result {
	t.Helper()
	type out struct {
		res *investigator.Result
		err error
	}
	done := make(chan out, 1)
	attached := make(chan struct{})
	var once sync.Once
	progress := opts.Progress
	opts.Progress = func(f float64) {
		once.Do(func() { close(attached) })
		if progress != nil {
			progress(f)
		}
	}
	go func() {
		res, err := inv.Run(context.Background(), opts)
		done <- out{res, err}
	}()
	if during != nil {
		select {
		case <-attached:
		case o := <-done:
			t.Fatalf("%s ended before attaching: %v", inv.Name(), o.err)
		}
		during()
	}
	o := <-done
	if o.err != nil {
		t.Fatalf("%s: %v", inv.Name(), o.err)
	}
	return o.res
}
