// Package render prints reports: text that reads well in 80 columns (with
// colour only when writing to a terminal), the JSON contract, and one
// self-contained HTML page with charts and flame graphs.
package render

import (
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/human"
	"github.com/wolf-investigator/wolf/internal/kstack"
)

// Format is an output format name.
type Format string

const (
	FormatText Format = "text"
	FormatJSON Format = "json"
	FormatHTML Format = "html"
)

// ParseFormat validates a --format value.
func ParseFormat(s string) (Format, error) {
	switch Format(s) {
	case FormatText, FormatJSON, FormatHTML:
		return Format(s), nil
	}
	return "", fmt.Errorf("unknown format %q (want text, json or html)", s)
}

// JSON writes the report as indented JSON, the contract in ARCHITECTURE.md#the-json-contract.
func JSON(w io.Writer, r *finding.Report) error {
	if r.Findings == nil {
		r.Findings = []finding.Finding{}
	}
	if r.Histograms == nil {
		r.Histograms = []finding.Histogram{}
	}
	if r.Diagnoses == nil {
		r.Diagnoses = []finding.Diagnosis{}
	}
	if r.Capabilities == nil {
		r.Capabilities = map[string]bool{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("render json: %w", err)
	}
	return nil
}

// TextOptions tune the text renderer.
type TextOptions struct {
	Color bool // ANSI colours; only for terminals
	Width int  // wrap width; 80 when zero
	// StackDepth limits frames printed per subject (offenders get twice
	// as many); 0 means 4.
	StackDepth int
	// Histograms, when set, picks histograms to draw as log2 bars after
	// the report, as SystemTap's @hist_log prints them.
	Histograms func(name string) bool
}

type textWriter struct {
	w     io.Writer
	o     TextOptions
	err   error
	color bool
}

func (t *textWriter) printf(format string, args ...any) {
	if t.err != nil {
		return
	}
	_, t.err = fmt.Fprintf(t.w, format, args...)
}

func (t *textWriter) paint(code, s string) string {
	if !t.color {
		return s
	}
	return "\x1b[" + code + "m" + s + "\x1b[0m"
}

// Text writes the report for a person: a header, the diagnoses (each with
// its chain and the findings it explains folded under it), the other
// findings ranked by severity, a verdict line, and what wolf itself cost.
func Text(w io.Writer, r *finding.Report, o TextOptions) error {
	if o.Width <= 0 {
		o.Width = 80
	}
	if o.StackDepth <= 0 {
		o.StackDepth = 4
	}
	t := &textWriter{w: w, o: o, color: o.Color}
	t.printf("%s\n\n", t.paint("1", header(r)))
	// What did not run comes first: a report without it looks complete.
	if len(r.Errors) > 0 {
		t.printf("%s\n", t.paint("1;31", Incomplete(r)))
		for _, e := range r.Errors {
			for i, l := range Wrap(e, t.o.Width-4) {
				lead := "  - "
				if i > 0 {
					lead = "    "
				}
				t.printf("%s%s\n", lead, l)
			}
		}
		t.printf("\n")
	}
	t.checklist(r.Checklist)
	fs := append([]finding.Finding(nil), r.Findings...)
	finding.Sort(fs)
	for i := range r.Diagnoses {
		t.diagnosis(&r.Diagnoses[i], fs)
	}
	for _, f := range fs {
		if len(f.ExplainedBy) > 0 && explainedHere(r, &f) {
			continue // folded under its diagnosis
		}
		t.finding(&f)
	}
	for _, n := range r.Notes {
		for i, l := range Wrap(n, t.o.Width-6) {
			lead := "Note: "
			if i > 0 {
				lead = "      "
			}
			t.printf("%s%s\n", lead, l)
		}
	}
	if len(r.Notes) > 0 {
		t.printf("\n")
	}
	if line := dataLine(r); line != "" {
		for _, l := range Wrap(line, t.o.Width) {
			t.printf("%s\n", l)
		}
		t.printf("\n")
	}
	t.printf("%s\n", t.paint("1", Verdict(r)))
	if r.Command == "analyze" {
		return t.err // offline: wolf attached nothing, so there is no cost to tell
	}
	ov := r.Overhead
	perEvent := ""
	if ov.Events > 0 && ov.BPFRunNs > 0 {
		perEvent = fmt.Sprintf(" (%.0f ns per event)", float64(ov.BPFRunNs)/float64(ov.Events))
	}
	t.printf("wolf's own cost: %.2f s CPU, %.1f ms in BPF programs%s, %d events, %d dropped\n",
		ov.CPUSeconds, float64(ov.BPFRunNs)/1e6, perEvent, ov.Events, ov.Dropped)
	if line := windowCost(ov); line != "" {
		t.printf("  %s\n", line)
	}
	if o.Histograms != nil && t.err == nil {
		for _, h := range r.Histograms {
			if o.Histograms(h.Name) {
				Log2Histogram(w, h)
			}
		}
	}
	return t.err
}

// windowCost says what the window cost apart from start-up, against the
// BPF budget: "" when the report has no such figures (a report of an
// older wolf, or a command that attached nothing).
func windowCost(ov finding.Overhead) string {
	if ov.StartupS == 0 && ov.CPUPct == 0 && ov.BPFPct == 0 {
		return ""
	}
	budget := ""
	if ov.BudgetPct > 0 {
		budget = " (budget " + human.Percent(ov.BudgetPct)
		if ov.OverBudget {
			budget += ", over it"
		}
		if ov.BudgetBit {
			budget += ", detail sampled"
		}
		budget += ")"
	}
	return fmt.Sprintf("start-up %.2f s CPU; then %s of one CPU, BPF %s%s",
		ov.StartupCPUS, human.Percent(ov.CPUPct), human.Percent(ov.BPFPct), budget)
}

// header is the report's first line: who ran what where. A saved log's
// analysis names the log's host and kernel, which the log may not give.
func header(r *finding.Report) string {
	parts := []string{"wolf " + r.WolfVersion, r.Command}
	if r.Host != "" {
		parts = append(parts, r.Host)
	}
	kernel := r.Kernel
	if kernel == "" {
		kernel = "unknown"
	}
	parts = append(parts, "kernel "+kernel, fmt.Sprintf("%.1f s", r.DurationS))
	return strings.Join(parts, " · ")
}

// dataLine tells what the report holds beyond its findings that text
// cannot show (flame graphs, timelines), and how to see it.
func dataLine(r *finding.Report) string {
	var parts []string
	for _, p := range r.Profiles {
		parts = append(parts, fmt.Sprintf("%s (%d stacks, %d %s)", p.Name, len(p.Stacks), p.Total(), p.Unit))
	}
	if n := len(r.Timelines); n > 0 {
		parts = append(parts, fmt.Sprintf("%d migration timeline%s", n, map[bool]string{true: "", false: "s"}[n == 1]))
	}
	if len(parts) == 0 {
		return ""
	}
	return "Also collected: " + strings.Join(parts, ", ") + ". See them with --format html -o FILE, or export the stacks with --folded FILE / --pprof FILE."
}

// Incomplete is the line that says which investigators did not run, or
// "" when every one did.
func Incomplete(r *finding.Report) string {
	if len(r.Errors) == 0 {
		return ""
	}
	var names []string
	for _, e := range r.Errors {
		name, _, _ := strings.Cut(e, ":")
		names = append(names, name)
	}
	verb := "did"
	if len(names) == 1 {
		return fmt.Sprintf("INCOMPLETE: %s %s not run; this report is without it:", names[0], verb)
	}
	return fmt.Sprintf("INCOMPLETE: %s %s not run; this report is without them:", strings.Join(names, ", "), verb)
}

// Verdict is the one line that sums the report up.
func Verdict(r *finding.Report) string {
	counts := map[finding.Severity]int{}
	for _, f := range r.Findings {
		counts[f.Severity]++
	}
	if len(r.Errors) > 0 && counts[finding.Critical]+counts[finding.Warning] == 0 {
		return fmt.Sprintf("Incomplete: %d investigator(s) failed; no problem found by the rest.", len(r.Errors))
	}
	if len(r.Errors) > 0 {
		return fmt.Sprintf("Unhealthy: %d critical, %d warning, %d info; incomplete: %d investigator(s) failed.", counts[finding.Critical], counts[finding.Warning], counts[finding.Info], len(r.Errors))
	}
	if counts[finding.Critical]+counts[finding.Warning] == 0 {
		v := fmt.Sprintf("Healthy: nothing wrong found in %.0f s.", r.DurationS)
		if r.Command == "analyze" {
			v = "Nothing wrong found in the log."
		}
		if n := counts[finding.Info]; n > 0 {
			v += fmt.Sprintf(" (%d note%s above.)", n, map[bool]string{true: "", false: "s"}[n == 1])
		}
		return v
	}
	if n := len(r.Diagnoses); n > 0 {
		return fmt.Sprintf("Unhealthy: %s; %d critical, %d warning, %d info findings.", human.Plural(n, "diagnosis", "diagnoses"), counts[finding.Critical], counts[finding.Warning], counts[finding.Info])
	}
	return fmt.Sprintf("Unhealthy: %d critical, %d warning, %d info.", counts[finding.Critical], counts[finding.Warning], counts[finding.Info])
}

// explainedHere says whether a diagnosis of r explains f, so that f is
// folded under it rather than listed on its own.
func explainedHere(r *finding.Report, f *finding.Finding) bool {
	for _, ref := range f.ExplainedBy {
		for _, d := range r.Diagnoses {
			if d.Ref == ref {
				return true
			}
		}
	}
	return false
}

// diagnosis writes one diagnosis: the root cause, the chain hop by hop
// with its numbers, what would confirm it, what to do, and the findings it
// explains, one line each.
func (t *textWriter) diagnosis(d *finding.Diagnosis, fs []finding.Finding) {
	const indent = "          "
	code := map[finding.Severity]string{finding.Critical: "1;31", finding.Warning: "1;33", finding.Info: "36"}[d.Severity]
	for i, line := range Wrap(d.Title, t.o.Width-len(indent)) {
		lead := indent
		if i == 0 {
			lead = t.paint(code, "DIAGNOSIS") + " "
		}
		t.printf("%s%s\n", lead, line)
	}
	t.printf("%s%s\n", indent, t.paint("2", fmt.Sprintf("[%s · %s · %s · %s]", d.ID, d.Ref, d.Severity, d.Confidence)))
	for i, h := range d.Chain {
		text := fmt.Sprintf("%d. %s: %s", i+1, h.Relation, h.Text)
		if h.Likely {
			text += " (likely)"
		}
		for j, line := range Wrap(text, t.o.Width-len(indent)-3) {
			if j == 0 {
				t.printf("%s%s\n", indent, line)
			} else {
				t.printf("%s   %s\n", indent, line)
			}
		}
	}
	for i, r := range d.Rivals {
		if i == 2 {
			break
		}
		t.para(indent, "Ruled out: ", r.Text)
	}
	for _, c := range d.Confirm {
		t.para(indent, "To confirm: ", c)
	}
	if len(d.Remediation) > 0 {
		t.printf("%s%s\n", indent, t.paint("1", "Do:"))
		for _, r := range d.Remediation {
			for i, line := range Wrap(r, t.o.Width-len(indent)-2) {
				if i == 0 {
					t.printf("%s- %s\n", indent, line)
				} else {
					t.printf("%s  %s\n", indent, line)
				}
			}
		}
	}
	var folded []*finding.Finding
	for i := range fs {
		for _, ref := range fs[i].ExplainedBy {
			if ref == d.Ref {
				folded = append(folded, &fs[i])
			}
		}
	}
	if len(folded) > 0 {
		t.printf("%s%s\n", indent, t.paint("1", "Explains:"))
		for _, f := range folded {
			line := fmt.Sprintf("%-8s %s [%s]", strings.ToUpper(f.Severity.String()), f.Title, f.ID)
			for i, l := range Wrap(line, t.o.Width-len(indent)-2) {
				if i == 0 {
					t.printf("%s- %s\n", indent, l)
				} else {
					t.printf("%s  %s\n", indent, l)
				}
			}
		}
	}
	t.printf("\n")
}

func (t *textWriter) finding(f *finding.Finding) {
	label := strings.ToUpper(f.Severity.String())
	code := map[finding.Severity]string{finding.Critical: "1;31", finding.Warning: "1;33", finding.Info: "36"}[f.Severity]
	const indent = "          "
	title := Wrap(f.Title, t.o.Width-len(indent))
	for i, line := range title {
		if i == 0 {
			t.printf("%s%s%s\n", t.paint(code, label), strings.Repeat(" ", len(indent)-len(label)), line)
		} else {
			t.printf("%s%s\n", indent, line)
		}
	}
	t.printf("%s%s\n", indent, t.paint("2", "["+f.ID+"]"))
	t.para(indent, "", f.Summary)
	t.para(indent, "Why: ", f.Mechanism)
	if len(f.Evidence) > 0 {
		t.para(indent, "Evidence: ", evidenceLine(f.Evidence))
	}
	for _, s := range f.Subjects {
		t.subject(indent, &s)
	}
	if len(f.Remediation) > 0 {
		t.printf("%s%s\n", indent, t.paint("1", "Do:"))
		for _, r := range f.Remediation {
			for i, line := range Wrap(r, t.o.Width-len(indent)-2) {
				if i == 0 {
					t.printf("%s- %s\n", indent, line)
				} else {
					t.printf("%s  %s\n", indent, line)
				}
			}
		}
	}
	t.printf("\n")
}

func (t *textWriter) para(indent, prefix, text string) {
	if text == "" {
		return
	}
	for i, line := range Wrap(prefix+text, t.o.Width-len(indent)) {
		_ = i
		t.printf("%s%s\n", indent, line)
	}
}

func (t *textWriter) subject(indent string, s *finding.Subject) {
	who := s.Comm
	switch {
	case s.PID != 0 && s.TID != 0 && s.TID != s.PID:
		who = fmt.Sprintf("%s (pid %d, tid %d)", s.Comm, s.PID, s.TID)
	case s.PID != 0:
		who = fmt.Sprintf("%s (pid %d)", s.Comm, s.PID)
	case s.Cgroup != "" && s.Label != "":
		who = s.Label + " (cgroup " + s.Cgroup + ")"
	case s.Cgroup != "":
		who = s.Cgroup
	case s.CPU != nil:
		who = fmt.Sprintf("cpu %d", *s.CPU)
	}
	if s.State != "" {
		who += " " + s.State
	}
	if s.PID != 0 && s.Label != "" {
		who += " in " + s.Label
	}
	line := who
	if s.Detail != "" {
		line += ": " + s.Detail
	}
	for i, l := range Wrap(line, t.o.Width-len(indent)-10) {
		if i == 0 {
			t.printf("%s%-9s %s\n", indent, s.Role, l)
		} else {
			t.printf("%s          %s\n", indent, l)
		}
	}
	depth := t.o.StackDepth
	if s.Role == finding.RoleOffender {
		depth *= 2
	}
	stack := s.Stack
	for len(stack) > 1 && schedulerFrame(stack[0]) {
		stack = stack[1:] // how a task sleeps is noise; where it sleeps is not
	}
	for i, fr := range stack {
		if i == depth {
			t.printf("%s          %s\n", indent, t.paint("2", fmt.Sprintf("… %s (--format json has them all)", human.Plural(len(stack)-depth, "more frame", "more frames"))))
			break
		}
		t.printf("%s          %s\n", indent, t.paint("2", fr))
	}
}

func evidenceLine(ev map[string]any) string {
	keys := make([]string, 0, len(ev))
	for k := range ev {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		var v string
		switch x := ev[k].(type) {
		case float64:
			v = human.Number(x)
		default:
			// Lists and records (a chain of owners, a queue over time) are
			// told by the subjects or kept for --format json.
			switch reflect.ValueOf(x).Kind() {
			case reflect.Slice, reflect.Array, reflect.Map, reflect.Struct:
				continue
			}
			v = fmt.Sprint(x)
		}
		parts = append(parts, k+"="+v)
	}
	return strings.Join(parts, " ")
}

// Wrap breaks s into lines of at most width runes, at spaces when it can.
func Wrap(s string, width int) []string {
	if width < 20 {
		width = 20
	}
	var lines []string
	for _, para := range strings.Split(s, "\n") {
		words := strings.Fields(para)
		var cur []rune
		for _, w := range words {
			rw := []rune(w)
			for len(rw) > width { // a token longer than a line: cut it
				if len(cur) > 0 {
					lines = append(lines, string(cur))
					cur = nil
				}
				lines = append(lines, string(rw[:width]))
				rw = rw[width:]
			}
			switch {
			case len(cur) == 0:
				cur = rw
			case len(cur)+1+len(rw) <= width:
				cur = append(append(cur, ' '), rw...)
			default:
				lines = append(lines, string(cur))
				cur = rw
			}
		}
		if len(cur) > 0 {
			lines = append(lines, string(cur))
		}
	}
	return lines
}

// schedulerFrame reports frames every sleeping task has (the scheduler,
// the generic sleep and lock slow paths, unreliable "?" frames).
func schedulerFrame(frame string) bool {
	if kstack.Unreliable(frame) {
		return true
	}
	switch kstack.FuncName(frame) {
	case "__schedule", "schedule", "schedule_timeout", "schedule_preempt_disabled", "io_schedule",
		"io_schedule_timeout", "schedule_hrtimeout_range", "schedule_hrtimeout_range_clock",
		"preempt_schedule", "preempt_schedule_common", "__switch_to", "__switch_to_asm",
		"__mutex_lock", "__mutex_lock_slowpath", "mutex_lock", "rwsem_down_write_slowpath", "rwsem_down_read_slowpath",
		"down_write", "down_read", "__down_common", "__down", "rt_mutex_slowlock_block",
		"wait_for_completion", "__wait_for_common", "wait_for_common":
		return true
	}
	return false
}
