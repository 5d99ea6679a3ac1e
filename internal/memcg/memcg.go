// Package memcg reads the memory controller of cgroups, v1 or v2, the way
// ClickHouse's "The case of the vanishing CPU" reads a container at its limit: limit, usage, how often it hit
// the limit, OOM kills, the LRU list sizes and (v2) its pressure stall
// information. It finds where the controller is mounted, maps the cgroup ids
// the BPF side reports (kernfs ids, which are the directories' inode
// numbers) to paths, and lists a cgroup's processes.
//
// Everything here reads cgroupfs and /proc/pressure, which take no lock a
// stuck task can hold; nothing reads a process's memory.
package memcg

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/wolf-investigator/wolf/internal/procfs"
)

// ErrNoMemoryController is returned by Find when no mounted cgroup
// hierarchy has the memory controller.
var ErrNoMemoryController = errors.New("no mounted cgroup hierarchy has the memory controller")

// Hierarchy is the cgroup hierarchy the memory controller is bound to.
type Hierarchy struct {
	Version int    // 1 or 2
	Mount   string // where its root is mounted
}

// Find locates the memory controller: a v1 hierarchy mounted with the
// "memory" option, or a v2 hierarchy whose root lists "memory" in
// cgroup.controllers. A controller bound to v1 is absent from v2, so at most
// one of them matches.
func Find(ctx context.Context, r procfs.Reader) (Hierarchy, error) {
	mounts, err := r.Mounts(ctx, 0)
	if err != nil {
		return Hierarchy{}, fmt.Errorf("memcg: %w", err)
	}
	return findIn(mounts, func(dir string) string {
		b, _ := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
		return string(b)
	})
}

func findIn(mounts []procfs.Mount, controllers func(dir string) string) (Hierarchy, error) {
	for _, m := range mounts {
		if m.FSType == "cgroup" && m.Root == "/" {
			for _, o := range m.SuperOptions {
				if o == "memory" {
					return Hierarchy{Version: 1, Mount: m.Point}, nil
				}
			}
		}
	}
	for _, m := range mounts {
		if m.FSType == "cgroup2" && m.Root == "/" {
			for _, c := range strings.Fields(controllers(m.Point)) {
				if c == "memory" {
					return Hierarchy{Version: 2, Mount: m.Point}, nil
				}
			}
		}
	}
	return Hierarchy{}, ErrNoMemoryController
}

// Dir is the directory of the cgroup at path ("/" is the root).
func (h Hierarchy) Dir(path string) string {
	return filepath.Join(h.Mount, filepath.Clean("/"+path))
}

// ID is the cgroup id of path: the inode number of its directory, which is
// what the kernel's kernfs node id (cgroup->kn->id) is on 64-bit hosts.
func (h Hierarchy) ID(path string) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(h.Dir(path), &st); err != nil {
		return 0, fmt.Errorf("memcg: stat %s: %w", h.Dir(path), err)
	}
	return st.Ino, nil
}

// IDs walks the hierarchy and maps every cgroup's id to its path, visiting
// at most limit directories (a bound for hosts with very many cgroups; the
// walk is breadth-first, so the shallow ones are never the ones missed).
// It reports whether the walk was cut short.
func (h Hierarchy) IDs(ctx context.Context, limit int) (ids map[uint64]string, truncated bool, err error) {
	ids = map[uint64]string{}
	queue := []string{"/"}
	for len(queue) > 0 {
		if err := ctx.Err(); err != nil {
			return ids, true, err
		}
		if len(ids) >= limit {
			return ids, true, nil
		}
		p := queue[0]
		queue = queue[1:]
		id, err := h.ID(p)
		if err != nil {
			if p == "/" {
				return nil, false, err
			}
			continue // removed meanwhile
		}
		ids[id] = p
		ents, err := os.ReadDir(h.Dir(p))
		if err != nil {
			continue
		}
		for _, e := range ents {
			if e.IsDir() {
				queue = append(queue, filepath.Join(p, e.Name()))
			}
		}
	}
	return ids, false, nil
}

// Procs lists the processes (thread-group ids) in the cgroup at path, not
// in its descendants.
func (h Hierarchy) Procs(path string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(h.Dir(path), "cgroup.procs"))
	if err != nil {
		return nil, fmt.Errorf("memcg: %w", err)
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	sort.Ints(out)
	return out, nil
}

