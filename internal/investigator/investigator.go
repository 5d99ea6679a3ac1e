// Package investigator defines what every wolf investigator is, so that
// `wolf doctor`, `wolf watch` and the per-investigator commands can drive
// them the same way.
package investigator

import (
	"context"
	"errors"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
)

// Options are the settings every investigator understands. Investigator
// specific settings (thresholds, filters) live on the investigator value.
type Options struct {
	Duration time.Duration // how long to watch; live investigators stop then
	PID      int           // 0: the whole host; else only this process
	// Progress, when set, is called now and then with the fraction of
	// Duration done. It must not block.
	Progress func(done float64)
}

// Result is what one investigator run produced.
type Result struct {
	Findings     []finding.Finding
	Histograms   []finding.Histogram
	Profiles     []finding.Profile  // stack aggregations, for flame graphs and exports
	Timelines    []finding.Timeline // per-subject event series
	Capabilities map[string]bool
	Overhead     finding.Overhead
	// Notes say what the investigator had to do without ("owners' stacks
	// not captured: …"), for the report's notes.
	Notes []string
}

// Investigator watches the live kernel for Options.Duration and concludes.
// Run must detach everything it attached before it returns, whether ctx was
// cancelled or not.
type Investigator interface {
	Name() string
	Summary() string
	Run(ctx context.Context, opts Options) (*Result, error)
}

// Auditor is an investigator's static check: settings and configuration
// read from /proc and /sys, no BPF, fast. `wolf doctor` runs every one.
type Auditor interface {
	Audit(ctx context.Context) []finding.Finding
}

// Requirement is one kernel feature an investigator uses, named as the
// features package names its probes ("tracepoint:sched/sched_switch").
type Requirement struct {
	Feature  string
	Why      string // what the investigator uses it for
	Optional bool   // the investigator degrades without it instead of failing
}

// Requirer is implemented by investigators that declare their needs, for
// `wolf check`.
type Requirer interface {
	Requirements() []Requirement
}

// ErrUnsupported is wrapped by investigators whose kernel lacks something
// they cannot do without; the CLI turns it into exit code 3.
var ErrUnsupported = errors.New("not supported by this kernel")

// ErrPrivilege is wrapped when wolf lacks the privilege an investigator
// needs; the CLI turns it into exit code 3.
var ErrPrivilege = errors.New("missing privilege")
