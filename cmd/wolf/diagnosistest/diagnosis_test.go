package diagnosistest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/btf"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/lab/cpuquota"
	"github.com/wolf-investigator/wolf/internal/lab/labproc"
	"github.com/wolf-investigator/wolf/internal/lab/memchain"
	"github.com/wolf-investigator/wolf/internal/lab/pshang"
	"github.com/wolf-investigator/wolf/internal/testutil"
	"github.com/wolf-investigator/wolf/internal/testutil/wolfcli"
)

// The diagnosis issue's acceptance tests: with each story's lab running,
// `wolf doctor` puts first the one diagnosis that names the right root and
// every task of the chain, with numbers on each hop, as subjects of
// diagnoses[0].

func doctorJSON(t *testing.T, d time.Duration) finding.Report {
	t.Helper()
	out := filepath.Join(t.TempDir(), "report.json")
	r := runWolf(t, d+40*time.Second, "doctor", "--duration", d.String(), "--format", "json", "--output", out)
	if r.Code != 0 {
		t.Fatalf("doctor exit %d: %s", r.Code, r.Stderr)
	}
	return wolfcli.ReadReport(t, out)
}

func logDiagnoses(t *testing.T, rep *finding.Report) {
	t.Helper()
	for _, d := range rep.Diagnoses {
		t.Logf("%s %s [%s]", d.Ref, d.Title, d.ID)
		for _, h := range d.Chain {
			t.Logf("   %s: %s", h.Relation, h.Text)
		}
	}
}

