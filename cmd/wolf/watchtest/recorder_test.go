package watchtest

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

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/finding/findingtest"
	"github.com/wolf-investigator/wolf/internal/incident"
	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/lab/fusestall"
	"github.com/wolf-investigator/wolf/internal/testutil"
	"github.com/wolf-investigator/wolf/internal/testutil/wolfcli"
	"github.com/wolf-investigator/wolf/internal/watch"
)

// watchProc is a running `wolf watch`.
type watchProc struct{ *wolfcli.Watch }

// startWatchProc runs `wolf watch` with args on a free loopback port.
func startWatchProc(t *testing.T, args ...string) *watchProc {
	t.Helper()
	return &watchProc{wolfcli.StartWatch(t, wolfBin, args...)}
}

// get returns the body of a GET on the watch's server ("" on error).
func (w *watchProc) get(path string) string {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + w.Addr + path)
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
	if err := w.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := w.Cmd.Wait(); err != nil {
		t.Errorf("wolf watch after SIGTERM: %v; stderr:\n%s", err, w.Errb.String())
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

	wolfcli.WaitFor(t, "the failed write to be reported", 30*time.Second, func() bool {
		return strings.Contains(w.Errb.String(), "no space left on device")
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
	wolfcli.WaitFor(t, "the held lines to reach the file", 45*time.Second, func() bool {
		b, _ := os.ReadFile(path)
		return strings.Contains(string(b), `"id":"hung.lock-owner"`)
	})
	wolfcli.WaitFor(t, "/healthz to be ok again", 10*time.Second, func() bool { return w.get("/healthz") == "ok\n" })
	inst.Close()
	w.stop(t)
	if !strings.Contains(w.Errb.String(), "writable again") {
		t.Errorf("recovery not said on stderr:\n%s", w.Errb.String())
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

// The flight recorder's acceptance test: a hang that starts and clears
// between two window boundaries (the fuse-rwsem lab stalled for 8 s
// inside one 60 s hung window) is captured. Its incident bundle names the
// offender and the victims, holds their blocked stacks, and its page
// opens in Chromium with the flame graph drawn.
func TestWatchCapturesAHangInsideAWindow(t *testing.T) {
	testutil.RequireRoot(t)
	_, err := os.Stat("/dev/fuse")
	testutil.Require(t, err == nil, "needs /dev/fuse")
	chromium := testutil.Chromium(t)
	testutil.Exclusive(t)

	dir := filepath.Join(t.TempDir(), "incidents")
	w := startWatchProc(t, "--investigators", "hung", "--interval", "60s", "--hung-interval", "60s", "--incidents", dir)
	windowStart := time.Now()
	time.Sleep(3 * time.Second) // well inside the first window

	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	inst, err := fusestall.NewRWSem().Start(ctx, lab.Options{Victims: 2, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	tasks := inst.Tasks()
	stalled := time.Now()
	time.Sleep(8 * time.Second)
	inst.(*fusestall.Instance).Release() // the daemon answers: the hang clears by itself
	cleared := time.Now()
	if err := inst.Close(); err != nil {
		t.Error(err)
	}
	if cleared.Sub(windowStart) > 55*time.Second {
		t.Fatalf("the stall ended %v into the window: not inside it", cleared.Sub(windowStart))
	}
	t.Logf("stall from %.1f s to %.1f s of a 60 s window", stalled.Sub(windowStart).Seconds(), cleared.Sub(windowStart).Seconds())

	var metas []incident.Meta
	wolfcli.WaitFor(t, "an incident bundle", 70*time.Second, func() bool {
		metas, _ = incident.List(dir)
		return len(metas) > 0
	})
	m := metas[0]
	t.Logf("incident %s opened %.1f s into the window: %s", m.ID, m.Time.Sub(windowStart).Seconds(), m.Title)
	rep, err := incident.ReadReport(dir, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	owner := findingtest.First(rep.Findings, "hung.lock-owner")
	if owner == nil {
		t.Fatalf("the bundle's report has no hung.lock-owner finding: %+v", rep.Findings)
	}
	roles := map[string]map[int]bool{}
	for _, s := range owner.Subjects {
		if roles[s.Role] == nil {
			roles[s.Role] = map[int]bool{}
		}
		roles[s.Role][s.PID] = true
		if (s.Role == finding.RoleVictim || s.Role == finding.RoleOffender) && len(s.Stack) == 0 {
			t.Errorf("%s %d has no stack", s.Role, s.PID)
		}
	}
	if !roles[finding.RoleOffender][tasks.Offender] {
		t.Errorf("offender %d not named: %+v", tasks.Offender, owner.Subjects)
	}
	for _, v := range tasks.Victims {
		if !roles[finding.RoleVictim][v] {
			t.Errorf("victim %d not named: %+v", v, owner.Subjects)
		}
	}
	folded, err := os.ReadFile(filepath.Join(dir, m.ID, "profiles", "blocked_stacks.folded"))
	if err != nil || !strings.Contains(string(folded), "fuse_file_write_iter") {
		t.Errorf("blocked stacks (profiles/blocked_stacks.folded): %q, %v", folded, err)
	}
	page := filepath.Join(dir, m.ID, "report.html")
	p := testutil.OpenHeadless(t, chromium, page, testutil.ArtifactPath(t, "incident.png"), time.Minute)
	if len(p.Console) > 0 {
		t.Errorf("console messages:\n%s", strings.Join(p.Console, "\n"))
	}
	if !strings.Contains(p.DOM, `data-ready="1"`) || regexp.MustCompile(`data-drawn="[1-9]`).FindString(p.DOM) == "" {
		t.Errorf("the incident page's flame graph was not drawn")
	}
	index, _ := os.ReadFile(filepath.Join(dir, "index.html"))
	if !strings.Contains(string(index), m.ID+"/report.html") {
		t.Errorf("index.html does not list %s", m.ID)
	}
	if !strings.Contains(w.Out.String(), `"event":"incident"`) {
		t.Errorf("no incident event line")
	}
	if v := w.metric("wolf_incidents_written_total"); v < 1 {
		t.Errorf("wolf_incidents_written_total = %v", v)
	}
	w.stop(t)
}
