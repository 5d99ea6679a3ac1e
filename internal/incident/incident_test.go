package incident

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/testutil"
)

func report(title string, stacks int) *finding.Report {
	r := &finding.Report{
		WolfVersion: "test", Command: "watch", Kernel: "6.18", Host: "box",
		StartedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), DurationS: 60,
		Findings: []finding.Finding{{ID: "hung.lock-owner", Investigator: "hung", Severity: finding.Critical, Title: title,
			Subjects: []finding.Subject{{Role: finding.RoleOffender, PID: 10, TID: 10, Comm: "sh", Stack: []string{"request_wait_answer+0x1"}}}}},
		Histograms:   []finding.Histogram{},
		Capabilities: map[string]bool{},
	}
	p := finding.Profile{Name: "blocked_stacks", Unit: "tasks"}
	for i := range stacks {
		p.Stacks = append(p.Stacks, finding.StackCount{Frames: []string{"[D state]", fmt.Sprintf("frame_%d", i), "rwsem_down_write_slowpath"}, Value: 1})
	}
	r.Profiles = []finding.Profile{p}
	return r
}

func bundle(id string, sev finding.Severity, at time.Time) *Bundle {
	return &Bundle{
		Time:     at,
		Triggers: []Trigger{{Kind: "finding", Identity: id, Event: "start", Severity: sev, Title: "2 tasks hung on " + id, Investigator: "hung"}},
		Report:   report("2 tasks hung on "+id, 3),
		Before:   []*finding.Report{report("before", 1)},
	}
}

