package lab

import (
	"time"

	"github.com/wolf-investigator/wolf/internal/pace"
)

// Slowdown is pace.Slowdown: how many times slower than an ordinary
// machine this one starts a process.
func Slowdown() float64 { return pace.Slowdown() }

// Scaled is d stretched by Slowdown, for start-up deadlines.
func Scaled(d time.Duration) time.Duration { return pace.Scaled(d) }
