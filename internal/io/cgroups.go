package io

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/memcg"
	"github.com/wolf-investigator/wolf/internal/procfs"
)

// hierarchy is where the I/O controller is: a v1 hierarchy mounted with
// "blkio", or v2 with "io" in its root's cgroup.controllers. The BPF side
// reports the cgroup of a bio's blkg, which lives in that hierarchy: its
// id is the directory's inode number there (memcg.Hierarchy's IDs and
// Procs work on any controller's hierarchy).
type hierarchy struct {
	memcg.Hierarchy
}

// errNoIOController: no mounted hierarchy has the I/O controller.
var errNoIOController = fmt.Errorf("no mounted cgroup hierarchy has the I/O controller (blkio or io)")

func findHierarchy(ctx context.Context, r procfs.Reader) (hierarchy, error) {
	mounts, err := r.Mounts(ctx, 0)
	if err != nil {
		return hierarchy{}, fmt.Errorf("io: %w", err)
	}
	return findIn(mounts, func(dir string) string {
		b, _ := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
		return string(b)
	})
}

func findIn(mounts []procfs.Mount, controllers func(dir string) string) (hierarchy, error) {
	for _, m := range mounts {
		if m.FSType == "cgroup" && m.Root == "/" {
			for _, o := range m.SuperOptions {
				if o == "blkio" {
					return hierarchy{memcg.Hierarchy{Version: 1, Mount: m.Point}}, nil
				}
			}
		}
	}
	for _, m := range mounts {
		if m.FSType == "cgroup2" && m.Root == "/" {
			for _, c := range strings.Fields(controllers(m.Point)) {
				if c == "io" {
					return hierarchy{memcg.Hierarchy{Version: 2, Mount: m.Point}}, nil
				}
			}
		}
	}
	return hierarchy{}, errNoIOController
}

// pathOf is process pid's cgroup in the hierarchy, from /proc/PID/cgroup.
func (h hierarchy) pathOf(cgs []procfs.Cgroup) (string, bool) {
	for _, c := range cgs {
		if h.Version == 2 && c.Hierarchy == 0 {
			return c.Path, true
		}
		if h.Version == 1 {
			for _, ctl := range c.Controllers {
				if ctl == "blkio" {
					return c.Path, true
				}
			}
		}
	}
	return "", false
}

// limitFiles are the files that cap a cgroup's I/O on a device, v1: one
// value per device line.
var limitFilesV1 = []struct{ file, key string }{
	{"blkio.throttle.read_bps_device", "rbps"},
	{"blkio.throttle.write_bps_device", "wbps"},
	{"blkio.throttle.read_iops_device", "riops"},
	{"blkio.throttle.write_iops_device", "wiops"},
}

// limits reads the I/O limits on device dev ("MAJ:MIN") of the cgroup at
// path and of its ancestors (a child is held by its parents' limits too).
// Kernel-written files only; a cgroup that vanished has none.
func (h hierarchy) limits(path, dev string) []Limit {
	var out []Limit
	own := true
	for p := filepath.Clean("/" + path); ; p = filepath.Dir(p) {
		dir := h.Dir(p)
		if h.Version == 1 {
			for _, lf := range limitFilesV1 {
				b, err := os.ReadFile(filepath.Join(dir, lf.file))
				if err != nil {
					continue
				}
				for _, l := range parseV1Limits(string(b)) {
					if l.dev == dev {
						out = append(out, Limit{Cgroup: p, File: lf.file, Key: lf.key, Value: l.v, Own: own})
					}
				}
			}
		} else {
			if b, err := os.ReadFile(filepath.Join(dir, "io.max")); err == nil {
				for _, l := range parseIOMax(string(b)) {
					if l.dev == dev {
						out = append(out, Limit{Cgroup: p, File: "io.max", Key: l.key, Value: l.v, Own: own})
					}
				}
			}
			if b, err := os.ReadFile(filepath.Join(dir, "io.latency")); err == nil {
				for _, l := range parseIOMax(string(b)) {
					if l.dev == dev && l.key == "target" {
						out = append(out, Limit{Cgroup: p, File: "io.latency", Key: "target", Value: l.v, Own: own})
					}
				}
			}
		}
		if p == "/" {
			break
		}
		own = false
	}
	return out
}

type devValue struct {
	dev string
	key string
	v   uint64
}