// A bundle holds the report three ways, the profiles folded and as
// pprof, the windows before, and an incident.json whose byte count is
// the bundle's size on disk; index.html lists it; nothing temporary stays.
func TestWriteBundle(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.Write(bundle("hung|a", finding.Critical, time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"before/01-20260102T030405Z.json", "incident.json", "profiles/blocked_stacks.folded", "profiles/profile.pb.gz", "report.html", "report.json", "report.txt"}
	var got []string
	var size int64
	err = filepath.Walk(filepath.Join(dir, m.ID), func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if !info.IsDir() {
			rel, _ := filepath.Rel(filepath.Join(dir, m.ID), p)
			got = append(got, rel)
			size += info.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("files %v, want %v", got, want)
	}
	if size != m.Bytes {
		t.Errorf("meta says %d bytes, the files take %d", m.Bytes, size)
	}
	rm, err := ReadMeta(dir, m.ID)
	if err != nil || rm.Bytes != size || rm.Severity != finding.Critical || len(rm.Triggers) != 1 {
		t.Errorf("incident.json: %+v, %v", rm, err)
	}
	folded, _ := os.ReadFile(filepath.Join(dir, m.ID, "profiles/blocked_stacks.folded"))
	if !strings.Contains(string(folded), "[D state];frame_0;rwsem_down_write_slowpath 1") {
		t.Errorf("folded profile:\n%s", folded)
	}
	rep, err := ReadReport(dir, m.ID)
	if err != nil || len(rep.Findings) != 1 || rep.Findings[0].Subjects[0].Comm != "sh" {
		t.Errorf("report.json: %+v, %v", rep, err)
	}
	index, _ := os.ReadFile(filepath.Join(dir, "index.html"))
	if !bytes.Contains(index, []byte(m.ID+"/report.html")) {
		t.Errorf("index.html does not link the bundle:\n%s", index)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			t.Errorf("left behind: %s", e.Name())
		}
	}
	if st := s.Stats(); st.Written != 1 || st.Kept != 1 || st.Bytes != m.Bytes {
		t.Errorf("stats %+v", st)
	}
}

// A flood of incidents: the store never holds more than its count or its
// bytes, removes the oldest first, and index.html, List and the stats
// agree with the disk.
func TestLimitsHoldUnderAFlood(t *testing.T) {
	dir := t.TempDir()
	one, err := Open(t.TempDir(), Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m1, err := one.Write(bundle("x", finding.Critical, time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	// Room for a little over 7 bundles by bytes, 10 by count.
	lim := Limits{MaxCount: 10, MaxBytes: m1.Bytes*7 + m1.Bytes/2, MinInterval: -1}
	s, err := Open(dir, lim, nil)
	if err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	var last Meta
	for i := range 60 {
		m, err := s.Write(bundle(fmt.Sprintf("id-%d", i), finding.Critical, base.Add(time.Duration(i)*time.Second)))
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		last = m
		st := s.Stats()
		if st.Kept > lim.MaxCount || st.Bytes > lim.MaxBytes {
			t.Fatalf("after %d writes: %d bundles, %d bytes; limits %d, %d", i+1, st.Kept, st.Bytes, lim.MaxCount, lim.MaxBytes)
		}
	}
	metas, err := List(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(metas) != 7 {
		t.Fatalf("%d bundles kept, want 7 (byte limit)", len(metas))
	}
	if metas[0].ID != last.ID {
		t.Errorf("newest first: got %s, want %s", metas[0].ID, last.ID)
	}
	var disk int64
	for i, m := range metas {
		if i > 0 && !m.Time.Before(metas[i-1].Time) {
			t.Errorf("not newest first: %s after %s", m.ID, metas[i-1].ID)
		}
		if !strings.Contains(m.Title, fmt.Sprintf("id-%d", 59-i)) {
			t.Errorf("bundle %d is %q: the oldest were not removed first", i, m.Title)
		}
		disk += dirSize(t, filepath.Join(dir, m.ID))
	}
	st := s.Stats()
	if st.Bytes != disk || st.Written != 60 || st.Removed != 53 {
		t.Errorf("stats %+v; on disk %d bytes", st, disk)
	}
	index, _ := os.ReadFile(filepath.Join(dir, "index.html"))
	if n := bytes.Count(index, []byte("/report.json")); n != 7 {
		t.Errorf("index.html lists %d bundles, want 7", n)
	}
	if i, j := bytes.Index(index, []byte(metas[0].ID)), bytes.Index(index, []byte(metas[6].ID)); i < 0 || j < i {
		t.Errorf("index.html not newest first")
	}
	// Reopened with a lower count, the store trims what is there.
	s2, err := Open(dir, Limits{MaxCount: 3, MaxBytes: lim.MaxBytes}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st := s2.Stats(); st.Kept != 3 {
		t.Errorf("reopened with max 3: %d kept", st.Kept)
	}
	// A bundle bigger than the whole store is refused, and counted.
	tiny, _ := Open(t.TempDir(), Limits{MaxBytes: 1000}, nil)
	if _, err := tiny.Write(bundle("big", finding.Critical, time.Now())); err == nil || tiny.Stats().Dropped[DropTooLarge] != 1 {
		t.Errorf("too large: %v, %+v", err, tiny.Stats())
	}
}

func dirSize(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	_ = filepath.Walk(dir, func(_ string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			n += info.Size()
		}
		return nil
	})
	return n
}

// The same identity opens one incident per interval, unless it
// escalates; others are not held back by it.
func TestAdmitRateLimitsPerIdentity(t *testing.T) {
	s, err := Open(t.TempDir(), Limits{MinInterval: time.Minute}, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return now }
	tr := func(id string, sev finding.Severity) []Trigger {
		return []Trigger{{Kind: "finding", Identity: id, Severity: sev}}
	}
	if got := s.Admit(tr("a", finding.Warning)); len(got) != 1 {
		t.Errorf("first a: %v", got)
	}
	now = now.Add(30 * time.Second)
	if got := s.Admit(tr("a", finding.Warning)); len(got) != 0 {
		t.Errorf("a again within the interval: %v", got)
	}
	if got := s.Admit(tr("b", finding.Warning)); len(got) != 1 {
		t.Errorf("b is another identity: %v", got)
	}
	if got := s.Admit(tr("a", finding.Critical)); len(got) != 1 {
		t.Errorf("a escalated: %v", got)
	}
	if got := s.Admit(tr("a", finding.Critical)); len(got) != 0 {
		t.Errorf("a critical again: %v", got)
	}
	now = now.Add(61 * time.Second)
	if got := s.Admit(tr("a", finding.Critical)); len(got) != 1 {
		t.Errorf("a after the interval: %v", got)
	}
	if d := s.Stats().Dropped[DropRateLimited]; d != 2 {
		t.Errorf("rate_limited %d, want 2", d)
	}
}

// Open removes what a crash left half-written and picks up the bundles
// already there.
func TestOpenRecovers(t *testing.T) {
	dir := t.TempDir()
	s, _ := Open(dir, Limits{}, nil)
	m, err := s.Write(bundle("a", finding.Critical, time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	half := filepath.Join(dir, tmpPrefix+"20260101T000000.000Z-x")
	if err := os.MkdirAll(half, 0o755); err != nil {
		t.Fatal(err)
	}
	// Not ours: left alone.
	mine := filepath.Join(dir, "notes")
	if err := os.Mkdir(mine, 0o755); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(dir, Limits{MaxCount: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(half); !os.IsNotExist(err) {
		t.Errorf("half-written bundle still there: %v", err)
	}
	if st := s2.Stats(); st.Kept != 1 || st.Bytes != m.Bytes {
		t.Errorf("reopened: %+v", st)
	}
	if _, err := s2.Write(bundle("b", finding.Critical, time.Now().Add(time.Second))); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, m.ID)); !os.IsNotExist(err) {
		t.Errorf("oldest not removed at the count limit")
	}
	if _, err := os.Stat(mine); err != nil {
		t.Errorf("a directory that is not a bundle was removed: %v", err)
	}
}

// A full disk: a small tmpfs filled by another file. Writes fail without
// a crash, leave nothing half-written, are counted and reported (once on
// the log, in Problems until a write succeeds), and the store writes
// again once the space is freed.
func TestFullDisk(t *testing.T) {
	testutil.RequireRoot(t)
	mnt := t.TempDir()
	if err := syscall.Mount("wolf-incidents-test", mnt, "tmpfs", 0, "size=256k"); err != nil {
		testutil.Require(t, false, "cannot mount tmpfs: "+err.Error())
	}
	t.Cleanup(func() { _ = syscall.Unmount(mnt, syscall.MNT_DETACH) })
	dir := filepath.Join(mnt, "incidents")
	var log bytes.Buffer
	s, err := Open(dir, Limits{MinInterval: -1}, &log)
	if err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(mnt, "filler")
	fill(t, filler)

	for i := range 3 {
		_, err := s.Write(bundle(fmt.Sprintf("full-%d", i), finding.Critical, time.Now()))
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("write %d on a full disk: %v, want ENOSPC", i, err)
		}
	}
	st := s.Stats()
	if st.Dropped[DropWriteError] != 3 || st.Kept != 0 || st.Written != 0 {
		t.Errorf("stats on a full disk: %+v", st)
	}
	if p := s.Problems(); len(p) != 1 || !strings.Contains(p[0], "no space left") {
		t.Errorf("Problems: %q", p)
	}
	if n := strings.Count(log.String(), "\n"); n != 1 {
		t.Errorf("log said %d lines for one outage:\n%s", n, log.String())
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.Name() != "index.html" {
			t.Errorf("left on the full disk: %s", e.Name())
		}
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	m, err := s.Write(bundle("after", finding.Critical, time.Now()))
	if err != nil {
		t.Fatalf("write after freeing space: %v", err)
	}
	if p := s.Problems(); len(p) != 0 {
		t.Errorf("Problems after recovery: %q", p)
	}
	if _, err := ReadMeta(dir, m.ID); err != nil {
		t.Error(err)
	}
	if !strings.Contains(log.String(), "writing again") {
		t.Errorf("recovery not said:\n%s", log.String())
	}
}

// fill writes path until the file system is full.
func fill(t *testing.T, path string) {
	t.Helper()
	// dd stops at ENOSPC with an error; what matters is the disk is full.
	_ = exec.Command("dd", "if=/dev/zero", "of="+path, "bs=4k").Run()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(make([]byte, 4096)); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("tmpfs not full: %v", err)
	}
}
