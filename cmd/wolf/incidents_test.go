package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/incident"
)

// wolf incidents list, show and pack read what a store wrote; unknown
// names and missing directories are bad usage.
func TestIncidentsCommand(t *testing.T) {
	dir := t.TempDir()
	s, err := incident.Open(dir, incident.Limits{MinInterval: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i, title := range []string{"first hang", "second hang"} {
		rep := &finding.Report{WolfVersion: "test", Command: "watch", Host: "box", StartedAt: time.Now().UTC(), DurationS: 1,
			Findings: []finding.Finding{{ID: "hung.lock-owner", Investigator: "hung", Severity: finding.Critical, Title: title}}}
		m, err := s.Write(&incident.Bundle{Time: time.Now().Add(time.Duration(i) * time.Second), Report: rep,
			Triggers: []incident.Trigger{{Kind: "finding", Identity: title, Event: "start", Severity: finding.Critical, Title: title}}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.ID)
	}
	r := runWolf(t, 10*time.Second, "incidents", "list", "--dir", dir)
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if r.Code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], ids[1]) || !strings.Contains(lines[0], "second hang") {
		t.Errorf("list: exit %d\n%s", r.Code, r.Stdout)
	}
	r = runWolf(t, 10*time.Second, "incidents", "list", "--dir", dir, "--format", "json")
	var metas []incident.Meta
	if err := json.Unmarshal([]byte(r.Stdout), &metas); err != nil || len(metas) != 2 {
		t.Errorf("list json: %v\n%s", err, r.Stdout)
	}
	r = runWolf(t, 10*time.Second, "incidents", "show", "latest", "--dir", dir)
	if r.Code != 0 || !strings.Contains(r.Stdout, "second hang") || !strings.Contains(r.Stdout, "opened by finding start") {
		t.Errorf("show latest: exit %d\n%s", r.Code, r.Stdout)
	}
	r = runWolf(t, 10*time.Second, "incidents", "show", ids[0], "--dir", dir, "--format", "html")
	if r.Code != 0 || !strings.HasPrefix(strings.ToLower(r.Stdout), "<!doctype html>") || !strings.Contains(r.Stdout, "first hang") {
		t.Errorf("show html: exit %d\n%.200s", r.Code, r.Stdout)
	}
	// pack: a tar.gz of the bundle's files under its name.
	cmd := exec.Command(wolfBin, "incidents", "pack", ids[0], "--dir", dir)
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("pack: %v", err)
	}
	zr, err := gzip.NewReader(&out)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	names := map[string]bool{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names[h.Name] = true
	}
	for _, want := range []string{ids[0] + "/incident.json", ids[0] + "/report.html", ids[0] + "/report.json"} {
		if !names[want] {
			t.Errorf("pack lacks %s: %v", want, names)
		}
	}
	for _, args := range [][]string{
		{"incidents", "show", "nosuch", "--dir", dir},
		{"incidents", "list", "--dir", dir + "/missing"},
		{"incidents", "list", "--dir", dir, "--format", "xml"},
	} {
		if r := runWolf(t, 10*time.Second, args...); r.Code != exitUsage {
			t.Errorf("%v: exit %d, want 2: %s", args, r.Code, r.Stderr)
		}
	}
}
