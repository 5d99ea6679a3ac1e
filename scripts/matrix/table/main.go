// Command table classifies the outputs of kernel-matrix rows
// (scripts/matrix/run) and writes the kernel x command table as markdown
// and JSON.
//
//	table -out docs/kernels/matrix ROWDIR...
//
// Each ROWDIR holds row.json (which kernel), console.log (the guest's
// console) and NAME.out / NAME.rc for every framed output of
// scripts/matrix/guest.sh. A cell is "ok", "degraded" (it ran; what was
// lost is listed), "fail" (with the first error line) or absent (the step
// did not run in that row).
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Status of a cell.
const (
	OK       = "ok"
	Degraded = "degraded"
	Fail     = "fail"
	// NA: the kernel did not produce the lab's pathology in that run
	// (sched-bounce's ping-pong depends on the machine), said with the
	// kernel's own numbers.
	NA = "n/a"
)

// Cell is one command on one kernel.
type Cell struct {
	Status string `json:"status"`
	// Detail is one line: the first error line of a failure, the
	// findings that made a lab pass, or the investigators check found
	// degraded.
	Detail string `json:"detail,omitempty"`
	// Lost is what a degraded cell ran without, in wolf's words (the
	// report's notes, check's missing features).
	Lost []string `json:"lost,omitempty"`
}

// Row is one kernel.
type Row struct {
	Row     string          `json:"row"`
	Kernel  string          `json:"kernel"` // uname -r in the guest
	Package string          `json:"package,omitempty"`
	Version string          `json:"version,omitempty"`
	Arch    string          `json:"arch"`
	Accel   string          `json:"accel"`
	Seconds int             `json:"seconds"`
	QemuRC  int             `json:"qemu_rc"`
	Wolf    string          `json:"wolf,omitempty"` // git describe of the tree wolf was built from
	Date    string          `json:"date,omitempty"`
	Cells   map[string]Cell `json:"cells"`
}

// Table is the whole matrix.
type Table struct {
	Generated string   `json:"generated"`
	Columns   []string `json:"columns"` // command names, in table order
	Rows      []Row    `json:"rows"`
}

// labs says what each lab must make its investigator report: a finding id
// (any of several, "|"), or "!id" for a baseline lab that must not raise
// it at warning or above. fallback, when set, is what a kernel that cannot
// show the pathology fully gives instead: the cell is then degraded, with
// wolf's notes saying why. Keep in step with ALL_LABS in guest.sh.
var labs = []struct{ name, inv, want, fallback string }{
	{"fuse-rwsem", "hung", "hung.lock-owner", ""},
	{"fuse-mutex", "hung", "hung.lock-owner", ""},
	{"coredump", "hung", "hung.coredump", ""},
	// Without the mmap_lock tracepoints (before 5.11) holds are not timed;
	// the waits behind the held lock still are.
	{"mmap-lock", "locks", "locks.mmap-hold", "locks.contention"},
	{"mmap-lock-reclaim", "locks", "locks.mmap-hold", "locks.contention"},
	{"memcg-stress", "reclaim", "reclaim.memcg-livelock|reclaim.memcg-pressure", ""},
	{"sched-bounce", "sched", "sched.bounce", ""},
	{"sched-affinity", "sched", "sched.bounce", ""},
	{"sched-pinned", "sched", "!sched.bounce", ""},
	{"tcp-collapse", "softirq", "softirq.stall", ""},
	// journal-stall is not among them: the guest has no mkfs.ext4.
	{"io-throttle", "io", "io.throttled", ""},
	{"dirty-throttle", "io", "io.dirty-throttled", ""},
	{"slow-device", "io", "io.slow-device", ""},
	{"hot-uprobe", "bpf", "bpf.hot-uprobe", ""},
}

var investigators = []string{"hung", "locks", "reclaim", "sched", "softirq", "io", "bpf"}

func columns() []string {
	cols := []string{"kernel-log", "check", "doctor"}
	cols = append(cols, investigators...)
	for _, l := range labs {
		cols = append(cols, "lab:"+l.name)
	}
	return cols
}

