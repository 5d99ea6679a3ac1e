// Package investigator defines what every wolf investigator is, so that
// `wolf doctor`, `wolf watch` and the per-investigator commands can drive
// them the same way.
package investigator

import (
	"context"
	"errors"
	"time"

	"github.com/wolf-investigator/wolf/internal/fact"
	"github.com/wolf-investigator/wolf/internal/finding"
)

// Options are the settings every investigator understands. Investigator
// specific settings (thresholds, filters) live on the investigator value.
type Options struct {
	PID int // 0: the whole host; else only this process
	// Alongside names the other investigators started with this one in
	// one process, over the same windows (doctor's): where two watch the
	// same events, one may leave them to the other and read what it keeps
	// (probekit's shared maps).
	Alongside []string
	// BTF is a file with the kernel's BTF, for kernels that do not ship
	// it (/sys/kernel/btf/vmlinux); empty means the running kernel's.
	BTF string

	// Duration and Progress are for Run, which watches one window: how
	// long, and a callback told now and then the fraction done (it must
	// not block). Start ignores them: its caller decides when to Collect.
	Duration time.Duration
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
	// Facts are the window's measurements, typed, for the diagnosis stage
	// (internal/fact): made from the same snapshot as the findings.
	Facts *fact.Set
}

// Investigator watches the live kernel. Start loads and attaches its
// programs and returns once they see events; the session it returns
// concludes a window at each Collect and keeps watching until Close.
type Investigator interface {
	Name() string
	Summary() string
	Start(ctx context.Context, opts Options) (Session, error)
}

// Session is an investigator attached to the kernel.
//
// Collect concludes the window since Start or since the previous Collect:
// its findings, histograms, profiles and cost cover that window, no event
// counted in two windows and none lost between them; the programs stay
// attached and the next window begins at once. ctx bounds the reads that
// complete the report; a cancelled ctx (Ctrl-C) still yields a report.
//
// Close detaches everything and frees what Start loaded. Callers write
// their report before they Close: detaching waits for the kernel's RCU
// grace periods, unbounded on a sick host. Close may be called once,
// after the last Collect, or without any Collect when the caller gives up.
type Session interface {
	Collect(ctx context.Context) (*Result, error)
	Close() error
}

// Restarter is a session whose window can begin again, what it counted
// so far left out. A run of several investigators restarts the sessions
// that implement it once every investigator is attached: loading and
// verifying the others' programs takes seconds on a slow machine, at
// wolf's raised priority, and the host's tasks and softirqs that wait
// meanwhile wait for wolf, not for the host's own work. Investigators
// that measure such waits (run-queue and softirq latency) implement it.
type Restarter interface {
	Restart(ctx context.Context) error
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
