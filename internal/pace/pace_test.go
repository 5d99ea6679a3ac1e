package pace

import (
	"testing"
	"time"
)

func TestScaledNeverShortens(t *testing.T) {
	f := Slowdown()
	if f < 1 || f > maxSlowdown {
		t.Fatalf("slowdown %v outside [1, %d]", f, maxSlowdown)
	}
	t.Logf("this machine: slowdown %.2f", f)
	if d := Scaled(5 * time.Second); d < 5*time.Second || d > maxSlowdown*5*time.Second {
		t.Errorf("Scaled(5s) = %v", d)
	}
}

func TestOrdinary(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		slow float64
		want time.Duration
	}{
		{800 * time.Millisecond, 8, 100 * time.Millisecond},
		{800 * time.Millisecond, 1.9, 800 * time.Millisecond}, // a loaded ordinary machine: as measured
		{800 * time.Millisecond, 2, 400 * time.Millisecond},
	} {
		if got := Ordinary(c.d, c.slow); got != c.want {
			t.Errorf("Ordinary(%v, %v) = %v, want %v", c.d, c.slow, got, c.want)
		}
	}
	if n := SlowNote("the hold", 278*time.Millisecond, 8); n != "This machine starts a process 8.0 times more slowly than an ordinary one (an emulated CPU, such as QEMU without KVM, runs kernel code that much slower): the hold of 278 ms here is about 35 ms of an ordinary machine's work, and is graded as such." {
		t.Errorf("SlowNote: %q", n)
	}
}
