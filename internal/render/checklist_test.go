package render

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/wolf-investigator/wolf/internal/finding"
)

func TestTextChecklistOneLinePerAreaBeforeFindings(t *testing.T) {
	r := sample()
	r.Command = "doctor"
	r.Checklist = []finding.Check{
		{Area: "load", Summary: "1.02 0.80 0.51 (2 CPUs), runnable 1.2 avg 3 max, blocked 0"},
		{Area: "psi", Severity: finding.Warning, Summary: "stalled (some/full): cpu 64%, memory 0%/0%, io 1.2%/0.4%"},
		{Area: "kernel log", Severity: finding.Critical, Summary: "1 error(s) in 3 new record(s): [err] a very long message that certainly does not fit on the one line it is given"},
	}
	var b bytes.Buffer
	if err := Text(&b, r, TextOptions{}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	lines := strings.Split(out, "\n")
	for _, l := range lines {
		if n := utf8.RuneCountInString(l); n > 80 {
			t.Errorf("line of %d columns: %q", n, l)
		}
	}
	load := strings.Index(out, "load       1.02 0.80 0.51")
	finding := strings.Index(out, "CRITICAL  2 tasks hung")
	if load < 0 || finding < 0 || load > finding {
		t.Fatalf("checklist missing or not before the findings:\n%s", out)
	}
	for _, want := range []string{"blocked 0", "ok", "WARNING", "CRITICAL"} {
		if !strings.Contains(out[load:finding], want) {
			t.Errorf("no %q in the checklist:\n%s", want, out[load:finding])
		}
	}
	// The verdict sits at the right margin of the area's last line.
	for _, l := range lines {
		if strings.HasPrefix(l, "load ") && !strings.HasSuffix(l, " ok") {
			t.Errorf("load line %q does not end in its verdict", l)
		}
		if strings.HasPrefix(l, "psi ") && (!strings.HasSuffix(l, "WARNING") || utf8.RuneCountInString(l) != 80) {
			t.Errorf("psi line %q: verdict not at column 80", l)
		}
	}
	b.Reset()
	r.Checklist = nil
	if err := Text(&b, r, TextOptions{}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "load ") {
		t.Error("a checklist printed for a report without one")
	}
}
