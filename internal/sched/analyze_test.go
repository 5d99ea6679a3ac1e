package sched

import (
	"strings"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/finding/findingtest"
	"github.com/wolf-investigator/wolf/internal/hist"
)

// seedTask is "The Network Is Slow"'s iperf thread: busy, moved away by the balancer
// (ksoftirqd on a third CPU) and back by its next wake-up, nearly always
// while cache-hot; its runs after those moves take over three times as
// long as after staying on its warm CPU (cold starts cost it 11% of its
// CPU time).
func seedTask() *Task {
	t := &Task{
		TID: 351528, PID: 351520, Comm: "iperf", Window: 10 * time.Second, Prio: 120,
		Migrations: 3000, Bounces: 1400, BounceCPUs: [2]int{0, 1},
		Remote: 700, WakeAffine: 1400, WakeWide: 1300, WakeeFlips: 2100, WakerFlips: 3500,
		CPUPct: 85, CPU: 0, CPUsAllowed: "0-3",
		Runtime: 8500 * time.Millisecond, MovedRuns: 3000, HotMoves: 2800,
		MovedWaits: 3000, MovedWait: 3000 * 30 * time.Microsecond,
		HotMoved:  runs(2600, 500*time.Microsecond, 100*time.Microsecond),
		HotStayed: runs(5000, 150*time.Microsecond, 50*time.Microsecond),
	}
	t.ByKind[KindBalance] = 1500
	t.ByKind[KindWakeup] = 1500
	t.BounceOut[KindBalance] = 1400
	t.BounceBack[KindWakeup] = 1400
	for i := 0; i < 500; i++ {
		t.Runq.Add(uint64(20_000 + i*10))
	}
	return t
}

// runs is n runs of mean length mean and standard deviation sd.
func runs(n uint64, mean, sd time.Duration) RunStats {
	m, v := float64(mean.Microseconds()), float64(sd.Microseconds())
	return RunStats{N: n, Sum: time.Duration(n) * mean, SqUs2: uint64(float64(n) * (v*v + m*m))}
}

func quietTask(tid int) *Task {
	t := &Task{TID: tid, PID: tid, Comm: "sshd", Window: 10 * time.Second, Prio: 120, Migrations: 3, CPUPct: 1}
	t.ByKind[KindWakeup] = 3
	t.Runq.Add(5000)
	return t
}

func TestConcludeSeedPingPong(t *testing.T) {
	s := &Snapshot{
		Duration: 10 * time.Second, Tasks: []*Task{seedTask(), quietTask(7)},
		Thresholds: DefaultThresholds, BounceWindow: DefaultBounceWindow,
	}
	fs := Conclude(s)
	if len(fs) != 1 {
		t.Fatalf("want one finding, got %d: %+v", len(fs), fs)
	}
	f := fs[0]
	if f.ID != "sched.bounce" || f.Severity != finding.Critical {
		t.Errorf("id %s severity %v, want sched.bounce critical", f.ID, f.Severity)
	}
	for _, want := range []string{"iperf", "351528", "CPUs 0 and 1", "300 migrations/s", "140 bounces/s"} {
		if !strings.Contains(f.Title, want) {
			t.Errorf("title %q lacks %q", f.Title, want)
		}
	}
	if len(f.Subjects) != 1 || f.Subjects[0].Role != finding.RoleTask || f.Subjects[0].TID != 351528 || f.Subjects[0].PID != 351520 {
		t.Errorf("subjects %+v", f.Subjects)
	}
	ev := f.Evidence
	if ev["migrations_per_s"] != 300.0 || ev["bounces_per_s"] != 140.0 || ev["initiator_balance_pct"] != 50.0 || ev["initiator_wakeup_pct"] != 50.0 {
		t.Errorf("evidence %v", ev)
	}
	if ev["bounce_pattern"] != "balance away, wakeup back" {
		t.Errorf("bounce_pattern %v", ev["bounce_pattern"])
	}
	if ev["cold_start_us"] != 350.0 || ev["lost_cpu_pct"] != 11.5 || ev["hot_moves_per_s"] != 280.0 || ev["cpu_us_per_hot_move"] != 3035.7 {
		t.Errorf("cost evidence %v", ev)
	}
	if !strings.Contains(f.Summary, "cold starts cost it 11.5% of its CPU time") {
		t.Errorf("summary should say what the moves cost: %s", f.Summary)
	}
	if ev["wake_affine_pct"] != 93.3 || ev["moved_by_third_cpu"] != uint64(700) {
		t.Errorf("wake_affine_pct %v moved_by_third_cpu %v", ev["wake_affine_pct"], ev["moved_by_third_cpu"])
	}
	if !strings.Contains(f.Mechanism, "undo each other") {
		t.Errorf("mechanism should tell the balancer/wake-up fight: %s", f.Mechanism)
	}
	rem := strings.Join(f.Remediation, "\n")
	for _, want := range []string{"taskset -pc 0 351528", "migration_cost_ns"} {
		if !strings.Contains(rem, want) {
			t.Errorf("remediation lacks %q:\n%s", want, rem)
		}
	}
}

