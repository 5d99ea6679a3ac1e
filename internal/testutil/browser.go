package testutil

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// RequireTool returns the path of the first of names found in PATH, or
// skips t (fails it under WOLF_REQUIRE_BPF=1, where CI installed it).
func RequireTool(t testing.TB, names ...string) string {
	t.Helper()
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	Require(t, false, "needs one of "+strings.Join(names, ", ")+" in PATH")
	return ""
}

// Chromium finds a headless-capable Chromium (Debian's chromium package).
func Chromium(t testing.TB) string {
	t.Helper()
	return RequireTool(t, "chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
}

// Page is what a headless browser made of an HTML file.
type Page struct {
	DOM     string   // the document after its scripts ran
	Console []string // every console message and uncaught exception
}

// consoleRE matches Chromium's log line for a console message, of any
// level, and for an uncaught exception:
// [pid:tid:date:INFO:CONSOLE:12] "message", source: file:///… (12)
var consoleRE = regexp.MustCompile(`:CONSOLE(?::\d+|\(\d+\))\] (.*)`)

// OpenHeadless loads the HTML file at path in a headless Chromium (bin),
// waits for it to load and its scripts to run, and returns the DOM and the
// console. With screenshot set it also saves a PNG of the first 1280×2000
// pixels there. The browser gets a throw-away profile and is killed, with
// every process it started, if it takes longer than timeout; none is left
// behind either way.
func OpenHeadless(t testing.TB, bin, path, screenshot string, timeout time.Duration) Page {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	profile, err := os.MkdirTemp("", "wolf-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(profile)
	args := []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
		"--disable-extensions", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + profile, "--enable-logging=stderr", "--v=0", "--window-size=1280,2000",
	}
	if screenshot != "" {
		args = append(args, "--screenshot="+screenshot)
	}
	args = append(args, "--dump-dom", "file://"+abs)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Its own process group, so that its renderer, GPU and zygote
	// processes can be killed with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err = cmd.Run()
	if cmd.Process != nil {
		// Helpers that outlived the browser's main process.
		if kerr := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); kerr != nil && !errors.Is(kerr, syscall.ESRCH) {
			t.Logf("kill chromium's process group: %v", kerr)
		}
	}
	if ctx.Err() != nil {
		t.Fatalf("chromium did not finish within %v; stderr:\n%s", timeout, stderr.String())
	}
	if err != nil {
		t.Fatalf("chromium: %v; stderr:\n%s", err, stderr.String())
	}
	var p Page
	p.DOM = stdout.String()
	for _, line := range strings.Split(stderr.String(), "\n") {
		if m := consoleRE.FindStringSubmatch(line); m != nil {
			p.Console = append(p.Console, m[1])
		}
	}
	return p
}

// ArtifactPath is where a test keeps a file for people to look at after
// the run (a screenshot): $WOLF_ARTIFACTS when set, else
// $TMPDIR/wolf-artifacts-UID (one per user: a directory root's run left
// behind is not writable by anyone else's). It outlives the test on
// purpose; where it cannot be written, the test's own temporary directory
// is used instead.
func ArtifactPath(t testing.TB, name string) string {
	t.Helper()
	dir := os.Getenv("WOLF_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), fmt.Sprintf("wolf-artifacts-%d", os.Getuid()))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil || unix.Access(dir, unix.W_OK) != nil {
		t.Logf("artifacts: %s is not writable (%v); keeping them with the test", dir, err)
		dir = t.TempDir()
	}
	return filepath.Join(dir, name)
}
