package hung

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/diagnose"
	"github.com/wolf-investigator/wolf/internal/fact"
	"github.com/wolf-investigator/wolf/internal/features"
	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/finding/findingtest"
	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/lab/coredump"
	"github.com/wolf-investigator/wolf/internal/lab/fusestall"
	"github.com/wolf-investigator/wolf/internal/sysctl"
	"github.com/wolf-investigator/wolf/internal/testutil"
)

func requireLive(t *testing.T) {
	t.Helper()
	testutil.RequireRoot(t)
	_, err := os.Stat("/dev/fuse")
	testutil.Require(t, err == nil, "needs /dev/fuse for the FUSE lab")
	testutil.Exclusive(t)
}

// requireBlocker gates tests that need task->blocker (6.16+) to know the
// lock of a task that blocked before wolf started; TestLiveWithoutBlockerField
// covers older kernels.
func requireBlocker(t *testing.T) {
	t.Helper()
	st := features.Probe(context.Background(), "task_blocker")
	testutil.Require(t, st.Available, "needs task->blocker (Linux 6.16+): "+st.Detail)
}

func startLab(t *testing.T, l lab.Lab, victims int) *fusestall.Instance {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	inst, err := l.Start(ctx, lab.Options{Victims: victims, Logf: t.Logf})
	if err != nil {
		t.Fatalf("start lab %s: %v", l.Name(), err)
	}
	t.Cleanup(func() {
		if err := inst.Close(); err != nil {
			t.Errorf("close lab: %v", err)
		}
	})
	return inst.(*fusestall.Instance)
}

func runHung(t *testing.T, d, threshold time.Duration, during func()) *investigator.Result {
	t.Helper()
	h := New()
	h.Threshold = threshold
	h.Interval = 250 * time.Millisecond
	return runWith(t, h, d, during)
}

// runWith runs h for d; during, if set, runs once every program is attached.
func runWith(t *testing.T, h *Investigator, d time.Duration, during func()) *investigator.Result {
	t.Helper()
	return testutil.RunLive(t, h, investigator.Options{Duration: d}, during)
}

func pidsWithRole(f *finding.Finding, role string) []int {
	var out []int
	for _, s := range f.Subjects {
		if s.Role == role {
			out = append(out, s.PID)
		}
	}
	sort.Ints(out)
	return out
}

func sorted(v []int) []int {
	out := append([]int(nil), v...)
	sort.Ints(out)
	return out
}

func dump(t *testing.T, fs []finding.Finding) {
	for _, f := range fs {
		t.Logf("%s %s: %s", f.Severity, f.ID, f.Title)
		for _, s := range f.Subjects {
			t.Logf("   %s %s pid %d tid %d %s", s.Role, s.Comm, s.PID, s.TID, s.Detail)
		}
	}
}

