package realtable

import (
	"errors"
	"testing"

	"github.com/wolf-investigator/wolf/internal/testutil"
)

func TestLoad(t *testing.T) {
	ps, err := Load()
	if errors.Is(err, ErrNotInCache) {
		testutil.Require(t, false, err.Error()) // CI has it: the lpm benchmarks import bart
	}
	if err != nil {
		t.Fatal(err)
	}
	v4, v6 := Split(ps)
	if len(v4) < 850_000 || len(v6) < 100_000 {
		t.Errorf("%d IPv4 and %d IPv6 prefixes; the pinned table has ~902 K and ~160 K", len(v4), len(v6))
	}
	for _, p := range ps[:1000] {
		if p != p.Masked() {
			t.Fatalf("%v not masked", p)
		}
	}
}