func main() {
	out := flag.String("out", "matrix", "write `PREFIX`.md and PREFIX.json")
	require := flag.String("require", "", "space-separated cell `PATTERNS` (path.Match on column names) that must not fail; default every cell")
	merge := flag.String("merge", "", "keep the rows of this existing `JSON` table that the new rows do not replace")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "table: give the row directories")
		os.Exit(2)
	}
	t := Table{Generated: time.Now().UTC().Format(time.RFC3339), Columns: columns()}
	for _, dir := range flag.Args() {
		r, err := readRow(dir)
		if err != nil {
			fmt.Fprintf(os.Stderr, "table: %v\n", err)
			os.Exit(1)
		}
		t.Rows = append(t.Rows, r)
	}
	if *merge != "" {
		if err := mergeOld(&t, *merge); err != nil {
			fmt.Fprintf(os.Stderr, "table: %v\n", err)
			os.Exit(1)
		}
	}
	sortRows(t.Rows)
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "table: %v\n", err)
		os.Exit(1)
	}
	js, _ := json.MarshalIndent(t, "", "  ")
	if err := os.WriteFile(*out+".json", append(js, '\n'), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "table: %v\n", err)
		os.Exit(1)
	}
	md := markdown(&t)
	if err := os.WriteFile(*out+".md", []byte(md), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "table: %v\n", err)
		os.Exit(1)
	}
	fmt.Print(summary(&t))
	if failed := failures(&t, strings.Fields(*require)); len(failed) > 0 {
		fmt.Fprintf(os.Stderr, "table: %d required cell(s) failed: %s\n", len(failed), strings.Join(failed, ", "))
		os.Exit(1)
	}
}

// rowOrder sorts x86-64 kernels by version, then arm64, then the host.
func sortRows(rows []Row) {
	key := func(r Row) (int, []int) {
		group := 0
		if r.Arch == "arm64" {
			group = 1
		}
		if strings.HasPrefix(r.Row, "host") {
			group = 2
		}
		var v []int
		for _, p := range strings.FieldsFunc(r.Kernel, func(c rune) bool { return c < '0' || c > '9' }) {
			n, _ := strconv.Atoi(p)
			v = append(v, n)
		}
		return group, v
	}
	sort.SliceStable(rows, func(i, j int) bool {
		gi, vi := key(rows[i])
		gj, vj := key(rows[j])
		if gi != gj {
			return gi < gj
		}
		return slices.Compare(vi, vj) < 0
	})
}

func mergeOld(t *Table, file string) error {
	b, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	var old Table
	if err := json.Unmarshal(b, &old); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	have := map[string]bool{}
	for _, r := range t.Rows {
		have[r.Row] = true
	}
	for _, r := range old.Rows {
		if !have[r.Row] {
			t.Rows = append(t.Rows, r)
		}
	}
	return nil
}

// ---------------------------------------------------------------- reading

type rowFiles struct{ dir string }

func (f rowFiles) read(name string) (string, bool) {
	b, err := os.ReadFile(filepath.Join(f.dir, name+".out"))
	if err != nil {
		return "", false
	}
	return string(b), true
}

func (f rowFiles) rc(name string) int {
	b, err := os.ReadFile(filepath.Join(f.dir, name+".rc"))
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return -1
	}
	return n
}

