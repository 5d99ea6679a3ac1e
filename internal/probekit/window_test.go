package probekit_test

import (
	"testing"

	"github.com/wolf-investigator/wolf/internal/probekit"
)

// Two readings of a cumulative map make a window: what each key gained,
// a new key all it has, a key gone forgotten.
func TestSinceStep(t *testing.T) {
	var s probekit.Since[string, uint64]
	sub := func(cur, prev uint64, seen bool) (uint64, uint64) {
		if !seen {
			prev = 0
		}
		return probekit.Sub(cur, prev), cur
	}
	if w := s.Step(map[string]uint64{"a": 5}, sub); w["a"] != 5 {
		t.Errorf("first window %v", w)
	}
	if w := s.Step(map[string]uint64{"a": 8, "b": 2}, sub); w["a"] != 3 || w["b"] != 2 {
		t.Errorf("second window %v", w)
	}
	if w := s.Step(map[string]uint64{"b": 2}, sub); len(w) != 1 || w["b"] != 0 {
		t.Errorf("third window %v", w)
	}
	// "a" was forgotten: back, it counts from zero.
	if w := s.Step(map[string]uint64{"a": 1, "b": 2}, sub); w["a"] != 1 {
		t.Errorf("fourth window %v", w)
	}
}

// A sum read short once (a value between two maps) gives no negative
// window, and what it missed is counted once when it shows.
func TestEnvelope(t *testing.T) {
	var keep, total uint64
	for i, c := range []struct{ cur, want uint64 }{{10, 10}, {7, 0}, {12, 2}, {12, 0}, {20, 8}} {
		var w uint64
		w, keep = probekit.Envelope(c.cur, keep)
		if w != c.want {
			t.Errorf("reading %d (%d): window %d, want %d", i, c.cur, w, c.want)
		}
		total += w
	}
	if total != 20 {
		t.Errorf("windows add up to %d, the sum is 20", total)
	}
}

// A struct wolf_max's slot is window w's only if stamped with w.
func TestWindowMax(t *testing.T) {
	v, win, tag := [2]uint64{30, 40}, [2]uint32{6, 3}, [2]uint32{1, 2}
	if m, tg := probekit.WindowMaxTag(v, win, tag, 6); m != 30 || tg != 1 {
		t.Errorf("window 6: %d tag %d", m, tg)
	}
	if m := probekit.WindowMax(v, win, 3); m != 40 {
		t.Errorf("window 3: %d", m)
	}
	// Slot 1 holds window 3, not 5: window 5 saw no value.
	if m := probekit.WindowMax(v, win, 5); m != 0 {
		t.Errorf("window 5: %d", m)
	}
}