func TestConcludeQuietHostHasNoFinding(t *testing.T) {
	var tasks []*Task
	for i := 1; i < 50; i++ {
		tasks = append(tasks, quietTask(i))
	}
	s := &Snapshot{Duration: 10 * time.Second, Tasks: tasks, Thresholds: DefaultThresholds}
	if fs := Conclude(s); len(fs) != 0 {
		t.Errorf("quiet host: %+v", fs)
	}
}

func TestSeverityByCPUAndInitiator(t *testing.T) {
	idle := seedTask()
	idle.CPUPct = 1 // moves a lot, barely runs
	aff := &Task{TID: 9, PID: 9, Comm: "tuner", Window: time.Second, Migrations: 200, CPUPct: 0.5, Prio: 120}
	aff.ByKind[KindAffinity] = 200
	aff.Affinity = &AffinityCalls{Other: 200, LastCallerTID: 77, LastCallerPID: 77, LastCallerComm: "irqbalance"}
	busy := seedTask()
	busy.TID, busy.Bounces = 42, 100 // 10 bounces/s: busy but not critical
	s := &Snapshot{Duration: 10 * time.Second, Tasks: []*Task{idle, aff, busy}, Thresholds: DefaultThresholds, BounceWindow: DefaultBounceWindow}
	got := map[int]finding.Finding{}
	for _, f := range Conclude(s) {
		got[f.Subjects[0].TID] = f
	}
	if got[351528].Severity != finding.Info {
		t.Errorf("idle mover: %v", got[351528].Severity)
	}
	if got[9].Severity != finding.Warning || !strings.Contains(got[9].Title, "allowed CPUs") {
		t.Errorf("affinity churn: %v %q", got[9].Severity, got[9].Title)
	}
	if !strings.Contains(strings.Join(got[9].Remediation, " "), "irqbalance (pid 77)") {
		t.Errorf("affinity remediation should name the caller: %v", got[9].Remediation)
	}
	if got[42].Severity != finding.Warning {
		t.Errorf("busy, few bounces: %v", got[42].Severity)
	}
}

