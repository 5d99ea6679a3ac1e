package reclaim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/lab/memcgstress"
	"github.com/wolf-investigator/wolf/internal/memcg"
	"github.com/wolf-investigator/wolf/internal/probekit"
	"github.com/wolf-investigator/wolf/internal/procfs"
	"github.com/wolf-investigator/wolf/internal/testutil"
)

func gate(t *testing.T) memcg.Hierarchy {
	t.Helper()
	testutil.RequireRoot(t)
	h, err := memcg.Find(context.Background(), procfs.Reader{})
	testutil.Require(t, err == nil, fmt.Sprintf("needs the memory cgroup controller: %v", err))
	testutil.Exclusive(t)
	return h
}

// counters is an independent count of pages scanned and reclaimed: the
// kernel's own, from the cgroup's memory.stat on v2, else /proc/vmstat
// (which, on 6.18 with the classic LRU, counts every lru_shrink_inactive
// batch in pgscan_anon/file and pgsteal_anon/file, cgroup reclaim or not).
type counters struct{ scanned, reclaimed uint64 }

func readCounters(t *testing.T, h memcg.Hierarchy, path string) counters {
	t.Helper()
	if h.Version == 2 {
		st, err := h.Read(path)
		if err != nil {
			t.Fatal(err)
		}
		return counters{st.Stat["pgscan"], st.Stat["pgsteal"]}
	}
	v := readVMStat()
	return counters{v["pgscan_anon"] + v["pgscan_file"], v["pgsteal_anon"] + v["pgsteal_file"]}
}

func runWith(t *testing.T, iv *Investigator, d time.Duration, pid int) *investigator.Result {
	t.Helper()
	res, err := investigator.Run(context.Background(), iv, investigator.Options{Duration: d, PID: pid})
	if err != nil {
		t.Fatalf("reclaim.Run: %v", err)
	}
	for _, f := range res.Findings {
		t.Logf("%s %s: %s", f.Severity, f.ID, f.Title)
	}
	return res
}

func cgroupFinding(fs []finding.Finding, path string) *finding.Finding {
	for i := range fs {
		if !strings.HasPrefix(fs[i].ID, "reclaim.memcg-") {
			continue
		}
		for _, s := range fs[i].Subjects {
			if s.Role == finding.RoleCgroup && s.Cgroup == path {
				return &fs[i]
			}
		}
	}
	return nil
}

func within(a, b uint64, pct float64) bool {
	if b == 0 {
		return a == 0
	}
	return math.Abs(float64(a)-float64(b)) <= pct/100*float64(b)
}

