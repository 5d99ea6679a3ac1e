package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/investigator"
)

// slowDetach is an investigator whose detach blocks until released: a
// kernel whose RCU grace periods do not end (closing a link waits for one).
type slowDetach struct {
	closing  chan struct{} // closed when Close is entered
	released chan struct{} // Close returns once this is closed
}

func (*slowDetach) Name() string    { return "slowdetach" }
func (*slowDetach) Summary() string { return "detaches slowly" }
func (s *slowDetach) Start(context.Context, investigator.Options) (investigator.Session, error) {
	return s, nil
}

func (s *slowDetach) Collect(context.Context) (*investigator.Result, error) {
	return &investigator.Result{Findings: []finding.Finding{{ID: "slowdetach.x", Investigator: "slowdetach", Severity: finding.Warning, Title: "seen"}}}, nil
}

func (s *slowDetach) Close() error {
	close(s.closing)
	<-s.released
	return nil
}

// The report is on disk, whole, at the window's end, while detaching
// still waits on the kernel: a user whose wolf hangs in exit already has
// the report.
func TestReportWrittenBeforeDetach(t *testing.T) {
	inv := &slowDetach{closing: make(chan struct{}), released: make(chan struct{})}
	path := filepath.Join(t.TempDir(), "r.json")
	out := &outputFlags{format: "json", output: path}
	if _, err := out.validate(); err != nil {
		t.Fatal(err)
	}
	cmd := &cobra.Command{}
	cmd.SetContext(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- investigate(cmd, out, "slowdetach", []investigator.Investigator{inv}, investigator.Options{}, 100*time.Millisecond, 0, false, true, nil, nil)
	}()
	select {
	case <-inv.closing:
	case err := <-done:
		t.Fatalf("investigate returned without detaching: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("detaching never began")
	}
	// Detaching has begun and cannot end: the report must be there already.
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("no report while detaching: %v", err)
	}
	var rep finding.Report
	if err := json.Unmarshal(b, &rep); err != nil || len(rep.Findings) != 1 || rep.Findings[0].ID != "slowdetach.x" {
		t.Fatalf("report incomplete while detaching (%v): %s", err, b)
	}
	select {
	case err := <-done:
		t.Fatalf("investigate returned before detaching ended: %v", err)
	default:
	}
	close(inv.released)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