// The grading by cost: a task is judged by what its moves measurably cost
// it, not by how often it moves.
func TestSeverityByCost(t *testing.T) {
	// "vet" of the issue: a go vet that go test ran beside other
	// packages on a busy 2-CPU machine, woken on either CPU: 125
	// migrations/s, 52% of a CPU; few of its moves hot, and its runs
	// after them no longer than after staying.
	vet := &Task{TID: 10040, PID: 10040, Comm: "vet", Window: 3 * time.Second, Prio: 120, CPUPct: 52, Runtime: 1560 * time.Millisecond,
		Migrations: 375, Bounces: 330, BounceCPUs: [2]int{0, 1}, MovedRuns: 360, HotMoves: 150,
		HotMoved: runs(120, 900*time.Microsecond, 2*time.Millisecond), HotStayed: runs(400, 880*time.Microsecond, 2*time.Millisecond)}
	vet.ByKind[KindWakeup] = 375
	// The same with too few stays to compare: its hot moves are rare for
	// its CPU time (one per 10 ms).
	vetUnmeasured := *vet
	vetUnmeasured.TID, vetUnmeasured.HotStayed = 10041, runs(5, time.Millisecond, 0)
	// An I/O-bound fio: each move measurably costs it (16 µs on 60 µs
	// runs) but moves are rare for its CPU time: 0.7% of it.
	fio := &Task{TID: 20, PID: 20, Comm: "fio", Window: 5 * time.Second, Prio: 120, CPUPct: 11, Runtime: 565 * time.Millisecond,
		Migrations: 305, Bounces: 286, BounceCPUs: [2]int{0, 1}, MovedRuns: 300, HotMoves: 246,
		HotMoved: runs(245, 76*time.Microsecond, 20*time.Microsecond), HotStayed: runs(6880, 60*time.Microsecond, 20*time.Microsecond)}
	fio.ByKind[KindWakeup] = 305
	// sched-bounce's task: moved hot at nearly every wake-up, so no stays
	// to compare with; a hot move every 400 µs of its CPU.
	lab := &Task{TID: 30, PID: 30, Comm: "bounce-task", Window: 3 * time.Second, Prio: 120, CPUPct: 20, Runtime: 600 * time.Millisecond,
		Migrations: 2400, Bounces: 2390, BounceCPUs: [2]int{0, 1}, MovedRuns: 2400, HotMoves: 1500,
		HotMoved: runs(1400, 200*time.Microsecond, 50*time.Microsecond), HotStayed: runs(3, 180*time.Microsecond, 10*time.Microsecond)}
	lab.ByKind[KindWakeup] = 2400
	// A busy task whose cold starts cost it 4%: a warning, not critical.
	mild := *lab
	mild.TID, mild.HotStayed = 31, runs(300, 184*time.Microsecond, 50*time.Microsecond)
	s := &Snapshot{Duration: 5 * time.Second, Tasks: []*Task{vet, &vetUnmeasured, fio, lab, &mild}, Thresholds: DefaultThresholds, BounceWindow: DefaultBounceWindow}
	got := map[int]finding.Finding{}
	for _, f := range Conclude(s) {
		got[f.Subjects[0].TID] = f
	}
	for tid, want := range map[int]finding.Severity{10040: finding.Info, 10041: finding.Info, 20: finding.Info, 30: finding.Warning, 31: finding.Warning} {
		f, ok := got[tid]
		if !ok {
			t.Errorf("task %d: no finding", tid)
			continue
		}
		if f.Severity != want {
			t.Errorf("task %d (%s): %v, want %v: %s", tid, f.Evidence["comm"], f.Severity, want, f.Summary)
		}
	}
	if sum := got[10040].Summary; !strings.Contains(sum, "no measurable time") {
		t.Errorf("vet: the summary should say its moves cost nothing measurable: %s", sum)
	}
	if sum := got[30].Summary; !strings.Contains(sum, "could not be measured") || !strings.Contains(sum, "400 µs") {
		t.Errorf("lab: the summary should say the cost is unmeasured, and how often it moves hot: %s", sum)
	}
	if ev := got[31].Evidence; ev["lost_cpu_pct"] != 4.0 {
		t.Errorf("mild: lost_cpu_pct %v", ev["lost_cpu_pct"])
	}
}

func TestMinMigrationsGuardsShortWindows(t *testing.T) {
	tk := &Task{TID: 5, PID: 5, Comm: "x", Window: 20 * time.Millisecond, Migrations: 4, CPUPct: 50}
	tk.ByKind[KindWakeup] = 4 // 200/s, but only 4 moves
	if fs := Conclude(&Snapshot{Tasks: []*Task{tk}, Thresholds: DefaultThresholds}); len(fs) != 0 {
		t.Errorf("4 moves made a finding: %+v", fs)
	}
}

func TestTooManyMoversAreSummarised(t *testing.T) {
	var tasks []*Task
	for i := 0; i < 8; i++ {
		tk := seedTask()
		tk.TID = 1000 + i
		tasks = append(tasks, tk)
	}
	fs := Conclude(&Snapshot{Tasks: tasks, Thresholds: DefaultThresholds})
	n := 0
	for _, f := range fs {
		if f.ID == "sched.bounce" {
			n++
		}
	}
	more := findingtest.First(fs, "sched.bounce-more")
	if n != 5 || more == nil || len(more.Subjects) != 3 {
		t.Errorf("%d bounce findings, more %+v", n, more)
	}
}

