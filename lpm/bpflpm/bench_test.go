package bpflpm

import (
	"context"
	"net/netip"
	"testing"

	"github.com/wolf-investigator/wolf/internal/testutil"
)

// TestBenchSmall runs the whole benchmark at small sizes, with a small
// synthetic "real" table of both families, and checks that wolf and the
// kernel trie agreed on every probe and that every row is there and sane.
// It asserts nothing about speed.
func TestBenchSmall(t *testing.T) {
	testutil.RequireRoot(t)
	var real []netip.Prefix
	for _, s := range []string{"10.0.0.0/8", "10.1.0.0/16", "10.1.2.0/24", "10.1.2.128/25", "192.168.0.0/16", "192.168.7.7/32", "0.0.0.0/0",
		"2001:db8::/32", "2001:db8:1::/48", "2001:db8:1:2::/64", "2001:db8:1:2::1/128", "2a00::/12", "::/0"} {
		real = append(real, netip.MustParsePrefix(s))
	}
	var logged int
	rep, err := Bench(context.Background(), BenchOptions{
		Entries:      []int{1, 100, 5000},
		Real:         true,
		IPv6:         true,
		Repeat:       4,
		Loops:        1000,
		Trials:       1,
		UserOps:      300,
		Probes:       5000,
		RealPrefixes: real,
		Log:          func(string, ...any) { logged++ },
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Mismatches != 0 {
		t.Fatalf("%d mismatches between wolf and the kernel trie: %v", rep.Mismatches, rep.Notes)
	}
	if rep.Compared < 5000 {
		t.Fatalf("only %d probes compared", rep.Compared)
	}
	if logged != 5 {
		t.Errorf("%d progress lines, want one per set (5)", logged)
	}
	type row struct {
		set, impl, op, via string
		entries            int
	}
	got := map[row]BenchResult{}
	for _, r := range rep.Results {
		got[row{r.Set, r.Impl, r.Op, r.Via, r.Entries}] = r
		if r.NsPerOp <= 0 || r.Mops <= 0 || r.Ops == 0 {
			t.Errorf("%+v: not a measurement", r)
		}
		if (r.Op == "lookup" || r.Op == "load" || r.Op == "free") && r.Bytes == 0 {
			t.Errorf("%+v: no memory figure", r)
		}
		if r.Impl == "wolf" && r.Op != "free" && r.Speedup <= 0 {
			t.Errorf("%+v: no speedup against the kernel trie", r)
		}
	}
	for _, n := range []int{1, 100, 5000} {
		for _, want := range []row{
			{"dense-v4", "kernel-trie", "lookup", "bpf", n}, {"dense-v4", "wolf", "lookup", "bpf", n},
			{"dense-v4", "kernel-trie", "load", "syscall", n}, {"dense-v4", "wolf", "load", "user", n},
			{"dense-v4", "kernel-trie", "update", "bpf", n}, {"dense-v4", "kernel-trie", "delete", "bpf", n},
			{"dense-v4", "kernel-trie", "update", "syscall", n}, {"dense-v4", "wolf", "update", "user", n},
			{"dense-v4", "kernel-trie", "delete", "syscall", n}, {"dense-v4", "wolf", "delete", "user", n},
			{"dense-v4", "kernel-trie", "free", "close", n}, {"dense-v4", "wolf", "free", "close", n},
		} {
			if _, ok := got[want]; !ok {
				t.Errorf("no row %+v", want)
			}
		}
	}
	for _, set := range []string{"real-v4", "real-v6"} {
		n := 7
		if set == "real-v6" {
			n = 6
		}
		for _, impl := range []string{"kernel-trie", "wolf"} {
			if _, ok := got[row{set, impl, "lookup", "bpf", n}]; !ok {
				t.Errorf("no %s lookup row for %s with %d entries", impl, set, n)
			}
		}
	}
	if len(rep.Harness) == 0 {
		t.Error("no harness measurements")
	}
}
