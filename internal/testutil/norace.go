//go:build !race

package testutil

// RaceEnabled is true when the test binary is built with -race: tests that
// measure a workload against a reference skip then, since the detector
// slows the workload in this process (not the kernel's side), and the full
// tier makes the comparison without it.
const RaceEnabled = false
