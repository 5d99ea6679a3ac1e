package render

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/wolf-investigator/wolf/internal/diagnose"
	"github.com/wolf-investigator/wolf/internal/fact"
	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/testutil"
)

// diagnosedReport is a FUSE-stalled mmap_lock (reader-owned, a writer
// queued, a /proc reader behind it) plus an unrelated finding, diagnosed
// by the real diagnosis stage; comm names are hostile.
func diagnosedReport(comm string) *finding.Report {
	lock := "mmap_lock of " + comm + " (pid 400)"
	addr := "0xffff888100bb0d38"
	r := &finding.Report{WolfVersion: "test", Command: "doctor", Host: "h", Kernel: "6.18", DurationS: 5,
		Findings: []finding.Finding{
			{ID: "hung.lock-owner", Investigator: "hung", Severity: finding.Critical, Title: "2 tasks hung 12 s on " + lock,
				Evidence: map[string]any{"lock": lock, "lock_addr": addr, "mm_pid": 400, "owner_likely": true, "blocked_s": 12.0},
				Subjects: []finding.Subject{
					{Role: finding.RoleOffender, PID: 400, TID: 401, Comm: comm, State: "D",
						Evidence: map[string]any{"sleeps_on": "folio", "wait_site": "filemap_fault", "fuse_opcode": "READ", "fuse_unique": 42, "fuse_age_s": 12.5, "fuse_request_from_task": true}},
					{Role: finding.RoleOwner, PID: 600, TID: 600, Comm: "wolf", Detail: "FUSE daemon", Evidence: map[string]any{"fuse_daemon": true}},
					{Role: finding.RoleVictim, PID: 400, TID: 402, Comm: comm, State: "D", Evidence: map[string]any{"blocked_s": 11.8, "mode": "write"}},
					{Role: finding.RoleVictim, PID: 500, TID: 500, Comm: "cat", State: "D", Evidence: map[string]any{"blocked_s": 11.0, "mode": "read", "behind_writer_tid": 402}},
				}},
			{ID: "hung.wait-site", Investigator: "hung", Severity: finding.Warning, Title: "1 task blocked 12 s in filemap_fault",
				Subjects: []finding.Subject{{Role: finding.RoleVictim, PID: 400, TID: 401, Comm: comm, State: "D", Evidence: map[string]any{"sleeps_on": "folio"}}}},
			{ID: "audit.no-swap", Investigator: "audit", Severity: finding.Info, Title: "No swap: only file pages can be reclaimed"},
		}}
	// The facts hung makes of the same window.
	k, fk := fact.MMLockKey(400), fact.FUSEKey("47")
	owner, site := r.Findings[0], r.Findings[1]
	facts := &fact.Set{}
	facts.Resource(fact.Resource{Kind: fact.Lock, Key: k, Name: lock, LockAddr: addr, MMPID: 400})
	facts.Resource(fact.Resource{Kind: fact.FUSE, Key: fk, Conn: "47"})
	facts.Waits = append(facts.Waits,
		fact.Wait{Task: fact.Task{PID: 400, TID: 402, Comm: comm}, Kind: fact.WaitLock, On: k, Max: 11800 * time.Millisecond, Hung: true, Mode: "write", Finding: owner.ID, FindingTitle: owner.Title},
		fact.Wait{Task: fact.Task{PID: 500, TID: 500, Comm: "cat"}, Kind: fact.WaitLock, On: k, Max: 11 * time.Second, Hung: true, Mode: "read", BehindWriter: 402, Finding: owner.ID, FindingTitle: owner.Title},
		fact.Wait{Task: fact.Task{PID: 400, TID: 401, Comm: comm}, Kind: fact.WaitFUSE, On: fk, Max: 12500 * time.Millisecond, Hung: true, Finding: site.ID, FindingTitle: site.Title,
			Numbers: map[string]any{"fuse_opcode": "READ", "fuse_unique": 42, "fuse_age_s": 12.5, "sleeps_on": "folio"}, Detail: "READ request #42 unanswered for 12 s"},
	)
	facts.Holds = append(facts.Holds,
		fact.Hold{On: k, Holder: fact.Task{PID: 400, TID: 401, Comm: comm}, Mode: "read", Split: &fact.Split{State: "D", SleepsOn: fk, Site: "filemap_fault", Still: true}, Finding: owner.ID, FindingTitle: owner.Title},
		fact.Hold{On: fk, Holder: fact.Task{PID: 600, TID: 600, Comm: "wolf"}, Finding: owner.ID, FindingTitle: owner.Title},
	)
	diagnose.Apply(r, facts)
	return r
}

