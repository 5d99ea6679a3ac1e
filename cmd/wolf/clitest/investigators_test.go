package clitest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/finding/findingtest"
	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/lab/fusestall"
	"github.com/wolf-investigator/wolf/internal/lab/memcgstress"
	"github.com/wolf-investigator/wolf/internal/lab/mmaplock"
	"github.com/wolf-investigator/wolf/internal/lab/tcpcollapse"
	"github.com/wolf-investigator/wolf/internal/memcg"
	"github.com/wolf-investigator/wolf/internal/procfs"
	"github.com/wolf-investigator/wolf/internal/testutil"
	"github.com/wolf-investigator/wolf/internal/testutil/wolfcli"
)

// The acceptance test, through the CLI: a lab is running and
// `wolf hung --format json` names its offender and victims.
func TestHungCLINamesLabOffender(t *testing.T) {
	testutil.RequireRoot(t)
	_, err := os.Stat("/dev/fuse")
	testutil.Require(t, err == nil, "needs /dev/fuse")
	testutil.Exclusive(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	inst, err := fusestall.NewRWSem().Start(ctx, lab.Options{Victims: 2, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	tasks := inst.Tasks()
	out := filepath.Join(t.TempDir(), "report.json")
	r := runWolf(t, 30*time.Second, "hung", "--duration", "3s", "--threshold", "1s", "--format", "json", "--output", out)
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	rep := wolfcli.ReadReport(t, out)
	f := findingtest.First(rep.Findings, "hung.lock-owner")
	if f == nil {
		t.Fatalf("no hung.lock-owner finding: %+v", rep.Findings)
	}
	var offenders, victims []int
	for _, s := range f.Subjects {
		switch s.Role {
		case "offender":
			offenders = append(offenders, s.PID)
		case "victim":
			victims = append(victims, s.PID)
		}
	}
	sort.Ints(victims)
	want := append([]int(nil), tasks.Victims...)
	sort.Ints(want)
	if len(offenders) != 1 || offenders[0] != tasks.Offender {
		t.Errorf("offenders %v, want %d", offenders, tasks.Offender)
	}
	if len(victims) != len(want) || victims[0] != want[0] || victims[1] != want[1] {
		t.Errorf("victims %v, want %v", victims, want)
	}
	if rep.Overhead.Events == 0 || rep.Kernel == "" || rep.WolfVersion == "" {
		t.Errorf("report header or overhead empty: %+v", rep)
	}
}

// The reclaim issue's acceptance test, through the CLI: with the
// memcg-stress lab running, `wolf reclaim --format json` names the lab's
// cgroup and its worker.
func TestReclaimCLINamesLabCgroup(t *testing.T) {
	testutil.RequireRoot(t)
	_, err := memcg.Find(context.Background(), procfs.Reader{})
	testutil.Require(t, err == nil, "needs the memory cgroup controller")
	testutil.Exclusive(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	inst, err := memcgstress.New().Start(ctx, lab.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	in := inst.(*memcgstress.Instance)
	r := runWolf(t, 30*time.Second, "reclaim", "--duration", "3s", "--format", "json", "--cgroup", in.Cgroup())
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	var rep finding.Report
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
		t.Fatal(err)
	}
	var f *finding.Finding
	for i := range rep.Findings {
		if strings.HasPrefix(rep.Findings[i].ID, "reclaim.memcg-") && rep.Findings[i].Severity >= finding.Warning {
			f = &rep.Findings[i]
		}
	}
	if f == nil {
		t.Fatalf("no reclaim.memcg-* warning in %s", r.Stdout)
	}
	var cg, worker bool
	for _, s := range f.Subjects {
		cg = cg || (s.Role == finding.RoleCgroup && s.Cgroup == in.Cgroup())
		worker = worker || (s.Role == finding.RoleTask && s.PID == in.PID())
	}
	if !cg || !worker {
		t.Errorf("subjects %+v: want cgroup %s and worker %d", f.Subjects, in.Cgroup(), in.PID())
	}
	for _, k := range []string{"pages_scanned", "pages_reclaimed", "reclaim_s_total", "max_reclaim_ms", "efficiency_pct"} {
		if _, ok := f.Evidence[k]; !ok {
			t.Errorf("evidence lacks %s: %v", k, f.Evidence)
		}
	}
	if rep.Overhead.Events == 0 {
		t.Errorf("overhead %+v", rep.Overhead)
	}
}

// wolf locks through the CLI on the mmap-lock lab: JSON with the hold
// finding and the lab's histograms, and the stack exports: one folded file
// per profile, and a pprof file go tool pprof reads.
func TestLocksCLIOnMmapLockLab(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.Exclusive(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	in, err := mmaplock.NewSized(256).Start(ctx, lab.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	pid := in.(*mmaplock.Instance).PID()
	dir := t.TempDir()
	r := runWolf(t, 30*time.Second, "locks", "--duration", "3s", "--pid", strconv.Itoa(pid), "--format", "json",
		"--output", dir+"/r.json", "--folded", dir+"/f.folded", "--pprof", dir+"/p.pb.gz")
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	rep := wolfcli.ReadReport(t, dir+"/r.json")
	var hold bool
	for _, f := range rep.Findings {
		if f.ID == "locks.mmap-hold" && f.Investigator == "locks" && len(f.Subjects) > 0 && f.Subjects[0].PID == pid {
			hold = true
		}
	}
	if !hold {
		t.Errorf("no mmap-hold finding for pid %d: %+v", pid, rep.Findings)
	}
	if rep.Overhead.Events == 0 {
		t.Errorf("no overhead: %+v", rep.Overhead)
	}
	var names []string
	for _, p := range rep.Profiles {
		names = append(names, p.Name)
	}
	if !slices.Contains(names, "mmap_lock_profile") || !slices.Contains(names, "lock_wait_stacks") {
		t.Errorf("profiles %v, want mmap_lock_profile and lock_wait_stacks", names)
	}
	folded, err := os.ReadFile(dir + "/f.mmap_lock_profile.folded")
	if err != nil || !strings.Contains(string(folded), fmt.Sprintf("wolf-mmaplock (pid %d);[mmap_lock ", pid)) {
		t.Errorf("folded profile under lock (%v):\n%.500s", err, folded)
	}
	if !strings.Contains(r.Stderr, "f.lock_wait_stacks.folded") {
		t.Errorf("stderr does not name the folded files: %s", r.Stderr)
	}
	out, err := exec.Command("go", "tool", "pprof", "-top", "-sample_index=lock_wait_stacks", dir+"/p.pb.gz").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "rwsem_down_") {
		t.Errorf("go tool pprof on the export (%v):\n%s", err, out)
	}
}

// The softirq acceptance test, through the CLI: with the tcp-collapse lab
// running, `wolf softirq --format json` reports the NET_RX stall, its cause
// and the lab's namespace, and the NET_RX run-time histogram.
func TestSoftirqCLINamesCollapse(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.Exclusive(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	inst, err := tcpcollapse.New().Start(ctx, lab.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	out := filepath.Join(t.TempDir(), "report.json")
	r := runWolf(t, 30*time.Second, "softirq", "--duration", "3s", "--format", "json", "--output", out)
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	rep := wolfcli.ReadReport(t, out)
	var f *finding.Finding
	for i := range rep.Findings {
		if rep.Findings[i].ID == "softirq.stall" && rep.Findings[i].Evidence["vector"] == "NET_RX" {
			f = &rep.Findings[i]
		}
	}
	if f == nil {
		t.Fatalf("no NET_RX softirq.stall finding: %+v", rep.Findings)
	}
	if f.Evidence["cause"] != "tcp-collapse" || f.Evidence["netns"] != float64(inst.(*tcpcollapse.Instance).Netns()) {
		t.Errorf("evidence %v", f.Evidence)
	}
	found := false
	for _, h := range rep.Histograms {
		if h.Name == "softirq_runtime_us" && h.Labels["vector"] == "NET_RX" && h.Max >= 5000 {
			found = true
		}
	}
	if !found {
		t.Errorf("no NET_RX run-time histogram reaching 5 ms: %+v", rep.Histograms)
	}
	if rep.Overhead.Events == 0 || !rep.Capabilities["tracepoint:irq/softirq_entry"] {
		t.Errorf("overhead %+v capabilities %v", rep.Overhead, rep.Capabilities)
	}
}
