// Package wolfcli runs the wolf binary as a separate process for tests
// that need what only a process shows: exit codes as a shell sees them,
// signals, privilege, `wolf watch` serving HTTP, BPF programs the kernel
// drops when the process dies. Several test packages use it (cmd/wolf's
// own and the ones split from it so that no package comes near go test's
// ten-minute default), so each builds the binary once in its TestMain.
package wolfcli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/wolf-investigator/wolf/internal/finding"
)

// Package is wolf's main package, built by Build.
const Package = "github.com/wolf-investigator/wolf/cmd/wolf"

// Build builds wolf into a new temporary directory and returns the
// binary's path and a function that removes the directory.
func Build() (bin string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "wolf-cli-test-")
	if err != nil {
		return "", nil, fmt.Errorf("wolf's build directory: %w", err)
	}
	bin = filepath.Join(dir, "wolf")
	build := exec.Command("go", "build", "-o", bin, Package)
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("build wolf: %w", err)
	}
	return bin, func() { os.RemoveAll(dir) }, nil
}

// Main is a test package's TestMain: it builds wolf into *bin, runs the
// tests, removes the build and exits with their status.
func Main(m *testing.M, bin *string) {
	b, cleanup, err := Build()
	if err != nil {
		panic(err)
	}
	*bin = b
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// Result is how a wolf process ended.
type Result struct {
	Code           int
	Stdout, Stderr string
}

// Run runs bin with args and fails t when it does not end within timeout.
func Run(t testing.TB, bin string, timeout time.Duration, args ...string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("wolf %v did not finish within %v", args, timeout)
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run wolf %v: %v", args, err)
	}
	return Result{code, out.String(), errb.String()}
}

// SyncBuffer is a bytes.Buffer safe for a writer process and a reader test.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// WaitFor polls cond until it holds, and fails t after d.
func WaitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Watch is a running `wolf watch`.
type Watch struct {
	Cmd       *exec.Cmd
	Addr      string // host:port of its HTTP server
	Out, Errb *SyncBuffer
}

// StartWatch runs `wolf watch` with args on a free loopback port and
// waits until it says where it listens. The process is killed when t ends.
func StartWatch(t testing.TB, bin string, args ...string) *Watch {
	t.Helper()
	w := &Watch{Out: &SyncBuffer{}, Errb: &SyncBuffer{}}
	w.Cmd = exec.Command(bin, append([]string{"watch", "--listen", "127.0.0.1:0"}, args...)...)
	w.Cmd.Stdout, w.Cmd.Stderr = w.Out, w.Errb
	if err := w.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Cmd.Process.Kill(); _ = w.Cmd.Wait() })
	addrRE := regexp.MustCompile(`http://([0-9.]+:[0-9]+)/metrics`)
	WaitFor(t, "wolf watch to listen", 15*time.Second, func() bool {
		if m := addrRE.FindStringSubmatch(w.Errb.String()); m != nil {
			w.Addr = m[1]
		}
		return w.Addr != ""
	})
	return w
}

// ProgramsOf returns the BPF programs process pid holds, by id: its
// program and link file descriptors name them (fdinfo's prog_id). What
// other processes hold is none of a test's business: other tests' wolf,
// or another engineer's, may run on the same machine at the same time.
func ProgramsOf(pid int) map[ebpf.ProgramID]bool {
	ids := map[ebpf.ProgramID]bool{}
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "prog_id:"); ok {
				if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32); err == nil {
					ids[ebpf.ProgramID(n)] = true
				}
			}
		}
	}
	return ids
}

// StillLoaded counts the programs of ids the kernel still has.
func StillLoaded(ids map[ebpf.ProgramID]bool) int {
	n := 0
	for id := range ids {
		if p, err := ebpf.NewProgramFromID(id); err == nil {
			p.Close()
			n++
		}
	}
	return n
}

// HeldPrograms waits until process pid holds at least n BPF programs and
// returns them.
func HeldPrograms(t testing.TB, what string, pid, n int, d time.Duration) map[ebpf.ProgramID]bool {
	t.Helper()
	var ids map[ebpf.ProgramID]bool
	WaitFor(t, what, d, func() bool {
		ids = ProgramsOf(pid)
		return len(ids) >= n
	})
	return ids
}

// attachesRE matches one collector's attach counter on /metrics.
var attachesRE = regexp.MustCompile(`(?m)^wolf_collector_attaches_total\{collector="([^"]+)"\} ([0-9.e+]+)$`)

// WaitAttached waits until every investigator of the watch has loaded and
// attached its programs once (wolf_collector_attaches_total ≥ 1 for every
// collector on /metrics). Investigators start side by side and the kernel's
// verifier takes seconds for some programs: a test that means to signal a
// running watch, not one still starting, waits for this.
func (w *Watch) WaitAttached(t testing.TB, d time.Duration) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	pending := []string{"(no /metrics answer yet)"}
	for deadline := time.Now().Add(d); ; time.Sleep(100 * time.Millisecond) {
		if b, err := get(c, "http://"+w.Addr+"/metrics"); err == nil {
			pending = pending[:0]
			m := attachesRE.FindAllStringSubmatch(b, -1)
			for _, s := range m {
				if n, err := strconv.ParseFloat(s[2], 64); err != nil || n < 1 {
					pending = append(pending, s[1])
				}
			}
			if len(m) > 0 && len(pending) == 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for wolf watch's investigators to attach: %v still starting", d, pending)
		}
	}
}

func get(c *http.Client, url string) (string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// ReadReport reads the JSON report wolf wrote to path (--output).
func ReadReport(t testing.TB, path string) finding.Report {
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
