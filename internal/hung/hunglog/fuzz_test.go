package hunglog

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzAnalyze feeds arbitrary bytes to Analyze, seeded with every fixture.
// Logs are untrusted: whatever comes in, Analyze must not panic, must stay
// within its caps and must produce findings the JSON contract can carry.
func FuzzAnalyze(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.log"))
	if err != nil {
		f.Fatal(err)
	}
	// The real logs of the corpus too, cut to keep the fuzzer's inputs small.
	for _, dir := range []string{"seen", "unseen", "unseen2"} {
		more, _ := filepath.Glob(filepath.Join("testdata", "corpus", dir, "*.log"))
		files = append(files, more...)
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		if len(b) > 16<<10 {
			b = b[:16<<10]
		}
		f.Add(b)
	}
	f.Add([]byte("INFO: task a:1 blocked for more than 1 seconds.\nINFO: task a:1 is blocked on a mutex likely owned by task a:1.\n"))
	f.Add([]byte("1 lock held by x/1:\n #0: ffff (a){.}, at: b\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := Analyze(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("Analyze failed on in-memory input: %v", err)
		}
		if len(a.Reports) > MaxReports || len(a.Held) > MaxHolders {
			t.Fatalf("caps exceeded: %d reports, %d holders", len(a.Reports), len(a.Held))
		}
		victims := 0
		for _, g := range a.Groups {
			victims += len(g.Victims)
		}
		if victims != len(a.Reports) {
			t.Fatalf("%d grouped victims for %d reports", victims, len(a.Reports))
		}
		for _, r := range a.Reports {
			if len(r.Stack) > MaxFrames {
				t.Fatalf("%d frames kept", len(r.Stack))
			}
		}
		for _, fd := range a.Findings {
			if !strings.HasPrefix(fd.ID, "hung.log-") || fd.Investigator != "hung" || fd.Title == "" || fd.Summary == "" {
				t.Fatalf("malformed finding %+v", fd)
			}
		}
		if _, err := json.Marshal(a.Findings); err != nil {
			t.Fatalf("findings do not marshal: %v", err)
		}
	})
}
