package locks

import "testing"

// The correction is taken only from a count the word held still for, and
// makes the programs' count (the word's low half, 32-bit wrapping) equal
// what was seen.
func TestAwaitedCorrection(t *testing.T) {
	const start = 1<<32 | 1 // AWAITED_START
	for _, c := range []struct {
		name          string
		before, after uint64
		seen          uint32
		corr          uint32
		ok            bool
	}{
		{"exact", 7*start - 3, 7*start - 3, 4, 0, true},
		{"two evicted", 7*start - 3, 7*start - 3, 2, 2, true},
		{"a wait ended meanwhile", 7*start - 3, 7*start - 4, 3, 0, false},
		{"a wait began and ended meanwhile", 7*start - 3, 8*start - 4, 4, 0, false},
		{"the low half wrapped", 1<<32 - 1 + 3<<32, 1<<32 - 1 + 3<<32, 5, 1<<32 - 1 - 5, true},
	} {
		corr, ok := awaitedCorrection(c.before, c.after, c.seen)
		if ok != c.ok || corr != c.corr {
			t.Errorf("%s: correction %d, %v; want %d, %v", c.name, corr, ok, c.corr, c.ok)
		}
		if ok && awaitedExcess(c.before, corr, c.seen) != 0 {
			t.Errorf("%s: corrected count %d, %d awaiting", c.name, uint32(c.before)-corr, c.seen)
		}
	}
	// What each end sees: none awaited exactly when the count less the
	// correction is 0.
	if e := awaitedExcess(9*start-6, 1, 2); e != 0 {
		t.Errorf("excess %d over an exact count", e)
	}
	if e := awaitedExcess(9*start-6, 0, 2); e != 1 {
		t.Errorf("excess %d, want 1", e)
	}
}

func TestAwaitingEnd(t *testing.T) {
	for _, c := range []struct {
		pe   locksPending
		want bool
	}{
		{locksPending{}, false},
		{locksPending{StartNs: 5}, true},
		{locksPending{StartNs: 5, EndNs: 9}, false},
		{locksPending{SkipLock: 0xffff1234}, true},
	} {
		if got := awaitingEnd(&c.pe); got != c.want {
			t.Errorf("%+v: awaiting %v, want %v", c.pe, got, c.want)
		}
	}
}
