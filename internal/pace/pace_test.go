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
