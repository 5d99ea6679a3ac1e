package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/testutil"
	"github.com/wolf-investigator/wolf/internal/testutil/wolfcli"
)

// TestReportSavedWhenOutputFails: the --output directory disappears during
// the run; the report is not lost but saved in TMPDIR, and the one error
// line says where (exit 1). analyze reads standard input until EOF, so the
// test decides when the run ends.
func TestReportSavedWhenOutputFails(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "reports")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	cmd := exec.Command(wolfBin, "analyze", "-", "--format", "json", "--output", filepath.Join(dir, "r.json"))
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	r, stdin, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin = r
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	defer cmd.Process.Kill()
	// The run is under way (the checks passed) once wolf has read what
	// the pipe held.
	if _, err := io.WriteString(stdin, "[  1.000000] nothing to see\n"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := unix.IoctlGetInt(int(stdin.Fd()), unix.TIOCINQ)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("wolf analyze did not read its input")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("wolf analyze did not end")
	}
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != exitFailed {
		t.Fatalf("exit: %v, want %d (stderr %q)", err, exitFailed, stderr.String())
	}
	m := regexp.MustCompile(`the report is saved in (\S+) instead\n$`).FindStringSubmatch(stderr.String())
	if m == nil || strings.Count(stderr.String(), "\n") != 1 {
		t.Fatalf("stderr %q: want one line saying where the report is", stderr.String())
	}
	if filepath.Dir(m[1]) != tmp {
		t.Errorf("saved in %s, want a file in TMPDIR %s", m[1], tmp)
	}
	rep := wolfcli.ReadReport(t, m[1])
	if rep.Command != "analyze" {
		t.Errorf("saved report: command %q", rep.Command)
	}
}

// TestReportReplacesAtomically: a report over an existing file replaces it
// whole, keeps its permissions and leaves no temporary file.
func TestReportReplacesAtomically(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "r.json")
	if err := os.WriteFile(out, []byte("an older and much longer report than the one that replaces it, with more bytes"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(wolfBin, "analyze", "-", "--format", "json", "--output", out)
	cmd.Stdin = strings.NewReader("[  1.000000] nothing to see\n")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	rep := wolfcli.ReadReport(t, out) // fails on a half-replaced file
	if rep.Command != "analyze" {
		t.Errorf("command %q", rep.Command)
	}
	st, _ := os.Stat(out)
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want the old file's -rw-------", st.Mode())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("directory holds %d entries, want the report alone", len(ents))
	}
}

// TestSoftirqHistogramsInReportFile: with --histograms the text histograms
// are part of the report file, written with it.
func TestSoftirqHistogramsInReportFile(t *testing.T) {
	testutil.RequireRoot(t)
	out := filepath.Join(t.TempDir(), "softirq.txt")
	r := runWolf(t, 60*time.Second, "softirq", "--duration", "1s", "--histograms", "--output", out)
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "softirq_runtime_us {vector=") {
		t.Errorf("report file lacks the histograms:\n%s", b)
	}
	if r.Stdout != "" {
		t.Errorf("stdout %q, want everything in the file", r.Stdout)
	}
}

// In the DaemonSet, reports name the node (WOLF_NODE_NAME, from the
// downward API), not the pod's hostname.
func TestReportHostIsTheNode(t *testing.T) {
	t.Setenv("WOLF_NODE_NAME", "node-7")
	if got := newReport("doctor", time.Now()).Host; got != "node-7" {
		t.Errorf("host %q, want node-7", got)
	}
	t.Setenv("WOLF_NODE_NAME", "")
	if h, _ := os.Hostname(); newReport("doctor", time.Now()).Host != h {
		t.Errorf("without WOLF_NODE_NAME the host is the hostname")
	}
}
