package sched

import (
	"context"
	"math"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/lab/bounce"
	"github.com/wolf-investigator/wolf/internal/testutil"
)

// liveWindow is how long the live tests watch.
const liveWindow = 3 * time.Second

func requireLive(t *testing.T) {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.Exclusive(t)
}

func startLab(t *testing.T, l lab.Lab) *bounce.Instance {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	inst, err := l.Start(ctx, lab.Options{Logf: t.Logf})
	if err != nil {
		t.Fatalf("start lab %s: %v", l.Name(), err)
	}
	t.Cleanup(func() {
		if err := inst.Close(); err != nil {
			t.Errorf("close lab: %v", err)
		}
	})
	return inst.(*bounce.Instance)
}

// watched is one live run: wolf's result and snapshot, and the kernel's
// own migration count of the lab's task over the same window.
type watched struct {
	res        *investigator.Result
	snap       *Snapshot
	kernel     int64 // se.nr_migrations at the dump minus at the attach
	kernelSpan time.Duration
	// kernelOuter counts from before the programs were loaded to after
	// the run: the programs count from their own attach, which comes
	// before the attach hook by as long as the others take to load
	// (hundreds of milliseconds on a loaded machine, or under -race).
	kernelOuter int64
}

func watch(t *testing.T, pid int, tid int) watched {
	t.Helper()
	return watchWith(t, New(), pid, tid)
}

func watchWith(t *testing.T, s *Investigator, pid int, tid int) watched {
	t.Helper()
	var w watched
	var k0 int64
	var t0 time.Time
	s.attached = func() { k0, t0 = bounce.NrMigrations(pid, tid), time.Now() }
	s.dumped = func() { w.kernel, w.kernelSpan = bounce.NrMigrations(pid, tid)-k0, time.Since(t0) }
	s.snapshot = func(snap *Snapshot) { w.snap = snap }
	outer0 := bounce.NrMigrations(pid, tid)
	res, err := investigator.Run(context.Background(), s, investigator.Options{Duration: liveWindow, PID: pid})
	if err != nil {
		t.Fatalf("sched.Run: %v", err)
	}
	w.kernelOuter = bounce.NrMigrations(pid, tid) - outer0
	w.res = res
	return w
}

// migrationsWithin checks wolf's count of a task's migrations against the
// kernel's, within 10% (and one) of the count over the window's inner
// edges (the attach hook to the dump) and the outer ones (before loading
// to after the run): a migration at an edge may fall on either side.
func migrationsWithin(t *testing.T, wolf uint64, w watched) {
	t.Helper()
	lo, hi := 0.9*float64(w.kernel)-1, 1.1*float64(w.kernelOuter)+1
	if float64(wolf) < lo || float64(wolf) > hi {
		t.Errorf("migrations: wolf %d, kernel %d..%d over the window's inner and outer edges: more than 10%% apart", wolf, w.kernel, w.kernelOuter)
	} else {
		t.Logf("migrations: wolf %d, kernel %d..%d", wolf, w.kernel, w.kernelOuter)
	}
}

func (w watched) task(tid int) *Task {
	for _, tk := range w.snap.Tasks {
		if tk.TID == tid {
			return tk
		}
	}
	return nil
}

func bounceFindingFor(fs []finding.Finding, tid int) *finding.Finding {
	for i := range fs {
		if fs[i].ID != "sched.bounce" {
			continue
		}
		for _, s := range fs[i].Subjects {
			if s.Role == finding.RoleTask && s.TID == tid {
				return &fs[i]
			}
		}
	}
	return nil
}

// within10 checks wolf's count against the kernel's: within 10% (and one
// migration, for the moves in flight at either edge of the window).
func within10(t *testing.T, what string, wolf, kernel float64) {
	t.Helper()
	if math.Abs(wolf-kernel) > 0.1*kernel+1 {
		t.Errorf("%s: wolf %.1f, kernel %.1f: more than 10%% apart", what, wolf, kernel)
	} else {
		t.Logf("%s: wolf %.1f, kernel %.1f", what, wolf, kernel)
	}
}

