package clitest

import (
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
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

func readReport(t *testing.T, path string) finding.Report {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep finding.Report
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return rep
}
