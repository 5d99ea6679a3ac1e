package memcg

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/procfs"
)

func write(t *testing.T, dir, name, body string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestFindIn(t *testing.T) {
	v1 := []procfs.Mount{
		{FSType: "cgroup", Root: "/", Point: "/sys/fs/cgroup/cpu", SuperOptions: []string{"rw", "cpu"}},
		{FSType: "cgroup", Root: "/", Point: "/sys/fs/cgroup/memory", SuperOptions: []string{"rw", "memory"}},
		{FSType: "cgroup2", Root: "/", Point: "/sys/fs/cgroup/unified"},
	}
	none := func(string) string { return "hugetlb" }
	h, err := findIn(v1, none)
	if err != nil || h != (Hierarchy{Version: 1, Mount: "/sys/fs/cgroup/memory"}) {
		t.Errorf("v1: %+v, %v", h, err)
	}
	v2 := []procfs.Mount{{FSType: "cgroup2", Root: "/", Point: "/sys/fs/cgroup"}}
	h, err = findIn(v2, func(string) string { return "cpuset cpu io memory pids\n" })
	if err != nil || h != (Hierarchy{Version: 2, Mount: "/sys/fs/cgroup"}) {
		t.Errorf("v2: %+v, %v", h, err)
	}
	// A bind mount of a sub-cgroup (inside a container) is not the root.
	sub := []procfs.Mount{{FSType: "cgroup", Root: "/docker/x", Point: "/sys/fs/cgroup/memory", SuperOptions: []string{"memory"}}}
	if _, err := findIn(sub, none); err != ErrNoMemoryController {
		t.Errorf("sub-cgroup mount: %v", err)
	}
	if _, err := findIn(v2, none); err != ErrNoMemoryController {
		t.Errorf("v2 without memory: %v", err)
	}
}

func TestReadV1(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "lab")
	write(t, dir, "memory.stat", "cache 100\nrss 50\nactive_file 10\ninactive_file 20\nworkingset_refault_file 4\nhierarchical_memory_limit 268435456\ntotal_active_file 11\ntotal_inactive_file 21\ntotal_active_anon 0\ntotal_inactive_anon 7\ntotal_workingset_refault_file 5\n")
	write(t, dir, "memory.limit_in_bytes", "268435456\n")
	write(t, dir, "memory.usage_in_bytes", "268000000\n")
	write(t, dir, "memory.max_usage_in_bytes", "268435456\n")
	write(t, dir, "memory.failcnt", "31\n")
	write(t, dir, "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
	write(t, dir, "cgroup.procs", "42\n7\n")
	h := Hierarchy{Version: 1, Mount: root}
	s, err := h.Read("/lab")
	if err != nil {
		t.Fatal(err)
	}
	if s.LimitBytes != 268435456 || s.EffectiveLimitBytes != 268435456 || s.UsageBytes != 268000000 || s.LimitHits != 31 || s.OOMKills != 2 {
		t.Errorf("state %+v", s)
	}
	if s.Stat["active_file"] != 11 || s.Stat["inactive_file"] != 21 || s.Stat["inactive_anon"] != 7 || s.Stat["cache"] != 100 {
		t.Errorf("stat %v: want the hierarchical totals", s.Stat)
	}
	c, err := h.ReadCounters("lab")
	if err != nil || c.LimitHits != 31 || c.OOMKills != 2 || c.Stat["workingset_refault_file"] != 5 {
		t.Errorf("counters %+v %v", c, err)
	}
	procs, err := h.Procs("/lab")
	if err != nil || len(procs) != 2 || procs[0] != 7 {
		t.Errorf("procs %v %v", procs, err)
	}
	// The root's "no limit" reads as Unlimited.
	write(t, root, "memory.stat", "hierarchical_memory_limit 9223372036854771712\n")
	write(t, root, "memory.limit_in_bytes", "9223372036854771712\n")
	s, err = h.Read("/")
	if err != nil || s.LimitBytes != Unlimited || s.EffectiveLimitBytes != Unlimited {
		t.Errorf("root: %+v %v", s, err)
	}
	ids, truncated, err := h.IDs(context.Background(), 100)
	if err != nil || truncated || len(ids) != 2 {
		t.Errorf("ids %v %v %v", ids, truncated, err)
	}
	id, _ := h.ID("/lab")
	if ids[id] != "/lab" {
		t.Errorf("ids[%d] = %q", id, ids[id])
	}
	if ids, truncated, _ := h.IDs(context.Background(), 1); !truncated || len(ids) != 1 {
		t.Errorf("bounded walk: %v %v", ids, truncated)
	}
}

func TestReadV2(t *testing.T) {
	root := t.TempDir()
	parent := filepath.Join(root, "kubepods")
	dir := filepath.Join(parent, "pod")
	write(t, parent, "memory.max", "1073741824\n")
	write(t, dir, "memory.max", "max\n")
	write(t, dir, "memory.current", "1000\n")
	write(t, dir, "memory.peak", "2000\n")
	write(t, dir, "memory.stat", "anon 10\nfile 20\nactive_file 5\npgscan 100\npgsteal 3\nworkingset_refault_file 40\nworkingset_nodereclaim 6\n")
	write(t, dir, "memory.events", "low 0\nhigh 0\nmax 9\noom 1\noom_kill 1\n")
	write(t, dir, "memory.pressure", "some avg10=1.50 avg60=0.00 avg300=0.00 total=2000000\nfull avg10=0.50 avg60=0.00 avg300=0.00 total=1000000\n")
	h := Hierarchy{Version: 2, Mount: root}
	s, err := h.Read("/kubepods/pod")
	if err != nil {
		t.Fatal(err)
	}
	if s.LimitBytes != Unlimited || s.EffectiveLimitBytes != 1<<30 || s.UsageBytes != 1000 || s.MaxUsageBytes != 2000 ||
		s.LimitHits != 9 || s.OOMKills != 1 || s.Stat["pgscan"] != 100 {
		t.Errorf("state %+v", s)
	}
	if s.Pressure == nil || s.Pressure.SomeAvg10 != 1.5 || s.Pressure.FullTotal != time.Second {
		t.Errorf("pressure %+v", s.Pressure)
	}
	// A window's start keeps what tells the refaults and how far the
	// kernel's count of them falls short (the shadow nodes it dropped,
	// the pages it evicted).
	c, err := h.ReadCounters("/kubepods/pod")
	if err != nil || c.Stat["workingset_refault_file"] != 40 || c.Stat["workingset_nodereclaim"] != 6 || c.Stat["pgsteal"] != 3 || c.Stat["anon"] != 0 {
		t.Errorf("counters %v %v", c.Stat, err)
	}
	if p, ok := h.PathOf([]procfs.Cgroup{{Hierarchy: 0, Path: "/kubepods/pod"}}); !ok || p != "/kubepods/pod" {
		t.Errorf("PathOf v2 = %q %v", p, ok)
	}
	h1 := Hierarchy{Version: 1}
	if p, ok := h1.PathOf([]procfs.Cgroup{{Hierarchy: 3, Controllers: []string{"cpu"}, Path: "/a"}, {Hierarchy: 4, Controllers: []string{"memory"}, Path: "/b"}}); !ok || p != "/b" {
		t.Errorf("PathOf v1 = %q %v", p, ok)
	}
}

func TestPSI(t *testing.T) {
	before, err := ParsePSI([]byte("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"))
	if err != nil {
		t.Fatal(err)
	}
	after, err := ParsePSI([]byte("some avg10=43.31 avg60=3.72 avg300=6.84 total=2500000\nfull avg10=8.67 avg60=0.61 avg300=1.36 total=500000\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := StallPct(before, after, 5*time.Second, false); got != 50 {
		t.Errorf("some = %v, want 50", got)
	}
	if got := StallPct(before, after, 5*time.Second, true); got != 10 {
		t.Errorf("full = %v, want 10", got)
	}
	for _, bad := range []string{"", "full avg10=1 total=2", "some avg10=x total=1", "some avg10"} {
		if _, err := ParsePSI([]byte(bad)); err == nil {
			t.Errorf("ParsePSI(%q) succeeded", bad)
		}
	}
}
