package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// TestManPages generates one man page per command from the command tree
// (cobra/doc) and checks that every command has its page and that groff
// reads each without a warning.
//
// With WOLF_MAN_DIR set it writes the pages there: `make man` builds the
// packages' pages this way, from the very tree wolf runs, without linking
// the man page generator into every wolf binary (it would add 0.6 MB).
// The pages are generated at build time rather than committed: they follow
// every help text change without anyone regenerating and merging them.
func TestManPages(t *testing.T) {
	dir := os.Getenv("WOLF_MAN_DIR")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	root := newRootCmd()
	root.InitDefaultCompletionCmd()
	var cmds []*cobra.Command
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		// A date-stamped "auto generated" line would make two builds differ.
		c.DisableAutoGenTag = true
		if c.IsAvailableCommand() || c == root {
			cmds = append(cmds, c)
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	// The date is SOURCE_DATE_EPOCH's (the commit's, set by make) when set.
	header := &doc.GenManHeader{Title: "WOLF", Section: "1", Source: "wolf " + version, Manual: "wolf manual"}
	if err := doc.GenManTree(root, header, dir); err != nil {
		t.Fatal(err)
	}
	groff, _ := exec.LookPath("groff")
	for _, c := range cmds {
		name := strings.ReplaceAll(c.CommandPath(), " ", "-") + ".1"
		page, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("%s: no man page: %v", c.CommandPath(), err)
			continue
		}
		for _, want := range []string{`.TH "WOLF"`, "wolf " + version, ".SH SYNOPSIS"} {
			if !bytes.Contains(page, []byte(want)) {
				t.Errorf("%s lacks %q", name, want)
			}
		}
		if groff == "" {
			continue
		}
		// -k: UTF-8 input (preconv, as man does); -ww: all warnings; -z: no
		// output. groff says nothing for a clean page.
		g := exec.Command(groff, "-k", "-man", "-Tutf8", "-ww", "-z", filepath.Join(dir, name))
		if out, err := g.CombinedOutput(); err != nil || len(out) > 0 {
			t.Errorf("groff on %s: %v\n%s", name, err, out)
		}
	}
	for _, want := range []string{"wolf.1", "wolf-doctor.1", "wolf-version.1", "wolf-completion-bash.1"} {
		if _, err := os.Stat(filepath.Join(dir, want)); err != nil {
			t.Errorf("missing %s: %v", want, err)
		}
	}
}