func TestTextOpensWithTheDiagnosisAndFoldsWhatItExplains(t *testing.T) {
	r := diagnosedReport("pshang")
	if len(r.Diagnoses) != 1 {
		t.Fatalf("%d diagnoses", len(r.Diagnoses))
	}
	var b bytes.Buffer
	if err := Text(&b, r, TextOptions{}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, line := range strings.Split(out, "\n") {
		if n := utf8.RuneCountInString(line); n > 80 {
			t.Errorf("line of %d columns: %q", n, line)
		}
	}
	d := strings.Index(out, "DIAGNOSIS")
	info := strings.Index(out, "INFO      No swap")
	if d < 0 || info < 0 || d > info {
		t.Errorf("the diagnosis does not come first:\n%s", out)
	}
	// Each explained finding appears once, folded, not as a top item.
	for _, title := range []string{"2 tasks hung 12 s on", "1 task blocked 12 s in filemap_fault"} {
		if n := strings.Count(out, title); n != 1 {
			t.Errorf("%q appears %d times:\n%s", title, n, out)
		}
	}
	if strings.Contains(out, "CRITICAL  2 tasks hung") {
		t.Errorf("an explained finding is listed on its own:\n%s", out)
	}
	for _, want := range []string{"held_by", "waits_on", "FUSE daemon wolf (pid 600)", "To confirm:", "Unhealthy: 1 diagnosis;"} {
		if !strings.Contains(strings.ReplaceAll(out, "\n          ", " "), want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
}

func TestJSONCarriesDiagnoses(t *testing.T) {
	var b bytes.Buffer
	if err := JSON(&b, diagnosedReport("x")); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	ds, ok := m["diagnoses"].([]any)
	if !ok || len(ds) != 1 {
		t.Fatalf("diagnoses %v", m["diagnoses"])
	}
	d := ds[0].(map[string]any)
	for _, k := range []string{"ref", "id", "severity", "title", "root", "chain", "subjects", "explains", "confidence"} {
		if _, ok := d[k]; !ok {
			t.Errorf("diagnosis lacks %q", k)
		}
	}
	hop := d["chain"].([]any)[0].(map[string]any)
	for _, k := range []string{"from", "relation", "to", "text", "evidence"} {
		if _, ok := hop[k]; !ok {
			t.Errorf("hop lacks %q: %v", k, hop)
		}
	}
	f := m["findings"].([]any)[0].(map[string]any)
	if _, ok := f["explained_by"]; !ok {
		t.Errorf("finding lacks explained_by: %v", f)
	}
	// A report without diagnoses still has the list, empty.
	b.Reset()
	if err := JSON(&b, &finding.Report{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"diagnoses": []`) {
		t.Errorf("no empty diagnoses list:\n%s", b.String())
	}
}

// The chain drawn in a real browser: one box per subject of the chain, an
// arrow per hop, the root marked, the explained findings folded inside the
// diagnosis and not among the others, hostile names as text, no console
// message.
func TestHTMLDrawsTheChainInChromium(t *testing.T) {
	bin := testutil.Chromium(t)
	r := diagnosedReport(hostile[0])
	page := renderHTML(t, r)
	path := writePage(t, page)
	shot := testutil.ArtifactPath(t, "diagnosis.png")
	os.Remove(shot)
	p := testutil.OpenHeadless(t, bin, path, shot, browserTimeout)
	if len(p.Console) > 0 {
		t.Errorf("console messages:\n%s", strings.Join(p.Console, "\n"))
	}
	dom := p.DOM
	di, fi := strings.Index(dom, `id="diagnoses"`), strings.Index(dom, `id="findings"`)
	if di < 0 || fi < 0 || di > fi {
		t.Fatalf("diagnoses section missing or after the findings (%d, %d)", di, fi)
	}
	svg := regexp.MustCompile(`(?s)<svg class="chain-svg".*?</svg>`).FindString(dom)
	d := r.Diagnoses[0]
	wantNodes := map[string]bool{}
	for _, h := range d.Chain {
		wantNodes[subjectKey(h.From)] = true
		wantNodes[subjectKey(h.To)] = true
	}
	if n := strings.Count(svg, `<g class="node`); n != len(wantNodes) {
		t.Errorf("%d boxes, want %d", n, len(wantNodes))
	}
	if n := strings.Count(svg, `<g class="edge`); n != len(d.Chain) {
		t.Errorf("%d arrows, want %d", n, len(d.Chain))
	}
	if !strings.Contains(svg, `root"`) || !strings.Contains(svg, "FUSE daemon") && !strings.Contains(svg, "wolf (pid 600)") {
		t.Error("the root is not marked")
	}
	if strings.Contains(svg, "<img") || !strings.Contains(dom, "&lt;img src=x onerror=alert(1)&gt;") {
		t.Error("a hostile comm is not escaped")
	}
	other := dom[fi:]
	if strings.Contains(other, "2 tasks hung 12 s on") {
		t.Error("an explained finding is listed among the other findings")
	}
	if !strings.Contains(dom[di:fi], "2 tasks hung 12 s on") {
		t.Error("the explained finding is not folded under the diagnosis")
	}
	if !strings.Contains(other, "No swap") {
		t.Error("the unrelated finding is missing")
	}
	if st, err := os.Stat(shot); err == nil && st.Size() > 0 {
		t.Logf("screenshot: %s", shot)
	}
}
