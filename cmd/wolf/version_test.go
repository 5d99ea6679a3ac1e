package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestVersionListsCompiledObjects checks wolf version against the
// repository: every investigator's committed BPF object is listed with its
// size and hash, and the Go version is the one that built the binary.
func TestVersionListsCompiledObjects(t *testing.T) {
	r := runWolf(t, 30*time.Second, "version", "--format", "json")
	if r.Code != 0 {
		t.Fatalf("wolf version: exit %d, stderr %q", r.Code, r.Stderr)
	}
	var rep versionReport
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
		t.Fatalf("wolf version --format json: %v\n%s", err, r.Stdout)
	}
	if rep.GoVersion != runtime.Version() {
		t.Errorf("go_version %q, want %q", rep.GoVersion, runtime.Version())
	}
	if rep.Version == "" || rep.KernelRange == "" || len(rep.TestedKernels) == 0 {
		t.Errorf("version %q, kernel range %q, %d tested kernels", rep.Version, rep.KernelRange, len(rep.TestedKernels))
	}
	listed := map[string]string{}
	for _, o := range rep.BPFObjects {
		listed[o.File] = o.SHA256
	}
	for _, inv := range []string{"hung", "locks", "reclaim", "sched", "softirq"} {
		b, err := os.ReadFile(filepath.Join("../../internal", inv, inv+"_bpfel.o"))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		if got, want := listed[inv+"_bpfel.o"], hex.EncodeToString(sum[:]); got != want {
			t.Errorf("%s_bpfel.o: listed sha256 %q, committed object's %q", inv, got, want)
		}
	}

	text := runWolf(t, 30*time.Second, "version")
	for _, want := range []string{"wolf", "commit", runtime.Version(), "kernels", "tested on", "hung_bpfel.o"} {
		if !strings.Contains(text.Stdout, want) {
			t.Errorf("wolf version text lacks %q:\n%s", want, text.Stdout)
		}
	}
	if bad := runWolf(t, 30*time.Second, "version", "--format", "yaml"); bad.Code != exitUsage || strings.Count(strings.TrimSpace(bad.Stderr), "\n") != 0 {
		t.Errorf("wolf version --format yaml: exit %d, stderr %q; want exit 2 and one line", bad.Code, bad.Stderr)
	}
}

// TestCompletion checks that each shell's script is produced and that the
// completions they ask wolf for (the hidden __complete command every
// script calls) name wolf's commands and flags.
func TestCompletion(t *testing.T) {
	for _, sh := range []string{"bash", "zsh", "fish"} {
		r := runWolf(t, 30*time.Second, "completion", sh)
		if r.Code != 0 || !strings.Contains(r.Stdout, "__complete") {
			t.Errorf("wolf completion %s: exit %d, %d bytes, stderr %q", sh, r.Code, len(r.Stdout), r.Stderr)
		}
		if sh == "bash" {
			if bash, err := exec.LookPath("bash"); err == nil {
				check := exec.Command(bash, "-n")
				check.Stdin = strings.NewReader(r.Stdout)
				if out, err := check.CombinedOutput(); err != nil {
					t.Errorf("bash -n on the bash completion: %v\n%s", err, out)
				}
			}
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"__complete", "doc"}, "doctor"},
		{[]string{"__complete", "ver"}, "version"},
		{[]string{"__complete", "doctor", "--dur"}, "--duration"},
		{[]string{"__complete", "lab", ""}, "list"},
	} {
		r := runWolf(t, 30*time.Second, c.args...)
		if r.Code != 0 || !strings.Contains(r.Stdout, c.want) {
			t.Errorf("wolf %v: exit %d, got %q, want %q among the completions", c.args, r.Code, r.Stdout, c.want)
		}
	}
}