func readRow(dir string) (Row, error) {
	var r Row
	b, err := os.ReadFile(filepath.Join(dir, "row.json"))
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("%s/row.json: %w", dir, err)
	}
	if st, err := os.Stat(filepath.Join(dir, "row.json")); err == nil {
		r.Date = st.ModTime().UTC().Format("2006-01-02")
	}
	f := rowFiles{dir}
	r.Cells = map[string]Cell{}
	if env, ok := f.read("env"); ok {
		for _, line := range strings.Split(env, "\n") {
			if rest, ok := strings.CutPrefix(line, "uname: "); ok {
				if fs := strings.Fields(rest); len(fs) > 2 {
					r.Kernel = fs[2]
				}
			}
		}
	}
	if r.Kernel == "" {
		r.Kernel = r.Version
	}
	r.Cells["kernel-log"] = kernelLog(dir, r)
	checked := map[string]checkVerdict{}
	if _, ok := f.read("check"); ok {
		var c Cell
		c, checked = checkCell(f)
		r.Cells["check"] = c
	}
	if c, ok := doctorCell(f); ok {
		r.Cells["doctor"] = c
	}
	for _, inv := range investigators {
		if _, ok := f.read("inv-" + inv); !ok {
			continue
		}
		r.Cells[inv] = reportCell(f, "inv-"+inv)
	}
	for _, l := range labs {
		if _, ok := f.read("lab-" + l.name); !ok {
			continue
		}
		r.Cells["lab:"+l.name] = labCell(f, l.name, l.want, l.fallback)
	}
	// check tells the truth: what it calls ready runs, what it says
	// cannot run does not.
	if c, ok := r.Cells["check"]; ok && c.Status != Fail {
		var wrong []string
		for _, inv := range investigators {
			v, ok := checked[inv]
			ran, ok2 := r.Cells[inv]
			if !ok || !ok2 {
				continue
			}
			switch {
			case v.state == "cannot run" && ran.Status != Fail:
				wrong = append(wrong, fmt.Sprintf("%s: check says it cannot run, it ran", inv))
			case v.state != "cannot run" && ran.Status == Fail:
				wrong = append(wrong, fmt.Sprintf("%s: check says %s, it failed", inv, v.state))
			}
		}
		if len(wrong) > 0 {
			c.Status = Fail
			c.Detail = "disagrees with what ran: " + strings.Join(wrong, "; ")
			r.Cells["check"] = c
		}
	}
	return r, nil
}

var oopsRE = regexp.MustCompile(`BUG:|Oops|Kernel panic|soft lockup|hard LOCKUP|WARNING: CPU|Unrecoverable kprobe|rcu_sched self-detected stall|rcu: INFO`)

func kernelLog(dir string, r Row) Cell {
	if strings.HasPrefix(r.Row, "host") {
		return Cell{Status: OK, Detail: "not watched on the host"}
	}
	b, err := os.ReadFile(filepath.Join(dir, "console.log"))
	if err != nil {
		return Cell{Status: Fail, Detail: "no console log"}
	}
	for _, line := range strings.Split(string(b), "\n") {
		if oopsRE.MatchString(line) {
			return Cell{Status: Fail, Detail: strings.TrimSpace(strings.TrimRight(line, "\r"))}
		}
	}
	data, _ := os.ReadFile(filepath.Join(dir, "data.txt"))
	if !strings.Contains(string(data), "@@WOLF-NOTE done") {
		why := fmt.Sprintf("the run did not finish (qemu exit %d after %d s)", r.QemuRC, r.Seconds)
		return Cell{Status: Fail, Detail: why}
	}
	return Cell{Status: OK, Detail: fmt.Sprintf("clean, %d s", r.Seconds)}
}

// firstError is the first line of stderr worth showing.
func firstError(f rowFiles, name string) string {
	s, _ := f.read(name + ".stderr")
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "lab: ") {
			continue
		}
		return clip(line, 300)
	}
	return ""
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

type report struct {
	Findings []struct {
		ID       string `json:"id"`
		Severity string `json:"severity"`
		Title    string `json:"title"`
	} `json:"findings"`
	Diagnoses []struct {
		ID    string `json:"id"`
		Title string `json:"title"`
	} `json:"diagnoses"`
	Errors []string `json:"errors"`
	Notes  []string `json:"notes"`
}

func parseReport(f rowFiles, name string) (*report, error) {
	s, _ := f.read(name)
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("no output")
	}
	var rep report
	if err := json.Unmarshal([]byte(s), &rep); err != nil {
		return nil, fmt.Errorf("output is not a report: %v", err)
	}
	return &rep, nil
}

// reportCell: an investigator's run. Failed when it exited non-zero;
// degraded when its report has notes (what it ran without).
func reportCell(f rowFiles, name string) Cell {
	rc := f.rc(name)
	rep, err := parseReport(f, name)
	if rc != 0 || err != nil {
		line := firstError(f, name)
		if line == "" && err != nil {
			line = err.Error()
		}
		return Cell{Status: Fail, Detail: fmt.Sprintf("exit %d: %s", rc, line)}
	}
	if len(rep.Notes) > 0 {
		return Cell{Status: Degraded, Lost: rep.Notes}
	}
	return Cell{Status: OK}
}