// The SRE arrives after the hang: victims blocked before wolf started, and
// more block while it watches. wolf must name the offender, every victim,
// and the FUSE daemon the offender waits for.
func TestLiveRWSemOwnerBeforeAndAfterStart(t *testing.T) {
	requireLive(t)
	requireBlocker(t)
	inst := startLab(t, fusestall.NewRWSem(), 2)
	before := inst.Tasks()
	time.Sleep(1200 * time.Millisecond) // the first victims are past the threshold
	var late []int
	res := runHung(t, 4*time.Second, time.Second, func() {
		pids, err := inst.AddVictims(2)
		if err != nil {
			t.Errorf("AddVictims: %v", err)
		}
		late = pids
	})
	dump(t, res.Findings)
	f := findingtest.First(res.Findings, "hung.lock-owner")
	if f == nil {
		t.Fatalf("no hung.lock-owner finding")
	}
	if got := pidsWithRole(f, finding.RoleOffender); len(got) != 1 || got[0] != before.Offender {
		t.Errorf("offender %v, want %d", got, before.Offender)
	}
	want := sorted(append(append([]int(nil), before.Victims...), late...))
	if got := pidsWithRole(f, finding.RoleVictim); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("victims %v, want %v", got, want)
	}
	if got := pidsWithRole(f, finding.RoleOwner); len(got) != 1 || got[0] != os.Getpid() {
		t.Errorf("FUSE daemon in chain %v, want this process %d", got, os.Getpid())
	}
	if f.Evidence["lock_type"] != "rw-semaphore" || f.Evidence["lock_mode"] != "write" {
		t.Errorf("evidence %v", f.Evidence)
	}
	// Victims that blocked while wolf watched are timed exactly.
	for _, s := range f.Subjects {
		if s.Role == finding.RoleVictim && len(s.Stack) == 0 {
			t.Errorf("victim %d has no stack", s.PID)
		}
	}
	if !strings.Contains(f.Title, "FUSE daemon") {
		t.Errorf("title does not follow the chain to the daemon: %s", f.Title)
	}
	// The flame graph of blocked tasks counts every victim in the FUSE write.
	var inWrite uint64
	for _, p := range res.Profiles {
		for _, st := range p.Stacks {
			if p.Name == "blocked_stacks" && slices.ContainsFunc(st.Frames, func(f string) bool { return strings.HasPrefix(f, "fuse_file_write_iter+") }) {
				inWrite += st.Value
			}
		}
	}
	if inWrite < uint64(len(want)) {
		t.Errorf("blocked_stacks has %d tasks in fuse_file_write_iter, want >= %d: %+v", inWrite, len(want), res.Profiles)
	}
}

func TestLiveMutexOwner(t *testing.T) {
	requireLive(t)
	requireBlocker(t)
	inst := startLab(t, fusestall.NewMutex(), 2)
	tasks := inst.Tasks()
	time.Sleep(1200 * time.Millisecond)
	res := runHung(t, 2*time.Second, time.Second, nil)
	dump(t, res.Findings)
	f := findingtest.First(res.Findings, "hung.lock-owner")
	if f == nil {
		t.Fatalf("no hung.lock-owner finding")
	}
	if got := pidsWithRole(f, finding.RoleOffender); len(got) != 1 || got[0] != tasks.Offender {
		t.Errorf("offender %v, want %d", got, tasks.Offender)
	}
	if got := pidsWithRole(f, finding.RoleVictim); fmt.Sprint(got) != fmt.Sprint(sorted(tasks.Victims)) {
		t.Errorf("victims %v, want %v", got, tasks.Victims)
	}
	if f.Evidence["lock_type"] != "mutex" {
		t.Errorf("evidence %v", f.Evidence)
	}
}

// With no lab, this host has no hung task (other tests that hang tasks
// hold testutil.Exclusive).
func TestLiveHealthyHostHasNoFinding(t *testing.T) {
	requireLive(t)
	res := runHung(t, 2*time.Second, DefaultThreshold, nil)
	for _, f := range res.Findings {
		if f.Severity >= finding.Warning {
			t.Errorf("healthy host gave %s: %s", f.ID, f.Title)
		}
	}
	if !res.Capabilities["tracepoint:sched/sched_switch"] {
		t.Errorf("capabilities %v", res.Capabilities)
	}
	if res.Overhead.Events == 0 {
		t.Errorf("no events counted: %+v", res.Overhead)
	}
}

var likelyOwned = regexp.MustCompile(`INFO: task (.+):(\d+) .*blocked on an? (\S+).* likely owned by task (.+):(\d+)`)

