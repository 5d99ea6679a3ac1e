package labtest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/testutil/wolfcli"
)

// wolfBin is the wolf binary, built once for every test here.
var wolfBin string

func TestMain(m *testing.M) { wolfcli.Main(m, &wolfBin) }

type result struct {
	code           int
	stdout, stderr string
}

func runWolf(t *testing.T, timeout time.Duration, args ...string) result {
	t.Helper()
	r := wolfcli.Run(t, wolfBin, timeout, args...)
	return result{r.Code, r.Stdout, r.Stderr}
}

// labNames are the labs wolf ships, as `wolf lab list` gives them: the
// test follows the binary, so a new lab is killed mid-run too.
func labNames(t *testing.T) []string {
	t.Helper()
	r := runWolf(t, time.Minute, "lab", "list", "--format", "json")
	if r.code != 0 {
		t.Fatalf("wolf lab list: exit %d: %s", r.code, r.stderr)
	}
	var entries []struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &entries); err != nil {
		t.Fatalf("wolf lab list --format json: %v: %q", err, r.stdout)
	}
	if len(entries) == 0 {
		t.Fatal("wolf lab list names no lab")
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name)
	}
	return names
}
