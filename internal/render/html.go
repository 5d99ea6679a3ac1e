package render

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"html/template"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
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
	v := &htmlView{R: r, Verdict: Verdict(r), Counts: map[string]int{}}
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
	v.Duration = shortFloat(r.DurationS)
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
	PID, TID, Comm, Cgroup, CPU, State, Detail bool
	Span                                       int // columns after the role, for the stack row
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
		c.CPU = c.CPU || s.CPU != nil
		c.State = c.State || s.State != ""
		c.Detail = c.Detail || s.Detail != ""
	}
	for _, on := range []bool{h.Cols.PID, h.Cols.TID, h.Cols.Comm, h.Cols.Cgroup, h.Cols.CPU, h.Cols.State, h.Cols.Detail} {
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

// evNode is one evidence value, shaped for the template: a scalar, a list
// of scalars, a table (a list of records), or a record (key/value rows).
type evNode struct {
	Scalar  string
	Scalars []string
	Columns []string
	Rows    [][]*evNode
	Fields  []evField
	Kind    string // "scalar", "list", "table", "record", "empty"
	// Long lists and tables fold away behind their size.
	Collapse bool
}

type evField struct {
	Key   string
	Value *evNode
}

// evidenceNode turns free-form evidence (numbers, strings, slices of
// records, maps) into evNodes. It goes through JSON first, so that what
// the page shows is exactly what --format json would have said.
func evidenceNode(m map[string]any) *evNode {
	if len(m) == 0 {
		return nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return &evNode{Kind: "scalar", Scalar: fmt.Sprintf("(unprintable evidence: %v)", err)}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // keep addresses and counters exact
	var v any
	if err := dec.Decode(&v); err != nil {
		return &evNode{Kind: "scalar", Scalar: fmt.Sprintf("(unprintable evidence: %v)", err)}
	}
	return toEvNode(v, 0)
}

const (
	evMaxDepth = 5
	evFoldRows = 10
)

func toEvNode(v any, depth int) *evNode {
	switch x := v.(type) {
	case nil:
		return &evNode{Kind: "scalar", Scalar: "null"}
	case map[string]any:
		if depth >= evMaxDepth {
			return jsonNode(x)
		}
		if len(x) == 0 {
			return &evNode{Kind: "empty"}
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		n := &evNode{Kind: "record"}
		for _, k := range keys {
			n.Fields = append(n.Fields, evField{Key: k, Value: toEvNode(x[k], depth+1)})
		}
		return n
	case []any:
		if len(x) == 0 {
			return &evNode{Kind: "empty"}
		}
		if depth >= evMaxDepth {
			return jsonNode(x)
		}
		scalars := true
		records := true
		for _, e := range x {
			switch e.(type) {
			case map[string]any:
				scalars = false
			case []any:
				scalars, records = false, false
			default:
				records = false
			}
		}
		if scalars {
			n := &evNode{Kind: "list"}
			for _, e := range x {
				n.Scalars = append(n.Scalars, scalarText(e))
			}
			n.Collapse = len(n.Scalars) > evFoldRows
			return n
		}
		if records {
			// A list of records is a table: one column per key any record has.
			seen := map[string]bool{}
			n := &evNode{Kind: "table"}
			for _, e := range x {
				for k := range e.(map[string]any) {
					if !seen[k] {
						seen[k] = true
						n.Columns = append(n.Columns, k)
					}
				}
			}
			sort.Strings(n.Columns)
			for _, e := range x {
				rec := e.(map[string]any)
				row := make([]*evNode, len(n.Columns))
				for i, c := range n.Columns {
					if cv, ok := rec[c]; ok {
						row[i] = toEvNode(cv, depth+1)
					} else {
						row[i] = &evNode{Kind: "empty"}
					}
				}
				n.Rows = append(n.Rows, row)
			}
			n.Collapse = len(n.Rows) > evFoldRows
			return n
		}
		n := &evNode{Kind: "record"} // mixed: index them
		for i, e := range x {
			n.Fields = append(n.Fields, evField{Key: strconv.Itoa(i), Value: toEvNode(e, depth+1)})
		}
		return n
	default:
		return &evNode{Kind: "scalar", Scalar: scalarText(x)}
	}
}

func jsonNode(v any) *evNode {
	b, _ := json.Marshal(v)
	return &evNode{Kind: "scalar", Scalar: string(b)}
}

func scalarText(v any) string {
	switch x := v.(type) {
	case json.Number:
		if _, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return string(x)
		}
		if _, err := strconv.ParseUint(string(x), 10, 64); err == nil {
			return string(x)
		}
		if f, err := x.Float64(); err == nil {
			return shortFloat(f)
		}
		return string(x)
	case string:
		return x
	case bool:
		return strconv.FormatBool(x)
	case nil:
		return "null"
	}
	return fmt.Sprint(v)
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

// ---- histograms ----

type htmlHist struct {
	Name, Unit, Labels string
	Count              uint64
	Sum, Mean, Max     string
	P50, P99           string
	W, H               int
	Bars               []svgBar
	YTicks             []svgTick
	Empty              bool
}

type svgBar struct {
	X, Y, W, H string
	TextX      string
	LabelY     string
	Label      string // the bucket's upper bound, on every few bars
	Title      string
}

type svgTick struct {
	Pos   string
	Label string
}

const (
	histW      = 760
	histH      = 220
	histLeft   = 56
	histBottom = 40
	histTop    = 16
)

// newHTMLHist draws a histogram as bars, one per bucket. Buckets in the
// report are cumulative (Prometheus' le): each bar is the difference.
func newHTMLHist(h *finding.Histogram) htmlHist {
	out := htmlHist{Name: h.Name, Unit: h.Unit, Labels: labelText(h.Labels), Count: h.Count,
		Sum: shortFloat(h.Sum), Max: shortFloat(h.Max), W: histW, H: histH}
	if h.Count > 0 {
		out.Mean = shortFloat(h.Sum / float64(h.Count))
		out.P50 = quantileLE(h, 0.5)
		out.P99 = quantileLE(h, 0.99)
	}
	type bucket struct {
		le    float64
		count uint64
	}
	var bs []bucket
	var prev uint64
	for _, b := range h.Buckets {
		c := uint64(0)
		if b.Count > prev {
			c = b.Count - prev
		}
		prev = max(prev, b.Count)
		bs = append(bs, bucket{b.LE, c})
	}
	for len(bs) > 0 && bs[0].count == 0 { // the empty low end says nothing
		bs = bs[1:]
	}
	for len(bs) > 0 && bs[len(bs)-1].count == 0 {
		bs = bs[:len(bs)-1]
	}
	if len(bs) == 0 {
		out.Empty = true
		return out
	}
	var top uint64
	for _, b := range bs {
		top = max(top, b.count)
	}
	plotW := float64(histW - histLeft - 8)
	plotH := float64(histH - histTop - histBottom)
	slot := plotW / float64(len(bs))
	// Label every bar when there is room, else every few (the title of
	// each bar still tells its bounds).
	every := int(math.Ceil(36 / slot))
	for i, b := range bs {
		bh := plotH * float64(b.count) / float64(top)
		if b.count > 0 && bh < 1 {
			bh = 1
		}
		x := float64(histLeft) + float64(i)*slot
		y := float64(histTop) + plotH - bh
		lo := "0"
		if i > 0 {
			lo = shortFloat(bs[i-1].le)
		} else if j := bucketIndex(h, b.le); j > 0 {
			lo = shortFloat(h.Buckets[j-1].LE)
		}
		label := ""
		if i%every == 0 {
			label = leText(b.le)
		}
		out.Bars = append(out.Bars, svgBar{
			X: f1(x + 1), Y: f1(y), W: f1(math.Max(slot-2, 1)), H: f1(bh),
			TextX: f1(x + slot/2), LabelY: f1(float64(histH - histBottom + 14)),
			Label: label,
			Title: fmt.Sprintf("%s < v ≤ %s %s: %d", lo, leText(b.le), h.Unit, b.count),
		})
	}
	for _, v := range []uint64{0, top / 2, top} {
		y := float64(histTop) + plotH - plotH*float64(v)/float64(top)
		out.YTicks = append(out.YTicks, svgTick{Pos: f1(y), Label: strconv.FormatUint(v, 10)})
	}
	return out
}

func bucketIndex(h *finding.Histogram, le float64) int {
	for i, b := range h.Buckets {
		if b.LE == le {
			return i
		}
	}
	return -1
}

// leText prints a bucket bound compactly (1023 → 1023, 1048575 → 1.0M).
func leText(le float64) string {
	switch {
	case math.IsInf(le, 1):
		return "+Inf"
	case le >= 1e9:
		return strconv.FormatFloat(le/1e9, 'f', 1, 64) + "G"
	case le >= 1e6:
		return strconv.FormatFloat(le/1e6, 'f', 1, 64) + "M"
	case le >= 1e4:
		return strconv.FormatFloat(le/1e3, 'f', 0, 64) + "k"
	}
	return shortFloat(le)
}

// quantileLE is an upper estimate of a quantile: the bound of the first
// bucket whose cumulative count reaches it.
func quantileLE(h *finding.Histogram, q float64) string {
	want := uint64(math.Ceil(q * float64(h.Count)))
	for _, b := range h.Buckets {
		if b.Count >= want {
			return shortFloat(math.Min(b.LE, h.Max))
		}
	}
	return shortFloat(h.Max)
}

// ---- flame graphs ----

const (
	flameW        = 1200
	flameRowH     = 17
	flameMaxNodes = 20000 // beyond this the smallest frames are left out
	flameMinRectW = 0.3   // narrower rectangles are not drawn
	flameCharW    = 6.6   // 11px monospace
)

type htmlProfile struct {
	ID      string
	Name    string
	Unit    string
	Labels  string
	Total   string // with its unit
	CPUTime string
	Stacks  int
	Omitted int
	W, H    int
	Rects   []flameRect
	Data    flameData
}

type flameRect struct {
	X, Y, W string
	TextX   string
	TextY   string
	Fill    string
	Label   string
	Title   string
}

// flameData is what the page's script zooms and searches: the merged
// tree, one column per property, nodes in depth-first order (a node's
// descendants follow it), each with its offset X within the root.
type flameData struct {
	Unit   string   `json:"unit"`
	Total  uint64   `json:"total"`
	Names  []string `json:"n"`
	Values []uint64 `json:"v"`
	X      []uint64 `json:"x"`
	Depth  []int    `json:"d"`
	Hue    []int    `json:"h"`
}

type flameNode struct {
	name     string
	value    uint64
	children map[string]*flameNode
}

func newHTMLProfile(i int, p *finding.Profile) htmlProfile {
	out := htmlProfile{ID: fmt.Sprintf("flame-%d", i+1), Name: p.Name, Unit: p.Unit, Labels: labelText(p.Labels),
		Total: valueText(p.Total(), p.Unit), Stacks: len(p.Stacks), W: flameW}
	if p.Unit == "samples" && p.PeriodNs > 0 {
		out.CPUTime = shortFloat(float64(p.Total())*float64(p.PeriodNs)/1e9) + " s"
	}
	root := &flameNode{name: "all", children: map[string]*flameNode{}}
	for _, s := range p.Stacks {
		if s.Value == 0 {
			continue
		}
		root.value += s.Value
		cur := root
		for _, fr := range s.Frames {
			c := cur.children[fr]
			if c == nil {
				c = &flameNode{name: fr, children: map[string]*flameNode{}}
				cur.children[fr] = c
			}
			c.value += s.Value
			cur = c
		}
	}
	// Leave out the smallest frames when there are too many to draw:
	// a frame is never larger than its parent, so a value threshold cuts
	// whole subtrees and the tree stays a tree.
	var values []uint64
	var collect func(n *flameNode)
	collect = func(n *flameNode) {
		values = append(values, n.value)
		for _, c := range n.children {
			collect(c)
		}
	}
	collect(root)
	threshold := uint64(1)
	if len(values) > flameMaxNodes {
		sort.Slice(values, func(a, b int) bool { return values[a] > values[b] })
		threshold = values[flameMaxNodes-1] + 1
	}
	d := &out.Data
	d.Unit, d.Total = p.Unit, root.value
	var walk func(n *flameNode, x uint64, depth int)
	walk = func(n *flameNode, x uint64, depth int) {
		if n.value < threshold && depth > 0 {
			out.Omitted++
			return
		}
		d.Names = append(d.Names, n.name)
		d.Values = append(d.Values, n.value)
		d.X = append(d.X, x)
		d.Depth = append(d.Depth, depth)
		d.Hue = append(d.Hue, frameHue(n.name))
		names := make([]string, 0, len(n.children))
		for k := range n.children {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			c := n.children[k]
			walk(c, x, depth+1)
			x += c.value
		}
	}
	walk(root, 0, 0)
	if root.value == 0 {
		out.H = flameRowH
		return out
	}
	// The graph is as tall as its deepest frame wide enough to draw
	// (zooming in, the script makes room for deeper ones).
	drawnDepth := 0
	for j := range d.Names {
		if float64(d.Values[j])/float64(root.value)*flameW >= flameMinRectW {
			drawnDepth = max(drawnDepth, d.Depth[j])
		}
	}
	out.H = (drawnDepth + 1) * flameRowH
	// The server draws the whole graph, so that it shows without script;
	// the script redraws it on zoom and search.
	for j := range d.Names {
		w := float64(d.Values[j]) / float64(root.value) * flameW
		if w < flameMinRectW {
			continue
		}
		x := float64(d.X[j]) / float64(root.value) * flameW
		y := float64(out.H - (d.Depth[j]+1)*flameRowH)
		out.Rects = append(out.Rects, flameRect{
			X: f1(x), Y: f1(y), W: f1(w), TextX: f1(x + 3), TextY: f1(y + 12),
			Fill:  fmt.Sprintf("hsl(%d,75%%,62%%)", d.Hue[j]),
			Label: fitLabel(d.Names[j], w),
			Title: fmt.Sprintf("%s: %s (%s%%)", d.Names[j], valueText(d.Values[j], p.Unit), pct(d.Values[j], root.value)),
		})
	}
	return out
}

// valueText prints a profile's value in its unit, nanoseconds as time.
func valueText(v uint64, unit string) string {
	if unit == "ns" {
		switch x := float64(v); {
		case x >= 1e9:
			return strconv.FormatFloat(x/1e9, 'f', 2, 64) + " s"
		case x >= 1e6:
			return strconv.FormatFloat(x/1e6, 'f', 1, 64) + " ms"
		case x >= 1e3:
			return strconv.FormatFloat(x/1e3, 'f', 1, 64) + " µs"
		}
	}
	return strconv.FormatUint(v, 10) + " " + unit
}

func pct(v, total uint64) string {
	if total == 0 {
		return "0"
	}
	return strconv.FormatFloat(100*float64(v)/float64(total), 'f', 1, 64)
}

// fitLabel cuts a frame name to what a rectangle w units wide shows; the
// script does the same when it redraws.
func fitLabel(name string, w float64) string {
	n := int((w - 6) / flameCharW)
	r := []rune(name)
	switch {
	case n < 3:
		return ""
	case len(r) <= n:
		return name
	}
	return string(r[:n-1]) + "…"
}

// frameHue gives a frame a stable warm colour (red to yellow), so that the
// same function has the same colour in every graph of the report.
func frameHue(name string) int {
	h := fnv.New32a()
	h.Write([]byte(name))
	return int(h.Sum32() % 55)
}

// ---- timelines ----

type htmlTimeline struct {
	Name, Unit, Labels string
	Events             int
	Dropped            uint64
	W, H               int
	Path               string
	Points             []svgPoint
	XTicks, YTicks     []svgTick
	PlotBottom         string
	PlotLeft           string
	PlotRight          string
}

type svgPoint struct {
	X, Y   string
	LabelX string
	LabelY string
	Label  string // drawn next to the point when the chart is not crowded
	Title  string
}

const (
	tlW       = 900
	tlLeft    = 56
	tlRight   = 16
	tlTop     = 16
	tlBottom  = 36
	tlRowMin  = 18 // px per distinct value, at least
	tlMaxText = 40 // label points only when there are this few
	tlMaxDots = 2000
)

// newHTMLTimeline draws a step chart: the subject's value (its CPU) from
// each event on, over the run's seconds.
func newHTMLTimeline(tl *finding.Timeline, durationS float64) htmlTimeline {
	out := htmlTimeline{Name: tl.Name, Unit: tl.Unit, Labels: labelText(tl.Labels), Events: len(tl.Events), Dropped: tl.Dropped, W: tlW}
	if len(tl.Events) == 0 {
		out.H = tlTop + tlBottom
		return out
	}
	evs := append([]finding.TimelineEvent(nil), tl.Events...)
	sort.SliceStable(evs, func(a, b int) bool { return evs[a].AtS < evs[b].AtS })
	lo, hi := evs[0].Value, evs[0].Value
	end := durationS
	for _, e := range evs {
		lo, hi = math.Min(lo, e.Value), math.Max(hi, e.Value)
		end = math.Max(end, e.AtS)
	}
	if end <= 0 {
		end = 1
	}
	if tl.Unit == "cpu" {
		lo = math.Min(lo, 0)
	}
	span := hi - lo
	if span == 0 {
		span = 1
	}
	rows := math.Min(span+1, 64)
	plotH := math.Max(120, rows*tlRowMin)
	out.H = int(plotH) + tlTop + tlBottom
	plotW := float64(tlW - tlLeft - tlRight)
	xOf := func(s float64) float64 { return tlLeft + plotW*s/end }
	yOf := func(v float64) float64 { return tlTop + plotH - plotH*(v-lo)/span }
	var p strings.Builder
	fmt.Fprintf(&p, "M%s %s", f1(xOf(evs[0].AtS)), f1(yOf(evs[0].Value)))
	for _, e := range evs[1:] {
		fmt.Fprintf(&p, "H%sV%s", f1(xOf(e.AtS)), f1(yOf(e.Value)))
	}
	fmt.Fprintf(&p, "H%s", f1(xOf(end)))
	out.Path = p.String()
	for i, e := range evs {
		if i == tlMaxDots {
			break
		}
		pt := svgPoint{X: f1(xOf(e.AtS)), Y: f1(yOf(e.Value)), LabelX: f1(xOf(e.AtS) + 4), LabelY: f1(yOf(e.Value) - 4),
			Title: fmt.Sprintf("%s s: %s %s", strconv.FormatFloat(e.AtS, 'f', 3, 64), shortFloat(e.Value), tl.Unit)}
		if e.Label != "" {
			pt.Title += " (" + e.Label + ")"
		}
		if len(evs) <= tlMaxText {
			pt.Label = shortFloat(e.Value)
			if e.Label != "" {
				pt.Label += " " + e.Label
			}
		}
		out.Points = append(out.Points, pt)
	}
	out.PlotBottom = f1(tlTop + plotH)
	out.PlotLeft = f1(tlLeft)
	out.PlotRight = f1(float64(tlW - tlRight))
	step := niceStep(end, 8)
	for s := 0.0; s <= end+1e-9; s += step {
		out.XTicks = append(out.XTicks, svgTick{Pos: f1(xOf(s)), Label: shortFloat(s)})
	}
	ystep := math.Max(1, niceStep(span, 8))
	for v := math.Ceil(lo/ystep) * ystep; v <= hi+1e-9; v += ystep {
		out.YTicks = append(out.YTicks, svgTick{Pos: f1(yOf(v)), Label: shortFloat(v)})
	}
	return out
}

// niceStep is a round tick step (1, 2 or 5 times a power of ten) giving at
// most n ticks over span.
func niceStep(span float64, n int) float64 {
	if span <= 0 {
		return 1
	}
	raw := span / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}