// labDiagnosis returns the diagnosis of the lab's pathology (want says
// which), which must come first, unless what ranks before it is another
// pathology of the machine: a diagnosis that names none of the lab's
// processes and cgroups (ours), such as another user's workload or
// another lab of theirs running beside this test. One ranked before it
// that names the lab's tasks is a wrong root for them.
func labDiagnosis(t *testing.T, rep *finding.Report, what string, want func(*finding.Diagnosis) bool, ours func(*finding.Subject) bool) *finding.Diagnosis {
	t.Helper()
	d, others, err := pickLabDiagnosis(rep, what, want, ours)
	for _, o := range others {
		t.Logf("another pathology of the machine ranks before the lab's: %s", o)
	}
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// pickLabDiagnosis is labDiagnosis's judgement: the lab's diagnosis, the
// diagnoses of other work ranked before it, or why there is none.
func pickLabDiagnosis(rep *finding.Report, what string, want func(*finding.Diagnosis) bool, ours func(*finding.Subject) bool) (*finding.Diagnosis, []string, error) {
	if len(rep.Diagnoses) == 0 {
		return nil, nil, fmt.Errorf("no diagnosis")
	}
	var others []string
	for i := range rep.Diagnoses {
		d := &rep.Diagnoses[i]
		if want(d) {
			return d, others, nil
		}
		if ours(&d.Root) {
			return nil, others, fmt.Errorf("diagnosis %d, %s, is rooted at the lab's %+v; want %s first", i+1, d.ID, d.Root, what)
		}
		if j := slices.IndexFunc(d.Subjects, func(s finding.Subject) bool { return ours(&s) }); j >= 0 {
			return nil, others, fmt.Errorf("diagnosis %d, %s rooted at %+v, names the lab's %+v; want %s first", i+1, d.ID, d.Root, d.Subjects[j], what)
		}
		others = append(others, d.ID+" "+d.Title)
	}
	return nil, others, fmt.Errorf("no diagnosis is %s", what)
}

func find(d *finding.Diagnosis, role string, match func(*finding.Subject) bool) *finding.Subject {
	for i := range d.Subjects {
		if d.Subjects[i].Role == role && match(&d.Subjects[i]) {
			return &d.Subjects[i]
		}
	}
	return nil
}

func numOf(ev map[string]any, k string) float64 {
	v, _ := ev[k].(float64)
	return v
}

// waitedLong says whether a finding of the report saw pid wait long
// enough to make it a victim (the diagnosis stage's floor: 200 ms at
// once, 1 s in all, or blocked as a hung task).
func waitedLong(rep *finding.Report, pid int) bool {
	for _, f := range rep.Findings {
		for _, s := range f.Subjects {
			if s.PID != pid || (s.Role != finding.RoleWaiter && s.Role != finding.RoleVictim) {
				continue
			}
			if numOf(s.Evidence, "wait_ms_max") >= 200 || numOf(s.Evidence, "wait_ms_total") >= 1000 || s.Evidence["blocked_s"] != nil {
				return true
			}
		}
	}
	return false
}

// every hop carries numbers, but the ones that only say who holds what.
func checkHopNumbers(t *testing.T, d *finding.Diagnosis) {
	t.Helper()
	for _, h := range d.Chain {
		if len(h.Evidence) == 0 && h.Relation != finding.HeldBy {
			t.Errorf("hop without numbers: %s: %s", h.Relation, h.Text)
		}
	}
}

// (1) The ClickHouse story: reclaim at the cgroup's limit under the
// process's mmap_lock; a ps-like reader waits.
func TestDoctorDiagnosesMemcgLimitUnderMmapLock(t *testing.T) {
	testutil.RequireRoot(t)
	_, _, err := labproc.Hierarchy(context.Background(), "memory", 0)
	testutil.Require(t, err == nil, fmt.Sprintf("needs the memory cgroup controller: %v", err))
	testutil.Exclusive(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	inst, err := memchain.New().Start(ctx, lab.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	in := inst.(*memchain.Instance)
	rep := doctorJSON(t, 10*time.Second)
	logDiagnoses(t, &rep)
	reads, maxMs := in.ReaderStats()
	t.Logf("reader: %d reads, the longest %.0f ms", reads, maxMs)
	d := labDiagnosis(t, &rep, "diagnose.memcg-limit at "+in.Cgroup().Path, func(d *finding.Diagnosis) bool {
		return d.ID == "diagnose.memcg-limit" && d.Root.Cgroup == in.Cgroup().Path
	}, func(s *finding.Subject) bool {
		return s.PID == in.PID() || s.PID == in.Reader() || s.Cgroup == in.Cgroup().Path
	})
	if cg := find(d, finding.RoleCgroup, func(s *finding.Subject) bool { return s.Cgroup == in.Cgroup().Path }); cg == nil {
		t.Errorf("cgroup not among the subjects")
	}
	var limit float64
	var reclaim bool
	for _, h := range d.Chain {
		if h.Relation == finding.ConstrainedBy {
			limit = numOf(h.Evidence, "limit_bytes")
		}
		if h.Relation == finding.SpendsHold && numOf(h.Evidence, "reclaim_ms") > 0 {
			reclaim = true
		}
	}
	if limit != float64(memchain.Defaults.LimitMB<<20) {
		t.Errorf("the chain says limit %v, want %d MiB", limit, memchain.Defaults.LimitMB)
	}
	if !reclaim {
		t.Error("no hop says the holder reclaimed under the lock")
	}
	if find(d, finding.RoleHolder, func(s *finding.Subject) bool { return s.PID == in.PID() }) == nil {
		t.Errorf("the holder is not a thread of the lab's process %d", in.PID())
	}
	if find(d, finding.RoleVictim, func(s *finding.Subject) bool { return s.PID == in.Reader() }) == nil {
		if waitedLong(&rep, in.Reader()) {
			t.Errorf("the waiting reader (pid %d) is not a victim", in.Reader())
		} else {
			t.Logf("the reader (pid %d) is no victim: doctor saw it wait under 200 ms at most and 1 s in all (a host busy enough to starve the lab's holder can starve its reader's loop too)", in.Reader())
		}
	}
	if find(d, finding.RoleLock, func(s *finding.Subject) bool {
		return strings.HasPrefix(s.Lock, "mmap_lock") && numOf(s.Evidence, "mm_pid") == float64(in.PID())
	}) == nil {
		t.Errorf("the lock is not the lab's mmap_lock")
	}
	checkHopNumbers(t, d)
}

// (3) "ps hangs", with the stall on before wolf starts: a reader-owned
// mmap_lock, its reader asleep on a FUSE page, a queued writer and a
// blocked cmdline reader.
func TestDoctorDiagnosesPsHangFuse(t *testing.T) {
	testutil.RequireRoot(t)
	_, err := os.Stat("/dev/fuse")
	testutil.Require(t, err == nil, "needs /dev/fuse")
	testutil.Exclusive(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	inst, err := pshang.New().Start(ctx, lab.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	in := inst.(*pshang.Instance)
	time.Sleep(time.Second) // every victim blocked before wolf starts
	rep := doctorJSON(t, 5*time.Second)
	logDiagnoses(t, &rep)
	d := labDiagnosis(t, &rep, fmt.Sprintf("diagnose.fuse-daemon at this process (%d), the lab's FUSE daemon", os.Getpid()), func(d *finding.Diagnosis) bool {
		return d.ID == "diagnose.fuse-daemon" && d.Root.PID == os.Getpid()
	}, func(s *finding.Subject) bool {
		return s.PID == in.PID() || slices.Contains(in.Readers(), s.PID) || s.PID == os.Getpid()
	})
	checks := map[string]*finding.Subject{
		"mmap_lock": find(d, finding.RoleLock, func(s *finding.Subject) bool {
			return strings.HasPrefix(s.Lock, "mmap_lock") && numOf(s.Evidence, "mm_pid") == float64(in.PID())
		}),
		"reader-owner": find(d, finding.RoleHolder, func(s *finding.Subject) bool { return s.TID == in.TID("memreader") }),
		// The unmapper, or a thread of the child's Go runtime that
		// mapped memory first and took the writer's place in the queue
		// (the unmapper then queues behind it): a writer of the child.
		"queued writer": find(d, finding.RoleVictim, func(s *finding.Subject) bool {
			return s.PID == in.PID() && s.TID != in.TID("memreader") && s.Evidence["mode"] == "write"
		}),
		"cmdline reader": find(d, finding.RoleVictim, func(s *finding.Subject) bool {
			return s.PID == in.Readers()[0] && s.Evidence["mode"] == "read"
		}),
		"FUSE daemon": find(d, finding.RoleDaemon, func(s *finding.Subject) bool { return s.PID == os.Getpid() }),
	}
	for what, s := range checks {
		if s == nil {
			t.Errorf("%s missing from the first diagnosis's subjects", what)
		}
	}
	checkHopNumbers(t, d)
}

// taskBasedThrottle says whether this kernel throttles tasks on their way
// back to user space (6.18+: task_struct.throttled), so that a task inside
// the kernel, holding a kernel lock, is never throttled.
func taskBasedThrottle(t *testing.T) bool {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		t.Fatalf("kernel BTF: %v", err)
	}
	var ts *btf.Struct
	if err := spec.TypeByName("task_struct", &ts); err != nil {
		t.Fatalf("task_struct: %v", err)
	}
	for _, m := range ts.Members {
		if m.Name == "throttled" {
			return true
		}
	}
	return false
}

// (2) A lock holder in a cgroup throttled by its CPU quota. Before 6.18 the
// throttled cgroup takes the holder off the CPU with the lock held: the
// first diagnosis names the cgroup, its quota and share of periods
// throttled, the holder and the reader. Since 6.18 the kernel throttles a
// task only on its way back to user space, so the holder is never
// throttled while it holds the lock: wolf must measure that (0 ms
// throttled per hold), still report the throttling on its own, and not
// blame the quota for the lock.
func TestDoctorOnCPUQuotaHolder(t *testing.T) {
	testutil.RequireRoot(t)
	_, _, err := labproc.Hierarchy(context.Background(), "cpu", 0)
	testutil.Require(t, err == nil, fmt.Sprintf("needs the cpu cgroup controller: %v", err))
	testutil.Exclusive(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	inst, err := cpuquota.New().Start(ctx, lab.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	in := inst.(*cpuquota.Instance)
	rep := doctorJSON(t, 10*time.Second)
	logDiagnoses(t, &rep)
	reads, maxMs := in.ReaderStats()
	t.Logf("reader: %d reads, the longest %.0f ms", reads, maxMs)

	var thr *finding.Finding
	var holds *finding.Finding
	for i := range rep.Findings {
		f := &rep.Findings[i]
		if f.ID == "sched.cpu-throttled" && f.Evidence["cgroup"] == in.Cgroup().Path {
			thr = f
		}
		if f.ID == "locks.mmap-hold" && numOf(f.Evidence, "mm_pid") == float64(in.PID()) {
			holds = f
		}
	}
	if thr == nil {
		t.Fatalf("no sched.cpu-throttled finding for %s", in.Cgroup().Path)
	}
	if numOf(thr.Evidence, "quota_us") != float64(cpuquota.Defaults.QuotaUs) || numOf(thr.Evidence, "throttled_pct") < 50 {
		t.Errorf("throttling evidence %v", thr.Evidence)
	}
	pidsOK := false
	for _, p := range thr.Evidence["pids"].([]any) {
		pidsOK = pidsOK || p.(float64) == float64(in.PID())
	}
	if !pidsOK {
		t.Errorf("the lab's process is not among the throttled cgroup's pids: %v", thr.Evidence["pids"])
	}
	if taskBasedThrottle(t) {
		if holds != nil {
			if v, ok := holds.Evidence["throttled_ms_total"]; !ok || v.(float64) != 0 {
				t.Errorf("a holder inside the kernel was throttled %v ms on a kernel that throttles only on return to user space: %s %v", v, holds.Title, holds.Evidence)
			}
		}
		// The quota may well be the root of its own threads' throttled
		// waits; not of the lock's.
		for _, d := range rep.Diagnoses {
			if d.ID != "diagnose.cpu-quota" {
				continue
			}
			for _, h := range d.Chain {
				if h.Relation == finding.HeldBy || h.Relation == finding.SpendsHold {
					t.Errorf("the quota is blamed for a lock its holder held unthrottled: %s", d.Title)
					break
				}
			}
		}
		return
	}
	d := labDiagnosis(t, &rep, "diagnose.cpu-quota at "+in.Cgroup().Path, func(d *finding.Diagnosis) bool {
		return d.ID == "diagnose.cpu-quota" && d.Root.Cgroup == in.Cgroup().Path
	}, func(s *finding.Subject) bool {
		return s.PID == in.PID() || s.PID == in.Reader() || s.Cgroup == in.Cgroup().Path
	})
	if find(d, finding.RoleHolder, func(s *finding.Subject) bool { return s.TID == in.Holder() }) == nil ||
		find(d, finding.RoleVictim, func(s *finding.Subject) bool { return s.PID == in.Reader() }) == nil {
		t.Errorf("holder %d or reader %d missing: %+v", in.Holder(), in.Reader(), d.Subjects)
	}
	checkHopNumbers(t, d)
}
