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
			if err := requireRoot("wolf doctor"); err != nil {
				return err
			}
			return investigate(cmd, &out, "doctor", investigators(), investigator.Options{}, duration, true, false, nil)
		},
	}
	out.register(c)
	c.Flags().DurationVarP(&duration, "duration", "d", 10*time.Second, "how long to watch")
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

// update draws the fraction of the window done and the investigators
// still at work.
func (b *progressBar) update(frac float64) {
	if b.w == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	const width = 30
	filled := int(frac * width)
	fmt.Fprintf(b.w, "\r[%s%s] %3.0f%% of %v  %s\x1b[K", strings.Repeat("#", filled), strings.Repeat(".", width-filled), frac*100, b.total, b.names)
}

func (b *progressBar) stop() {
	b.stopOnce.Do(func() {
		if b.w != nil {
			fmt.Fprint(b.w, "\r\x1b[K")
		}
	})
}
