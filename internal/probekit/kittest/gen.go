// Package kittest holds a small BPF object for probekit's tests: programs
// that attach everywhere, one whose tracepoint no kernel has, and counters
// declared with WOLF_STATS. Nothing outside tests uses it.
package kittest

import "github.com/cilium/ebpf"

// The object and its Go bindings are generated from kittest.bpf.c and
// committed, so that building wolf needs no clang.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type stat_index kittest kittest.bpf.c -- -I../../../bpf/include

// Spec reads the object.
func Spec() (*ebpf.CollectionSpec, error) { return loadKittest() }

// StatSwitches, StatMine, StatDetailed, StatTimed and StatEstimate index
// the counters.
const (
	StatSwitches = kittestStatIndexSTAT_SWITCHES
	StatMine     = kittestStatIndexSTAT_MINE
	StatDetailed = kittestStatIndexSTAT_DETAILED
	StatTimed    = kittestStatIndexSTAT_TIMED
	StatEstimate = kittestStatIndexSTAT_ESTIMATE
)
