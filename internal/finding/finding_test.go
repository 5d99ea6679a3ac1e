package finding

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestSeverityJSONRoundTrip(t *testing.T) {
	for _, s := range []Severity{Info, Warning, Critical} {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var back Severity
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("unmarshal %s: %v", b, err)
		}
		if back != s {
			t.Errorf("round trip of %v gave %v", s, back)
		}
	}
	var s Severity
	if err := json.Unmarshal([]byte(`"fatal"`), &s); err == nil {
		t.Error("unknown severity accepted")
	}
}

func TestSortRanksBySeverity(t *testing.T) {
	fs := []Finding{
		{Investigator: "hung", Severity: Info, Title: "b"},
		{Investigator: "hung", Severity: Critical, Title: "z"},
		{Investigator: "audit", Severity: Warning, Title: "a"},
		{Investigator: "audit", Severity: Critical, Title: "y"},
	}
	Sort(fs)
	var got []string
	for _, f := range fs {
		got = append(got, f.Severity.String()+"/"+f.Investigator+"/"+f.Title)
	}
	want := "critical/audit/y critical/hung/z warning/audit/a info/hung/b"
	if strings.Join(got, " ") != want {
		t.Errorf("got %v, want %s", got, want)
	}
	if w, ok := Worst(fs); !ok || w != Critical {
		t.Errorf("Worst = %v,%v", w, ok)
	}
	if _, ok := Worst(nil); ok {
		t.Error("Worst(nil) reported a severity")
	}
}

func TestReportContractKeys(t *testing.T) {
	b, err := json.Marshal(Report{Findings: []Finding{{ID: "hung.lock-owner", Severity: Critical,
		Subjects: []Subject{{Role: RoleOffender, PID: 1}}, Evidence: map[string]any{"blocked_s": 1.5}}}})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"wolf_version", "kernel", "host", "started_at", "duration_s", "findings", "histograms", "capabilities", "overhead"} {
		if _, ok := m[k]; !ok {
			t.Errorf("report JSON lacks %q", k)
		}
	}
	f := m["findings"].([]any)[0].(map[string]any)
	for _, k := range []string{"id", "investigator", "severity", "title", "summary", "subjects", "evidence"} {
		if _, ok := f[k]; !ok {
			t.Errorf("finding JSON lacks %q", k)
		}
	}
	if f["severity"] != "critical" {
		t.Errorf("severity = %v", f["severity"])
	}
	ov := m["overhead"].(map[string]any)
	for _, k := range []string{"cpu_s", "bpf_run_ns", "events", "dropped"} {
		if _, ok := ov[k]; !ok {
			t.Errorf("overhead JSON lacks %q", k)
		}
	}
}
