package sched

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/wolf-investigator/wolf/internal/procfs"
)

// maxCgroupDirs bounds the walk of the cgroup tree.
const maxCgroupDirs = 20000

// cpuCgroupRoot finds where the cgroup hierarchy holding the cpu
// controller is mounted: a cgroup v1 mount with "cpu" among its options, or
// the cgroup2 mount (where the cpu controller lives on v2-only hosts, and
// whose root holds everything when no hierarchy has it).
func cpuCgroupRoot(ctx context.Context, r procfs.Reader) string {
	mounts, _ := r.Mounts(ctx, 0)
	v2 := ""
	for _, m := range mounts {
		switch m.FSType {
		case "cgroup":
			if slices.Contains(m.SuperOptions, "cpu") && m.Root == "/" {
				return m.Point
			}
		case "cgroup2":
			if v2 == "" && m.Root == "/" {
				v2 = m.Point
			}
		}
	}
	return v2
}

// cgroupPaths maps cgroup ids (the kernfs inode numbers the BPF side reads)
// to paths relative to root, for the ids in want.
func cgroupPaths(root string, want map[uint64]bool) map[uint64]string {
	out := map[uint64]string{}
	if root == "" || len(want) == 0 {
		return out
	}
	n := 0
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		n++
		if n > maxCgroupDirs || len(out) == len(want) {
			return filepath.SkipAll
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok || !want[st.Ino] {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return nil
		}
		if rel == "." {
			rel = ""
		}
		out[st.Ino] = "/" + rel
		return nil
	})
	return out
}

// effectiveCpuset reads the effective CPUs of the cgroup holding a task,
// from its cgroup v2 path or its v1 cpuset path; "" when unknown.
func effectiveCpuset(ctx context.Context, r procfs.Reader, pid, tid int) string {
	cgs, err := r.Cgroup(ctx, pid, tid)
	if err != nil {
		return ""
	}
	for _, c := range cgs {
		var candidates []string
		switch {
		case c.Hierarchy == 0:
			candidates = []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}
		case slices.Contains(c.Controllers, "cpuset"):
			candidates = []string{"/sys/fs/cgroup/cpuset"}
		default:
			continue
		}
		for _, base := range candidates {
			for _, f := range []string{"cpuset.cpus.effective", "cpuset.effective_cpus"} {
				b, err := os.ReadFile(filepath.Join(base, c.Path, f))
				if err == nil {
					if s := strings.TrimSpace(string(b)); s != "" {
						return s
					}
				}
			}
		}
	}
	return ""
}
