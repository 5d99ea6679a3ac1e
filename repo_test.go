// Tests of the repository itself rather than of a package: its documents
// agree with its code.
package wolf_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// walk calls f with the path and text of every file under the repository
// root whose name ends in one of exts (or is named in names), leaving out
// generated kernel headers and testdata.
func walk(t *testing.T, exts []string, names []string, f func(path, text string)) {
	t.Helper()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "testdata", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() == "vmlinux.h" {
			return nil
		}
		match := false
		for _, e := range exts {
			match = match || strings.HasSuffix(path, e)
		}
		for _, n := range names {
			match = match || d.Name() == n
		}
		if !match {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f(path, string(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// anchors are the GitHub anchors of a Markdown file's headings.
func anchors(t *testing.T, doc string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	inCode := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var slug strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				slug.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
				slug.WriteRune(r)
			}
		}
		out[slug.String()] = true
	}
	return out
}

// Every reference to a section of ARCHITECTURE.md or CONTRIBUTING.md, in
// code, scripts and documents, names a heading that exists; and nothing
// cites DESIGN.md, which is not in the repository.
func TestDocumentReferencesResolve(t *testing.T) {
	docs := map[string]map[string]bool{
		"ARCHITECTURE.md": anchors(t, "ARCHITECTURE.md"),
		"CONTRIBUTING.md": anchors(t, "CONTRIBUTING.md"),
	}
	ref := regexp.MustCompile(`(ARCHITECTURE|CONTRIBUTING)\.md#([a-z0-9_-]+)`)
	n := 0
	walk(t, []string{".go", ".md", ".c", ".h", ".sh", ".tmpl", ".yml", ".yaml"}, []string{"run", "Makefile"}, func(path, text string) {
		for _, m := range ref.FindAllStringSubmatch(text, -1) {
			n++
			if !docs[m[1]+".md"][m[2]] {
				t.Errorf("%s: %s names no heading of %s.md", path, m[0], m[1])
			}
		}
		if strings.Contains(text, "DESIGN.md") && path != "repo_test.go" {
			t.Errorf("%s cites DESIGN.md, which is not in the repository (ARCHITECTURE.md is)", path)
		}
	})
	if n < 5 {
		t.Errorf("only %d references to the documents found: the scan is broken", n)
	}
}

// CONTRIBUTING.md's table lists every WOLF_* environment variable the
// code, the tests and the scripts read.
func TestEnvironmentKnobsDocumented(t *testing.T) {
	b, err := os.ReadFile("CONTRIBUTING.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(WOLF_[A-Z0-9_]+)` \\|").FindAllStringSubmatch(string(b), -1) {
		documented[m[1]] = true
	}
	// In Go, a knob's name is a string literal; in shell, an expansion.
	goName := regexp.MustCompile(`"(WOLF_[A-Z0-9_]+)"`)
	shName := regexp.MustCompile(`\$\{?(WOLF_[A-Z0-9_]+)`)
	used := map[string]string{}
	walk(t, []string{".go"}, nil, func(path, text string) {
		for _, m := range goName.FindAllStringSubmatch(text, -1) {
			used[m[1]] = path
		}
	})
	walk(t, []string{".sh", ".bash", ".mk"}, []string{"run", "Makefile"}, func(path, text string) {
		for _, m := range shName.FindAllStringSubmatch(text, -1) {
			used[m[1]] = path
		}
	})
	var missing []string
	for k, path := range used {
		if !documented[k] {
			missing = append(missing, k+" (read in "+path+")")
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("%s is not in CONTRIBUTING.md's table of environment knobs", m)
	}
	if len(used) < 5 {
		t.Errorf("only %d knobs found in the code: the scan is broken", len(used))
	}
}

// Users have never heard of the seeds, the write-ups wolf was built from:
// code, help, findings and documents cite a write-up by its title
// (ARCHITECTURE.md#the-write-ups-behind-the-investigators). Tests may say
// "seed" for their fixtures; a random seed is another word.
func TestNoSeedReferences(t *testing.T) {
	seed := regexp.MustCompile(`(?i)\bseeds?[ -]+[0-9]{3}\b|\bthe seeds?\b|\bseed's\b|\bseeds/`)
	walk(t, []string{".go", ".c", ".h", ".md", ".sh", ".tmpl", ".js", ".yml", ".yaml"}, []string{"run", "Makefile"}, func(path, text string) {
		if strings.HasSuffix(path, "_test.go") {
			return
		}
		for i, line := range strings.Split(text, "\n") {
			if m := seed.FindString(line); m != "" {
				t.Errorf("%s:%d: %q: cite the write-up by its title", path, i+1, m)
			}
		}
	})
}

// Every relative link in a Markdown document (the README and the pages
// under docs/ link each other) points at a file that exists and, when it
// names a section of a Markdown file, at a heading of that file: the
// README is a landing page whose links are its content.
func TestMarkdownLinksResolve(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	n := 0
	walk(t, []string{".md"}, nil, func(path, text string) {
		inCode := false
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(line, "```") {
				inCode = !inCode
			}
			if inCode {
				continue
			}
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				n++
				file, anchor, _ := strings.Cut(target, "#")
				dest := path
				if file != "" {
					dest = filepath.Join(filepath.Dir(path), file)
				}
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %s: %v", path, target, err)
					continue
				}
				if anchor != "" && strings.HasSuffix(dest, ".md") && !anchors(t, dest)[anchor] {
					t.Errorf("%s: link %s names no heading of %s", path, target, dest)
				}
			}
		}
	})
	if n < 30 {
		t.Errorf("only %d relative links found: the scan is broken", n)
	}
}