// The acceptance test: wolf's migration rate for the lab's task
// is within 10% of the kernel's own count over the same window, and the
// finding names the task and who moved it.
func TestLiveAffinityLab(t *testing.T) { testAffinityLab(t, New()) }

// The same where per-task state lives in the hash that stands in for
// task-local storage on kernels before 5.11: the counts must not change.
func TestLiveAffinityLabWithoutTaskStorage(t *testing.T) {
	s := New()
	s.noTaskStorage = true
	testAffinityLab(t, s)
}

func testAffinityLab(t *testing.T, s *Investigator) {
	requireLive(t)
	in := startLab(t, bounce.NewAffinity())
	w := watchWith(t, s, in.PID(), in.TID())
	tk := w.task(in.TID())
	if tk == nil {
		t.Fatalf("wolf saw nothing of task %d", in.TID())
	}
	if w.kernel < 50 {
		t.Fatalf("the kernel counts only %d migrations of the lab's task in %v", w.kernel, liveWindow)
	}
	migrationsWithin(t, tk.Migrations, w)
	within10(t, "migrations_per_s", tk.Rate(tk.Migrations), float64(w.kernel)/w.kernelSpan.Seconds())
	f := bounceFindingFor(w.res.Findings, in.TID())
	if f == nil {
		t.Fatalf("no sched.bounce finding for %d: %+v", in.TID(), w.res.Findings)
	}
	if f.Severity < finding.Warning {
		t.Errorf("severity %v", f.Severity)
	}
	ev := f.Evidence
	if ev["initiator_affinity_pct"].(float64) < 90 {
		t.Errorf("initiators %v, want affinity", ev["initiators"])
	}
	if ev["bounces_per_s"].(float64) <= 0 || ev["comm"] != "bounce-affinity" {
		t.Errorf("evidence %v", ev)
	}
	if w.res.Capabilities["tracepoint:syscalls/sys_enter_sched_setaffinity"] && ev["setaffinity_calls_self"].(uint64) == 0 {
		t.Errorf("the thread calls sched_setaffinity on itself; evidence %v", ev)
	}
	if w.res.Overhead.Events == 0 || w.res.Overhead.BPFRunNs == 0 {
		t.Errorf("overhead %+v", w.res.Overhead)
	}
	checkTimeline(t, w, tk, "affinity")
}

// checkTimeline: the named task's migration timeline holds its latest
// moves, in time order, between CPUs, each labelled with its initiator
// (mostly want); kept and dropped add up to its migrations.
func checkTimeline(t *testing.T, w watched, tk *Task, want string) {
	t.Helper()
	var tl *finding.Timeline
	for i := range w.res.Timelines {
		if w.res.Timelines[i].Labels["tid"] == strconv.Itoa(tk.TID) {
			tl = &w.res.Timelines[i]
		}
	}
	if tl == nil {
		t.Fatalf("no migration timeline for task %d: %+v", tk.TID, w.res.Timelines)
	}
	cpus := map[float64]bool{}
	labels := map[string]int{}
	for i, e := range tl.Events {
		cpus[e.Value] = true
		labels[e.Label]++
		if i > 0 && e.AtS < tl.Events[i-1].AtS {
			t.Errorf("timeline not in time order at %d: %+v", i, tl.Events[i-1:i+1])
		}
	}
	moves := len(tl.Events) - 1
	if len(cpus) < 2 || moves <= 0 || moves > DefaultTimelineLen || uint64(moves)+tl.Dropped != tk.Migrations {
		t.Errorf("timeline: %d moves over CPUs %v, %d dropped, %d migrations", moves, cpus, tl.Dropped, tk.Migrations)
	}
	if labels[want]*2 < moves {
		t.Errorf("timeline initiators %v, want mostly %s", labels, want)
	}
}

