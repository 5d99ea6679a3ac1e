// Package incident keeps the evidence of what `wolf watch` saw go wrong:
// one self-contained bundle per incident in a directory (the report as
// JSON and as an HTML page with its flame graphs, timelines and
// diagnoses, the stack profiles in folded and pprof form, and the reports
// of the windows before it), written atomically, bounded by count and
// bytes (oldest removed first), rate-limited per identity, and listed
// newest first in an index.html that opens without a server.
//
// A store never stops the watch: a bundle that cannot be written (a full
// disk, a directory gone read-only) is dropped, counted by reason, said
// once on the log and reported by Problems (for /healthz) until a write
// succeeds again.
package incident

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/wolf-investigator/wolf/internal/export"
	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/render"
)

// Defaults: 100 incidents or 256 MiB, whichever comes first; the same
// identity at most once in 10 minutes unless it escalates.
const (
	DefaultMaxCount    = 100
	DefaultMaxBytes    = 256 << 20
	DefaultMinInterval = 10 * time.Minute
)

// Trigger is one reason an incident opened: a diagnosis or a finding that
// started or escalated.
type Trigger struct {
	Kind         string           `json:"kind"`     // "diagnosis" or "finding"
	Identity     string           `json:"identity"` // stable across windows while the situation lasts
	Event        string           `json:"event"`    // "start" or "escalate"
	Severity     finding.Severity `json:"severity"`
	Title        string           `json:"title"`
	Investigator string           `json:"investigator,omitempty"`
}

// Bundle is an incident before it is written.
type Bundle struct {
	Time     time.Time
	Triggers []Trigger
	Report   *finding.Report   // the host as the watch saw it when the incident opened
	Before   []*finding.Report // the windows before it, oldest first
}

// File is one file of a written bundle.
type File struct {
	Name  string `json:"name"` // relative to the bundle's directory
	Bytes int64  `json:"bytes"`
}

// Meta describes a written bundle; it is the bundle's incident.json.
type Meta struct {
	ID       string           `json:"id"` // the bundle's directory name
	Time     time.Time        `json:"time"`
	Severity finding.Severity `json:"severity"` // the worst trigger's
	Title    string           `json:"title"`    // the worst trigger's
	Triggers []Trigger        `json:"triggers"`
	Host     string           `json:"host"`
	Kernel   string           `json:"kernel"`
	Findings int              `json:"findings"`
	Before   int              `json:"windows_before"`
	Files    []File           `json:"files"`
	Bytes    int64            `json:"bytes"`
}

// Limits bound a store.
type Limits struct {
	MaxCount    int           // bundles kept; 0 means DefaultMaxCount
	MaxBytes    int64         // bytes kept; 0 means DefaultMaxBytes
	MinInterval time.Duration // per identity; 0 means DefaultMinInterval, <0 none
}

// Drop reasons, the label of wolf_incidents_dropped_total.
const (
	DropRateLimited = "rate_limited" // the same identity wrote one less than MinInterval ago
	DropTooLarge    = "too_large"    // the bundle alone exceeds MaxBytes
	DropWriteError  = "write_error"  // the disk refused it (full, read-only, gone)
	DropQueueFull   = "queue_full"   // bundles came faster than the disk took them
)

// Stats are a store's counters.
type Stats struct {
	Written uint64
	Dropped map[string]uint64 // by reason
	Removed uint64            // removed to keep within the limits
	Kept    int
	Bytes   int64
}

// Store is an incidents directory. Use Open.
type Store struct {
	dir string
	lim Limits
	log io.Writer
	now func() time.Time

	mu      sync.Mutex
	kept    []Meta // oldest first
	bytes   int64
	last    map[string]admitted
	written uint64
	dropped map[string]uint64
	removed uint64
	failing error // the last write's error, nil once one succeeds
	failAt  time.Time
}

type admitted struct {
	at  time.Time
	sev finding.Severity
}

// tmpPrefix marks a bundle being written; a crash leaves one behind, and
// Open removes it.
const tmpPrefix = ".tmp-"

// idRE is what a bundle's directory is called: its UTC time, then a slug.
var idRE = regexp.MustCompile(`^\d{8}T\d{6}\.\d{3}Z(-[a-z0-9._-]+)?$`)

