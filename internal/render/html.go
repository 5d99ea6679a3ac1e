package render

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"fmt"
	"html/template"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/human"
)

// The page's template, style and script are hand-written and embedded, so
// the report is one file that fetches nothing: it is opened on a laptop
// far from the sick host, often offline, and must not phone anywhere.
//
//go:embed html/report.tmpl html/report.css html/report.js
var htmlAssets embed.FS

// htmlPage is the parsed template with its assets; parsed once, on first use.
var htmlPage = sync.OnceValues(func() (*template.Template, error) {
	css, err := htmlAssets.ReadFile("html/report.css")
	if err != nil {
		return nil, err
	}
	js, err := htmlAssets.ReadFile("html/report.js")
	if err != nil {
		return nil, err
	}
	// The Content-Security-Policy names the one script and the one style
	// sheet by hash and forbids every fetch: should an escaping bug ever
	// let markup from the system through, the browser still runs and
	// loads nothing of it.
	csp := fmt.Sprintf("default-src 'none'; script-src '%s'; style-src '%s'; img-src data:; base-uri 'none'; form-action 'none'",
		cspHash(js), cspHash(css))
	funcs := template.FuncMap{
		"css": func() template.CSS { return template.CSS(css) },
		"js":  func() template.JS { return template.JS(js) },
		"csp": func() string { return csp },
	}
	return template.New("report.tmpl").Funcs(funcs).ParseFS(htmlAssets, "html/report.tmpl")
})

func cspHash(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256-" + base64.StdEncoding.EncodeToString(sum[:])
}

// HTML writes the report as one self-contained page: the verdict and the
// findings first, then each investigator's data (histograms as bar charts,
// profiles as flame graphs, timelines as step charts), then what wolf cost.
// Every string that came from the system goes through html/template's
// contextual escaping; the flame graphs' data is embedded as JSON, which
// the template escapes for its script element.
func HTML(w io.Writer, r *finding.Report) error {
	t, err := htmlPage()
	if err != nil {
		return fmt.Errorf("render html: template: %w", err)
	}
	v := newHTMLView(r)
	var buf bytes.Buffer
	if err := t.Execute(&buf, v); err != nil {
		return fmt.Errorf("render html: %w", err)
	}
	if _, err := w.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("render html: %w", err)
	}
	return nil
}

type htmlView struct {
	R            *finding.Report
	Verdict      string
	VerdictClass string
	Incomplete   string // which investigators did not run; "" when all did
	Started      string
	Duration     string
	Counts       map[string]int
	Diagnoses    []htmlDiagnosis
	Findings     []htmlFinding // those no diagnosis explains
	Checklist    []htmlCheck
	Histograms   []htmlHist
	Profiles     []htmlProfile
	Timelines    []htmlTimeline
	Overhead     htmlOverhead
	Offline      bool
	Capabilities []htmlCapability
}

func newHTMLView(r *finding.Report) *htmlView {
	v := &htmlView{R: r, Verdict: Verdict(r), Incomplete: Incomplete(r), Counts: map[string]int{}}
	switch {
	case strings.HasPrefix(v.Verdict, "Unhealthy"):
		v.VerdictClass = "sev-warning"
		if w, _ := finding.Worst(r.Findings); w == finding.Critical {
			v.VerdictClass = "sev-critical"
		}
	case strings.HasPrefix(v.Verdict, "Incomplete"):
		v.VerdictClass = "sev-warning"
	default:
		v.VerdictClass = "sev-ok"
	}
	if !r.StartedAt.IsZero() {
		v.Started = r.StartedAt.UTC().Format(time.RFC3339)
	}
	v.Duration = human.Number(r.DurationS)
	fs := append([]finding.Finding(nil), r.Findings...)
	finding.Sort(fs)
	folded := map[string][]htmlFinding{}
	for i := range fs {
		hf := newHTMLFinding(i, &fs[i])
		v.Counts[fs[i].Severity.String()]++
		if explainedHere(r, &fs[i]) {
			// Under the first diagnosis that explains it, not on its own.
			for _, ref := range fs[i].ExplainedBy {
				if _, ok := folded[ref]; ok || diagnosisRef(r, ref) {
					folded[ref] = append(folded[ref], hf)
					break
				}
			}
			continue
		}
		v.Findings = append(v.Findings, hf)
	}
	for i := range r.Diagnoses {
		v.Diagnoses = append(v.Diagnoses, newHTMLDiagnosis(i, &r.Diagnoses[i], folded[r.Diagnoses[i].Ref]))
	}
	for _, c := range r.Checklist {
		v.Checklist = append(v.Checklist, htmlCheck{Check: c, Sev: c.Severity.String(), Values: evidenceNode(c.Values)})
	}
	for i := range r.Histograms {
		v.Histograms = append(v.Histograms, newHTMLHist(&r.Histograms[i]))
	}
	for i := range r.Profiles {
		v.Profiles = append(v.Profiles, newHTMLProfile(i, &r.Profiles[i]))
	}
	for i := range r.Timelines {
		v.Timelines = append(v.Timelines, newHTMLTimeline(&r.Timelines[i], r.DurationS))
	}
	v.Offline = r.Command == "analyze"
	ov := r.Overhead
	v.Overhead = htmlOverhead{
		CPUSeconds: strconv.FormatFloat(ov.CPUSeconds, 'f', 2, 64),
		BPFMs:      strconv.FormatFloat(float64(ov.BPFRunNs)/1e6, 'f', 1, 64),
		NsPerEvent: "n/a",
		Events:     ov.Events,
		Dropped:    ov.Dropped,
		Window:     windowCost(ov),
	}
	if ov.Events > 0 {
		v.Overhead.NsPerEvent = strconv.FormatFloat(float64(ov.BPFRunNs)/float64(ov.Events), 'f', 0, 64)
	}
	names := make([]string, 0, len(r.Capabilities))
	for k := range r.Capabilities {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		v.Capabilities = append(v.Capabilities, htmlCapability{Name: k, OK: r.Capabilities[k]})
	}
	return v
}

