package render

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
)

// Strings a process, a cgroup or a log line can carry, and that must come
// out of the page as text.
var hostile = []string{
	`<img src=x onerror=alert(1)>`,
	`</script><script>alert(1)</script>`,
	`"quoted" 'single' & ampersand`,
	`<!-- comment --> ]]> <![CDATA[`,
	`javascript:alert(1)`,
}

// hostileReport sets every string of a report that comes from the system
// to a hostile value, and fills every part of the report.
func hostileReport() *finding.Report {
	h := func(i int) string { return hostile[i%len(hostile)] }
	cpu := 3
	frames := func(i int) []string {
		return []string{"[" + h(i) + "]", "entry_SYSCALL_64", "do_syscall_64", h(i + 1), "schedule"}
	}
	return &finding.Report{
		WolfVersion: h(0), Command: "doctor", Kernel: h(1), Host: h(2),
		StartedAt: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), DurationS: 10,
		Findings: []finding.Finding{
			{ID: "hung.lock-owner", Investigator: "hung", Severity: finding.Critical,
				Title: "2 tasks hung on " + h(0), Summary: h(1), Mechanism: h(2),
				Subjects: []finding.Subject{
					{Role: finding.RoleOffender, PID: 10, TID: 11, Comm: h(0), Cgroup: "/sys/fs/cgroup/" + h(1), State: "D", Detail: h(2), Stack: []string{h(3), "fuse_simple_request+0x1a/0x2b [fuse]"}},
					{Role: finding.RoleVictim, PID: 12, Comm: h(1)},
					// Container and pod names come from the runtimes: as hostile as a comm.
					{Role: finding.RoleCgroup, Cgroup: "/libpod_parent/" + h(2), Workload: finding.Workload{Container: h(0), Pod: h(1), Image: h(4), Label: h(3)}},
					{Role: finding.RoleCPU, CPU: &cpu},
				},
				Evidence: map[string]any{
					"blocked_s": 41.5, "lock": h(0), "addr": uint64(18446612686426785792),
					"chain":  []map[string]any{{"comm": h(1), "pid": 1}, {"comm": h(0), "pid": 2, "wchan": h(3)}},
					"comms":  []string{h(0), h(1)},
					"nested": map[string]any{h(2): map[string]any{"deeper": []any{1, h(4)}}},
				},
				Remediation: []string{"kill " + h(0)},
				References:  []string{"https://docs.kernel.org/" + h(0), h(4), "javascript:alert(1)"},
			},
			{ID: "sched.bounce", Investigator: "sched", Severity: finding.Warning, Title: h(3)},
			{ID: "audit.x", Investigator: "audit", Severity: finding.Info, Title: h(4)},
		},
		Checklist: []finding.Check{
			{Area: "load", Severity: finding.Info, Summary: "load 0.1"},
			{Area: "kernel log", Severity: finding.Warning, Summary: h(0), Values: map[string]any{"line": h(1), "count": 2}},
		},
		Histograms: []finding.Histogram{
			{Name: "softirq_runtime_us", Unit: "us", Labels: map[string]string{"vector": h(0)}, Count: 10, Sum: 100, Max: 40,
				Buckets: []finding.Bucket{{LE: 0, Count: 0}, {LE: 1, Count: 0}, {LE: 3, Count: 2}, {LE: 7, Count: 5}, {LE: 15, Count: 5}, {LE: 31, Count: 9}, {LE: 63, Count: 10}}},
			{Name: "empty_us", Unit: "us"},
		},
		Profiles: []finding.Profile{
			{Name: "blocked_stacks", Unit: "tasks", Labels: map[string]string{"comm": h(1)},
				Stacks: []finding.StackCount{{Frames: frames(0), Value: 3}, {Frames: frames(1), Value: 1}, {Frames: frames(0)[:3], Value: 2}}},
			{Name: "mmap_lock_profile", Unit: "samples", PeriodNs: 10101010,
				Stacks: []finding.StackCount{{Frames: []string{h(1), "a", "b"}, Value: 99}, {Frames: []string{h(1), "a", "c"}, Value: 1}}},
		},
		Timelines: []finding.Timeline{
			{Name: "migrations", Unit: "cpu", Labels: map[string]string{"comm": h(0), "pid": "42"}, Dropped: 7,
				Events: []finding.TimelineEvent{{AtS: 0.1, Value: 0, Label: "wakeup"}, {AtS: 1.5, Value: 1, Label: h(1)}, {AtS: 2.25, Value: 0, Label: "load balance"}}},
		},
		Capabilities: map[string]bool{"tracepoints": true, "kprobes": false},
		Overhead:     finding.Overhead{CPUSeconds: 0.25, BPFRunNs: 12_000_000, Events: 40000, Dropped: 3},
		Errors:       []string{"locks: " + h(2)},
		Notes:        []string{"softirq: " + h(3)},
	}
}

