package investigator

import (
	"context"
	"time"

	"github.com/spf13/pflag"
)

// Command is an investigator's own command (wolf hung, wolf locks, …),
// declared by the investigator: what it is for, the flags it adds to the
// ones every command has (--duration, --format, --output, --folded,
// --pprof), and its checks. cmd/wolf builds every command from these, so
// adding an investigator touches no CLI code.
type Command struct {
	Short, Long, Example string
	// Duration is the default window (0: 10 s).
	Duration time.Duration
	// WatchWindow, when set, is the investigator's window in wolf watch
	// when shorter than --interval: for one whose findings alerts want
	// soonest and that is cheap to conclude (hung). watch adds a flag
	// --NAME-interval to change it.
	WatchWindow time.Duration
	// PID, when not empty, adds --pid with this help text.
	PID string
	// Audit runs the investigator's audit with the command, as doctor does.
	Audit bool
	// Flags adds the investigator's own flags, bound to its fields.
	Flags func(*pflag.FlagSet)
	// Validate checks the flags and --pid before anything runs; it needs
	// no privilege. A plain error is bad usage (exit 2); one wrapping
	// ErrUnsupported or ErrPrivilege exits 3.
	Validate func(ctx context.Context, pid int) error
	// Prepare runs after the privilege check, before the window: checks
	// that need root (that a probed binary's symbol exists, say). Errors
	// map as Validate's.
	Prepare func(ctx context.Context) error
	// TextHistograms, when set, names the histograms the text report ends
	// with, drawn as log2 bars (softirq's --histograms and --func).
	TextHistograms func(name string) bool
}

// Commander is an investigator with a command of its own.
type Commander interface {
	Command() Command
}

// HistogramMetric exports one of an investigator's report histograms in
// `wolf watch` as a Prometheus histogram of running totals.
type HistogramMetric struct {
	Histogram string // the report histogram's name
	Name      string // the metric's
	Help      string
	Labels    []string // exactly the report histogram's labels
	// TopN bounds the label sets to watch's --top; the rest count under
	// "other".
	TopN bool
	// MaxName is the gauge of the window's largest single value.
	MaxName string
}

// GaugeMetric is a value per label set, computed from each window's result.
type GaugeMetric struct {
	Name   string
	Help   string
	Labels []string
	// TopN keeps the largest --top values.
	TopN bool
	// Values computes the window's values; their Labels follow Labels.
	Values func(res *Result) []GaugeValue
}

// GaugeValue is one series of a GaugeMetric.
type GaugeValue struct {
	Labels []string
	Value  float64
}

// Exporter is an investigator that declares the metrics `wolf watch`
// exports from its results.
type Exporter interface {
	Metrics() ([]HistogramMetric, []GaugeMetric)
}
