package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/lab/fusestall"
	"github.com/wolf-investigator/wolf/internal/testutil"
	"github.com/wolf-investigator/wolf/internal/watch"
)

// watchProc is a running `wolf watch`.
type watchProc struct {
	cmd       *exec.Cmd
	addr      string
	out, errb *syncBuffer
}

// startWatchProc runs `wolf watch` with args on a free loopback port.
func startWatchProc(t *testing.T, args ...string) *watchProc {
	t.Helper()
	w := &watchProc{out: &syncBuffer{}, errb: &syncBuffer{}}
	w.cmd = exec.Command(wolfBin, append([]string{"watch", "--listen", "127.0.0.1:0"}, args...)...)
	w.cmd.Stdout, w.cmd.Stderr = w.out, w.errb
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.cmd.Process.Kill(); _ = w.cmd.Wait() })
	addrRE := regexp.MustCompile(`http://([0-9.]+:[0-9]+)/metrics`)
	waitFor(t, "wolf watch to listen", 15*time.Second, func() bool {
		if m := addrRE.FindStringSubmatch(w.errb.String()); m != nil {
			w.addr = m[1]
		}
		return w.addr != ""
	})
	return w
}

// get returns the body of a GET on the watch's server ("" on error).
func (w *watchProc) get(path string) string {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + w.addr + path)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// metric reads one unlabelled sample from /metrics (-1 when absent).
func (w *watchProc) metric(name string) float64 {
	for _, line := range strings.Split(w.get("/metrics"), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				return f
			}
		}
	}
	return -1
}

// stop ends the watch with SIGTERM and wants exit 0.
func (w *watchProc) stop(t *testing.T) {
	t.Helper()
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := w.cmd.Wait(); err != nil {
		t.Errorf("wolf watch after SIGTERM: %v; stderr:\n%s", err, w.errb.String())
	}
}

// mountTmpfs mounts a tmpfs of size (e.g. "64k") on a new directory.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	mnt := t.TempDir()
	if err := syscall.Mount("wolf-test", mnt, "tmpfs", 0, "size="+size); err != nil {
		testutil.Require(t, false, "cannot mount a tmpfs: "+err.Error())
	}
	t.Cleanup(func() { _ = syscall.Unmount(mnt, syscall.MNT_DETACH) })
	return mnt
}

// fillDisk writes path until its file system is full.
func fillDisk(t *testing.T, path string) {
	t.Helper()
	_ = exec.Command("dd", "if=/dev/zero", "of="+path, "bs=1k").Run() // ends with ENOSPC, as meant
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(make([]byte, 4096)); err == nil {
		t.Fatal("the file system is not full")
	}
}

// The --output half of the sick-host issue: wolf watch --output on a
// small tmpfs that fills while a lab makes findings. The failure is said
// on stderr, counted in wolf_output_errors_total and shown by /healthz;
// once the disk is emptied, the held lines reach the file, in order and
// whole, and /healthz is ok again.
func TestWatchOutputSurvivesAFullDisk(t *testing.T) {
	testutil.RequireRoot(t)
	_, err := os.Stat("/dev/fuse")
	testutil.Require(t, err == nil, "needs /dev/fuse")
	testutil.Exclusive(t)

	mnt := mountTmpfs(t, "64k")
	path := filepath.Join(mnt, "watch.jsonl")
	w := startWatchProc(t, "--investigators", "hung", "--interval", "2s", "--output", path)
	fillDisk(t, filepath.Join(mnt, "filler"))

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	inst, err := fusestall.NewRWSem().Start(ctx, lab.Options{Victims: 2, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()

	waitFor(t, "the failed write to be reported", 30*time.Second, func() bool {
		return strings.Contains(w.errb.String(), "no space left on device")
	})
	if h := w.get("/healthz"); !strings.HasPrefix(h, "degraded\n") || !strings.Contains(h, "output: --output "+path) {
		t.Errorf("/healthz while the disk is full: %q", h)
	}
	if v := w.metric("wolf_output_errors_total"); v < 1 {
		t.Errorf("wolf_output_errors_total = %v", v)
	}
	if v := w.metric("wolf_output_pending_lines"); v < 1 {
		t.Errorf("wolf_output_pending_lines = %v", v)
	}
	if err := os.Remove(filepath.Join(mnt, "filler")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the held lines to reach the file", 45*time.Second, func() bool {
		b, _ := os.ReadFile(path)
		return strings.Contains(string(b), `"id":"hung.lock-owner"`)
	})
	waitFor(t, "/healthz to be ok again", 10*time.Second, func() bool { return w.get("/healthz") == "ok\n" })
	inst.Close()
	w.stop(t)
	if !strings.Contains(w.errb.String(), "writable again") {
		t.Errorf("recovery not said on stderr:\n%s", w.errb.String())
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<22)
	starts := 0
	for sc.Scan() {
		var e watch.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("not a whole JSON line: %q: %v", sc.Text(), err)
		}
		if e.Event == "start" && e.Finding != nil && e.Finding.ID == "hung.lock-owner" {
			starts++
		}
	}
	if starts != 1 {
		t.Errorf("%d start lines for hung.lock-owner, want exactly 1 (none lost, none repeated)", starts)
	}
}