// With khungtaskd's timeout lowered, the kernel itself names the owner
// ("likely owned by task"); wolf must agree, and see khungtaskd's report.
func TestLiveAgreesWithKernelLikelyOwner(t *testing.T) {
	requireLive(t)
	requireBlocker(t) // the kernel prints "likely owned by" only from task->blocker
	if _, err := sysctl.Read("kernel.hung_task_timeout_secs"); err != nil {
		testutil.Require(t, false, "kernel has no hung-task detector")
	}
	// A raw non-blocking fd: os.File would park reads in the poller
	// and never return at the end of the log.
	kmsg, err := unix.Open("/dev/kmsg", unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open /dev/kmsg: %v", err)
	}
	defer unix.Close(kmsg)
	if _, err := unix.Seek(kmsg, 0, 2); err != nil { // only messages from now on
		t.Fatalf("seek /dev/kmsg: %v", err)
	}
	for name, value := range map[string]string{"kernel.hung_task_warnings": "-1", "kernel.hung_task_timeout_secs": "2"} {
		restore, err := sysctl.Set(name, value)
		if err != nil {
			t.Fatalf("set %s: %v", name, err)
		}
		t.Cleanup(func() {
			if err := restore(); err != nil {
				t.Errorf("restore %s: %v", name, err)
			}
		})
	}
	inst := startLab(t, fusestall.NewRWSem(), 1)
	tasks := inst.Tasks()
	res := runHung(t, 5*time.Second, time.Second, nil)
	dump(t, res.Findings)

	// Read what the kernel said meanwhile.
	var kernelOwner, kernelVictim int
	buf := make([]byte, 8192)
	for i := 0; i < 10000; i++ { // each read returns one record
		n, err := unix.Read(kmsg, buf)
		if err == unix.EPIPE {
			continue // records were overwritten; go on with the next
		}
		if err != nil || n <= 0 {
			break // EAGAIN: the end of the log
		}
		line := string(buf[:n])
		if i := strings.IndexByte(line, ';'); i >= 0 {
			line = strings.TrimSpace(line[i+1:])
		}
		if m := likelyOwned.FindStringSubmatch(line); m != nil && kernelOwner == 0 {
			kernelVictim, _ = strconv.Atoi(m[2])
			kernelOwner, _ = strconv.Atoi(m[5])
			t.Logf("kernel: %s", line)
		}
	}
	if kernelOwner == 0 {
		t.Fatalf("the kernel printed no \"likely owned by task\" line within the window")
	}
	f := findingtest.First(res.Findings, "hung.lock-owner")
	if f == nil {
		t.Fatal("no hung.lock-owner finding")
	}
	if got := pidsWithRole(f, finding.RoleOffender); len(got) != 1 || got[0] != kernelOwner || kernelOwner != tasks.Offender {
		t.Errorf("wolf's offender %v, kernel's %d, lab's %d", got, kernelOwner, tasks.Offender)
	}
	if kernelVictim != tasks.Victims[0] {
		t.Errorf("kernel reported victim %d, lab's is %d", kernelVictim, tasks.Victims[0])
	}
	if f.Evidence["khungtaskd_reports"] == nil {
		t.Errorf("khungtaskd's report (sched_process_hang) not seen: %v", f.Evidence)
	}
}

// Kernels before 6.14 have no task->blocker: a lock is known only from
// lock:contention_begin, i.e. for waits that began while wolf watched.
// Victims that blocked earlier are still reported, by their wait site.
func TestLiveWithoutBlockerField(t *testing.T) {
	requireLive(t)
	inst := startLab(t, fusestall.NewRWSem(), 1)
	early := inst.Tasks().Victims
	time.Sleep(1200 * time.Millisecond)
	h := New()
	h.Threshold = time.Second
	h.Interval = 250 * time.Millisecond
	h.ignoreBlocker = true
	var late []int
	res := runWith(t, h, 3*time.Second, func() {
		pids, err := inst.AddVictims(1)
		if err != nil {
			t.Errorf("AddVictims: %v", err)
		}
		late = pids
	})
	if len(late) != 1 {
		t.Fatalf("late victims %v", late)
	}
	dump(t, res.Findings)
	f := findingtest.First(res.Findings, "hung.lock-owner")
	if f == nil {
		t.Fatal("no hung.lock-owner finding for the victim that blocked while wolf watched")
	}
	if got := pidsWithRole(f, finding.RoleVictim); len(got) != 1 || got[0] != late[0] {
		t.Errorf("lock victims %v, want the late one %v", got, late)
	}
	if got := pidsWithRole(f, finding.RoleOffender); len(got) != 1 || got[0] != inst.Tasks().Offender {
		t.Errorf("offender %v, want %d", got, inst.Tasks().Offender)
	}
	if f.Evidence["lock_source"] != "lock:contention_begin" {
		t.Errorf("lock source %v", f.Evidence["lock_source"])
	}
	w := findingtest.First(res.Findings, "hung.wait-site")
	if w == nil {
		t.Fatal("the victim that blocked before wolf started is not reported")
	}
	if got := pidsWithRole(w, finding.RoleVictim); len(got) != 1 || got[0] != early[0] {
		t.Errorf("wait-site victims %v, want %v", got, early)
	}
	if w.Evidence["likely_owner_pid"] != inst.Tasks().Offender {
		t.Errorf("wait-site finding does not point at the likely owner: %v", w.Evidence)
	}
}

