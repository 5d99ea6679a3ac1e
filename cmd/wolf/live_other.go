//go:build !linux

package main

import "github.com/spf13/cobra"

// addLiveCommands adds, on a system that is not Linux, a command for each
// of Linux wolf's live commands that says it needs Linux; wolf analyze and
// wolf version work as everywhere.
func addLiveCommands(root *cobra.Command) {
	addNeedsLinux(root)
}
