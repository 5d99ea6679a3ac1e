package main

import (
	"strings"
	"testing"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/render"
)

// The healthy-host test accepts what the machine was independently seen to
// be under; it must still fail on false alarms, loaded machine or not.
func TestHealthyJudgeFailsFalseAlarms(t *testing.T) {
	bounce := finding.Finding{ID: "sched.bounce", Investigator: "sched", Severity: finding.Critical,
		Title: "vet (pid 10040) bounced between CPUs 0 and 1: 125 migrations/s, 60 bounces/s"}
	runq := finding.Finding{ID: "sched.runq-latency", Investigator: "sched", Severity: finding.Critical,
		Title: "tasks waited 250 ms (p99) for a CPU"}
	psiIO := finding.Finding{ID: "system.psi-io", Investigator: "system", Severity: finding.Warning, Title: "I/O pressure 30%"}
	hung := finding.Finding{ID: "hung.lock-owner", Investigator: "hung", Severity: finding.Warning, Title: "3 tasks in D"}
	memcg := finding.Diagnosis{ID: "diagnose.memcg-limit", Title: "cgroup /x at its limit", Root: finding.Subject{Cgroup: "/x"}}
	quota := finding.Diagnosis{ID: "diagnose.cpu-quota", Title: "cgroup /q throttled", Root: finding.Subject{Cgroup: "/q"}}
	busy := machineTruth{CPU: true}
	cases := []struct {
		name  string
		rep   finding.Report
		tr    machineTruth
		wantN int
	}{
		{"an ordinary busy task called critical, on a loaded machine", finding.Report{Findings: []finding.Finding{bounce}}, busy, 1},
		{"an ordinary busy task called critical, on a quiet machine", finding.Report{Findings: []finding.Finding{bounce}}, machineTruth{}, 1},
		{"waits for a loaded CPU", finding.Report{Findings: []finding.Finding{runq}}, busy, 0},
		{"waits for a CPU nobody loaded", finding.Report{Findings: []finding.Finding{runq}}, machineTruth{}, 1},
		{"I/O pressure nobody made", finding.Report{Findings: []finding.Finding{psiIO}}, busy, 1},
		{"I/O pressure other work made", finding.Report{Findings: []finding.Finding{psiIO}}, machineTruth{IO: true}, 0},
		{"hung tasks, whatever the load", finding.Report{Findings: []finding.Finding{hung}}, machineTruth{CPU: true, IO: true, Memory: true}, 1},
		{"a memory limit nobody reached", finding.Report{Diagnoses: []finding.Diagnosis{memcg}}, busy, 1},
		{"a memory limit other work reached", finding.Report{Diagnoses: []finding.Diagnosis{memcg}}, machineTruth{Memory: true}, 0},
		{"a quota that throttled another cgroup", finding.Report{Diagnoses: []finding.Diagnosis{quota}}, machineTruth{Throttled: map[string]bool{"/other": true}}, 1},
		{"a quota that throttled it", finding.Report{Diagnoses: []finding.Diagnosis{quota}}, machineTruth{Throttled: map[string]bool{"/q": true}}, 0},
	}
	for _, c := range cases {
		if got := unhealthy(&c.rep, c.tr); len(got) != c.wantN {
			t.Errorf("%s: %d problems %q, want %d", c.name, len(got), got, c.wantN)
		}
	}

	// The text output, as doctor renders it.
	text := func(fs ...finding.Finding) string {
		var b strings.Builder
		if err := render.Text(&b, &finding.Report{Findings: fs}, render.TextOptions{}); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	if out := text(bounce); healthyText(t, out, busy) {
		t.Errorf("a critical bounce of an ordinary task passed for healthy on a loaded machine:\n%s", out)
	}
	if out := text(runq); !healthyText(t, out, busy) {
		t.Errorf("waits for a loaded CPU did not pass:\n%s", out)
	}
	if out := text(runq); healthyText(t, out, machineTruth{}) {
		t.Errorf("waits for a CPU nobody loaded passed for healthy:\n%s", out)
	}
}
