package main

import (
	"runtime"

	"github.com/spf13/cobra"
)

// liveCommands are the commands that watch the live kernel and exist only
// in a wolf built for Linux (live_linux.go); a test keeps the list in step
// with the Linux command tree.
var liveCommands = []string{"doctor", "hung", "locks", "reclaim", "sched", "softirq", "io", "bpf", "check", "lab", "bench", "watch"}

// addNeedsLinux adds, for each live command, one that fails at once with
// one line and exit code 3 (a missing kernel feature: the kernel is not
// Linux), whatever its arguments: a wolf built for a laptop can read a
// saved kernel log (wolf analyze) but has no kernel of interest to watch.
func addNeedsLinux(root *cobra.Command) {
	for _, name := range liveCommands {
		root.AddCommand(&cobra.Command{
			Use:                name,
			Short:              "needs Linux: it watches the running Linux kernel",
			DisableFlagParsing: true,
			RunE: func(*cobra.Command, []string) error {
				return privilegeErr("wolf %s needs Linux (this wolf is built for %s); wolf analyze FILE works here", name, runtime.GOOS)
			},
		})
	}
}