func doctorCell(f rowFiles) (Cell, bool) {
	var runs, clean int
	var fails, lost []string
	for i := 1; ; i++ {
		name := fmt.Sprintf("doctor-%d", i)
		if _, ok := f.read(name); !ok {
			break
		}
		runs++
		rc := f.rc(name)
		rep, err := parseReport(f, name)
		if rc != 0 || err != nil {
			line := firstError(f, name)
			if line == "" && err != nil {
				line = err.Error()
			}
			fails = append(fails, fmt.Sprintf("run %d: exit %d: %s", i, rc, line))
			continue
		}
		bad := false
		for _, e := range rep.Errors {
			fails = append(fails, fmt.Sprintf("run %d: %s", i, clip(e, 200)))
			bad = true
		}
		for _, fd := range rep.Findings {
			if fd.Severity == "warning" || fd.Severity == "critical" {
				fails = append(fails, fmt.Sprintf("run %d: %s %s: %s", i, fd.Severity, fd.ID, clip(fd.Title, 160)))
				bad = true
			}
		}
		// An idle host has no root cause to name.
		for _, d := range rep.Diagnoses {
			fails = append(fails, fmt.Sprintf("run %d: diagnosis %s: %s", i, d.ID, clip(d.Title, 160)))
			bad = true
		}
		for _, n := range rep.Notes {
			if !slices.Contains(lost, n) {
				lost = append(lost, n)
			}
		}
		if !bad {
			clean++
		}
	}
	if runs == 0 {
		return Cell{}, false
	}
	detail := fmt.Sprintf("%d of %d idle runs clean", clean, runs)
	switch {
	case len(fails) > 0:
		return Cell{Status: Fail, Detail: detail + "; " + strings.Join(fails, "; ")}, true
	case len(lost) > 0:
		return Cell{Status: Degraded, Detail: detail, Lost: lost}, true
	}
	return Cell{Status: OK, Detail: detail}, true
}

type checkVerdict struct {
	state string // "ready", "degraded", "cannot run"
	lost  []string
}

func checkCell(f rowFiles) (Cell, map[string]checkVerdict) {
	rc := f.rc("check")
	s, _ := f.read("check")
	var rep struct {
		Investigators []struct {
			Name         string   `json:"name"`
			State        string   `json:"state"`
			Ready        bool     `json:"ready"`
			Degraded     bool     `json:"degraded"`
			Lost         []string `json:"lost"`
			Why          string   `json:"why"`
			Requirements []struct {
				Feature   string `json:"feature"`
				Available bool   `json:"available"`
				Optional  bool   `json:"optional"`
				Detail    string `json:"detail"`
			} `json:"requirements"`
		} `json:"investigators"`
	}
	verdicts := map[string]checkVerdict{}
	if err := json.Unmarshal([]byte(s), &rep); rc != 0 || err != nil {
		line := firstError(f, "check")
		if line == "" && err != nil {
			line = err.Error()
		}
		return Cell{Status: Fail, Detail: fmt.Sprintf("exit %d: %s", rc, line)}, verdicts
	}
	var parts, lost []string
	for _, inv := range rep.Investigators {
		v := checkVerdict{state: inv.State}
		if v.state == "" { // a wolf from before check loaded the programs
			v.state = "ready"
			switch {
			case !inv.Ready:
				v.state = "cannot run"
			case inv.Degraded:
				v.state = "degraded"
			}
			for _, r := range inv.Requirements {
				if !r.Available {
					v.lost = append(v.lost, fmt.Sprintf("%s: %s (%s)", inv.Name, r.Feature, clip(r.Detail, 160)))
				}
			}
		}
		for _, l := range inv.Lost {
			v.lost = append(v.lost, inv.Name+": "+l)
		}
		if inv.Why != "" {
			v.lost = append(v.lost, inv.Name+" cannot run: "+clip(inv.Why, 300))
		}
		verdicts[inv.Name] = v
		parts = append(parts, inv.Name+" "+v.state)
		lost = append(lost, v.lost...)
	}
	return Cell{Status: OK, Detail: strings.Join(parts, ", "), Lost: lost}, verdicts
}