func renderHTML(t *testing.T, r *finding.Report) string {
	t.Helper()
	var b bytes.Buffer
	if err := HTML(&b, r); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestHTMLEscapesEverythingFromTheSystem(t *testing.T) {
	out := renderHTML(t, hostileReport())
	for _, bad := range []string{
		`<img src=x`, `<img src="x"`, `<script>alert`, `</script><script>`, `<!-- comment -->`, `<![CDATA[`,
		`href="javascript:`,
	} {
		if i := strings.Index(out, bad); i >= 0 {
			t.Errorf("hostile markup %q unescaped at byte %d: …%s…", bad, i, out[max(0, i-80):min(len(out), i+80)])
		}
	}
	for _, tg := range htmlTags(out) {
		for name := range tg.attrs {
			if strings.HasPrefix(name, "on") {
				t.Errorf("an event handler attribute: <%s %s=…>", tg.name, name)
			}
		}
		if tg.name == "img" {
			t.Errorf("an img element: %v", tg.attrs)
		}
	}
	if !strings.Contains(out, "<th>container</th>") || !strings.Contains(out, `<td class="workload" title="image `) {
		t.Error("a subject in a container has no container column")
	}
	// Escaped, the strings are there as text.
	if !strings.Contains(out, "&lt;img src=x onerror=alert(1)&gt;") {
		t.Error("the hostile comm is missing from the page (as escaped text)")
	}
	// Exactly two script elements run: none. Only the page's own script
	// has no type; the rest are JSON data.
	if n := strings.Count(out, "<script>"); n != 1 {
		t.Errorf("%d executable <script> elements, want exactly the page's own", n)
	}
	if n := strings.Count(strings.ToLower(out), "<script"); n != 1+len(hostileReport().Profiles) {
		t.Errorf("%d <script elements, want 1 + one per profile", n)
	}
}

// The flame graphs' data is JSON inside a script element: a frame name
// holding "</script>" must not end it, and the JSON must read back to the
// very names.
func TestHTMLFlameDataIsJSONThatCannotBreakOut(t *testing.T) {
	r := hostileReport()
	out := renderHTML(t, r)
	re := regexp.MustCompile(`(?s)<script type="application/json" class="flame-data">(.*?)</script>`)
	ms := re.FindAllStringSubmatch(out, -1)
	if len(ms) != len(r.Profiles) {
		t.Fatalf("%d flame data elements, want %d", len(ms), len(r.Profiles))
	}
	var d flameData
	if err := json.Unmarshal([]byte(ms[0][1]), &d); err != nil {
		t.Fatalf("flame data is not JSON: %v: %s", err, ms[0][1])
	}
	names := strings.Join(d.Names, "\n")
	for _, want := range []string{"[" + hostile[0] + "]", hostile[1], "entry_SYSCALL_64"} {
		if !strings.Contains(names, want) {
			t.Errorf("flame data lost %q: %q", want, d.Names)
		}
	}
	if strings.Contains(ms[0][1], "<") {
		t.Errorf("raw < inside the JSON data: %s", ms[0][1])
	}
	// all=6, then [h0] 5 → entry 5 → do_syscall 5 → h1 3 → schedule 3; [h1] 1 → …
	if d.Total != 6 || d.Values[0] != 6 || d.Depth[0] != 0 {
		t.Errorf("root: total %d, value %d, depth %d; want 6, 6, 0", d.Total, d.Values[0], d.Depth[0])
	}
	for i := 1; i < len(d.Names); i++ {
		if d.Depth[i] < 1 || d.Depth[i] > d.Depth[i-1]+1 {
			t.Errorf("node %d depth %d after %d: not depth-first", i, d.Depth[i], d.Depth[i-1])
		}
	}
}

func TestHTMLStructure(t *testing.T) {
	r := hostileReport()
	out := renderHTML(t, r)
	count := func(s string) int { return strings.Count(out, s) }
	if n := count(`<figure class="flame"`); n != len(r.Profiles) {
		t.Errorf("%d flame graphs, want one per profile (%d)", n, len(r.Profiles))
	}
	if n := count(`<svg class="hist-svg"`); n != 1 {
		t.Errorf("%d histogram charts, want 1 (the other histogram is empty)", n)
	}
	if n := count(`<figure class="hist"`); n != len(r.Histograms) {
		t.Errorf("%d histogram figures, want %d", n, len(r.Histograms))
	}
	if n := count(`<svg class="timeline-svg"`); n != len(r.Timelines) {
		t.Errorf("%d timelines, want %d", n, len(r.Timelines))
	}
	if n := count(`<article class="finding`); n != len(r.Findings) {
		t.Errorf("%d findings, want %d", n, len(r.Findings))
	}
	// Ranked: critical, then warning, then info.
	c, w, i := strings.Index(out, `finding sev-critical`), strings.Index(out, `finding sev-warning`), strings.Index(out, `finding sev-info`)
	if c >= w || w >= i {
		t.Errorf("findings not ranked by severity: critical at %d, warning at %d, info at %d", c, w, i)
	}
	// Findings come before the data.
	if strings.Index(out, `id="findings"`) > strings.Index(out, `id="profiles"`) {
		t.Error("profiles before findings")
	}
	// What did not run is said at the top, with the verdict.
	if i := strings.Index(out, "INCOMPLETE: locks did not run"); i < 0 || i > strings.Index(out, `<main>`) {
		t.Errorf("the failed investigator is not named in the header (at %d, main at %d)", i, strings.Index(out, `<main>`))
	}
	for _, want := range []string{
		"Unhealthy: 1 critical, 1 warning, 1 info; incomplete: 1 investigator(s) failed.",
		"12.0 ms", "300 ns", "40000", // overhead: BPF ms, ns per event
		"7 events dropped", // the timeline's drops
		"1.01 s CPU",       // 100 samples at 99 Hz
		"<details>",        // stacks collapsible
		`<table class="checklist">`,
		`<table class="evtable">`, // evidence: a list of records
		"18446612686426785792",    // an address kept exact
		"tracepoints: yes", "kprobes: no",
		"p50 ≤ 7 us", "p99 ≤ 40 us",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	// Cumulative buckets become per-bucket bars: 2, 3, 0, 4, 1 (the empty
	// low buckets trimmed).
	bars := regexp.MustCompile(`<title>[^<]*us: (\d+)</title><rect class="bar"`).FindAllStringSubmatch(out, -1)
	var got []string
	for _, b := range bars {
		got = append(got, b[1])
	}
	if strings.Join(got, ",") != "2,3,0,4,1" {
		t.Errorf("bars %v, want 2,3,0,4,1", got)
	}
}

// Nothing on the page is fetched: the policy forbids it, no element has a
// src, and the only links are references' web addresses, opened on click
// without a referrer.
func TestHTMLFetchesNothing(t *testing.T) {
	out := renderHTML(t, hostileReport())
	if !strings.Contains(out, `http-equiv="Content-Security-Policy" content="default-src &#39;none&#39;;`) {
		t.Error("no Content-Security-Policy forbidding fetches")
	}
	tags := htmlTags(out)
	if len(tags) < 100 {
		t.Fatalf("only %d tags found: the scanner is broken", len(tags))
	}
	links := 0
	for _, tg := range tags {
		for _, a := range []string{"src", "srcset", "background", "poster", "data", "action", "formaction", "xlink:href"} {
			if v, ok := tg.attrs[a]; ok {
				t.Errorf("<%s %s=%q>: the page would fetch it", tg.name, a, v)
			}
		}
		url, ok := tg.attrs["href"]
		switch {
		case !ok || strings.HasPrefix(url, "#"):
		case tg.name == "a" && (strings.HasPrefix(url, "https://") || strings.HasPrefix(url, "http://")):
			links++
			if tg.attrs["rel"] != "noreferrer noopener" {
				t.Errorf("web link without rel=noreferrer: %v", tg.attrs)
			}
		default:
			t.Errorf("unexpected link <%s href=%q>", tg.name, url)
		}
	}
	if links != 1 {
		t.Errorf("%d web links, want 1 (the one https reference)", links)
	}
	if strings.Contains(out, "@import") || strings.Contains(out, "url(") {
		t.Error("style sheet fetches something")
	}
}

func TestHTMLEmptyReport(t *testing.T) {
	out := renderHTML(t, &finding.Report{Command: "analyze"})
	for _, want := range []string{"No findings.", "Offline analysis", "Nothing wrong found in the log."} {
		if !strings.Contains(out, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(out, "<figure") {
		t.Error("figures in an empty report")
	}
}

// A profile too large to draw keeps its biggest frames and says how many
// it left out.
func TestHTMLFlameGraphBoundsItsSize(t *testing.T) {
	p := finding.Profile{Name: "big", Unit: "samples"}
	for i := 0; i < 3*flameMaxNodes; i++ {
		p.Stacks = append(p.Stacks, finding.StackCount{Frames: []string{"root", "f" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + string(rune(i))}, Value: uint64(1 + i%5)})
	}
	h := newHTMLProfile(0, &p)
	if n := len(h.Data.Names); n > flameMaxNodes || n < flameMaxNodes/2 {
		t.Errorf("%d nodes kept, want at most %d and not far fewer", n, flameMaxNodes)
	}
	if h.Omitted == 0 || h.Data.Total != p.Total() {
		t.Errorf("omitted %d, total %d (profile %d)", h.Omitted, h.Data.Total, p.Total())
	}
}

func TestParseFormatHTML(t *testing.T) {
	if f, err := ParseFormat("html"); err != nil || f != FormatHTML {
		t.Errorf("html: %v %v", f, err)
	}
}

type htmlTag struct {
	name  string
	attrs map[string]string
}

var (
	tagRE  = regexp.MustCompile(`<([a-zA-Z][a-zA-Z0-9-]*)((?:\s+[a-zA-Z_:][-a-zA-Z0-9_:.]*(?:\s*=\s*(?:"[^"]*"|'[^']*'|[^\s"'=<>]+))?)*)\s*/?>`)
	attrRE = regexp.MustCompile(`([a-zA-Z_:][-a-zA-Z0-9_:.]*)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'=<>]+)))?`)
)

// htmlTags lists the start tags of a page and their attributes (values
// still escaped). Text never holds a raw "<" in an escaped page, so a tag
// is a tag.
func htmlTags(page string) []htmlTag {
	var out []htmlTag
	for _, m := range tagRE.FindAllStringSubmatch(page, -1) {
		tg := htmlTag{name: strings.ToLower(m[1]), attrs: map[string]string{}}
		for _, a := range attrRE.FindAllStringSubmatch(m[2], -1) {
			tg.attrs[strings.ToLower(a[1])] = a[2] + a[3] + a[4]
		}
		out = append(out, tg)
	}
	return out
}

// A graph is as tall as its deepest frame wide enough to draw, not as its
// deepest frame: one deep, rare stack must not push the graph off screen.
func TestHTMLFlameGraphHeightFollowsDrawnFrames(t *testing.T) {
	deep := make([]string, 60)
	for i := range deep {
		deep[i] = "deep" + string(rune('a'+i%26))
	}
	p := finding.Profile{Name: "p", Unit: "ns", Stacks: []finding.StackCount{
		{Frames: []string{"a", "b", "c"}, Value: 1e9},
		{Frames: deep, Value: 1},
	}}
	h := newHTMLProfile(0, &p)
	if h.H != 4*flameRowH {
		t.Errorf("height %d, want %d (root and three frames)", h.H, 4*flameRowH)
	}
	if len(h.Data.Names) != 1+3+60 {
		t.Errorf("%d nodes in the data, want all %d (zooming draws them)", len(h.Data.Names), 64)
	}
	if h.Total != "1.00 s" {
		t.Errorf("total %q, want nanoseconds told as time", h.Total)
	}
}

// Evidence numbers are humanised by the unit in their key, with the raw
// value beside; numbers that read as well raw stay alone.
func TestHTMLHumanisesEvidence(t *testing.T) {
	out := renderHTML(t, &finding.Report{Command: "locks", Findings: []finding.Finding{{
		ID: "locks.contention", Investigator: "locks", Severity: finding.Warning, Title: "t",
		Evidence: map[string]any{"max_wait_ns": uint64(811885583), "window_s": 10, "tcp_rmem_max_bytes": 33554432,
			"waits": []map[string]any{{"tid": 7, "wait_ns_total": 2300000000}}},
	}}})
	for _, want := range []string{
		`<span class="ev">812 ms</span> <span class="ev raw">(811885583)</span>`,
		`<span class="ev">2.3 s</span> <span class="ev raw">(2300000000)</span>`,
		`<span class="ev">32 MiB</span> <span class="ev raw">(33554432)</span>`,
		`<span class="ev">10</span>`,
		`<span class="ev">7</span>`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("page lacks %s", want)
		}
	}
}
