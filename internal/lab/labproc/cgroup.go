package labproc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/procfs"
)

// Cgroup is a lab's own cgroup in the hierarchy that has a controller.
type Cgroup struct {
	Version int    // 1 or 2
	Root    string // the hierarchy's mount point
	Path    string // within it, "/wolf-lab-…", as wolf reports it
}

// Dir is the cgroup's directory.
func (c *Cgroup) Dir() string { return filepath.Join(c.Root, c.Path) }

// Hierarchy finds where controller can be used: a cgroup v1 mount with it
// among its options, else the cgroup2 mount when its root offers it and
// enables it for children. version 1 or 2 insists on one; 0 takes either,
// v1 first (what this host's kernel does for memory and cpu).
func Hierarchy(ctx context.Context, controller string, version int) (root string, v int, err error) {
	mounts, err := procfs.Reader{}.Mounts(ctx, 0)
	if err != nil {
		return "", 0, fmt.Errorf("cgroup mounts: %w", err)
	}
	var v2 string
	for _, m := range mounts {
		switch {
		case m.FSType == "cgroup" && m.Root == "/" && slices.Contains(m.SuperOptions, controller) && version != 2:
			return m.Point, 1, nil
		case m.FSType == "cgroup2" && m.Root == "/" && v2 == "":
			v2 = m.Point
		}
	}
	if v2 != "" && version != 1 {
		ctrls, _ := os.ReadFile(filepath.Join(v2, "cgroup.controllers"))
		sub, _ := os.ReadFile(filepath.Join(v2, "cgroup.subtree_control"))
		switch {
		case !slices.Contains(strings.Fields(string(ctrls)), controller):
			return "", 0, fmt.Errorf("the %s controller is not available in cgroup v2 at %s (it is bound to a v1 hierarchy, or not built)", controller, v2)
		case !slices.Contains(strings.Fields(string(sub)), controller):
			return "", 0, fmt.Errorf("the %s controller is not enabled for children of %s (cgroup.subtree_control %q); the lab does not change that", controller, v2, strings.TrimSpace(string(sub)))
		}
		return v2, 2, nil
	}
	if version == 0 {
		return "", 0, fmt.Errorf("no cgroup hierarchy has the %s controller", controller)
	}
	return "", 0, fmt.Errorf("no cgroup v%d hierarchy with the %s controller here", version, controller)
}

// NewCgroup creates prefix+PID in the hierarchy that has controller,
// after removing what killed labs of the same kind left behind.
func NewCgroup(ctx context.Context, controller, prefix string, version int) (*Cgroup, error) {
	root, v, err := Hierarchy(ctx, controller, version)
	if err != nil {
		return nil, err
	}
	Sweep(root, prefix)
	c := &Cgroup{Version: v, Root: root, Path: "/" + prefix + strconv.Itoa(os.Getpid())}
	if err := os.Mkdir(c.Dir(), 0o755); err != nil {
		return nil, fmt.Errorf("create cgroup %s: %w", c.Dir(), err)
	}
	return c, nil
}

// Set writes a control file.
func (c *Cgroup) Set(file, value string) error {
	if err := os.WriteFile(filepath.Join(c.Dir(), file), []byte(value), 0); err != nil {
		return fmt.Errorf("cgroup %s: set %s to %q: %w", c.Path, file, value, err)
	}
	return nil
}

// Add moves a process (all its threads) into the cgroup.
func (c *Cgroup) Add(pid int) error { return c.Set("cgroup.procs", strconv.Itoa(pid)) }

// Remove removes the cgroup once its processes are gone (it waits up to
// ten seconds for their exit to complete).
func (c *Cgroup) Remove() error {
	if c == nil || c.Path == "" {
		return nil
	}
	dir := c.Dir()
	err := lab.WaitFor(context.Background(), 10*time.Second, "the lab's cgroup to empty", func() (bool, error) {
		err := os.Remove(dir)
		return err == nil || errors.Is(err, os.ErrNotExist), nil
	})
	if err != nil {
		return fmt.Errorf("remove cgroup %s: %w", dir, err)
	}
	return nil
}

// Sweep removes the empty cgroups named prefix+PID whose PID is gone: what
// a lab killed with SIGKILL leaves.
func Sweep(root, prefix string) {
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !e.IsDir() || !ok {
			continue
		}
		n, err := strconv.Atoi(rest)
		if err == nil && n != os.Getpid() && unix.Kill(n, 0) == unix.ESRCH {
			_ = os.Remove(filepath.Join(root, e.Name()))
		}
	}
}
