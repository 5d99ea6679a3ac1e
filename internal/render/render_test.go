package render

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/wolf-investigator/wolf/internal/finding"
)

func sample() *finding.Report {
	return &finding.Report{
		WolfVersion: "test", Command: "hung", Host: "h", Kernel: "6.18", DurationS: 10,
		Findings: []finding.Finding{
			{ID: "hung.lock-owner", Investigator: "hung", Severity: finding.Critical,
				Title:    "2 tasks hung 41 s on rw-semaphore ffff888100000000 in fuse_file_write_iter; owner sh (pid 6744) is itself waiting for FUSE daemon fz (pid 6601)",
				Summary:  "sh (pid 6750), sh (pid 6751) wait.",
				Subjects: []finding.Subject{{Role: "offender", PID: 6744, TID: 6744, Comm: "sh", State: "S", Stack: []string{"a+0x1", "b+0x2"}}},
				Evidence: map[string]any{"blocked_s": 41.0, "chain": []string{"x", "y"}}},
			{ID: "audit.x", Investigator: "audit", Severity: finding.Info, Title: "note"},
		},
	}
}

func TestTextFitsEightyColumnsWithoutColourOnPipes(t *testing.T) {
	var b bytes.Buffer
	if err := Text(&b, sample(), TextOptions{}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, line := range strings.Split(out, "\n") {
		if n := utf8.RuneCountInString(line); n > 80 {
			t.Errorf("line of %d columns: %q", n, line)
		}
	}
	if strings.Contains(out, "\x1b[") {
		t.Error("colour escape in plain output")
	}
	if !strings.Contains(out, "CRITICAL") || !strings.Contains(out, "Unhealthy: 1 critical, 0 warning, 1 info.") {
		t.Errorf("missing severity or verdict:\n%s", out)
	}
	if strings.Index(out, "CRITICAL") > strings.Index(out, "INFO") {
		t.Error("findings not ranked by severity")
	}
	b.Reset()
	_ = Text(&b, sample(), TextOptions{Color: true})
	if !strings.Contains(b.String(), "\x1b[1;31m") {
		t.Error("no colour when asked for")
	}
}

func TestVerdictHealthy(t *testing.T) {
	r := &finding.Report{DurationS: 10}
	if v := Verdict(r); !strings.HasPrefix(v, "Healthy") {
		t.Errorf("verdict %q", v)
	}
	r.Findings = []finding.Finding{{Severity: finding.Info}}
	if v := Verdict(r); !strings.HasPrefix(v, "Healthy") || !strings.Contains(v, "1 note") {
		t.Errorf("verdict %q", v)
	}
	r.Errors = []string{"hung: boom"}
	r.Findings = nil
	if v := Verdict(r); !strings.HasPrefix(v, "Incomplete") {
		t.Errorf("verdict %q", v)
	}
	r.Findings = []finding.Finding{{Severity: finding.Warning}}
	if v := Verdict(r); !strings.HasPrefix(v, "Unhealthy") || !strings.Contains(v, "incomplete") {
		t.Errorf("verdict %q", v)
	}
}

// An investigator that did not run is named on the first lines of the
// text report, before the checklist and the findings.
func TestTextIncompleteFirst(t *testing.T) {
	r := &finding.Report{Command: "doctor", DurationS: 10,
		Errors:   []string{"sched: the kernel's BPF verifier rejected the program (R2 unbounded memory access)", "locks: no lock:contention tracepoints"},
		Findings: []finding.Finding{{ID: "x.y", Investigator: "x", Severity: finding.Warning, Title: "something"}}}
	var b bytes.Buffer
	if err := Text(&b, r, TextOptions{}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	if len(lines) < 5 || !strings.HasPrefix(lines[2], "INCOMPLETE: sched, locks did not run") ||
		!strings.Contains(lines[3], "sched: the kernel's BPF verifier") || !strings.Contains(lines[5], "locks: no lock:contention") {
		t.Fatalf("first lines:\n%s", strings.Join(lines[:min(6, len(lines))], "\n"))
	}
	if strings.Count(b.String(), "R2 unbounded") != 1 {
		t.Errorf("the error is printed more than once:\n%s", b.String())
	}
}

func TestJSONHasEmptyArraysNotNull(t *testing.T) {
	var b bytes.Buffer
	if err := JSON(&b, &finding.Report{}); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["findings"].([]any); !ok {
		t.Errorf("findings = %#v, want []", m["findings"])
	}
	if _, ok := m["histograms"].([]any); !ok {
		t.Errorf("histograms = %#v, want []", m["histograms"])
	}
}

func TestParseFormat(t *testing.T) {
	if _, err := ParseFormat("xml"); err == nil {
		t.Error("xml accepted")
	}
	if f, err := ParseFormat("json"); err != nil || f != FormatJSON {
		t.Error("json refused")
	}
}

func TestWrapCutsLongTokens(t *testing.T) {
	for _, l := range Wrap(strings.Repeat("x", 100)+" y", 30) {
		if len(l) > 30 {
			t.Errorf("line %q too long", l)
		}
	}
}

func TestTextHidesSchedulerFrames(t *testing.T) {
	r := sample()
	r.Findings[0].Subjects[0].Stack = []string{"__schedule+0x3fc/0x1450", "schedule+0x5e/0xd0", "? finish_task_switch.isra.0+0x8f", "__mutex_lock.constprop.0+0x3a5/0x6c0", "rtnl_lock+0x15/0x20", "rtnetlink_rcv_msg+0x13b/0x3c0"}
	var b bytes.Buffer
	if err := Text(&b, r, TextOptions{}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.Contains(out, "__schedule") || strings.Contains(out, "__mutex_lock") || !strings.Contains(out, "rtnl_lock+0x15/0x20") {
		t.Errorf("stack not trimmed to where the task waits:\n%s", out)
	}
}

func TestTextNotes(t *testing.T) {
	r := &finding.Report{Command: "locks", Notes: []string{"locks: owners' stacks not captured: the kernel has no bpf_task_from_pid kfunc (Linux 6.2+)"}}
	var b strings.Builder
	if err := Text(&b, r, TextOptions{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "Note: locks: owners' stacks not captured") {
		t.Errorf("no note in:\n%s", b.String())
	}
}

// Profiles and timelines are not drawn in text; the report says they are
// there and how to see them.
func TestTextMentionsProfilesAndTimelines(t *testing.T) {
	r := &finding.Report{Command: "locks",
		Profiles:  []finding.Profile{{Name: "lock_wait_stacks", Unit: "ns", Stacks: []finding.StackCount{{Frames: []string{"a"}, Value: 5}, {Frames: []string{"b"}, Value: 7}}}},
		Timelines: []finding.Timeline{{Name: "migrations"}},
	}
	var b strings.Builder
	if err := Text(&b, r, TextOptions{Width: 200}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "Also collected: lock_wait_stacks (2 stacks, 12 ns), 1 migration timeline. See them with --format html") {
		t.Errorf("text:\n%s", b.String())
	}
	b.Reset()
	if err := Text(&b, &finding.Report{Command: "hung"}, TextOptions{}); err != nil || strings.Contains(b.String(), "Also collected") {
		t.Errorf("text without profiles: %v\n%s", err, b.String())
	}
}

// A subject in a container says so: a cgroup by its workload then its
// path, a task after its pid.
func TestTextNamesWorkloads(t *testing.T) {
	w := finding.Workload{Runtime: "containerd", Container: "server", Pod: "clickhouse-0", Namespace: "prod", Label: "pod clickhouse-0 (ns prod), container server"}
	r := &finding.Report{Findings: []finding.Finding{{ID: "sched.cpu-throttled", Severity: finding.Warning, Title: "t",
		Subjects: []finding.Subject{
			{Role: finding.RoleCgroup, Cgroup: "/kubepods/burstable/podx/abc", Detail: "cgroup v2", Workload: w},
			{Role: finding.RoleTask, PID: 7, Comm: "clickhouse", Workload: w},
			{Role: finding.RoleCgroup, Cgroup: "/system.slice/a.service"},
		}}}}
	var b bytes.Buffer
	if err := Text(&b, r, TextOptions{Width: 200}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"cgroup    pod clickhouse-0 (ns prod), container server (cgroup /kubepods/burstable/podx/abc): cgroup v2",
		"task      clickhouse (pid 7) in pod clickhouse-0 (ns prod), container server",
		"cgroup    /system.slice/a.service",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}
