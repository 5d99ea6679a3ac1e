package main

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// liveCommands, which a wolf built for another system turns into "needs
// Linux", is every command of this build but those that work anywhere.
func TestLiveCommandsListed(t *testing.T) {
	var live []string
	for _, c := range newRootCmd().Commands() {
		switch c.Name() {
		case "analyze", "version", "incidents", "help", "completion":
			continue
		}
		live = append(live, c.Name())
	}
	want := slices.Clone(liveCommands)
	slices.Sort(live)
	slices.Sort(want)
	if !slices.Equal(live, want) {
		t.Errorf("live commands %v, liveCommands %v: keep needslinux.go in step", live, want)
	}
}

// Built for another system, each live command fails at once with one line
// and exit code 3, whatever flags it is given.
func TestNeedsLinux(t *testing.T) {
	for _, args := range [][]string{{"hung", "--duration", "5s"}, {"doctor"}, {"lab", "run", "fuse-rwsem"}, {"watch", "--no-such-flag"}} {
		root := &cobra.Command{Use: "wolf", SilenceUsage: true, SilenceErrors: true}
		addNeedsLinux(root)
		root.SetArgs(args)
		err := root.Execute()
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != exitPrivilege {
			t.Errorf("%v: %v, want exit %d", args, err, exitPrivilege)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, "wolf "+args[0]+" needs Linux") {
			t.Errorf("%v: %q, want one line saying it needs Linux", args, msg)
		}
	}
}