// TestLiveLab is the acceptance test: with the memcg-stress lab
// running, wolf names the lab's cgroup and its worker, and its page counts
// agree with the kernel's own counters over the same window within 10 %.
func TestLiveLab(t *testing.T) {
	h := gate(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	li, err := memcgstress.New().Start(ctx, lab.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := li.Close(); err != nil {
			t.Errorf("close lab: %v", err)
		}
	})
	in := li.(*memcgstress.Instance)
	t.Log(in.Describe())

	t.Run("names the cgroup, counts agree", func(t *testing.T) {
		var c0, c1 counters
		iv := New()
		iv.attached = func() { c0 = readCounters(t, h, in.Cgroup()) }
		iv.collecting = func() { c1 = readCounters(t, h, in.Cgroup()) }
		var snap *Snapshot
		iv.snapshot = func(s *Snapshot) { snap = s }
		// 8 s: see the re-read measure below.
		res := runWith(t, iv, 8*time.Second, 0)
		f := cgroupFinding(res.Findings, in.Cgroup())
		if f == nil {
			t.Fatalf("no reclaim finding names cgroup %s", in.Cgroup())
		}
		if f.Severity < finding.Warning {
			t.Errorf("%s is %v, want warning or critical: %s", f.ID, f.Severity, f.Title)
		}
		worker := false
		for _, s := range f.Subjects {
			if s.Role == finding.RoleTask && s.PID == in.PID() && s.Cgroup == in.Cgroup() && strings.Contains(s.Detail, "reclaim calls") {
				worker = true
			}
		}
		if !worker {
			t.Errorf("the worker %d is not among the subjects %+v", in.PID(), f.Subjects)
		}
		ev := f.Evidence
		scanned, _ := ev["pages_scanned"].(uint64)
		reclaimed, _ := ev["pages_reclaimed"].(uint64)
		want := counters{c1.scanned - c0.scanned, c1.reclaimed - c0.reclaimed}
		t.Logf("wolf: %d scanned, %d reclaimed; kernel counters (v%d): %d scanned, %d reclaimed", scanned, reclaimed, h.Version, want.scanned, want.reclaimed)
		if want.scanned < 1000 {
			t.Fatalf("the lab barely reclaimed (%d pages scanned): not a test", want.scanned)
		}
		if !within(scanned, want.scanned, 10) || !within(reclaimed, want.reclaimed, 10) {
			t.Errorf("wolf counted %d/%d pages scanned/reclaimed, the kernel %d/%d: more than 10%% apart", scanned, reclaimed, want.scanned, want.reclaimed)
		}
		for _, k := range []string{"reclaim_s_total", "max_reclaim_ms", "efficiency_pct", "limit_bytes", "usage_bytes", "limit_hits", "sys_pct", "faults_per_s"} {
			if _, ok := ev[k]; !ok {
				t.Errorf("evidence lacks %s: %v", k, ev)
			}
		}
		if ev["limit_bytes"] != memcgstress.Defaults.LimitBytes {
			t.Errorf("limit_bytes %v, want %d", ev["limit_bytes"], memcgstress.Defaults.LimitBytes)
		}
		hist := false
		for _, hg := range res.Histograms {
			if hg.Name == "reclaim_duration_us" && hg.Labels["cgroup"] == in.Cgroup() && hg.Labels["kind"] == "memcg" && hg.Count > 0 {
				hist = true
			}
		}
		if !hist {
			t.Errorf("no memcg reclaim_duration_us histogram for %s in %+v", in.Cgroup(), res.Histograms)
		}
		if res.Overhead.Events == 0 || res.Overhead.Dropped != 0 || res.Overhead.BPFRunNs == 0 {
			t.Errorf("overhead %+v", res.Overhead)
		}
		if !res.Capabilities["tracepoint:vmscan/mm_vmscan_memcg_reclaim_begin"] {
			t.Errorf("capabilities %v", res.Capabilities)
		}
		// The CPU sampler: the lab's threads fault mapped file pages in and
		// reclaim for them, so its samples must find both.
		if snap == nil || snap.Samples.Hz != sampleHz || !snap.Samples.Classified || snap.Samples.Busy == 0 {
			t.Fatalf("samples %+v", snap.Samples)
		}
		for _, c := range snap.Cgroups {
			if c.Path != in.Cgroup() {
				continue
			}
			t.Logf("lab cgroup's CPU samples %+v of %d", c.CPU, snap.Samples.Busy)
			if c.CPU.Busy == 0 || c.CPU.Miss == 0 || c.CPU.Reclaim == 0 || c.CPU.Miss+c.CPU.Reclaim > c.CPU.Kernel || c.CPU.Kernel > c.CPU.Busy {
				t.Errorf("lab cgroup's CPU samples %+v: want busy ≥ kernel ≥ miss + reclaim, each > 0", c.CPU)
			}
			// Re-reads of evicted pages: the lab faults its mapped files'
			// pages back in as fast as the limit evicts them, and this
			// kernel keeps their shadows (its refault count is the
			// reference). The measure is a 1 in 8 sample of pages and
			// sees only pages evicted since it attached, so the kernel's
			// refaults of pages evicted before count against it for about
			// one turn of the lab's reads: about half the kernel's count
			// in a 4 s window on a quiet machine (0.55-0.56), 0.21-0.22 on
			// a loaded one, where a turn takes longer. The window is 8 s
			// so that the turn is a smaller part of it.
			if !snap.Rereads {
				t.Errorf("the re-read measure is not attached")
			} else if ref, ok := c.refaults(); ok {
				t.Logf("lab cgroup re-read %d evicted pages (measured), %d refaults (kernel)", c.Rereads, ref)
				if ref < 1000 {
					t.Fatalf("the lab barely refaulted (%d pages): not a test", ref)
				}
				// Under the race detector wolf attaches later into
				// the window, so more of the kernel's refaults are of
				// pages evicted before the measure could see them
				// (measured 0.24 in CI).
				low := 0.25
				if testutil.RaceEnabled {
					low = 0.12
				}
				if float64(c.Rereads) < low*float64(ref) || float64(c.Rereads) > 1.5*float64(ref) {
					t.Errorf("measured %d re-reads of evicted pages against the kernel's %d refaults: want %.2f-1.5 times", c.Rereads, ref, low)
				}
			}
		}
	})

	// On a storm with the budget spent, batches are summed one in N per
	// CPU, each standing for those its CPU skipped before it: the pages
	// become estimates (the report says so), which still agree with the
	// kernel's counters.
	t.Run("storm-sampled batches, counts agree", func(t *testing.T) {
		b, err := probekit.NewBudget(0.0001) // far under what the programs spend
		if err != nil {
			t.Fatal(err)
		}
		probekit.SetBudget(b)
		defer probekit.SetBudget(nil)
		var c0, c1 counters
		iv := New()
		iv.attached = func() { c0 = readCounters(t, h, in.Cgroup()) }
		iv.collecting = func() { c1 = readCounters(t, h, in.Cgroup()) }
		res := runWith(t, iv, 8*time.Second, 0)
		var storm *finding.Sampling
		for i, s := range res.Overhead.Sampled {
			if s.Investigator == "reclaim" && s.Estimated {
				storm = &res.Overhead.Sampled[i]
			}
		}
		if storm == nil || storm.Detailed == 0 || storm.Detailed >= storm.Events {
			t.Fatalf("no storm sampling of reclaim batches under a budget far under the programs' cost: %+v", res.Overhead.Sampled)
		}
		f := cgroupFinding(res.Findings, in.Cgroup())
		if f == nil {
			t.Fatalf("no reclaim finding names cgroup %s", in.Cgroup())
		}
		scanned, _ := f.Evidence["pages_scanned"].(uint64)
		reclaimed, _ := f.Evidence["pages_reclaimed"].(uint64)
		want := counters{c1.scanned - c0.scanned, c1.reclaimed - c0.reclaimed}
		t.Logf("wolf (%d of %d batches summed): %d scanned, %d reclaimed; kernel counters (v%d): %d scanned, %d reclaimed",
			storm.Detailed, storm.Events, scanned, reclaimed, h.Version, want.scanned, want.reclaimed)
		if want.scanned < 1000 {
			t.Fatalf("the lab barely reclaimed (%d pages scanned): not a test", want.scanned)
		}
		// An estimate from 2,500-4,000 batches of very uneven sizes (0 to
		// 32 pages reclaimed): -4.9% to +5.0% off in six runs on a loaded
		// machine, once +11.6% on reclaimed. A weight gone wrong is off
		// by the sampling's rate, 7 times or more.
		if !within(scanned, want.scanned, 15) || !within(reclaimed, want.reclaimed, 15) {
			t.Errorf("wolf estimated %d/%d pages scanned/reclaimed, the kernel counted %d/%d: more than 15%% apart", scanned, reclaimed, want.scanned, want.reclaimed)
		}
	})

	t.Run("--cgroup keeps to it", func(t *testing.T) {
		iv := New()
		iv.Cgroup = in.Cgroup()
		res := runWith(t, iv, 2*time.Second, 0)
		if cgroupFinding(res.Findings, in.Cgroup()) == nil {
			t.Errorf("no finding for %s", in.Cgroup())
		}
		for _, hg := range res.Histograms {
			if c := hg.Labels["cgroup"]; c != "" && c != in.Cgroup() {
				t.Errorf("histogram of cgroup %s outside --cgroup %s", c, in.Cgroup())
			}
		}
	})

	t.Run("--pid of another process leaves the lab out", func(t *testing.T) {
		res := runWith(t, New(), 2*time.Second, os.Getpid())
		if f := cgroupFinding(res.Findings, in.Cgroup()); f != nil {
			t.Errorf("--pid %d (not in the lab) still reports the lab: %s", os.Getpid(), f.Title)
		}
	})

	t.Run("--pid of the worker finds it", func(t *testing.T) {
		res := runWith(t, New(), 2*time.Second, in.PID())
		f := cgroupFinding(res.Findings, in.Cgroup())
		if f == nil {
			t.Fatalf("--pid %d: no finding for its cgroup %s", in.PID(), in.Cgroup())
		}
		for _, s := range f.Subjects {
			if s.Role == finding.RoleTask && s.PID != in.PID() {
				t.Errorf("--pid %d: subject of pid %d", in.PID(), s.PID)
			}
		}
	})
}

