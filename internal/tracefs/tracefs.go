// Package tracefs finds the kernel's tracing filesystem, mounting it when
// the host booted without it.
//
// Tracepoints are wolf's first choice of probe
// (ARCHITECTURE.md#tracepoints-first), and attaching a BPF program to one
// needs the event id that only tracefs publishes (cilium/ebpf reads
// events/GROUP/NAME/id). Some hosts, this lab machine among them, boot
// without tracefs mounted; Ensure mounts it at /sys/kernel/tracing so that
// everything after it just works.
//
// Call Ensure before the first tracepoint or kprobe attach through
// cilium/ebpf: cilium looks for tracefs once per process and caches the
// answer, so an attach tried before the mount keeps failing afterwards.
package tracefs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/procfs"
)

const (
	// DefaultPath is where tracefs lives on kernels since 4.1.
	DefaultPath = "/sys/kernel/tracing"
	// DebugfsPath is the older location, automounted inside debugfs.
	DebugfsPath = "/sys/kernel/debug/tracing"
)

// ensureMu keeps two goroutines of wolf from mounting tracefs twice.
var ensureMu sync.Mutex

// Ensure returns the path of a mounted tracefs, mounting one at
// DefaultPath when none is (which needs root). It prefers DefaultPath,
// then DebugfsPath, then any other tracefs mount.
func Ensure() (string, error) {
	ensureMu.Lock()
	defer ensureMu.Unlock()
	if p, err := find(); err != nil {
		return "", err
	} else if p != "" {
		return p, nil
	}
	if err := mountAt(DefaultPath); err != nil {
		return "", err
	}
	return DefaultPath, nil
}

// Find returns the path of a mounted tracefs without mounting one; ok is
// false when none is mounted.
func Find() (path string, ok bool) {
	p, err := find()
	return p, err == nil && p != ""
}

// find returns the preferred mounted tracefs of this process's mount
// namespace, or "" when none is mounted.
func find() (string, error) {
	mounts, err := procfs.Reader{}.Mounts(context.Background(), 0)
	if err != nil {
		return "", fmt.Errorf("tracefs: %w", err)
	}
	return choose(tracefsPoints(mounts)), nil
}

// choose picks the preferred tracefs mount point.
func choose(points []string) string {
	for _, want := range []string{DefaultPath, DebugfsPath} {
		for _, p := range points {
			if p == want {
				return p
			}
		}
	}
	if len(points) > 0 {
		return points[0]
	}
	return ""
}

// tracefsPoints returns the mount points of every tracefs among mounts.
func tracefsPoints(mounts []procfs.Mount) []string {
	var points []string
	for _, m := range mounts {
		if m.FSType == "tracefs" {
			points = append(points, m.Point)
		}
	}
	return points
}

// mountAt mounts a tracefs instance at dir.
func mountAt(dir string) error {
	if _, err := os.Stat(dir); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("tracefs: %s does not exist: the kernel was built without tracing support (CONFIG_TRACING)", dir)
		}
		return fmt.Errorf("tracefs: %w", err)
	}
	if err := unix.Mount("tracefs", dir, "tracefs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("tracefs: not mounted, and mounting it at %s needs root (CAP_SYS_ADMIN): %w", dir, err)
		}
		return fmt.Errorf("tracefs: mounting at %s: %w", dir, err)
	}
	return nil
}

func eventDir(group, name string) (string, error) {
	for _, s := range []string{group, name} {
		if s == "" || s == "." || s == ".." || strings.ContainsAny(s, "/\x00") {
			return "", fmt.Errorf("tracefs: bad event name %q/%q", group, name)
		}
	}
	root, err := Ensure()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "events", group, name), nil
}

// HasEvent reports whether the kernel has the tracepoint GROUP/NAME, e.g.
// ("sched", "sched_switch"). It mounts tracefs if needed.
func HasEvent(group, name string) bool {
	dir, err := eventDir(group, name)
	if err != nil {
		return false
	}
	_, err = os.Stat(filepath.Join(dir, "format"))
	return err == nil
}

// EventFormat returns the format description of tracepoint GROUP/NAME: its
// id and the layout of its fields.
func EventFormat(group, name string) (string, error) {
	dir, err := eventDir(group, name)
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(dir, "format"))
	if err != nil {
		return "", fmt.Errorf("tracefs: event %s/%s: %w", group, name, err)
	}
	return string(b), nil
}