// Long waits that ended on idle CPUs (seen on Debian 6.1 and 5.10 under
// QEMU's TCG, idle: rcu_preempt waiting 67 ms, ksoftirqd 537 ms) are the
// CPU not executing: a note. Mixed with contended waits, still a warning.
func TestRunqLatencyOnIdleCPUs(t *testing.T) {
	rcu := quietTask(15)
	rcu.Comm = "rcu_preempt"
	for i := 0; i < 100; i++ {
		rcu.Runq.Add(uint64(20 * time.Microsecond))
	}
	for i := 0; i < 5; i++ {
		rcu.Runq.Add(uint64(67 * time.Millisecond))
	}
	rcu.IdleLong = 5
	s := &Snapshot{Tasks: []*Task{rcu}, CPURunq: map[int]hist.Log2{}, CgroupRunq: map[string]hist.Log2{}, Thresholds: DefaultThresholds}
	f := findingtest.First(Conclude(s), "sched.runq-latency")
	if f == nil || f.Severity != finding.Info || f.Evidence["cause"] != "idle-cpu" || !strings.Contains(f.Title, "idle") {
		t.Fatalf("finding %+v", f)
	}
	rcu.IdleLong = 2 // three of five ended with other work on the CPU: contention
	if f := findingtest.First(Conclude(s), "sched.runq-latency"); f == nil || f.Severity != finding.Warning {
		t.Fatalf("mostly contended: %+v", f)
	}
	// Unless the CPUs took too few of their clock samples to have been
	// executing (seen on arm64 under QEMU: a CPU's p99 67 ms, idle).
	s.CPUCoverage = map[int]float64{0: 0.41, 1: 0.55}
	s.Virtual = "QEMU"
	if f := findingtest.First(Conclude(s), "sched.runq-latency"); f == nil || f.Severity != finding.Info || f.Evidence["cpu_clock_coverage_pct"] != 48.0 {
		t.Fatalf("CPUs not executing: %+v", f)
	}
	// On bare metal a lost sample may be another BPF program running on
	// that CPU, not a CPU that did not execute: still a warning.
	s.Virtual = ""
	if f := findingtest.First(Conclude(s), "sched.runq-latency"); f == nil || f.Severity != finding.Warning {
		t.Fatalf("bare metal: %+v", f)
	}
	s.Virtual = "QEMU"
	s.CPUCoverage = map[int]float64{0: 0.99, 1: 0.98}
	if f := findingtest.First(Conclude(s), "sched.runq-latency"); f == nil || f.Severity != finding.Warning {
		t.Fatalf("CPUs executing: %+v", f)
	}
	if got := longWaits(&rcu.Runq); got != 5 {
		t.Errorf("longWaits %d, want 5", got)
	}
}

func TestRunqLatency(t *testing.T) {
	slow := quietTask(11)
	slow.Comm = "api"
	for i := 0; i < 100; i++ {
		slow.Runq.Add(uint64(80 * time.Millisecond))
	}
	niced := quietTask(12)
	niced.Prio = 139 // nice 19: expected to wait
	for i := 0; i < 100; i++ {
		niced.Runq.Add(uint64(500 * time.Millisecond))
	}
	var cpu1 hist.Log2
	for i := 0; i < 200; i++ {
		cpu1.Add(uint64(90 * time.Millisecond))
	}
	cg := map[string]hist.Log2{"/batch": cpu1}
	s := &Snapshot{Tasks: []*Task{slow, niced}, CPURunq: map[int]hist.Log2{1: cpu1}, CgroupRunq: cg, Thresholds: DefaultThresholds}
	f := findingtest.First(Conclude(s), "sched.runq-latency")
	if f == nil {
		t.Fatal("no run-queue latency finding")
	}
	if f.Severity != finding.Warning {
		t.Errorf("severity %v", f.Severity)
	}
	roles := map[string]int{}
	for _, sub := range f.Subjects {
		roles[sub.Role]++
		if sub.TID == 12 {
			t.Errorf("a nice-19 task is named: %+v", sub)
		}
	}
	if roles[finding.RoleTask] != 1 || roles[finding.RoleCPU] != 1 || roles[finding.RoleCgroup] != 1 {
		t.Errorf("subjects %+v", f.Subjects)
	}
	if !strings.Contains(f.Title, "api") {
		t.Errorf("title %q", f.Title)
	}
	hs := Histograms(s, map[int]bool{})
	labels := map[string]bool{}
	for _, h := range hs {
		if h.Name != "runq_latency_us" || h.Unit != "us" {
			t.Errorf("histogram %s %s", h.Name, h.Unit)
		}
		for k := range h.Labels {
			labels[k] = true
		}
	}
	if !labels["cpu"] || !labels["cgroup"] || !labels["tid"] {
		t.Errorf("histogram labels %v", labels)
	}
}

