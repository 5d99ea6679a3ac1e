// Package findingtest holds the helpers tests use to pick findings and
// subjects out of a result, so that every package's tests read the same.
package findingtest

import (
	"strings"
	"testing"

	"github.com/wolf-investigator/wolf/internal/finding"
)

// First returns the first finding with id, or nil.
func First(fs []finding.Finding, id string) *finding.Finding {
	for i := range fs {
		if fs[i].ID == id {
			return &fs[i]
		}
	}
	return nil
}

// All returns the findings with id, in order.
func All(fs []finding.Finding, id string) []finding.Finding {
	var out []finding.Finding
	for _, f := range fs {
		if f.ID == id {
			out = append(out, f)
		}
	}
	return out
}

// Only returns the one finding with id and fails t, listing what there is,
// when there is not exactly one.
func Only(t testing.TB, fs []finding.Finding, id string) finding.Finding {
	t.Helper()
	got := All(fs, id)
	if len(got) != 1 {
		var ids []string
		for _, f := range fs {
			ids = append(ids, f.ID+": "+f.Title)
		}
		t.Fatalf("want exactly one %s finding, have:\n  %s", id, strings.Join(ids, "\n  "))
	}
	return got[0]
}

// Subjects returns f's subjects with role.
func Subjects(f finding.Finding, role string) []finding.Subject {
	var out []finding.Subject
	for _, s := range f.Subjects {
		if s.Role == role {
			out = append(out, s)
		}
	}
	return out
}
