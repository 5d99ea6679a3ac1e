package main

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/lab"
)

// fakeStallLab records its instances' starts and closes.
type fakeStallLab struct {
	mu     sync.Mutex
	events []string
}

func (f *fakeStallLab) Name() string    { return "fake-stall" }
func (f *fakeStallLab) Summary() string { return "a fake" }
func (f *fakeStallLab) Stalls() bool    { return true }
func (f *fakeStallLab) WhyRoot() string { return "" }
func (f *fakeStallLab) Start(context.Context, lab.Options) (lab.Instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, "start")
	return &fakeInstance{f}, nil
}

type fakeInstance struct{ l *fakeStallLab }

func (i *fakeInstance) Describe() string { return "fake" }
func (i *fakeInstance) Tasks() lab.Tasks { return lab.Tasks{Offender: 1} }
func (i *fakeInstance) Close() error {
	i.l.mu.Lock()
	defer i.l.mu.Unlock()
	i.l.events = append(i.l.events, "close")
	return nil
}

// TestLabEpisodes: a lab that keeps tasks in D runs in episodes no longer
// than the stall bound, each instance closed before the next starts.
func TestLabEpisodes(t *testing.T) {
	f := &fakeStallLab{}
	var out, errw strings.Builder
	if err := runLabEpisodes(t.Context(), &out, &errw, f, 200*time.Millisecond, 0, 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if len(f.events) < 4 {
		t.Fatalf("events %v: want several episodes", f.events)
	}
	for i, e := range f.events {
		if want := []string{"start", "close"}[i%2]; e != want {
			t.Fatalf("events %v: want start and close alternating", f.events)
		}
	}
	if !strings.Contains(out.String(), "runs in episodes of 20ms") {
		t.Errorf("output %q does not say so", out.String())
	}
	// A lab that stalls nothing runs in one piece.
	f2 := &fakeStallLab{}
	if err := runLabEpisodes(t.Context(), &out, &errw, nonStalling{f2}, 100*time.Millisecond, 0, 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if len(f2.events) != 2 {
		t.Errorf("a lab that stalls nothing: events %v, want one start and close", f2.events)
	}
}

// nonStalling hides Stalls.
type nonStalling struct{ l *fakeStallLab }

func (n nonStalling) Name() string    { return n.l.Name() }
func (n nonStalling) Summary() string { return n.l.Summary() }
func (n nonStalling) Start(ctx context.Context, o lab.Options) (lab.Instance, error) {
	return n.l.Start(ctx, o)
}
