package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/lab/fusestall"
	"github.com/wolf-investigator/wolf/internal/testutil"
	"github.com/wolf-investigator/wolf/internal/testutil/wolfcli"
)

// hostileName is a process name that is markup; the kernel keeps its
// first 15 bytes as the comm.
const hostileName = `<img src=x onerror=alert(1)>`

// --format html is for reports; listings and benchmarks refuse it.
func TestHTMLFormatOnlyForReports(t *testing.T) {
	for _, args := range [][]string{
		{"lab", "list", "--format", "html"},
		{"check", "--format", "html"},
		{"bench", "lpm", "--format", "html"},
	} {
		r := runWolf(t, 10*time.Second, args...)
		if r.Code != exitUsage || !strings.HasPrefix(r.Stderr, "wolf: ") || strings.Count(r.Stderr, "\n") != 1 || !strings.Contains(r.Stderr, "html") {
			t.Errorf("wolf %v: exit %d, stderr %q; want exit %d and one line about html", args, r.Code, r.Stderr, exitUsage)
		}
	}
}

// HTML to a terminal is refused before any work; to a pipe it is not.
func TestHTMLToTerminalNeedsOutput(t *testing.T) {
	master, slave := openPTY(t)
	defer master.Close()
	defer slave.Close()
	for _, command := range []string{"hung", "doctor"} {
		cmd := exec.Command(wolfBin, command, "--format", "html", "--duration", "1s")
		var errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = slave, &errb
		err := cmd.Run()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != exitUsage || !strings.Contains(errb.String(), "--format html needs --output FILE") || strings.Count(errb.String(), "\n") != 1 {
			t.Errorf("wolf %s --format html on a terminal: %v, stderr %q; want exit %d and one line", command, err, errb.String(), exitUsage)
		}
	}
	// Piped, validation passes: what stops it (if anything) is not usage.
	r := runWolf(t, 30*time.Second, "analyze", "--format", "html", "../../internal/hung/hunglog/testdata/rtnl.log")
	if r.Code != 0 || !strings.HasPrefix(r.Stdout, "<!DOCTYPE html>") || !strings.Contains(r.Stdout, "rtnl_mutex") {
		t.Errorf("analyze --format html to a pipe: exit %d, stderr %q, stdout starts %.80q", r.Code, r.Stderr, r.Stdout)
	}
}

// openPTY opens a pseudo-terminal pair, so that wolf's stdout is a
// terminal.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	testutil.Require(t, err == nil, fmt.Sprintf("needs /dev/ptmx: %v", err))
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		t.Fatalf("unlock pty: %v", err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		m.Close()
		t.Fatalf("pty number: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Fatalf("open pty: %v", err)
	}
	return m, s
}

// The acceptance test for the page: a task whose name is markup
// hangs behind the FUSE lab's offender; `wolf hung --format html` names it
// as a victim, as text, and Chromium shows the page without a console
// message and without an img element.
func TestHungHTMLEscapesHostileComm(t *testing.T) {
	testutil.RequireRoot(t)
	_, err := os.Stat("/dev/fuse")
	testutil.Require(t, err == nil, "needs /dev/fuse")
	testutil.Exclusive(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	inst, err := fusestall.NewRWSem().Start(ctx, lab.Options{Victims: 1, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	mount := inst.(*fusestall.Instance).MountPoint()

	// exec through a link named like markup: the kernel names the task
	// after the file it executes.
	dir := t.TempDir()
	link := filepath.Join(dir, hostileName)
	if err := os.Symlink("/bin/sh", link); err != nil {
		inst.Close()
		t.Fatal(err)
	}
	victim := exec.Command(link, "-c", `echo hostile >> "$0"`, filepath.Join(mount, "data"))
	victim.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := victim.Start(); err != nil {
		inst.Close()
		t.Fatal(err)
	}
	defer func() {
		// The lab's close aborts the FUSE connection: the offender drops
		// the lock, and the victim, no longer in D, can be killed.
		if err := inst.Close(); err != nil {
			t.Error(err)
		}
		_ = victim.Process.Kill()
		_ = victim.Wait()
	}()
	comm := hostileName[:15]
	wolfcli.WaitFor(t, "the hostile victim to block in D", 10*time.Second, func() bool {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", victim.Process.Pid))
		s := string(st)
		i := strings.LastIndexByte(s, ')')
		return err == nil && i > 0 && i+2 < len(s) && s[i+2] == 'D' && strings.Contains(s, "("+comm+")")
	})

	out := filepath.Join(t.TempDir(), "report.html")
	r := runWolf(t, 30*time.Second, "hung", "--duration", "3s", "--threshold", "1s", "--format", "html", "--output", out)
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	page := string(data)
	escaped := strings.NewReplacer("<", "&lt;", ">", "&gt;").Replace(comm)
	if !strings.Contains(page, `<td class="comm">`+escaped+`</td>`) {
		t.Errorf("the hostile victim (%q, pid %d) is not in the page's subjects as escaped text %q", comm, victim.Process.Pid, escaped)
	}
	if strings.Contains(page, "<img") {
		t.Error("raw <img in the page")
	}
	if !strings.Contains(page, "hung.lock-owner") || !strings.Contains(page, "BPF per event") {
		t.Error("the page lacks the lock-owner finding or wolf's own cost")
	}
	if bin := findChromium(); bin != "" {
		p := testutil.OpenHeadless(t, bin, out, testutil.ArtifactPath(t, "hung-hostile.png"), time.Minute)
		if len(p.Console) > 0 {
			t.Errorf("console messages:\n%s", strings.Join(p.Console, "\n"))
		}
		if strings.Contains(p.DOM, "<img") || !strings.Contains(p.DOM, "&lt;img src=x oner") {
			t.Error("in the browser, the hostile comm is not plain text")
		}
	} else {
		t.Log("no chromium: the page was checked as text only (internal/render's tests open pages in a browser)")
	}
}

func findChromium() string {
	for _, n := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	return ""
}