func TestLiveMismatchFinding(t *testing.T) {
	hw := &Hardware{LLC: map[int]CacheGroup{
		0: {Level: 2, CPUs: []int{0, 1, 2, 3}}, 1: {Level: 2, CPUs: []int{0, 1, 2, 3}},
		2: {Level: 2, CPUs: []int{0, 1, 2, 3}}, 3: {Level: 2, CPUs: []int{0, 1, 2, 3}},
	}}
	// CONFIG_SCHED_MC=n: every CPU is its own LLC domain.
	v := &SchedView{LLCSize: map[int]int{0: 1, 1: 1, 2: 1, 3: 1}, LLCID: map[int]int{0: 0, 1: 1, 2: 2, 3: 3}, Source: "bpf"}
	tk := seedTask()
	s := &Snapshot{Tasks: []*Task{tk}, Hardware: hw, Sched: v, Thresholds: DefaultThresholds, BounceWindow: DefaultBounceWindow}
	fs := Conclude(s)
	mm := findingtest.First(fs, "sched.llc-mismatch")
	if mm == nil || !strings.Contains(mm.Title, "CPUs 0-3 share an L2 cache") || mm.Evidence["cpu0_sd_llc_size"] != 1 {
		t.Fatalf("mismatch finding %+v", mm)
	}
	b := findingtest.First(fs, "sched.bounce")
	if b.Evidence["scheduler_llc_cpus"] != "0" || b.Evidence["hardware_llc_cpus"] != "0-3" {
		t.Errorf("bounce evidence %v", b.Evidence)
	}
	if !strings.Contains(strings.Join(b.Remediation, " "), "CONFIG_SCHED_MC=y") {
		t.Errorf("remediation %v", b.Remediation)
	}
	// When the audit already reports CONFIG_SCHED_MC off, the live view
	// adds evidence, not a second finding.
	s.SchedMCOff = true
	if findingtest.First(Conclude(s), "sched.llc-mismatch") != nil {
		t.Error("duplicate of the audit's finding")
	}
	// A scheduler that knows the shared cache: no mismatch.
	s.SchedMCOff = false
	s.Sched = &SchedView{LLCSize: map[int]int{0: 4, 1: 4, 2: 4, 3: 4}, LLCID: map[int]int{0: 0, 1: 0, 2: 0, 3: 0}}
	if findingtest.First(Conclude(s), "sched.llc-mismatch") != nil {
		t.Error("mismatch reported where there is none")
	}
}

func TestKindPhrasesAndShares(t *testing.T) {
	tk := &Task{Migrations: 4}
	tk.ByKind[KindStopper] = 3
	tk.ByKind[KindOther] = 1
	if tk.Dominant() != KindStopper || shares(tk) != "stopper 75%, other 25%" {
		t.Errorf("dominant %v shares %q", tk.Dominant(), shares(tk))
	}
	for k := Kind(0); k < NKinds; k++ {
		if k.Key() == "" || k.Phrase() == "" {
			t.Errorf("kind %d unnamed", k)
		}
	}
}