// parseV1Limits parses blkio.throttle.*_device: "MAJ:MIN VALUE" lines.
func parseV1Limits(s string) []devValue {
	var out []devValue
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		v, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil || v == 0 {
			continue
		}
		out = append(out, devValue{dev: f[0], v: v})
	}
	return out
}

// parseIOMax parses io.max ("MAJ:MIN rbps=N wbps=max riops=N wiops=max")
// and io.latency ("MAJ:MIN target=N"); "max" is no limit and is left out.
func parseIOMax(s string) []devValue {
	var out []devValue
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || !strings.Contains(f[0], ":") {
			continue
		}
		for _, kv := range f[1:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || v == "max" {
				continue
			}
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				continue
			}
			out = append(out, devValue{dev: f[0], key: k, v: n})
		}
	}
	return out
}

// deviceName is the kernel's name of block device major:minor ("vda"),
// from sysfs; "MAJ:MIN" when sysfs does not have it.
func deviceName(major, minor int) string {
	id := fmt.Sprintf("%d:%d", major, minor)
	if l, err := os.Readlink("/sys/dev/block/" + id); err == nil {
		return filepath.Base(l)
	}
	return id
}

// devNumber finds a block device by its name ("vda", "/dev/vda") or
// number ("254:0") in sysfs. Partitions are refused: requests are
// counted per disk.
func devNumber(name string) (major, minor int, err error) {
	name = strings.TrimPrefix(name, "/dev/")
	if a, b, ok := strings.Cut(name, ":"); ok {
		major, err1 := strconv.Atoi(a)
		minor, err2 := strconv.Atoi(b)
		if err1 != nil || err2 != nil {
			return 0, 0, fmt.Errorf("--device %s: not a device name or MAJ:MIN", name)
		}
		if _, err := os.Stat(fmt.Sprintf("/sys/dev/block/%d:%d", major, minor)); err != nil {
			return 0, 0, fmt.Errorf("--device %s: no such block device", name)
		}
		name = deviceName(major, minor)
	}
	b, err := os.ReadFile(filepath.Join("/sys/class/block", name, "dev"))
	if err != nil {
		return 0, 0, fmt.Errorf("--device %s: no such block device (see /sys/block)", name)
	}
	if _, err := os.Stat(filepath.Join("/sys/class/block", name, "partition")); err == nil {
		return 0, 0, fmt.Errorf("--device %s is a partition: give its disk (wolf counts requests per disk)", name)
	}
	a, c, _ := strings.Cut(strings.TrimSpace(string(b)), ":")
	major, _ = strconv.Atoi(a)
	minor, _ = strconv.Atoi(c)
	return major, minor, nil
}

// kdev is the kernel's internal dev_t (MKDEV: 20 bits of minor), as the
// programs report devices.
func kdev(major, minor int) uint32 { return uint32(major)<<20 | uint32(minor)&0xfffff }

// splitKdev is kdev's inverse.
func splitKdev(d uint32) (major, minor int) { return int(d >> 20), int(d & 0xfffff) }

// backing says what a loop device reads and writes ("loop: /path"), ""
// for other devices.
func backing(name string) string {
	b, err := os.ReadFile(filepath.Join("/sys/block", name, "loop/backing_file"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// under are the disks a device's I/O goes on to: a loop device's backing
// file's disk, a device-mapper or md device's members (sysfs "slaves").
func under(name string) []string {
	var out []string
	if ents, err := os.ReadDir(filepath.Join("/sys/block", name, "slaves")); err == nil {
		for _, e := range ents {
			out = append(out, diskOf(e.Name()))
		}
	}
	if f := backing(name); f != "" {
		var st unix.Stat_t
		if err := unix.Stat(f, &st); err == nil && st.Dev != 0 {
			if d := diskOf(deviceName(int(unix.Major(st.Dev)), int(unix.Minor(st.Dev)))); !strings.Contains(d, ":") {
				out = append(out, d)
			}
		}
	}
	return out
}

// diskOf is the disk a partition is on ("vda" for "vda1"), name itself
// for a disk.
func diskOf(name string) string {
	if _, err := os.Stat(filepath.Join("/sys/class/block", name, "partition")); err != nil {
		return name
	}
	l, err := os.Readlink(filepath.Join("/sys/class/block", name))
	if err != nil {
		return name
	}
	return filepath.Base(filepath.Dir(l))
}

// queueInt reads an integer of a disk's request queue ("nr_requests").
func queueInt(name, file string) int {
	b, err := os.ReadFile(filepath.Join("/sys/block", name, "queue", file))
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}