func diagnosisRef(r *finding.Report, ref string) bool {
	for _, d := range r.Diagnoses {
		if d.Ref == ref {
			return true
		}
	}
	return false
}

type htmlCapability struct {
	Name string
	OK   bool
}

type htmlOverhead struct {
	CPUSeconds, BPFMs, NsPerEvent string
	Events, Dropped               uint64
	Window                        string // windowCost's line, "" when none
}

type htmlCheck struct {
	finding.Check
	Sev    string
	Values *evNode
}

type htmlFinding struct {
	*finding.Finding
	Anchor   string
	Sev      string
	Subjects []htmlSubject
	Cols     subjectCols // the subject columns any subject fills
	Evidence *evNode
	Refs     []htmlRef
}

type subjectCols struct {
	PID, TID, Comm, Cgroup, Workload, CPU, State, Detail bool
	Span                                                 int // columns after the role, for the stack row
}

type htmlSubject struct {
	finding.Subject
	CPUText string
}

// htmlRef is a reference: a link when it is a web address (opened only
// when clicked, without a referrer), plain text otherwise.
type htmlRef struct {
	Text string
	URL  string
}

func newHTMLFinding(i int, f *finding.Finding) htmlFinding {
	h := htmlFinding{Finding: f, Anchor: fmt.Sprintf("finding-%d", i+1), Sev: f.Severity.String(), Evidence: evidenceNode(f.Evidence)}
	for _, s := range f.Subjects {
		hs := htmlSubject{Subject: s}
		if s.CPU != nil {
			hs.CPUText = strconv.Itoa(*s.CPU)
		}
		h.Subjects = append(h.Subjects, hs)
		c := &h.Cols
		c.PID = c.PID || s.PID != 0
		c.TID = c.TID || (s.TID != 0 && s.TID != s.PID)
		c.Comm = c.Comm || s.Comm != ""
		c.Cgroup = c.Cgroup || s.Cgroup != ""
		c.Workload = c.Workload || s.Label != ""
		c.CPU = c.CPU || s.CPU != nil
		c.State = c.State || s.State != ""
		c.Detail = c.Detail || s.Detail != ""
	}
	for _, on := range []bool{h.Cols.PID, h.Cols.TID, h.Cols.Comm, h.Cols.Cgroup, h.Cols.Workload, h.Cols.CPU, h.Cols.State, h.Cols.Detail} {
		if on {
			h.Cols.Span++
		}
	}
	h.Cols.Span = max(h.Cols.Span, 1)
	for _, ref := range f.References {
		hr := htmlRef{Text: ref}
		if strings.HasPrefix(ref, "https://") || strings.HasPrefix(ref, "http://") {
			hr.URL = ref
		}
		h.Refs = append(h.Refs, hr)
	}
	return h
}

// labelText prints labels as k=v, sorted, for captions.
func labelText(l map[string]string) string {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+l[k])
	}
	return strings.Join(parts, " ")
}

// f1 prints an SVG coordinate.
func f1(x float64) string { return strconv.FormatFloat(x, 'f', 1, 64) }
