//go:build linux

package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/wolf-investigator/wolf/internal/investigator"
)

func newDoctorCmd() *cobra.Command {
	var (
		out      outputFlags
		duration time.Duration
		maxCPU   float64
		wl       workloadFlags
	)
	c := &cobra.Command{
		Use:   "doctor",
		Short: "Run every investigator and the static audit; print ranked findings",
		Long: `doctor is the main job: it runs every investigator concurrently for
--duration, audits the kernel settings they care about, and prints the
findings ranked by severity, or a one-line healthy verdict.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := out.validate(); err != nil {
				return err
			}
			if err := checkDuration(duration); err != nil {
				return err
			}
			if err := checkMaxCPU(maxCPU); err != nil {
				return err
			}
			if err := wl.validate(cmd); err != nil {
				return err
			}
			if err := requireRoot("wolf doctor"); err != nil {
				return err
			}
			names, err := wl.prepare(cmd.Context(), duration)
			if err != nil {
				return err
			}
			return investigate(cmd, &out, "doctor", investigators(), investigator.Options{}, duration, maxCPU, true, false, nil, names)
		},
	}
	out.register(c)
	c.Flags().DurationVarP(&duration, "duration", "d", 10*time.Second, "how long to watch")
	maxCPUFlag(c, &maxCPU, defaultMaxCPU)
	wl.register(c)
	return c
}

// progressBar draws one line on a terminal and nothing on a pipe.
type progressBar struct {
	w        io.Writer
	mu       sync.Mutex
	names    string // the investigators at work
	total    time.Duration
	stopOnce sync.Once
}

func newProgressBar(f *os.File, total time.Duration, invs []investigator.Investigator) *progressBar {
	b := &progressBar{total: total}
	if f != nil && isTerminal(f) {
		b.w = f
	}
	names := make([]string, len(invs))
	for i, inv := range invs {
		names[i] = inv.Name()
	}
	sort.Strings(names)
	b.names = strings.Join(names, " ")
	return b
}

// attaching draws the line while the investigators load, verify and
// attach, before the window starts: on a saturated or emulated machine
// that takes seconds, and a blank terminal looks like a hang.
func (b *progressBar) attaching() {
	if b.w == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	fmt.Fprintf(b.w, "\r[%s] attaching  %s\x1b[K", strings.Repeat(".", progressWidth), b.names)
}

// progressWidth is the bar's width in characters.
const progressWidth = 30

// update draws the fraction of the window done and the investigators
// still at work.
func (b *progressBar) update(frac float64) {
	if b.w == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	filled := int(frac * progressWidth)
	fmt.Fprintf(b.w, "\r[%s%s] %3.0f%% of %v  %s\x1b[K", strings.Repeat("#", filled), strings.Repeat(".", progressWidth-filled), frac*100, b.total, b.names)
}

func (b *progressBar) stop() {
	b.stopOnce.Do(func() {
		if b.w != nil {
			fmt.Fprint(b.w, "\r\x1b[K")
		}
	})
}