func labCell(f rowFiles, lab, want, fallback string) Cell {
	name := "lab-" + lab
	rc := f.rc(name)
	labOut, _ := f.read(name + ".lab")
	if !strings.Contains(labOut, "offender pid") {
		le, _ := f.read(name + ".lab-stderr")
		line := ""
		for _, l := range strings.Split(le, "\n") {
			if strings.TrimSpace(l) != "" && !strings.HasPrefix(l, "lab: ") {
				line = l
				break
			}
		}
		if line == "" {
			line = firstError(f, name)
		}
		return Cell{Status: Fail, Detail: "the lab did not start: " + clip(strings.TrimSpace(line), 300)}
	}
	rep, err := parseReport(f, name)
	if rc != 0 || err != nil {
		line := firstError(f, name)
		if line == "" && err != nil {
			line = err.Error()
		}
		return Cell{Status: Fail, Detail: fmt.Sprintf("exit %d: %s", rc, line)}
	}
	var ids []string
	for _, fd := range rep.Findings {
		ids = append(ids, fd.ID+"("+fd.Severity+")")
	}
	found := "findings: " + strings.Join(ids, ", ")
	if len(ids) == 0 {
		found = "no findings"
	}
	if bad, ok := strings.CutPrefix(want, "!"); ok {
		for _, fd := range rep.Findings {
			if fd.ID == bad && (fd.Severity == "warning" || fd.Severity == "critical") {
				return Cell{Status: Fail, Detail: fmt.Sprintf("baseline raised %s: %s", bad, clip(fd.Title, 160))}
			}
		}
		return labStatus(rep, fmt.Sprintf("no %s warning, as wanted; %s", bad, found))
	}
	for _, w := range strings.Split(want, "|") {
		for _, fd := range rep.Findings {
			if fd.ID == w {
				return labStatus(rep, fmt.Sprintf("%s: %s", w, clip(fd.Title, 200)))
			}
		}
	}
	// A bounce the kernel did not make is no finding to miss: below
	// sched's own threshold (50 migrations/s, with a margin).
	if want == "sched.bounce" {
		if k, ok := f.read(name + ".kernel"); ok {
			var mig, secs float64
			fmt.Sscanf(strings.TrimSpace(k), "migrations=%g seconds=%g", &mig, &secs)
			if secs > 0 && mig/secs < 60 {
				return Cell{Status: NA, Detail: fmt.Sprintf("the kernel moved the lab's task %.0f times/s (%.0f in %.0f s): no ping-pong to find here; %s", mig/secs, mig, secs, found)}
			}
		}
	}
	if fallback != "" && len(rep.Notes) > 0 {
		for _, fd := range rep.Findings {
			if fd.ID == fallback {
				return Cell{Status: Degraded, Detail: fmt.Sprintf("no %s, but %s: %s", want, fallback, clip(fd.Title, 200)), Lost: rep.Notes}
			}
		}
	}
	return Cell{Status: Fail, Detail: fmt.Sprintf("no %s; %s", want, found)}
}

func labStatus(rep *report, detail string) Cell {
	if len(rep.Notes) > 0 {
		return Cell{Status: Degraded, Detail: detail, Lost: rep.Notes}
	}
	return Cell{Status: OK, Detail: detail}
}

// ---------------------------------------------------------------- writing

func rowTitle(r Row) string {
	arch := map[string]string{"amd64": "x86-64", "arm64": "arm64"}[r.Arch]
	if arch == "" {
		arch = r.Arch
	}
	if strings.HasPrefix(r.Row, "host") {
		return fmt.Sprintf("%s %s (host)", r.Kernel, arch)
	}
	return fmt.Sprintf("%s %s", r.Kernel, arch)
}

