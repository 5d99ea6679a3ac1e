package sched

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
)

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Both hierarchies' files, as the kernel writes them; cgroups without a
// quota (v1 -1, v2 "max") are left out.
func TestReadBandwidthV1AndV2(t *testing.T) {
	v1 := t.TempDir()
	writeFiles(t, v1, map[string]string{"cpu.cfs_quota_us": "-1\n", "cpu.cfs_period_us": "100000\n", "cpu.stat": "nr_periods 0\nnr_throttled 0\nthrottled_time 0\n"})
	writeFiles(t, filepath.Join(v1, "lab"), map[string]string{"cpu.cfs_quota_us": "5000\n", "cpu.cfs_period_us": "100000\n",
		"cpu.stat": "nr_periods 121\nnr_throttled 119\nthrottled_time 21433954671\nnr_bursts 0\nburst_time 0\n"})
	got := cpuHierarchy{root: v1, version: 1}.readBandwidths()
	if len(got) != 1 {
		t.Fatalf("v1: %v", got)
	}
	if r := got["/lab"]; r.quotaUs != 5000 || r.periodUs != 100000 || r.periods != 121 || r.throttled != 119 || r.throttledNs != 21433954671 || r.id == 0 {
		t.Errorf("v1 /lab: %+v", r)
	}
	v2 := t.TempDir()
	writeFiles(t, v2, map[string]string{"cgroup.controllers": "cpu memory\n", "cpu.stat": "usage_usec 1\n"})
	writeFiles(t, filepath.Join(v2, "k8s", "pod"), map[string]string{"cpu.max": "20000 100000\n",
		"cpu.stat": "usage_usec 9000000\nuser_usec 1\nsystem_usec 1\nnr_periods 50\nnr_throttled 40\nthrottled_usec 3500000\n"})
	writeFiles(t, filepath.Join(v2, "k8s"), map[string]string{"cpu.max": "max 100000\n", "cpu.stat": "nr_periods 0\n"})
	got = cpuHierarchy{root: v2, version: 2}.readBandwidths()
	if r, ok := got["/k8s/pod"]; len(got) != 1 || !ok || r.quotaUs != 20000 || r.throttledNs != 3500000000 || r.usageNs != 9000000000 {
		t.Errorf("v2: %+v", got)
	}
	for _, bad := range []string{"max 100000", "", "0 100000", "x y", "5000"} {
		if _, _, ok := parseCPUMax(bad); ok {
			t.Errorf("cpu.max %q parsed", bad)
		}
	}
}

func TestBandwidthDeltasAndFinding(t *testing.T) {
	before := map[string]bwReading{
		"/lab":     {id: 7, quotaUs: 5000, periodUs: 100000, periods: 11, throttled: 9, throttledNs: 1383908298},
		"/idle":    {quotaUs: 50000, periodUs: 100000, periods: 5, throttled: 0},
		"/mild":    {quotaUs: 50000, periodUs: 100000, periods: 100, throttled: 10},
		"/gone":    {quotaUs: 1000, periodUs: 100000, periods: 100, throttled: 100},
		"/restart": {quotaUs: 1000, periodUs: 100000, periods: 500, throttled: 100},
	}
	after := map[string]bwReading{
		"/lab":     {id: 7, quotaUs: 5000, periodUs: 100000, periods: 121, throttled: 119, throttledNs: 21433954671},
		"/idle":    {quotaUs: 50000, periodUs: 100000, periods: 5, throttled: 0},
		"/mild":    {quotaUs: 50000, periodUs: 100000, periods: 200, throttled: 12},
		"/restart": {quotaUs: 1000, periodUs: 100000, periods: 3, throttled: 1},
		"/new":     {quotaUs: 1000, periodUs: 100000, periods: 100, throttled: 100},
	}
	bws := bandwidthDeltas(before, after, 1)
	if len(bws) != 2 || bws[0].Path != "/lab" || bws[0].Periods != 110 || bws[0].Throttled != 110 || bws[0].ID != 7 {
		t.Fatalf("deltas %+v", bws)
	}
	bws[0].Procs = []Proc{{PID: 42, Comm: "quotalab"}}
	fs := ThrottleFindings(bws, 10*time.Second)
	if len(fs) != 1 {
		t.Fatalf("findings %+v", fs)
	}
	f := fs[0]
	if f.ID != "sched.cpu-throttled" || f.Severity != finding.Warning {
		t.Errorf("%s %s", f.ID, f.Severity)
	}
	if !strings.Contains(f.Title, "/lab") || !strings.Contains(f.Title, "100% of periods") || !strings.Contains(f.Title, "5 ms per 100 ms") {
		t.Errorf("title %q", f.Title)
	}
	if f.Evidence["quota_us"] != int64(5000) || f.Evidence["throttled_pct"] != 100.0 || f.Evidence["nr_throttled"] != uint64(110) {
		t.Errorf("evidence %v", f.Evidence)
	}
	if pids, ok := f.Evidence["pids"].([]int); !ok || len(pids) != 1 || pids[0] != 42 {
		t.Errorf("pids %v", f.Evidence["pids"])
	}
	if f.Subjects[0].Role != finding.RoleCgroup || f.Subjects[0].CgroupID != 7 || f.Subjects[1].PID != 42 {
		t.Errorf("subjects %+v", f.Subjects)
	}
	// Mild throttling (12 of 100 periods... here 2 of 100) is no finding.
	if fs := ThrottleFindings(bws[1:], 10*time.Second); len(fs) != 0 {
		t.Errorf("mild: %+v", fs)
	}
}