// Unlimited is how State reports a cgroup without a limit.
const Unlimited = int64(-1)

// State is one cgroup's memory controller, read at one moment.
type State struct {
	Path    string
	Version int
	// LimitBytes is the cgroup's own limit (v1 memory.limit_in_bytes, v2
	// memory.max); EffectiveLimitBytes the tightest limit of it and its
	// ancestors (v1 hierarchical_memory_limit); Unlimited when none.
	LimitBytes, EffectiveLimitBytes int64
	UsageBytes, MaxUsageBytes       int64 // MaxUsageBytes: v1 max_usage_in_bytes, v2 memory.peak (0 when absent)
	// LimitHits counts how often usage hit the limit: v1 memory.failcnt,
	// v2 memory.events "max".
	LimitHits uint64
	HighHits  uint64 // v2 memory.events "high": reclaim forced by memory.high (0 on v1)
	OOMs      uint64 // v2 memory.events "oom"; v1: under_oom as 0/1
	OOMKills  uint64 // v1 memory.oom_control oom_kill, v2 memory.events oom_kill
	// Stat is memory.stat; on v1 the hierarchical total_* values replace
	// the local ones, so both versions mean "this cgroup and below".
	Stat     map[string]uint64
	Pressure *PSI // v2 memory.pressure; nil on v1
}

// Read reads the state of the cgroup at path.
func (h Hierarchy) Read(path string) (State, error) {
	dir := h.Dir(path)
	s := State{Path: filepath.Clean("/" + path), Version: h.Version, LimitBytes: Unlimited, EffectiveLimitBytes: Unlimited}
	stat, err := readKV(filepath.Join(dir, "memory.stat"))
	if err != nil {
		return s, fmt.Errorf("memcg: %w", err)
	}
	if h.Version == 1 {
		s.Stat = map[string]uint64{}
		for k, v := range stat {
			if strings.HasPrefix(k, "total_") {
				continue
			}
			s.Stat[k] = v
		}
		for k, v := range stat {
			if t, ok := strings.CutPrefix(k, "total_"); ok {
				s.Stat[t] = v
			}
		}
		s.LimitBytes = v1Limit(readInt(filepath.Join(dir, "memory.limit_in_bytes")))
		if v, ok := stat["hierarchical_memory_limit"]; ok {
			s.EffectiveLimitBytes = v1Limit(int64(min(v, math.MaxInt64)), nil)
		}
		s.UsageBytes, _ = readInt(filepath.Join(dir, "memory.usage_in_bytes"))
		s.MaxUsageBytes, _ = readInt(filepath.Join(dir, "memory.max_usage_in_bytes"))
		if v, err := readInt(filepath.Join(dir, "memory.failcnt")); err == nil {
			s.LimitHits = uint64(v)
		}
		if oc, err := readKV(filepath.Join(dir, "memory.oom_control")); err == nil {
			s.OOMKills = oc["oom_kill"]
			s.OOMs = oc["under_oom"]
		}
		return s, nil
	}
	s.Stat = stat
	s.LimitBytes = v2Limit(filepath.Join(dir, "memory.max"))
	s.EffectiveLimitBytes = s.LimitBytes
	for p := filepath.Dir(dir); strings.HasPrefix(p, h.Mount) && p != h.Mount; p = filepath.Dir(p) {
		if l := v2Limit(filepath.Join(p, "memory.max")); l != Unlimited && (s.EffectiveLimitBytes == Unlimited || l < s.EffectiveLimitBytes) {
			s.EffectiveLimitBytes = l
		}
	}
	s.UsageBytes, _ = readInt(filepath.Join(dir, "memory.current"))
	s.MaxUsageBytes, _ = readInt(filepath.Join(dir, "memory.peak"))
	if ev, err := readKV(filepath.Join(dir, "memory.events")); err == nil {
		s.LimitHits, s.HighHits, s.OOMs, s.OOMKills = ev["max"], ev["high"], ev["oom"], ev["oom_kill"]
	}
	if p, err := ReadPSI(filepath.Join(dir, "memory.pressure")); err == nil {
		s.Pressure = &p
	}
	return s, nil
}

