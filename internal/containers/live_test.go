package containers_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/containers"
	"github.com/wolf-investigator/wolf/internal/containers/podmantest"
	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/procfs"
	"github.com/wolf-investigator/wolf/internal/testutil"
)

// cgroupOf is the cgroup of pid that names its container.
func cgroupOf(t *testing.T, pid int) string {
	t.Helper()
	cgs, err := procfs.Reader{}.Cgroup(context.Background(), pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cgs {
		if containers.Parse(c.Path).ID != "" {
			return c.Path
		}
	}
	t.Fatalf("pid %d is in no container's cgroup: %+v", pid, cgs)
	return ""
}

// Real podman containers, one in a pod: their cgroups name them by what
// podman calls them, from podman's state on disk, its CLI and its API
// socket.
func TestLivePodman(t *testing.T) {
	podmantest.Require(t)
	testutil.Exclusive(t)
	p := podmantest.New(t)
	tag := fmt.Sprint(os.Getpid())
	pod := "wolf-test-pod-" + tag
	p.Pod(pod)
	inPod := p.Start("wolf-test-web-"+tag, []string{"--pod", pod}, "sleep", "60")
	solo := p.Start("wolf-test-solo-"+tag, nil, "sleep", "60")

	cgPod, cgSolo := cgroupOf(t, inPod.PID), cgroupOf(t, solo.PID)
	if r := containers.Parse(cgPod); r.Runtime != containers.Podman || r.ID != inPod.ID {
		t.Errorf("%s: %+v, want podman container %s", cgPod, r, inPod.ID)
	}
	ctx := context.Background()

	// The state on disk alone (no CLI, no socket): the container's name
	// and image from containers/storage, not the pod's name (podman keeps
	// that in its database).
	disk := containers.NewResolver(containers.Options{NoCLI: true, HostRoot: "/"})
	got := disk.Resolve(ctx, []string{cgPod, cgSolo})
	if i := got[cgSolo]; i.Name != solo.Name || i.Image != podmantest.Image || i.Runtime != containers.Podman {
		t.Errorf("from disk: %+v, want %s", i, solo.Name)
	}
	if i := got[cgPod]; i.Name != inPod.Name || i.PodID == "" {
		t.Errorf("from disk, in a pod: %+v", i)
	}

	// podman ps names the pod.
	cli := containers.NewResolver(containers.Options{HostRoot: "/"})
	if err := cli.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	got = cli.Resolve(ctx, []string{cgPod, cgSolo})
	if i := got[cgPod]; i.Text() != "pod "+pod+", container "+inPod.Name {
		t.Errorf("with podman ps: %q (%+v)", i.Text(), i)
	}
	if i := got[cgSolo]; i.Text() != "container "+solo.Name {
		t.Errorf("with podman ps: %q", i.Text())
	}

	// A report names them: titles, subjects, tasks by pid alone.
	rep := &finding.Report{Findings: []finding.Finding{{
		ID: "x.y", Title: "cgroup " + cgPod + " is busy",
		Subjects: []finding.Subject{{Role: finding.RoleCgroup, Cgroup: cgPod}, {Role: finding.RoleTask, PID: solo.PID, Comm: "w"}},
	}}}
	(&containers.Namer{Resolver: cli}).Report(ctx, rep)
	f := rep.Findings[0]
	if f.Title != "pod "+pod+", container "+inPod.Name+" is busy" || f.Subjects[0].Pod != pod || f.Subjects[0].Container != inPod.Name {
		t.Errorf("named report: %q %+v", f.Title, f.Subjects[0].Workload)
	}
	if w := f.Subjects[1].Workload; w.Container != solo.Name || w.ContainerID != solo.ID || w.Runtime != containers.Podman {
		t.Errorf("a task by pid: %+v", w)
	}

	// Filters, as --container and --pod take them.
	cli.Scan(ctx, "/sys/fs/cgroup")
	if f, err := cli.NewFilter("", pod); err != nil || len(f.Matched) != 1 {
		t.Errorf("--pod %s: %+v %v", pod, f, err)
	}
	if f, err := cli.NewFilter(solo.ID[:12], ""); err != nil || len(f.Matched) != 1 || !strings.Contains(f.Matched[0], solo.Name) {
		t.Errorf("--container %s: %+v %v", solo.ID[:12], f, err)
	}
	if _, err := cli.NewFilter("wolf-test-nosuch-"+tag, ""); err == nil {
		t.Errorf("an unknown container must be an error")
	}
}

// podman's API socket (podman system service), asked as the DaemonSet
// would ask a runtime's socket.
func TestLivePodmanSocket(t *testing.T) {
	bin := podmantest.Require(t)
	testutil.Exclusive(t)
	p := podmantest.New(t)
	tag := fmt.Sprint(os.Getpid())
	pod := "wolf-test-spod-" + tag
	p.Pod(pod)
	c := p.Start("wolf-test-sweb-"+tag, []string{"--pod", pod}, "sleep", "60")

	// The service listens on a socket of the test's; the resolver is
	// pointed at it as at a host mounted under HostRoot.
	root := t.TempDir()
	sock := filepath.Join(root, "run/podman/podman.sock")
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	svc := exec.CommandContext(ctx, bin, "system", "service", "--time", "0", "unix://"+sock)
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = svc.Wait() }()
	for i := 0; i < 100; i++ {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	r := containers.NewResolver(containers.Options{NoCLI: true, HostRoot: root})
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	cg := cgroupOf(t, c.PID)
	if i := r.Info(cg); i.Text() != "pod "+pod+", container "+c.Name {
		t.Errorf("from the API socket: %q (%+v)", i.Text(), i)
	}
}