// Open creates dir if needed, removes bundles left half-written by a
// crash, reads the bundles already there, and trims them to the limits.
func Open(dir string, lim Limits, log io.Writer) (*Store, error) {
	if lim.MaxCount <= 0 {
		lim.MaxCount = DefaultMaxCount
	}
	if lim.MaxBytes <= 0 {
		lim.MaxBytes = DefaultMaxBytes
	}
	if lim.MinInterval == 0 {
		lim.MinInterval = DefaultMinInterval
	}
	if log == nil {
		log = io.Discard
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("incidents: %w", err)
	}
	s := &Store{dir: dir, lim: lim, log: log, now: time.Now, last: map[string]admitted{}, dropped: map[string]uint64{}}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("incidents: %w", err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
	metas, err := List(dir)
	if err != nil {
		return nil, err
	}
	for i := len(metas) - 1; i >= 0; i-- { // List is newest first
		s.kept = append(s.kept, metas[i])
		s.bytes += metas[i].Bytes
	}
	s.trim(0, 0)
	_ = s.writeIndex()
	return s, nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// Admit returns the triggers that may open an incident now: an identity
// that opened one less than MinInterval ago is held back (counted as
// dropped, rate_limited) unless it is more severe than it was then.
func (s *Store) Admit(ts []Trigger) []Trigger {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var out []Trigger
	for _, t := range ts {
		a, ok := s.last[t.Identity]
		if ok && s.lim.MinInterval > 0 && now.Sub(a.at) < s.lim.MinInterval && t.Severity <= a.sev {
			s.dropped[DropRateLimited]++
			continue
		}
		s.last[t.Identity] = admitted{now, t.Severity}
		out = append(out, t)
	}
	if len(s.last) > 4096 {
		// Identities seen once and long ago: forget them so the map
		// stays bounded whatever the host does.
		for k, a := range s.last {
			if now.Sub(a.at) >= s.lim.MinInterval {
				delete(s.last, k)
			}
		}
	}
	return out
}

// Drop counts a bundle that was never handed to Write (reason as the
// DropX constants).
func (s *Store) Drop(reason string) {
	s.mu.Lock()
	s.dropped[reason]++
	s.mu.Unlock()
}

// Write renders b and writes it as one new bundle: into a temporary
// directory first, then renamed into place, so a reader (or a crash) never
// sees half a bundle. The oldest bundles are removed first as needed to
// keep within the limits. A failure removes what was written, is counted
// and reported, and is returned; the store stays usable.
func (s *Store) Write(b *Bundle) (Meta, error) {
	files, meta, err := s.render(b)
	if err != nil {
		s.mu.Lock()
		s.dropped[DropWriteError]++
		s.mu.Unlock()
		return Meta{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	meta.ID = s.uniqueID(meta.ID)
	meta, err = finish(meta, files)
	if err != nil {
		s.dropped[DropWriteError]++
		return Meta{}, err
	}
	if meta.Bytes > s.lim.MaxBytes {
		s.dropped[DropTooLarge]++
		return Meta{}, fmt.Errorf("incident %s: %d bytes, more than the store's limit of %d", meta.ID, meta.Bytes, s.lim.MaxBytes)
	}
	s.trim(1, meta.Bytes)
	if err := s.writeBundle(meta.ID, files); err != nil {
		s.dropped[DropWriteError]++
		if s.failing == nil {
			fmt.Fprintf(s.log, "wolf watch: incidents: %v; this incident is lost, watching goes on\n", err)
		}
		s.failing, s.failAt = err, s.now()
		return Meta{}, err
	}
	s.kept = append(s.kept, meta)
	s.bytes += meta.Bytes
	s.written++
	if s.failing != nil {
		fmt.Fprintf(s.log, "wolf watch: incidents: writing again (%s)\n", meta.ID)
		s.failing = nil
	}
	if err := s.writeIndex(); err != nil {
		s.failing, s.failAt = err, s.now()
	}
	return meta, nil
}

// render makes every file of a bundle in memory: sizes are known before
// anything is written, and a disk that fills half way leaves nothing.
func (s *Store) render(b *Bundle) (map[string][]byte, Meta, error) {
	if b.Report == nil || len(b.Triggers) == 0 {
		return nil, Meta{}, errors.New("incident: no report or no trigger")
	}
	when := b.Time
	if when.IsZero() {
		when = s.now()
	}
	worst := b.Triggers[0]
	for _, t := range b.Triggers[1:] {
		if t.Severity > worst.Severity {
			worst = t
		}
	}
	meta := Meta{
		ID:       when.UTC().Format("20060102T150405.000Z") + slug(worst),
		Time:     when.UTC().Truncate(time.Millisecond),
		Severity: worst.Severity,
		Title:    worst.Title,
		Triggers: b.Triggers,
		Host:     b.Report.Host,
		Kernel:   b.Report.Kernel,
		Findings: len(b.Report.Findings),
		Before:   len(b.Before),
	}
	files := map[string][]byte{}
	var buf bytes.Buffer
	if err := render.JSON(&buf, b.Report); err != nil {
		return nil, meta, err
	}
	files["report.json"] = bytes.Clone(buf.Bytes())
	buf.Reset()
	if err := render.HTML(&buf, b.Report); err != nil {
		return nil, meta, err
	}
	files["report.html"] = bytes.Clone(buf.Bytes())
	buf.Reset()
	if err := render.Text(&buf, b.Report, render.TextOptions{Width: 100, StackDepth: 12}); err != nil {
		return nil, meta, err
	}
	files["report.txt"] = bytes.Clone(buf.Bytes())
	if len(b.Report.Profiles) > 0 {
		for i := range b.Report.Profiles {
			p := &b.Report.Profiles[i]
			buf.Reset()
			if err := export.Folded(&buf, p); err != nil {
				return nil, meta, err
			}
			files["profiles/"+safeName(p.Name)+".folded"] = bytes.Clone(buf.Bytes())
		}
		buf.Reset()
		dur := time.Duration(b.Report.DurationS * float64(time.Second))
		if err := export.PProf(&buf, b.Report.Profiles, b.Report.StartedAt, dur); err != nil {
			return nil, meta, err
		}
		files["profiles/profile.pb.gz"] = bytes.Clone(buf.Bytes())
	}
	for i, r := range b.Before {
		buf.Reset()
		if err := render.JSON(&buf, r); err != nil {
			return nil, meta, err
		}
		name := fmt.Sprintf("before/%02d-%s.json", i+1, r.StartedAt.UTC().Format("20060102T150405Z"))
		files[name] = bytes.Clone(buf.Bytes())
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		meta.Files = append(meta.Files, File{Name: n, Bytes: int64(len(files[n]))})
		meta.Bytes += int64(len(files[n]))
	}
	return files, meta, nil
}

// finish names the bundle and adds its incident.json, whose own size is
// counted in Bytes (marshalled until the count stops changing its length).
func finish(meta Meta, files map[string][]byte) (Meta, error) {
	base := meta.Bytes
	for range 4 {
		mj, err := metaJSON(meta)
		if err != nil {
			return meta, err
		}
		files["incident.json"] = mj
		if base+int64(len(mj)) == meta.Bytes {
			break
		}
		meta.Bytes = base + int64(len(mj))
	}
	return meta, nil
}

func metaJSON(m Meta) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(m); err != nil {
		return nil, fmt.Errorf("incident meta: %w", err)
	}
	return buf.Bytes(), nil
}

// writeBundle writes files under a temporary directory, syncs them and
// renames the directory into place: a reader or a crash sees the whole
// bundle or none of it.
func (s *Store) writeBundle(id string, files map[string][]byte) (err error) {
	tmp := filepath.Join(s.dir, tmpPrefix+id)
	defer func() {
		if err != nil {
			_ = os.RemoveAll(tmp)
		}
	}()
	if err := os.Mkdir(tmp, 0o750); err != nil {
		return fmt.Errorf("incident %s: %w", id, err)
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		p := filepath.Join(tmp, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			return fmt.Errorf("incident %s: %w", id, err)
		}
		if err := writeSynced(p, files[name]); err != nil {
			return fmt.Errorf("incident %s: %w", id, err)
		}
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, id)); err != nil {
		return fmt.Errorf("incident %s: %w", id, err)
	}
	syncDir(s.dir)
	return nil
}

// writeSynced writes a file and syncs it, so that the rename that
// publishes its bundle never publishes empty files after a power cut.
func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// trim removes the oldest bundles until n more bundles of size more bytes
// fit within the limits. Called with s.mu held.
func (s *Store) trim(n int, size int64) {
	for len(s.kept) > 0 && (len(s.kept)+n > s.lim.MaxCount || s.bytes+size > s.lim.MaxBytes) {
		old := s.kept[0]
		if err := os.RemoveAll(filepath.Join(s.dir, old.ID)); err != nil {
			fmt.Fprintf(s.log, "wolf watch: incidents: remove %s: %v\n", old.ID, err)
		}
		s.kept = s.kept[1:]
		s.bytes -= old.Bytes
		s.removed++
	}
}

// uniqueID appends -2, -3, ... to an ID already taken (two incidents in
// one millisecond).
func (s *Store) uniqueID(id string) string {
	taken := func(c string) bool {
		_, err := os.Lstat(filepath.Join(s.dir, c))
		return err == nil
	}
	if !taken(id) {
		return id
	}
	for n := 2; ; n++ {
		if c := fmt.Sprintf("%s-%d", id, n); !taken(c) {
			return c
		}
	}
}

// slug is the readable tail of a bundle's name: the trigger's finding id
// (or the diagnosis's title), lower case, safe in a path.
func slug(t Trigger) string {
	base := t.Identity
	if i := strings.IndexByte(base, '|'); i > 0 {
		base = base[:i]
	}
	if t.Kind == "diagnosis" {
		base = "diagnosis-" + t.Title
	}
	s := safeName(strings.ToLower(base))
	if len(s) > 48 {
		s = s[:48]
	}
	s = strings.Trim(s, "-._")
	if s == "" {
		return ""
	}
	return "-" + s
}

var unsafeRE = regexp.MustCompile(`[^a-zA-Z0-9._-]+`)

// safeName keeps a name from the host (a profile's, a finding's) to
// characters any file system and URL take.
func safeName(n string) string {
	n = unsafeRE.ReplaceAllString(n, "-")
	n = strings.TrimLeft(n, ".")
	if n == "" {
		return "unnamed"
	}
	return n
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{Written: s.written, Removed: s.removed, Kept: len(s.kept), Bytes: s.bytes, Dropped: map[string]uint64{}}
	for k, v := range s.dropped {
		st.Dropped[k] = v
	}
	return st
}

// Problems says what is wrong with the store, for /healthz: the last
// write's failure until a write succeeds.
func (s *Store) Problems() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failing == nil {
		return nil
	}
	return []string{fmt.Sprintf("incidents: %s: last write failed at %s: %v (%d incidents dropped for write errors)",
		s.dir, s.failAt.UTC().Format(time.RFC3339), s.failing, s.dropped[DropWriteError])}
}

// List reads the bundles in dir, newest first. Directories that are not
// bundles (no incident.json, another name) are left out.
func List(dir string) ([]Meta, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("incidents: %w", err)
	}
	var out []Meta
	for _, e := range ents {
		if !e.IsDir() || !idRE.MatchString(e.Name()) {
			continue
		}
		m, err := ReadMeta(dir, e.Name())
		if err != nil {
			continue
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Time.Equal(out[j].Time) {
			return out[i].Time.After(out[j].Time)
		}
		return out[i].ID > out[j].ID
	})
	return out, nil
}

// ReadMeta reads one bundle's incident.json.
func ReadMeta(dir, id string) (Meta, error) {
	if !idRE.MatchString(id) {
		return Meta{}, fmt.Errorf("incident %q: not an incident name", id)
	}
	b, err := os.ReadFile(filepath.Join(dir, id, "incident.json"))
	if err != nil {
		return Meta{}, fmt.Errorf("incident %s: %w", id, err)
	}
	var m Meta
	if err := json.Unmarshal(b, &m); err != nil {
		return Meta{}, fmt.Errorf("incident %s: %w", id, err)
	}
	m.ID = id
	return m, nil
}

// ReadReport reads one bundle's report.
func ReadReport(dir, id string) (*finding.Report, error) {
	if !idRE.MatchString(id) {
		return nil, fmt.Errorf("incident %q: not an incident name", id)
	}
	b, err := os.ReadFile(filepath.Join(dir, id, "report.json"))
	if err != nil {
		return nil, fmt.Errorf("incident %s: %w", id, err)
	}
	var r finding.Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("incident %s: %w", id, err)
	}
	return &r, nil
}
