// Package podmantest runs real podman containers and pods for tests: an
// image built on the spot from a static binary (no registry), containers
// that end by themselves, and everything removed when the test ends.
//
// Containers run with runc (crun refuses hybrid cgroup hierarchies, this
// development machine's among them), no network, and explicit ulimits
// (podman asks for more than a root without CAP_SYS_RESOURCE may have).
package podmantest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/testutil"
)

// Label marks what these helpers make, so that what a killed test left
// is removed by the next one.
const Label = "wolf.test=containers"

// Image is the image every container runs: one static program, /w.
const Image = "localhost/wolf-test-spin:latest"

// Lifetime bounds every container's program: a test killed with -9
// leaves nothing running longer than this.
const Lifetime = 120 * time.Second

// program is the image's only binary: "spin S" burns a CPU for S seconds,
// "sleep S" sleeps S seconds.
const program = `package main

import (
	"os"
	"strconv"
	"time"
)

func main() {
	s := 120
	if len(os.Args) > 2 {
		if n, err := strconv.Atoi(os.Args[2]); err == nil && n > 0 && n <= 120 {
			s = n
		}
	}
	end := time.Now().Add(time.Duration(s) * time.Second)
	if len(os.Args) > 1 && os.Args[1] == "spin" {
		x := 0
		for time.Now().Before(end) {
			for i := 0; i < 1000000; i++ {
				x += i
			}
		}
		os.Exit(x & 0)
	}
	time.Sleep(time.Until(end))
}
`

// Require skips t unless podman and runc can run containers here (root,
// both installed); under WOLF_REQUIRE_BPF=1 (CI, which installs them) it
// fails instead.
func Require(t *testing.T) string {
	t.Helper()
	testutil.RequireRoot(t)
	bin := testutil.RequireTool(t, "podman")
	testutil.RequireTool(t, "runc")
	return bin
}

// Podman runs podman commands for one test.
type Podman struct {
	t   *testing.T
	bin string
}

// New builds the image (from a static Go program compiled here) and
// removes, first, whatever a killed earlier test left. Call Require and
// testutil.Exclusive first.
func New(t *testing.T) *Podman {
	t.Helper()
	p := &Podman{t: t, bin: Require(t)}
	p.clean()
	t.Cleanup(p.clean)
	dir := t.TempDir()
	root := filepath.Join(dir, "rootfs")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(program), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module spin\n\ngo 1.21\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		testutil.Require(t, false, "needs the go command to build the image's program")
	}
	build := exec.Command(gobin, "build", "-trimpath", "-o", filepath.Join(root, "w"), ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GOOS=linux")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the image's program: %v\n%s", err, out)
	}
	tarball := filepath.Join(dir, "rootfs.tar")
	if out, err := exec.Command("tar", "-C", root, "-cf", tarball, "w").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	p.Must("import", "--change", "LABEL "+Label, tarball, Image)
	return p
}

// Run runs podman with args, within a minute; its standard output.
func (p *Podman) Run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return "", fmt.Errorf("podman %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

// Must is Run, failing the test on error.
func (p *Podman) Must(args ...string) string {
	p.t.Helper()
	out, err := p.Run(args...)
	if err != nil {
		p.t.Fatal(err)
	}
	return out
}

// clean removes the containers, pods and image these helpers made.
func (p *Podman) clean() {
	_, _ = p.Run("rm", "--force", "--time", "0", "--filter", "label="+Label)
	if ids, err := p.Run("pod", "ps", "--quiet", "--filter", "label="+Label); err == nil {
		for _, id := range strings.Fields(ids) {
			_, _ = p.Run("pod", "rm", "--force", id)
		}
	}
	_, _ = p.Run("rmi", "--force", Image)
}

// Pod makes a pod without an infra container (no pause image to pull).
func (p *Podman) Pod(name string) string {
	p.t.Helper()
	return p.Must("pod", "create", "--infra=false", "--label", Label, "--name", name)
}

// Container is a running container.
type Container struct {
	ID   string
	Name string
	PID  int // its program's pid, in the host's pid namespace
}

// Start runs a detached container named name running the image's program
// with args (spin|sleep SECONDS), with the extra podman run flags (a pod,
// a CPU limit).
func (p *Podman) Start(name string, flags []string, args ...string) Container {
	p.t.Helper()
	var lim unix.Rlimit
	nofile := "1024:1024"
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) == nil {
		nofile = fmt.Sprintf("%d:%d", lim.Max, lim.Max)
	}
	run := []string{"run", "--detach", "--runtime", "runc", "--network", "none", "--label", Label,
		"--ulimit", "nofile=" + nofile, "--ulimit", "nproc=4096:4096", "--name", name}
	run = append(run, flags...)
	run = append(run, Image, "/w")
	run = append(run, args...)
	id := p.Must(run...)
	pid, err := strconv.Atoi(p.Must("inspect", "--format", "{{.State.Pid}}", id))
	if err != nil || pid <= 0 {
		p.t.Fatalf("container %s: no pid (%v)", name, err)
	}
	return Container{ID: id, Name: name, PID: pid}
}
