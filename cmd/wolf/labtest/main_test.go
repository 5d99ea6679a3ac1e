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

func runWolf(t *testing.T, timeout time.Duration, args ...string) wolfcli.Result {
	t.Helper()
	return wolfcli.Run(t, wolfBin, timeout, args...)
}

// labNames are the labs wolf ships, as `wolf lab list` gives them: the
// test follows the binary, so a new lab is killed mid-run too.
func labNames(t *testing.T) []string {
	t.Helper()
	r := runWolf(t, time.Minute, "lab", "list", "--format", "json")
	if r.Code != 0 {
		t.Fatalf("wolf lab list: exit %d: %s", r.Code, r.Stderr)
	}
	var entries []struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &entries); err != nil {
		t.Fatalf("wolf lab list --format json: %v: %q", err, r.Stdout)
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