// v1 reports "no limit" as the largest page-aligned long.
func v1Limit(v int64, err error) int64 {
	if err != nil || v >= math.MaxInt64/2 {
		return Unlimited
	}
	return v
}

func v2Limit(file string) int64 {
	b, err := os.ReadFile(file)
	if err != nil {
		return Unlimited
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return Unlimited
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return Unlimited
	}
	return v
}

func readInt(file string) (int64, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// readKV reads a "key value" per line file (memory.stat, memory.events).
func readKV(file string) (map[string]uint64, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return ParseKV(b), nil
}

// ParseKV parses "key value" lines; lines that do not parse are skipped.
func ParseKV(b []byte) map[string]uint64 {
	out := map[string]uint64{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		if v, err := strconv.ParseUint(f[1], 10, 64); err == nil {
			out[f[0]] = v
		}
	}
	return out
}

// IsNotExist reports whether err says a cgroup (or one of its files) is
// gone.
func IsNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }

// ReadCounters reads only the counters whose deltas matter over a window
// (limit hits, OOMs, OOM kills, v2 pressure totals): cheaper than Read, for
// snapshotting every cgroup at the start of a window.
func (h Hierarchy) ReadCounters(path string) (State, error) {
	dir := h.Dir(path)
	s := State{Path: filepath.Clean("/" + path), Version: h.Version, LimitBytes: Unlimited, EffectiveLimitBytes: Unlimited}
	if h.Version == 1 {
		v, err := readInt(filepath.Join(dir, "memory.failcnt"))
		if err != nil {
			return s, fmt.Errorf("memcg: %w", err)
		}
		s.LimitHits = uint64(v)
		if oc, err := readKV(filepath.Join(dir, "memory.oom_control")); err == nil {
			s.OOMKills, s.OOMs = oc["oom_kill"], oc["under_oom"]
		}
		s.readRefaults(dir, h.Version)
		return s, nil
	}
	ev, err := readKV(filepath.Join(dir, "memory.events"))
	if err != nil {
		return s, fmt.Errorf("memcg: %w", err)
	}
	s.LimitHits, s.HighHits, s.OOMs, s.OOMKills = ev["max"], ev["high"], ev["oom"], ev["oom_kill"]
	if p, err := ReadPSI(filepath.Join(dir, "memory.pressure")); err == nil {
		s.Pressure = &p
	}
	s.readRefaults(dir, h.Version)
	return s, nil
}

// refaultKeys are memory.stat's counters of pages read back after
// reclaim evicted them (the older kernels' name last), and those that
// tell how many of them the first fall short by: the shadow nodes the
// kernel dropped (each took up to 64 shadow entries with it, whose
// re-reads it then counts as first reads) and the pages reclaim evicted.
// v1 has the refaults only.
var refaultKeys = []string{"workingset_refault_file", "workingset_refault_anon", "workingset_refault", "workingset_nodereclaim", "pgsteal"}

// readRefaults adds the refault counters to s.Stat, for a cgroup that has
// ever hit its limit: only those thrash, and memory.stat costs more than
// the counters above on a host with many cgroups. v1's hierarchical
// total_ values are kept under the plain names, as Read does.
func (s *State) readRefaults(dir string, version int) {
	if s.LimitHits == 0 && s.HighHits == 0 {
		return
	}
	stat, err := readKV(filepath.Join(dir, "memory.stat"))
	if err != nil {
		return
	}
	s.Stat = map[string]uint64{}
	for _, k := range refaultKeys {
		v, ok := stat[k]
		if version == 1 {
			v, ok = stat["total_"+k]
		}
		if ok {
			s.Stat[k] = v
		}
	}
}

// PathOf returns the path of process pid's cgroup in this hierarchy, from
// /proc/PID/cgroup: the v1 line naming the memory controller, or the v2
// line (hierarchy 0).
func (h Hierarchy) PathOf(cgs []procfs.Cgroup) (string, bool) {
	for _, c := range cgs {
		if h.Version == 2 && c.Hierarchy == 0 {
			return c.Path, true
		}
		if h.Version == 1 {
			for _, ctl := range c.Controllers {
				if ctl == "memory" {
					return c.Path, true
				}
			}
		}
	}
	return "", false
}
