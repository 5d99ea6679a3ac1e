package main

import (
	"github.com/spf13/cobra"

	"github.com/wolf-investigator/wolf/internal/investigator"
)

// addLiveCommands adds the commands that watch the live kernel: doctor,
// one per investigator, check, lab, bench and watch (liveCommands names
// them for the builds that lack them).
func addLiveCommands(root *cobra.Command) {
	root.AddCommand(newDoctorCmd())
	for _, inv := range investigators() {
		if c, ok := inv.(investigator.Commander); ok {
			root.AddCommand(newInvestigatorCmd(inv, c.Command()))
		}
	}
	root.AddCommand(newCheckCmd(), newLabCmd(), newBenchCmd(), newWatchCmd())
}
