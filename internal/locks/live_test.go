package locks

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/finding/findingtest"
	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/lab/fusestall"
	"github.com/wolf-investigator/wolf/internal/lab/memcgstress"
	"github.com/wolf-investigator/wolf/internal/lab/memchain"
	"github.com/wolf-investigator/wolf/internal/lab/mmaplock"
	"github.com/wolf-investigator/wolf/internal/probekit"
	"github.com/wolf-investigator/wolf/internal/reclaim"
	"github.com/wolf-investigator/wolf/internal/testutil"
)

// run runs l with opts; during, if set, runs once every program is attached.
func run(t *testing.T, l *Investigator, opts investigator.Options, during func()) *investigator.Result {
	t.Helper()
	return testutil.RunLive(t, l, opts, during)
}

// Contention that begins while wolf runs is caught with its owner: the FUSE
// lab's offender holds a file's i_rwsem while its WRITE is parked; the
// victims that arrive afterwards wait on it. wolf must name the rwsem by
// its waiters' caller, the offender as owner (with its stack in the FUSE
// request), and the victims as waiters.
func testFuseOwner(t *testing.T, rawOnly bool) {
	testutil.RequireRoot(t)
	_, err := os.Stat("/dev/fuse")
	testutil.Require(t, err == nil, "needs /dev/fuse for the FUSE lab")
	testutil.Exclusive(t)

	var inst *fusestall.Instance
	l := New()
	l.rawOnly = rawOnly
	l.ProfileHz = 0
	res := run(t, l, investigator.Options{Duration: 4 * time.Second}, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		in, err := fusestall.NewRWSem().Start(ctx, lab.Options{Victims: 2, Logf: t.Logf})
		if err != nil {
			t.Fatalf("start lab: %v", err)
		}
		inst = in.(*fusestall.Instance)
		t.Cleanup(func() { _ = inst.Close() })
	})
	if rawOnly {
		// The probe-read twins of the mmap_lock programs stand in for
		// the BTF-task ones (refused), as before 5.11.
		if !res.Capabilities["tracepoint:mmap_lock/mmap_lock_released"] || !res.Capabilities["tracepoint:mmap_lock/mmap_lock_acquire_returned"] {
			t.Errorf("the mmap_lock programs did not attach as on an old kernel: %v", res.Capabilities)
		}
	}
	tasks := inst.Tasks()
	var hit *finding.Finding
	for _, f := range findingtest.All(res.Findings, "locks.contention") {
		for _, o := range findingtest.Subjects(f, finding.RoleOwner) {
			if o.PID == tasks.Offender {
				hit = &f
			}
		}
	}
	if hit == nil {
		t.Fatalf("no contention finding names offender %d as owner; findings: %+v", tasks.Offender, res.Findings)
	}
	t.Logf("%s: %s", hit.Severity, hit.Title)
	if hit.Evidence["lock_type"] != "rwsem:W" {
		t.Errorf("lock_type %v, want rwsem:W", hit.Evidence["lock_type"])
	}
	if name := hit.Evidence["lock"].(string); !strings.Contains(name, "fuse_file_write_iter") {
		t.Errorf("lock named %q, want it named after the waiters' caller fuse_file_write_iter", name)
	}
	var waiters []int
	for _, w := range findingtest.Subjects(*hit, finding.RoleWaiter) {
		waiters = append(waiters, w.PID)
	}
	slices.Sort(waiters)
	if want := slices.Sorted(slices.Values(tasks.Victims)); !slices.Equal(waiters, want) {
		t.Errorf("waiters %v, want the victims %v", waiters, want)
	}
	owner := findingtest.Subjects(*hit, finding.RoleOwner)[0]
	if owner.Comm != "sh" {
		t.Errorf("owner comm %q, want sh", owner.Comm)
	}
	// Owner stacks need BTF tracepoints and the bpf_task_from_pid kfunc
	// (6.2+); older kernels (the qemu 6.1 run) get the raw build.
	canStack := !rawOnly && kernelHasFunc("bpf_task_from_pid")
	stack := strings.Join(owner.Stack, " ")
	switch {
	case !canStack && len(owner.Stack) != 0:
		t.Errorf("owner stack %v without BTF tracepoints and the kfunc", owner.Stack)
	case canStack && !strings.Contains(stack, "fuse"):
		t.Errorf("owner stack %v does not show it waiting in FUSE", owner.Stack)
	}
	if !strings.HasPrefix(hit.Title, hit.Evidence["lock"].(string)+": ") || !strings.Contains(hit.Title, "owner sh (pid ") {
		t.Errorf("title %q", hit.Title)
	}
	if res.Capabilities["owner_stacks"] != canStack {
		t.Errorf("owner_stacks capability %v, want %v", res.Capabilities["owner_stacks"], canStack)
	}
}

