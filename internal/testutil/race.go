//go:build race

package testutil

// RaceEnabled is true when the test binary is built with -race.
const RaceEnabled = true