// Four rate-limited fio readers of a cached file in Debian 6.12 under
// qemu TCG (the scenario suite's neg-pagecache-fits, run 1): they used
// 61% of the 2 CPUs in doctor's 8.1 s window and waited up to 754 ms (p99)
// for one, because wolf's own process took 98% of one CPU beside them.
// The CPUs were short only with wolf's work: a warning that says so, not
// critical. The same waits with the host's tasks filling the CPUs by
// themselves stay critical.
func TestRunqLatencyTippedByWolfIsNoCritical(t *testing.T) {
	runtimes := []time.Duration{2958 * time.Millisecond, 2393 * time.Millisecond, 1997 * time.Millisecond, 1741 * time.Millisecond, 732 * time.Millisecond}
	mk := func(scale float64) *Snapshot {
		s := &Snapshot{Duration: 8109 * time.Millisecond, CPUs: 2, CPURunq: map[int]hist.Log2{}, CgroupRunq: map[string]hist.Log2{}, Thresholds: DefaultThresholds,
			SelfCPU: time.Duration(0.98246 * float64(8109*time.Millisecond))}
		for i, rt := range runtimes {
			tk := quietTask(347 + i)
			tk.Comm, tk.Runtime = "fio", time.Duration(scale*float64(rt))
			for j := 0; j < 100; j++ {
				tk.Runq.Add(uint64(754 * time.Millisecond))
			}
			s.Tasks = append(s.Tasks, tk)
		}
		return s
	}
	f := findingtest.First(Conclude(mk(1)), "sched.runq-latency")
	if f == nil || f.Severity != finding.Warning || f.Evidence["wolf_busy_pct"] != 49.1 || f.Evidence["tasks_busy_pct"] != 60.6 || !strings.Contains(f.Summary, "wolf itself") {
		t.Fatalf("tipped by wolf: %+v", f)
	}
	// The stage gets wolf's share beside the tasks' (the engine's
	// discountSelf).
	_, set := ConcludeFacts(mk(1))
	if len(set.Saturations) == 0 || set.Saturations[0].AtLimit || set.Saturations[0].Numbers["wolf_busy_pct"] != 49.1 {
		t.Errorf("facts: %+v", set.Saturations)
	}
	// The readers alone use 94% of the CPUs: the host's own contention.
	if f := findingtest.First(Conclude(mk(1.55)), "sched.runq-latency"); f == nil || f.Severity != finding.Critical || f.Evidence["wolf_busy_pct"] != nil {
		t.Fatalf("saturated by the host's tasks: %+v", f)
	}
	// wolf cheap (2% of one CPU): 61% busy, nothing tipped, critical.
	s := mk(1)
	s.SelfCPU = s.Duration / 50
	if f := findingtest.First(Conclude(s), "sched.runq-latency"); f == nil || f.Severity != finding.Critical {
		t.Fatalf("wolf cheap: %+v", f)
	}
}

// Thrash run 2 of a v2 pass under TCG: the tasks used 43.2% of the CPUs
// and wolf 44.6%, 87.8% together, while /proc/stat counted 93.6% busy:
// interrupts and softirqs, which no task's runtime holds. The CPUs were
// short only with wolf, so the waits are a warning; with /proc/stat's
// busy time unknown they were not tipped (critical), and with wolf cheap
// the CPUs were short without it.
func TestRunqLatencyTippedByWolfBesideInterrupts(t *testing.T) {
	const d = 8 * time.Second
	mk := func(busy float64, self time.Duration) *Snapshot {
		s := &Snapshot{Duration: d, CPUs: 2, CPURunq: map[int]hist.Log2{}, CgroupRunq: map[string]hist.Log2{}, Thresholds: DefaultThresholds,
			SelfCPU: self, CPUsBusy: busy}
		for i := range 4 {
			tk := quietTask(930 + i)
			tk.Comm, tk.Runtime = "fio", time.Duration(0.432*float64(2*d)/4)
			for range 20 {
				tk.Runq.Add(uint64(300 * time.Millisecond))
			}
			s.Tasks = append(s.Tasks, tk)
		}
		return s
	}
	wolf := time.Duration(0.446 * float64(2*d))
	f := findingtest.First(Conclude(mk(0.936, wolf)), "sched.runq-latency")
	if f == nil || f.Severity != finding.Warning || f.Evidence["wolf_busy_pct"] != 44.6 || !strings.Contains(f.Summary, "wolf itself") {
		t.Fatalf("tipped by wolf beside interrupts: %+v", f)
	}
	if !strings.Contains(f.Summary, "does not tell") || f.Evidence["tasks_runnable_mean"] != 3.9 {
		t.Errorf("the tasks' runnable threads are not said: %v / %s", f.Evidence["tasks_runnable_mean"], f.Summary)
	}
	_, set := ConcludeFacts(mk(0.936, wolf))
	if len(set.Saturations) == 0 || set.Saturations[0].Numbers["cpus_busy_pct"] != 93.6 || set.Saturations[0].Numbers["tasks_runnable_mean"] != 3.86 {
		t.Errorf("facts: %+v", set.Saturations)
	}
	if f := findingtest.First(Conclude(mk(0, wolf)), "sched.runq-latency"); f == nil || f.Severity != finding.Critical {
		t.Errorf("busy time unknown, 87.8%% counted: %+v", f)
	}
	if f := findingtest.First(Conclude(mk(0.936, d/50)), "sched.runq-latency"); f == nil || f.Severity != finding.Critical {
		t.Errorf("wolf cheap, the CPUs busy without it: %+v", f)
	}
}
