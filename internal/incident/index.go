package incident

import (
	"bytes"
	"fmt"
	"html/template"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/human"
)

// indexPage lists the bundles newest first. It is plain HTML with no
// script and nothing fetched, so it opens from the file system (a copy
// taken off a node) as well as from a web server.
var indexPage = template.Must(template.New("index").Funcs(template.FuncMap{
	"when":  func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
	"size":  human.Bytes,
	"lower": func(s finding.Severity) string { return s.String() },
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<title>wolf incidents{{if .Host}} on {{.Host}}{{end}}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:.3em .6em;border-bottom:1px solid #ddd;vertical-align:top}
.critical{color:#fff;background:#b00020}.warning{background:#f5c518}.info{background:#dde}
.sev{padding:0 .4em;border-radius:3px;font-size:12px}
small{color:#666}
</style></head><body>
<h1>wolf incidents{{if .Host}} on {{.Host}}{{end}}</h1>
<p>{{len .Incidents}} kept, {{size .Bytes}}, newest first. Each folder holds the report (report.html, report.json, report.txt),
the stack profiles (profiles/: folded for flame graph tools, profile.pb.gz for <code>go tool pprof</code>) and the windows before it (before/).
<small>Written {{when .Written}}.</small></p>
{{if .Incidents}}<table>
<tr><th>when (UTC)</th><th>severity</th><th>what</th><th>why it opened</th><th>size</th></tr>
{{range .Incidents}}<tr>
<td><a href="{{.ID}}/report.html">{{when .Time}}</a></td>
<td><span class="sev {{lower .Severity}}">{{lower .Severity}}</span></td>
<td><a href="{{.ID}}/report.html">{{.Title}}</a><br><small>{{.Findings}} findings; <a href="{{.ID}}/report.json">JSON</a> · <a href="{{.ID}}/report.txt">text</a> · <a href="{{.ID}}/">files</a></small></td>
<td>{{range .Triggers}}{{.Kind}} {{.Event}}: {{.Title}}<br>{{end}}</td>
<td>{{size .Bytes}}</td>
</tr>
{{end}}</table>{{else}}<p>No incidents.</p>{{end}}
</body></html>
`))

// writeIndex rewrites index.html from the bundles kept (atomically: a
// temporary file renamed over it). Called with s.mu held.
func (s *Store) writeIndex() error {
	view := struct {
		Host      string
		Bytes     int64
		Written   time.Time
		Incidents []Meta
	}{Bytes: s.bytes, Written: s.now()}
	for i := len(s.kept) - 1; i >= 0; i-- {
		view.Incidents = append(view.Incidents, s.kept[i])
		if view.Host == "" {
			view.Host = s.kept[i].Host
		}
	}
	var buf bytes.Buffer
	if err := indexPage.Execute(&buf, view); err != nil {
		return fmt.Errorf("incidents index: %w", err)
	}
	tmp := filepath.Join(s.dir, tmpPrefix+"index.html")
	if err := writeSynced(tmp, buf.Bytes()); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("incidents index: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, "index.html")); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("incidents index: %w", err)
	}
	return nil
}

// Summary is a bundle's line in `wolf incidents list`.
func (m *Meta) Summary() string {
	return strings.Join([]string{m.Time.UTC().Format("2006-01-02 15:04:05Z"), fmt.Sprintf("%-8s", m.Severity), human.Bytes(m.Bytes), m.Title}, "  ")
}