// sched-bounce's task is moved by the kernel's own wake-up placement; how
// often depends on what else runs on the machine, so the rate is compared
// with the kernel's whatever it is, and the finding is required when the
// kernel's rate is over the threshold.
func TestLiveBounceLab(t *testing.T) {
	requireLive(t)
	in := startLab(t, bounce.NewBounce())
	w := watch(t, in.PID(), in.TID())
	tk := w.task(in.TID())
	if tk == nil {
		t.Fatalf("wolf saw nothing of task %d", in.TID())
	}
	migrationsWithin(t, tk.Migrations, w)
	rate := float64(w.kernel) / w.kernelSpan.Seconds()
	f := bounceFindingFor(w.res.Findings, in.TID())
	if rate < DefaultThresholds.MigrationsPerSec*1.2 {
		t.Logf("the kernel moved the task only %.0f times/s here (a busy machine keeps wake-up placement from ping-ponging it); finding %v", rate, f != nil)
		return
	}
	if f == nil {
		t.Fatalf("kernel rate %.0f/s but no sched.bounce finding: %+v", rate, w.res.Findings)
	}
	if ev := f.Evidence; ev["initiator_wakeup_pct"].(float64) < 50 {
		t.Errorf("initiators %v, want mostly the wake-up path", ev["initiators"])
	}
	checkTimeline(t, w, tk, "wakeup")
}

// The same work pinned (the seed's fix): no finding.
func TestLivePinnedBaseline(t *testing.T) {
	requireLive(t)
	in := startLab(t, bounce.NewPinned())
	w := watch(t, in.PID(), in.TID())
	if tk := w.task(in.TID()); tk == nil || tk.Runq.Count == 0 {
		t.Fatalf("wolf did not see the pinned task run: %+v", tk)
	}
	if w.kernel != 0 {
		t.Errorf("the pinned task migrated %d times", w.kernel)
	}
	for _, f := range w.res.Findings {
		if f.Investigator == "sched" {
			t.Errorf("healthy baseline gave a finding: %s: %s", f.ID, f.Title)
		}
	}
}

// On this host: wolf reads the scheduler's own LLC view, and a healthy
// host gives no bounce finding at warning or above.
func TestLiveHealthyHost(t *testing.T) {
	requireLive(t)
	var snap *Snapshot
	s := New()
	s.snapshot = func(sn *Snapshot) { snap = sn }
	res, err := investigator.Run(context.Background(), s, investigator.Options{Duration: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range res.Findings {
		if f.Severity >= finding.Warning && f.ID == "sched.bounce" {
			t.Errorf("healthy host: %s: %s", f.ID, f.Title)
		}
	}
	if len(res.Histograms) == 0 {
		t.Error("no run-queue histograms on a live host")
	}
	// The CPUs' clocks were sampled. How many samples landed is not
	// asserted: a CPU loses them to steal, and to BPF programs running
	// there when a sample fires (the kernel runs one at a time); and CPUs
	// idle most of the window are left out (on this 6.18 VM an idle CPU
	// takes 5 to 9 of 400 samples in 4 s).
	if !res.Capabilities["perf_event"] {
		t.Errorf("clock samples not taken: capabilities %v", res.Capabilities)
	}
	for cpu, c := range snap.CPUCoverage {
		t.Logf("CPU %d took %.0f%% of its clock samples", cpu, 100*c)
		if c < 0 || c > 1 {
			t.Errorf("CPU %d: clock coverage %.2f", cpu, c)
		}
	}
	if snap.Hardware == nil || snap.Sched == nil {
		t.Fatalf("topology not read: hardware %v, scheduler %v", snap.Hardware, snap.Sched)
	}
	if !res.Capabilities["sched_llc_view"] {
		t.Error("capability sched_llc_view false")
	}
	// The scheduler's sd_llc_size must agree with what its domains say,
	// and, with CONFIG_SCHED_MC on this kernel, with the hardware.
	g := snap.Hardware.LLC[0]
	if n, ok := snap.Sched.LLCSize[0]; ok {
		doms := snap.Sched.Domains[0]
		want := 1
		for _, d := range doms {
			if d.SharesLLC() {
				want = len(d.Span)
			}
		}
		if n != want {
			t.Errorf("sd_llc_size of CPU 0 is %d, its domains say %d (%+v)", n, want, doms)
		}
		if !schedMCOff(snap.Hardware) && n != len(g.CPUs) {
			t.Logf("sd_llc_size %d, hardware LLC %v (isolated CPUs or a partial cpuset?)", n, g.CPUs)
		}
	} else if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err == nil {
		t.Error("sd_llc_size not read although the kernel has BTF")
	}
}
