//go:build linux

package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/wolf-investigator/wolf/internal/priority"
)

// defaultNice is the nice value wolf's one-shot investigations run at. See
// internal/priority for the measurement behind it.
const defaultNice = -20

// priorityFlag is the root's --nice.
type priorityFlag struct{ nice int }

func (p *priorityFlag) register(root *cobra.Command) {
	root.PersistentFlags().IntVar(&p.nice, "nice", defaultNice,
		"nice value for doctor, the investigators and check, so that their short work does not queue behind a saturated host (-20 to 19; kept as it is when wolf was started with a nice value and this flag is not given)")
}

// raisesPriority says whether c is a one-shot command that loads BPF
// programs and must report on time: doctor, check and every investigator.
func raisesPriority(c *cobra.Command) bool {
	if c.Parent() == nil || c.Parent().Parent() != nil {
		return false
	}
	switch c.Name() {
	case "doctor", "check":
		return true
	}
	for _, n := range investigatorNames() {
		if c.Name() == n {
			return true
		}
	}
	return false
}

// apply sets the nice value for c, before any work. An operator's own
// choice (wolf started under nice) stands unless --nice is given; without
// the privilege to raise its priority wolf runs as it is (it says why only
// when --nice was asked for).
func (p *priorityFlag) apply(c *cobra.Command) error {
	if !raisesPriority(c) {
		return nil
	}
	if p.nice < -20 || p.nice > 19 {
		return usageErr("--nice must be from -20 to 19, got %d", p.nice)
	}
	given := c.Flags().Changed("nice")
	cur, err := priority.Nice()
	if err != nil || (cur != 0 && !given) || cur == p.nice {
		return nil
	}
	if err := priority.Set(p.nice); err != nil && given {
		fmt.Fprintf(os.Stderr, "wolf: --nice %d: %v; running at nice %d\n", p.nice, err, cur)
	}
	return nil
}