func markdown(t *Table) string {
	var b strings.Builder
	b.WriteString("# wolf's kernel matrix\n\n")
	b.WriteString("Generated by `scripts/matrix/run` (see `scripts/matrix/README.md`); do not edit by hand.\n")
	b.WriteString("Each column is a kernel, booted under qemu (TCG) with a static wolf, except the host row;\n")
	b.WriteString("each row is a command run there. **ok**: ran, nothing lost. **degraded**: ran without\n")
	b.WriteString("something, listed below. **fail**: with the first error line below. A lab passes when its\n")
	b.WriteString("investigator reports the lab's pathology. `doctor` passes when three idle runs raise no\n")
	b.WriteString("warning or critical finding and no diagnosis, and every investigator ran.\n\n")
	b.WriteString("| command |")
	for _, r := range t.Rows {
		b.WriteString(" " + rowTitle(r) + " |")
	}
	b.WriteString("\n|---|")
	for range t.Rows {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	type note struct{ ref, text string }
	var notes []note
	refs := map[string]string{}
	for _, col := range t.Columns {
		b.WriteString("| " + col + " |")
		for _, r := range t.Rows {
			c, ok := r.Cells[col]
			if !ok {
				b.WriteString(" – |")
				continue
			}
			text := c.Status
			if c.Status == Fail {
				text = "**fail**"
			}
			var detail []string
			if (c.Status != OK || col == "check") && c.Detail != "" {
				detail = append(detail, c.Detail)
			}
			if c.Status != OK || col == "check" {
				detail = append(detail, c.Lost...)
			}
			if len(detail) > 0 {
				body := strings.Join(detail, "\n")
				ref, ok := refs[body]
				if !ok {
					ref = strconv.Itoa(len(refs) + 1)
					refs[body] = ref
					notes = append(notes, note{ref, body})
				}
				text += " [" + ref + "]"
			}
			b.WriteString(" " + text + " |")
		}
		b.WriteString("\n")
	}
	b.WriteString("\n| kernel | package | arch | wolf | date | run |\n|---|---|---|---|---|---|\n")
	for _, r := range t.Rows {
		pkg := r.Package
		if r.Version != "" && pkg != "" {
			pkg += " " + r.Version
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %d s, %s |\n", r.Kernel, orDash(pkg), r.Arch, orDash(r.Wolf), orDash(r.Date), r.Seconds, r.Accel)
	}
	if len(notes) > 0 {
		b.WriteString("\n## Notes\n\n")
		for _, n := range notes {
			lines := strings.Split(n.text, "\n")
			fmt.Fprintf(&b, "%s. %s\n", n.ref, mdEscape(lines[0]))
			for _, l := range lines[1:] {
				fmt.Fprintf(&b, "   - %s\n", mdEscape(l))
			}
		}
	}
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

func mdEscape(s string) string {
	return strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;").Replace(s)
}

func summary(t *Table) string {
	var b strings.Builder
	w := bufio.NewWriter(&b)
	for _, r := range t.Rows {
		counts := map[string]int{}
		var failed []string
		for _, col := range t.Columns {
			c, ok := r.Cells[col]
			if !ok {
				continue
			}
			counts[c.Status]++
			if c.Status == Fail {
				failed = append(failed, col)
			}
		}
		fmt.Fprintf(w, "%-28s ok %d, degraded %d, fail %d", rowTitle(r), counts[OK], counts[Degraded], counts[Fail])
		if len(failed) > 0 {
			fmt.Fprintf(w, ": %s", strings.Join(failed, ", "))
		}
		fmt.Fprintln(w)
		// What failed, in the cell's own words: a CI log then says why
		// without the row's files, which stay on the machine that ran it.
		for _, col := range failed {
			fmt.Fprintf(w, "  %s: %s\n", col, clip(r.Cells[col].Detail, 600))
		}
	}
	w.Flush()
	return b.String()
}

func failures(t *Table, patterns []string) []string {
	var out []string
	for _, r := range t.Rows {
		for _, col := range t.Columns {
			c, ok := r.Cells[col]
			if !ok || c.Status != Fail {
				continue
			}
			if len(patterns) > 0 {
				match := false
				for _, p := range patterns {
					if m, _ := path.Match(p, col); m {
						match = true
					}
				}
				if !match {
					continue
				}
			}
			out = append(out, r.Row+" "+col)
		}
	}
	return out
}
