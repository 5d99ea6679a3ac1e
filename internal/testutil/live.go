package testutil

import (
	"context"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/investigator"
)

// RunLive runs inv for opts.Duration and returns its result, failing t if
// it fails. during, if set, runs once every program is attached (Start
// has returned), so that a test can start a pathology wolf must see begin.
func RunLive(t testing.TB, inv investigator.Investigator, opts investigator.Options, during func()) *investigator.Result {
	t.Helper()
	s, err := inv.Start(context.Background(), opts)
	if err != nil {
		t.Fatalf("%s: %v", inv.Name(), err)
	}
	defer s.Close()
	start := time.Now()
	if during != nil {
		during()
	}
	investigator.Wait(context.Background(), opts, start, 250*time.Millisecond, nil)
	res, err := s.Collect(context.Background())
	if err != nil {
		t.Fatalf("%s: %v", inv.Name(), err)
	}
	return res
}