// TestLiveHealthyHost: nothing reclaims on an idle host, so no reclaim
// finding worth a warning.
func TestLiveHealthyHost(t *testing.T) {
	gate(t)
	res := runWith(t, New(), 2*time.Second, 0)
	for _, f := range res.Findings {
		if f.Severity >= finding.Warning {
			t.Errorf("healthy host: %s %s: %s", f.Severity, f.ID, f.Title)
		}
	}
	if res.Overhead.Dropped != 0 {
		t.Errorf("dropped %d", res.Overhead.Dropped)
	}
}

func TestRunNeedsDuration(t *testing.T) {
	if _, err := investigator.Run(context.Background(), New(), investigator.Options{}); err == nil {
		t.Error("Run with no duration succeeded")
	}
}

// On kernels without some vmscan tracepoints (mm_vmscan_throttled is 5.16+)
// wolf runs without them and says so; without a required one it refuses
// with ErrUnsupported (exit 3).
func TestLiveMissingTracepoints(t *testing.T) {
	gate(t)
	iv := New()
	iv.absent = map[string]bool{"mm_vmscan_throttled": true, "mm_vmscan_node_reclaim_begin": true}
	res := runWith(t, iv, 500*time.Millisecond, 0)
	if res.Capabilities["tracepoint:vmscan/mm_vmscan_throttled"] || res.Capabilities["tracepoint:vmscan/mm_vmscan_node_reclaim_begin"] ||
		!res.Capabilities["tracepoint:vmscan/mm_vmscan_node_reclaim_end"] || !res.Capabilities["tracepoint:vmscan/mm_vmscan_memcg_reclaim_begin"] {
		t.Errorf("capabilities %v", res.Capabilities)
	}
	iv = New()
	iv.absent = map[string]bool{"mm_vmscan_lru_shrink_inactive": true}
	_, err := investigator.Run(context.Background(), iv, investigator.Options{Duration: 100 * time.Millisecond})
	if !errors.Is(err, investigator.ErrUnsupported) || !strings.Contains(err.Error(), "mm_vmscan_lru_shrink_inactive") {
		t.Errorf("without a required tracepoint: %v, want ErrUnsupported naming it", err)
	}
}