func TestLiveFuseOwner(t *testing.T)               { testFuseOwner(t, false) }
func TestLiveFuseOwnerRawTracepoints(t *testing.T) { testFuseOwner(t, true) }

// The mmap-lock lab: a CPU-starved holder, a writer and readers in one
// process. wolf must report the long holds with the holder, how little
// CPU it got, what ran under the lock, the contention on that process's
// mmap_lock, and readers queued behind the writer; the profile under lock
// holds the lab's samples.
func TestLiveMmapLock(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.Exclusive(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// 64 MiB, not the lab's default: the holder's operations end sooner,
	// so a window holds several of its read holds, when readers arrive
	// behind the waiting writer, even on a host busy with other tests
	// (at 256 MiB, 7 windows in 18 under stress-ng --cpu 2 saw none).
	in, err := mmaplock.NewSized(64).Start(ctx, lab.Options{Logf: t.Logf})
	if err != nil {
		t.Fatalf("start lab: %v", err)
	}
	defer in.Close()
	inst := in.(*mmaplock.Instance)
	l := New()
	l.ProfileHz = 499
	res := run(t, l, investigator.Options{Duration: 5 * time.Second, PID: inst.PID()}, nil)

	holds := findingtest.All(res.Findings, "locks.mmap-hold")
	if len(holds) == 0 {
		t.Fatalf("no mmap-hold finding; findings: %+v", res.Findings)
	}
	h := holds[0]
	t.Logf("%s: %s", h.Severity, h.Title)
	// The lab's holder is the one it starves, but a busy host starves the
	// writer and readers on the other CPU too, and one of them may hold
	// longest in the window: the finding names the longest holder first,
	// and the lab's holder beside it (the most sampled under the lock).
	holder := findingtest.Subjects(h, finding.RoleHolder)
	if len(holder) == 0 || holder[0].PID != inst.PID() {
		t.Fatalf("holder %+v, want a thread of pid %d", holder, inst.PID())
	}
	if !slices.ContainsFunc(holder, func(s finding.Subject) bool { return s.TID == inst.Holder() }) {
		t.Fatalf("holders %+v lack the lab's holder tid %d", holder, inst.Holder())
	}
	if h.Severity < finding.Warning {
		t.Errorf("severity %s for a %v ms hold", h.Severity, h.Evidence["hold_ms_max"])
	}
	// Starved: most of the hold off CPU.
	if pct := h.Evidence["on_cpu_pct"].(float64); pct > 50 {
		t.Errorf("holder on CPU %.0f%% of its hold; the lab starves it", pct)
	}
	if !strings.Contains(h.Title, "mmap_lock of wolf-mmaplock (pid ") {
		t.Errorf("title %q does not name the process's mmap_lock", h.Title)
	}

	cont := findingtest.All(res.Findings, "locks.contention")
	var mm *finding.Finding
	for i := range cont {
		if strings.HasPrefix(cont[i].Evidence["lock"].(string), "mmap_lock of wolf-mmaplock") {
			mm = &cont[i]
		}
	}
	if mm == nil {
		t.Fatalf("no contention finding on the lab's mmap_lock: %+v", cont)
	}
	waiters := map[int]bool{}
	for _, w := range findingtest.Subjects(*mm, finding.RoleWaiter) {
		waiters[w.TID] = true
	}
	for _, v := range inst.Tasks().Victims {
		if !waiters[v] {
			t.Errorf("victim tid %d not among the waiters %v", v, waiters)
		}
	}
	if len(findingtest.All(res.Findings, "locks.writer-starvation")) == 0 {
		t.Errorf("no writer-starvation finding for readers queued behind the writer")
	}

	var sawHold bool
	for _, hg := range res.Histograms {
		if hg.Name == "mmap_lock_hold_us" && hg.Labels["pid"] != "" && hg.Count > 0 {
			sawHold = true
		}
	}
	if !sawHold {
		t.Error("no mmap_lock_hold_us histogram")
	}
	var under *finding.Profile
	for i := range res.Profiles {
		if res.Profiles[i].Name == "mmap_lock_profile" {
			under = &res.Profiles[i]
		}
	}
	if under == nil || len(under.Stacks) == 0 {
		t.Fatalf("no profile under lock: %+v", res.Profiles)
	}
	var sawLab bool
	for _, st := range under.Stacks {
		if len(st.Frames) > 2 && strings.HasPrefix(st.Frames[0], "wolf-mmaplock (pid ") && strings.HasPrefix(st.Frames[1], "[mmap_lock ") {
			sawLab = true
		}
	}
	if !sawLab {
		t.Errorf("profile under lock lacks the lab's samples: %+v", under.Stacks[0])
	}
	if res.Overhead.BPFRunNs == 0 || res.Overhead.Events == 0 {
		t.Errorf("overhead not measured: %+v", res.Overhead)
	}
}

// "The case of the vanishing CPU"'s mechanism on this kernel: a memory cgroup at its limit whose
// threads populate anonymous mappings (MAP_POPULATE faults the pages in
// under the mmap_lock), so the cgroup's reclaim runs with the lock held.
// wolf must put the reclaim into the hold: calls, pages scanned, reclaimed.
func TestLiveReclaimUnderMmapLock(t *testing.T) {
	testReclaimUnderMmapLock(t, false)
}

// The same with the reclaim investigator alongside in this process (wolf
// doctor): locks attaches no vmscan program and takes each hold's reclaim
// from reclaim's per-thread totals.
func TestLiveReclaimUnderMmapLockShared(t *testing.T) {
	testReclaimUnderMmapLock(t, true)
}

func testReclaimUnderMmapLock(t *testing.T, shared bool) {
	testutil.RequireRoot(t)
	testutil.Exclusive(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// wolf attaches before the lab starts: a hold is seen from its
	// acquire. Attached to a running lab, a hold that began before and
	// outlasted the window (the lab's holds last seconds: 3.3 s seen
	// with the machine busy) was never seen, nor the waits queued
	// behind it, and the window had no finding at all. So the lab's
	// worker is unknown at Start: wolf watches the host and the test
	// picks the worker's findings.
	l := New()
	l.HoldThreshold = 5 * time.Millisecond
	l.ProfileHz = 0
	opts := investigator.Options{Duration: time.Second}
	if shared {
		rs, err := reclaim.New().Start(ctx, opts)
		if err != nil {
			t.Fatalf("start reclaim: %v", err)
		}
		defer rs.Close()
		opts.Alongside = []string{"reclaim"}
	}
	var pid int
	res := run(t, l, opts, func() {
		in, err := memcgstress.NewPopulate().Start(ctx, lab.Options{Logf: t.Logf})
		if err != nil {
			t.Fatalf("start lab: %v", err)
		}
		t.Cleanup(func() { _ = in.Close() })
		pid = in.(*memcgstress.Instance).PID()
		time.Sleep(4 * time.Second) // reclaim at the limit, under the lock
	})
	if shared {
		if slices.ContainsFunc(res.Notes, func(n string) bool { return strings.Contains(n, "reclaim") }) {
			t.Errorf("reclaim runs alongside, yet: %q", res.Notes)
		}
		if _, ok := res.Capabilities["tracepoint:vmscan/mm_vmscan_lru_shrink_inactive"]; ok {
			t.Errorf("locks attached its own vmscan programs beside reclaim")
		}
	}
	worker := func(f finding.Finding) bool {
		return slices.ContainsFunc(f.Subjects, func(s finding.Subject) bool { return s.Role == finding.RoleHolder && s.PID == pid })
	}
	var holds []finding.Finding
	for _, f := range findingtest.All(res.Findings, "locks.mmap-hold") {
		if worker(f) {
			holds = append(holds, f)
		}
	}
	var best *finding.Finding
	for i, f := range holds {
		if best == nil || f.Evidence["hold_ms_max"].(float64) > best.Evidence["hold_ms_max"].(float64) {
			best = &holds[i]
		}
	}
	if best == nil {
		t.Fatalf("no mmap-hold finding for the lab's worker %d (notes %q, overhead %+v): %+v", pid, res.Notes, res.Overhead, res.Findings)
	}
	t.Logf("%s: %s", best.Severity, best.Title)
	if !strings.Contains(best.Title, fmt.Sprintf("mmap_lock of wolf-memcg-lab (pid %d)", pid)) {
		t.Errorf("title %q does not name the worker process's mmap_lock", best.Title)
	}
	// The longest hold need not have reclaimed; some hold did.
	var reclaimed bool
	for _, f := range holds {
		for _, h := range f.Evidence["holds"].([]HoldRecord) {
			if h.ReclaimCalls > 0 && h.PagesScanned > 0 {
				reclaimed = true
			}
		}
	}
	if !reclaimed {
		t.Errorf("no hold with reclaim under the mmap_lock: %v", best.Evidence["holds"])
	}
}

// stormUnderTinyBudget sets a budget far under what the lock programs
// spend, so that they sample and duty cycle, and starts the memchain lab's
// lock storm; unbudget puts the budget back (after the lab is closed).
func stormUnderTinyBudget(ctx context.Context, t *testing.T) (_ lab.Instance, unbudget func()) {
	t.Helper()
	b, err := probekit.NewBudget(0.0001)
	if err != nil {
		t.Fatal(err)
	}
	probekit.SetBudget(b)
	in, err := memchain.New().Start(ctx, lab.Options{Logf: t.Logf})
	if err != nil {
		probekit.SetBudget(nil)
		t.Fatalf("start lab: %v", err)
	}
	return in, func() { probekit.SetBudget(nil) }
}

// On a storm, with the budget spent, sleeping waits are timed one in N per
// CPU (WOLF_STORM): each timed one stands for itself and those its CPU
// skipped before it, so their count, summed over the locks, is the waits
// begun but those skipped last (fewer than 2N a CPU) and those still
// going, and the report says the figures are estimates. The exact count
// is the programs' own counter of sleeping waits begun.
func TestLiveStormSampledSleepingWaits(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.Exclusive(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	in, unbudget := stormUnderTinyBudget(ctx, t)
	defer unbudget()
	defer in.Close()
	l := New()
	l.ProfileHz = 0
	l.Top = 1 << 20 // every lock: the counts are compared over all of them
	res := run(t, l, investigator.Options{Duration: 8 * time.Second}, nil)
	var storm *finding.Sampling
	for i, s := range res.Overhead.Sampled {
		if s.Investigator == "locks" && s.Estimated {
			storm = &res.Overhead.Sampled[i]
		}
	}
	if storm == nil || storm.What != "lock waits" || storm.Detailed == 0 || storm.Detailed >= storm.Events {
		t.Fatalf("no storm sampling of lock waits under a budget far under the programs' cost: %+v", res.Overhead.Sampled)
	}
	var est, ongoing uint64
	for _, w := range l.last.Waits {
		if !w.Type.Spins() {
			est += w.Count
			ongoing += w.Ongoing
		}
	}
	exact := l.lastSleeps
	t.Logf("sleeping waits: %d begun, %d estimated (%d still going); %d of %d lock waits timed", exact, est, ongoing, storm.Detailed, storm.Events)
	if exact < 1000 {
		t.Fatalf("only %d sleeping waits: the lab did not storm", exact)
	}
	// What each CPU skipped last (fewer than 2 x 64), and a few waits
	// that lost their end; over the counter, never. With the budget this
	// far under, the contention programs are duty cycled too: the
	// counter and the weights are then both scaled by 2^DutyShift.
	slack := uint64(2*64*runtime.NumCPU())<<probekit.DutyShift + exact/50
	if est > exact || exact-est > slack {
		t.Errorf("%d sleeping waits estimated, %d begun: more than %d apart", est, exact, slack)
	}
}

// The programs' count of entries awaiting a sleeping wait's end (which
// lets contention_end skip its lookup when it is 0) never drifts: after a
// storm whose contention_begin is duty-cycled, attached and detached
// while waits go on, it equals the entries awaiting, with nothing taken
// back (no entry was evicted). Too low, a wait's end would be skipped.
func TestLiveAwaitedCountExact(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.Exclusive(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	in, unbudget := stormUnderTinyBudget(ctx, t) // duty cycles the begin
	defer unbudget()
	defer in.Close()
	l := New()
	l.ProfileHz = 0
	s, err := l.Start(ctx, investigator.Options{Duration: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p := s.(*session).p
	time.Sleep(6 * time.Second)
	if err := in.Close(); err != nil {
		t.Logf("lab close: %v", err)
	}
	var c awaitedCount
	for i := 0; i < 20 && (i == 0 || !c.exact()); i++ {
		time.Sleep(100 * time.Millisecond)
		if c, err = p.countAwaited(); err != nil {
			t.Fatal(err)
		}
	}
	if !c.exact() {
		t.Fatal("the awaited count never held still for a count of the entries")
	}
	word, corr, seen := c.before, c.corr, c.seen
	res, err := s.Collect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	duty := false
	for _, sh := range res.Overhead.Shed {
		duty = duty || sh.DutyPct > 0
	}
	starts := word >> 32
	t.Logf("%d sleeping waits awaited their end; count %d, correction %d, %d entries awaiting; duty cycled: %v",
		starts, uint32(word), corr, seen, duty)
	if starts < 200 { // the storm varies several fold between runs
		t.Fatalf("only %d sleeping waits: the lab did not storm", starts)
	}
	if !duty {
		t.Errorf("contention_begin was not duty-cycled under a budget far under its cost: %+v", res.Overhead.Shed)
	}
	if uint32(word) != seen || corr != 0 {
		t.Errorf("count %d less correction %d, %d entries awaiting: it drifted", uint32(word), corr, seen)
	}
}