// A process crashes and its core dump stalls on a pipe handler that does
// not read: its threads park (in state I since 6.12, invisible to
// khungtaskd) and wolf names the dumping thread.
func TestLiveCoredump(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.Exclusive(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	li, err := coredump.New().Start(ctx, lab.Options{Logf: t.Logf})
	if err != nil {
		t.Fatalf("start coredump lab: %v", err)
	}
	t.Cleanup(func() {
		if err := li.Close(); err != nil {
			t.Errorf("close lab: %v", err)
		}
	})
	inst := li.(*coredump.Instance)
	tasks := inst.Tasks()
	time.Sleep(1200 * time.Millisecond)
	res := runHung(t, 2*time.Second, time.Second, nil)
	dump(t, res.Findings)
	f := findingtest.First(res.Findings, "hung.coredump")
	if f == nil {
		t.Fatal("no hung.coredump finding")
	}
	var offender finding.Subject
	var victims []int
	for _, s := range f.Subjects {
		switch s.Role {
		case finding.RoleOffender:
			offender = s
		case finding.RoleVictim:
			victims = append(victims, s.TID)
			if s.PID != inst.Process() {
				t.Errorf("victim %d in process %d, want %d", s.TID, s.PID, inst.Process())
			}
		}
	}
	if offender.TID != tasks.Offender || len(offender.Stack) == 0 {
		t.Errorf("offender %+v, want the dumping thread %d with its stack", offender, tasks.Offender)
	}
	sort.Ints(victims)
	if fmt.Sprint(victims) != fmt.Sprint(sorted(tasks.Victims)) {
		t.Errorf("victims %v, want %v", victims, sorted(tasks.Victims))
	}
	if !strings.HasPrefix(f.Title, "Blocked by coredump") {
		t.Errorf("title %q", f.Title)
	}
}

// endedWaits are the victims' lock waits that began before attach and
// ended in the window (AtLeast), by pid, from a run's facts; the run's
// findings are logged.
func endedWaits(t *testing.T, res *investigator.Result, victims []int) map[int]fact.Wait {
	t.Helper()
	dump(t, res.Findings)
	if res.Facts == nil {
		t.Fatalf("no facts")
	}
	got := map[int]fact.Wait{}
	for _, w := range res.Facts.Waits {
		if w.Kind == fact.WaitLock && w.AtLeast && slices.Contains(victims, w.Task.PID) {
			got[w.Task.PID] = w
		}
	}
	return got
}

// The stall began before wolf attached and ends while it watches: the
// lookups' waits on the directory's mutex are facts of at least the time
// since the lab parked them up to the last walk that saw them, and the
// diagnosis names them, the mutex's holder and the daemon.
func TestLiveEndedWaitFromBeforeAttach(t *testing.T) {
	requireLive(t)
	requireBlocker(t)
	inst := startLab(t, fusestall.NewMutex(), 2)
	tasks := inst.Tasks()
	parked := time.Now()
	time.Sleep(1500 * time.Millisecond)
	attached := time.Now()
	res := runHung(t, 3*time.Second, 5*time.Second, func() {
		time.Sleep(time.Second)
		inst.Release()
	})
	got := endedWaits(t, res, tasks.Victims)
	lower := attached.Sub(parked)
	var lockKey string
	for _, v := range tasks.Victims {
		if got[v].Max < lower {
			t.Errorf("victim %d: ended wait %v, want at least %v (waits %+v)", v, got[v].Max, lower, res.Facts.Waits)
		}
		lockKey = cmp.Or(lockKey, got[v].On)
	}
	holder := false
	for _, h := range res.Facts.Holds {
		holder = holder || (h.On == lockKey && h.Holder.PID == tasks.Offender && h.Exact)
	}
	if !holder {
		t.Errorf("no hold of %s by the offender %d: %+v", lockKey, tasks.Offender, res.Facts.Holds)
	}
	res.Facts.Window = 3 * time.Second
	ds := diagnose.Diagnose(res.Findings, res.Facts)
	if len(ds) == 0 {
		t.Fatalf("no diagnosis")
	}
	t.Logf("%s: %s", ds[0].ID, ds[0].Title)
	named := 0
	for _, h := range ds[0].Chain {
		if h.Relation == finding.WaitsOn && slices.Contains(tasks.Victims, h.From.PID) && strings.Contains(h.Text, "waited at least") {
			named++
		}
	}
	if named != len(tasks.Victims) || !strings.Contains(ds[0].Title, fmt.Sprintf("(pid %d) held mutex", tasks.Offender)) {
		t.Errorf("diagnosis %s: %s, %d victims named with their ended waits", ds[0].ID, ds[0].Title, named)
	}
}

// Kernels without task->blocker (before 6.16: what Debian runs) cannot
// name the lock of a wait that began before wolf attached. When that wait
// ends in the window, its contention_end names it (pre_ends): the ended
// wait is then a fact on that lock, at least as long as the walks saw.
// task->blocker is ignored here so that the join is what names the lock;
// where the kernel has it, it says which lock that should be.
func TestLiveEndedWaitNamedByItsEnd(t *testing.T) {
	requireLive(t)
	inst := startLab(t, fusestall.NewMutex(), 2)
	tasks := inst.Tasks()
	parked := time.Now()
	time.Sleep(1500 * time.Millisecond)
	want := blockerLocks(t, tasks.Victims)
	attached := time.Now()
	h := New()
	h.Threshold = 5 * time.Second
	h.Interval = 250 * time.Millisecond
	h.ignoreBlocker = true
	res := runWith(t, h, 3*time.Second, func() {
		time.Sleep(time.Second)
		inst.Release()
	})
	got := endedWaits(t, res, tasks.Victims)
	lower := attached.Sub(parked)
	for _, v := range tasks.Victims {
		w, ok := got[v]
		switch {
		case !ok:
			t.Errorf("victim %d: no ended lock wait (waits %+v, notes %v)", v, res.Facts.Waits, res.Notes)
		case w.Max < lower:
			t.Errorf("victim %d: ended wait %v, want at least %v", v, w.Max, lower)
		case want[v] != "" && w.On != want[v]:
			t.Errorf("victim %d: ended wait on %s, task->blocker said %s", v, w.On, want[v])
		default:
			t.Logf("victim %d: waited at least %v on %s (task->blocker: %q)", v, w.Max, w.On, want[v])
		}
	}
	for _, r := range res.Facts.Resources {
		if r.Kind == fact.Lock && r.LockType != "mutex" {
			t.Errorf("lock %s: type %q, want mutex", r.Key, r.LockType)
		}
	}
}

// blockerLocks are the lock keys task->blocker gives for tids, where the
// kernel has it (empty otherwise).
func blockerLocks(t *testing.T, tids []int) map[int]string {
	t.Helper()
	out := map[int]string{}
	if !features.Probe(context.Background(), "task_blocker").Available {
		return out
	}
	p, err := openProbe(true, "")
	if err != nil {
		t.Fatalf("open probe: %v", err)
	}
	defer p.kit.Close()
	recs, err := p.scan(context.Background(), nil)
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	for i := range recs {
		if slices.Contains(tids, int(recs[i].Tid)) && recs[i].LockAddr != 0 {
			out[int(recs[i].Tid)] = fact.LockKey(fmt.Sprintf("0x%x", recs[i].LockAddr))
		}
	}
	return out
}
