package main

import (
	"context"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/sysstat"
)

// startChecklist starts doctor's system checklist (the 60-second
// checklist, read from /proc and /sys) over the same window as the
// investigators; other commands have none.
func startChecklist(ctx context.Context, command string) *sysstat.Sampler {
	if command != "doctor" {
		return nil
	}
	return sysstat.Start(ctx, sysstat.Options{})
}

// finishChecklist ends the window and puts the checklist, its findings
// and its notes in the report.
func finishChecklist(ctx context.Context, s *sysstat.Sampler, rep *finding.Report) {
	if s == nil {
		return
	}
	res := s.Stop(ctx)
	rep.Checklist = append(rep.Checklist, res.Checks...)
	rep.Findings = append(rep.Findings, res.Findings...)
	for _, n := range res.Notes {
		rep.Notes = append(rep.Notes, "system: "+n)
	}
}
