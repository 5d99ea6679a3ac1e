package sched

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/wolf-investigator/wolf/internal/fact"
	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/hist"
	"github.com/wolf-investigator/wolf/internal/human"
)

// Thresholds decide what is worth a finding.
type Thresholds struct {
	// MigrationsPerSec: a task moved at least this often is reported.
	MigrationsPerSec float64
	// MinMigrations: and at least this many times in the window, so that a
	// short window does not turn two moves into a storm.
	MinMigrations uint64
	// BusyCPUPct: below this CPU share a task that moves often is only
	// noted (info): a task that mostly sleeps has cold caches anyway.
	BusyCPUPct float64
	// CriticalBouncesPerSec and CriticalCPUPct make a busy task's
	// ping-pong critical: the iperf thread of "The Network Is Slow", if
	// its moves cost it CriticalLostPct.
	CriticalBouncesPerSec float64
	CriticalCPUPct        float64
	// WarningLostPct and CriticalLostPct: the share of a task's CPU time
	// its cache-hot moves measurably cost it (cold starts: the runs after
	// a hot move, longer than those after a hot stay) that makes a mover
	// a warning, and a busy bouncing task critical. A mover whose moves
	// cost nothing measurable is only noted (info): on a small machine
	// any task that sleeps and wakes is woken on either CPU.
	WarningLostPct  float64
	CriticalLostPct float64
	// HotMoveCPU: where the cost cannot be measured (the task almost
	// never stays on its CPU when it wakes hot, so there is nothing to
	// compare with), a task that moves while cache-hot at least once per
	// this much of its CPU time is a warning.
	HotMoveCPU time.Duration
	// RunqP99 and RunqCriticalP99: run-queue latency (p99 of a task or CPU)
	// that is a warning, and critical. RunqMinWaits: fewer waits than this
	// are not judged.
	RunqP99         time.Duration
	RunqCriticalP99 time.Duration
	RunqMinWaits    uint64
}

// DefaultThresholds are wolf sched's defaults.
var DefaultThresholds = Thresholds{
	MigrationsPerSec:      50,
	MinMigrations:         10,
	BusyCPUPct:            5,
	CriticalBouncesPerSec: 100,
	CriticalCPUPct:        20,
	WarningLostPct:        2,
	CriticalLostPct:       10,
	HotMoveCPU:            time.Millisecond,
	RunqP99:               50 * time.Millisecond,
	RunqCriticalP99:       200 * time.Millisecond,
	RunqMinWaits:          20,
}

// AffinityCalls is who called sched_setaffinity on a task while wolf
// watched.
type AffinityCalls struct {
	Self, Other    uint64 // calls by the task itself, by another task
	LastCallerTID  int
	LastCallerPID  int
	LastCallerComm string
}

// Task is what wolf saw of one task.
type Task struct {
	TID, PID int
	Comm     string
	Cgroup   string // cgroup v2 path, "" when unknown
	Exited   bool
	Window   time.Duration // the span its rates are per
	Policy   int
	Prio     int // kernel priority: 120 is nice 0, 139 nice 19, <100 RT

	Migrations  uint64
	ByKind      [NKinds]uint64
	Bounces     uint64
	BounceOut   [NKinds]uint64 // initiator of the move away
	BounceBack  [NKinds]uint64 // initiator of the move back
	BounceCPUs  [2]int         // the CPUs of its last bounce
	Remote      uint64         // moves done by a third CPU
	WakeAffine  uint64         // wake-up moves onto the waker's CPU
	WakeWide    uint64         // wake-up moves where wake_wide() held
	WakeeFlips  float64        // its mean wakee_flips at wake-up moves
	WakerFlips  uint64         // the largest waker wakee_flips seen
	KernelTotal uint64         // se.nr_migrations since it started (reference)

	CPUPct      float64 // CPU time over its observed span, % of one CPU
	CPU         int     // where it was last
	CPUsAllowed string  // its affinity, "0-3"
	Cpuset      string  // its cgroup's effective cpuset, "" when unknown
	Affinity    *AffinityCalls

	Runq hist.Log2 // run-queue waits, ns
	// Runtime is the CPU time it got in the window; Throttled the time
	// it waited, runnable, with its cgroup throttled by its CPU quota
	// (kept out of Runq), in ThrottledWaits waits.
	Runtime        time.Duration
	Throttled      time.Duration
	ThrottledWaits uint64

	// What its moves cost it (sched.bpf.c, on_switch). MovedRuns are its runs that began on another CPU than its last one;
	// HotMoves those that began within the scheduler's migration cost
	// (HotWindow) of leaving it: moves that lost warm caches.
	MovedRuns, HotMoves uint64
	// MovedWaits and MovedWait: the run-queue waits before runs on a new
	// CPU, counted and summed.
	MovedWaits uint64
	MovedWait  time.Duration
	// HotMoved and HotStayed are its runs from a wake-up to the next sleep
	// that began hot, after a move or on the same CPU: what a cold start
	// costs, for a task that does about the same work at each wake-up.
	HotMoved, HotStayed RunStats

	// IdleLong counts its waits of IdleLongNs or more that ended with the
	// CPU leaving its idle task, or wolf's own: not the host's contention
	// (see idleExplained).
	IdleLong uint64
}

// RunStats sums run lengths: their number, total and sum of squares (in
// microseconds squared), for a mean and its standard error.
type RunStats struct {
	N     uint64
	Sum   time.Duration
	SqUs2 uint64
}

// Mean is the mean run length.
func (r RunStats) Mean() time.Duration {
	if r.N == 0 {
		return 0
	}
	return r.Sum / time.Duration(r.N)
}

// varianceUs2 is the runs' variance, in microseconds squared.
func (r RunStats) varianceUs2() float64 {
	if r.N < 2 {
		return 0
	}
	m := float64(r.Sum.Microseconds()) / float64(r.N)
	return max(0, float64(r.SqUs2)/float64(r.N)-m*m)
}

// IdleLongNs is the shortest wait sched.bpf.c checks for having ended on an
// idle CPU (IDLE_LONG_NS): the floor of a log2 histogram slot, so the
// histogram counts the same waits.
const IdleLongNs = 1 << 23

// longWaits counts the waits of IdleLongNs or more in h.
func longWaits(h *hist.Log2) uint64 {
	var n uint64
	for i := hist.Slot(IdleLongNs); i < len(h.Slots); i++ {
		n += h.Slots[i]
	}
	return n
}

// idleExplained: most of these long waits ended on an idle CPU, or behind
// wolf itself. A task woken onto an idle CPU runs within microseconds,
// unless the CPU is not executing at all: a virtual CPU the hypervisor
// descheduled, or one taking its turn in an emulator. A task that waited
// behind wolf waited for wolf's start-up (loading and verifying its
// programs). Neither is the host's run-queue contention.
func idleExplained(h *hist.Log2, idle uint64) bool {
	long := longWaits(h)
	return long > 0 && idle*2 >= long
}

// Rate is per second over the task's window.
func (t *Task) Rate(n uint64) float64 {
	if t.Window <= 0 {
		return 0
	}
	return float64(n) / t.Window.Seconds()
}

// Share is the percentage of the task's migrations that kind initiated.
func (t *Task) Share(k Kind) float64 {
	if t.Migrations == 0 {
		return 0
	}
	return 100 * float64(t.ByKind[k]) / float64(t.Migrations)
}

// Dominant is the kind that initiated most of the task's migrations.
func (t *Task) Dominant() Kind {
	best := KindWakeup
	for k := Kind(0); k < NKinds; k++ {
		if t.ByKind[k] > t.ByKind[best] {
			best = k
		}
	}
	return best
}

// lowPriority: niced or SCHED_BATCH/SCHED_IDLE tasks are expected to wait.
func (t *Task) lowPriority() bool {
	return t.Prio > 120 || t.Policy == 3 || t.Policy == 5
}

// Snapshot is everything Conclude needs: pure data, so that it can be
// tested without BPF.
type Snapshot struct {
	Duration   time.Duration
	Tasks      []*Task
	CPURunq    map[int]hist.Log2
	CgroupRunq map[string]hist.Log2
	Kinds      [NKinds]uint64 // host-wide migrations by initiator
	Hardware   *Hardware
	Sched      *SchedView // the scheduler's view, read live; nil if not
	// SchedMCOff is true when the audit already reports CONFIG_SCHED_MC
	// off on shared-cache hardware, so the live mismatch adds evidence
	// rather than a finding of its own.
	SchedMCOff bool
	Thresholds Thresholds
	// Window is the bounce window the BPF side used.
	BounceWindow time.Duration
	// HotWindow is the migration cost the BPF side called a task
	// cache-hot within (MigrationCost).
	HotWindow time.Duration
	// CPUIdleLong counts, per CPU, the long waits that ended on it while
	// it was idle (Task.IdleLong, by CPU).
	CPUIdleLong map[int]uint64
	// CPUCoverage is, per CPU, the share of its clock samples that landed
	// (1: it executed throughout); nil when not measured.
	CPUCoverage map[int]float64
	// Virtual names the hypervisor or emulator ("" on bare metal). Only on
	// a virtual machine do missing clock samples mean a CPU that did not
	// execute: on bare metal a sample is also lost when another BPF
	// program was running on that CPU (the kernel runs one at a time).
	Virtual string
	// Bandwidth is the CPU quota of every cgroup that has one and ran in
	// the window, with its throttling (cgroupfs, read at both ends).
	Bandwidth []Bandwidth
	// Exited is the CPU time of tasks that exited in the window before
	// wolf read them, by cgroup and name.
	Exited []ExitedCPU
	// CPUs is how many CPUs the host has online (0: unknown).
	CPUs int
	// SelfCPU is wolf's own process's CPU time in the window (its tasks
	// are not among Tasks): on a machine where wolf is costly (an
	// emulated one) it is what tips CPUs the host's tasks leave room on
	// into saturation.
	SelfCPU time.Duration
	// CPUsBusy is the share of the CPUs' time /proc/stat counts busy over
	// the window (0: unknown): every task's, wolf's, and the interrupts'
	// and softirqs' the tasks' runtimes leave out.
	CPUsBusy float64
}

// selfTipped says whether the CPUs were saturated only with wolf's own
// use: the host's tasks used less than saturatedShare of them, the CPUs'
// busy time reached it, and without wolf's process it would not have.
// Waits for a CPU are then partly wolf's doing, and nothing says the
// host's tasks would have waited without it. The busy time is
// /proc/stat's over the window when known: the tasks' runtimes leave out
// interrupts and softirqs, which took the other 6% of a run where the
// tasks (43%) and wolf (45%) made 88%.
func (s *Snapshot) selfTipped() (tasks, self float64, ok bool) {
	capa := s.capacity()
	if capa <= 0 || s.SelfCPU <= 0 {
		return 0, 0, false
	}
	tasks = float64(used(s.Consumers())) / float64(capa)
	self = float64(s.SelfCPU) / float64(capa)
	busy := max(s.CPUsBusy, tasks+self)
	return tasks, self, tasks < saturatedShare && busy >= saturatedShare && busy-self < saturatedShare
}

// runnableMean is how many of the host's threads (wolf's are not among
// them) were on a CPU or waiting for one, on average over the window:
// their demand for the CPUs as far as the window shows it. Beside wolf it
// does not tell what they would have wanted without wolf: a thread that
// fell behind while wolf took the CPUs (a rate-limited reader catching
// up, a reader whose page-cache misses are slow on an emulated CPU)
// stays runnable as a CPU hog does.
func (s *Snapshot) runnableMean() float64 {
	if s.Duration <= 0 {
		return 0
	}
	var t time.Duration
	for _, x := range s.Tasks {
		t += x.Runtime + time.Duration(x.Runq.Sum)
	}
	return float64(t) / float64(s.Duration)
}

// saturatedShare is fact.HostCPUSaturatedPct as a fraction.
const saturatedShare = fact.HostCPUSaturatedPct / 100

// ExitedCPU is the CPU time of tasks of one name and cgroup that exited
// in the window unreported.
type ExitedCPU struct {
	Comm     string
	Cgroup   string
	Runtime  time.Duration
	Tasks    uint64
	LastTGID int
}

// notExecuting is the clock-sample coverage under which a CPU did not
// execute a significant part of the window: one that runs takes every
// sample, busy or idle.
const notExecuting = 0.75

// lowCoverage: the CPUs (cpu, or all when cpu < 0) took fewer than
// notExecuting of their clock samples, and how many they took.
func (s *Snapshot) lowCoverage(cpu int) (float64, bool) {
	if len(s.CPUCoverage) == 0 || s.Virtual == "" {
		return 0, false
	}
	if cpu >= 0 {
		c, ok := s.CPUCoverage[cpu]
		return c, ok && c < notExecuting
	}
	var sum float64
	for _, c := range s.CPUCoverage {
		sum += c
	}
	c := sum / float64(len(s.CPUCoverage))
	return c, c < notExecuting
}

const storyRef = "Eric's Place, \"The Network Is Slow: An Adventure in the Linux Kernel\", https://www.ericsplace.xyz/posts/network-is-slow/ (a task bounced between cores by the load balancer and wake-up placement; CONFIG_SCHED_MC off)"

// Conclude turns a snapshot into findings.
func Conclude(s *Snapshot) []finding.Finding {
	th := s.Thresholds
	if th == (Thresholds{}) {
		th = DefaultThresholds
	}
	if th.WarningLostPct == 0 && th.CriticalLostPct == 0 && th.HotMoveCPU == 0 {
		th.WarningLostPct, th.CriticalLostPct, th.HotMoveCPU = DefaultThresholds.WarningLostPct, DefaultThresholds.CriticalLostPct, DefaultThresholds.HotMoveCPU
	}
	var out []finding.Finding
	mismatches := Mismatches(s.Hardware, s.Sched)
	var movers []*Task
	for _, t := range s.Tasks {
		if t.Migrations >= th.MinMigrations && t.Rate(t.Migrations) >= th.MigrationsPerSec {
			movers = append(movers, t)
		}
	}
	sort.Slice(movers, func(i, j int) bool {
		if movers[i].Migrations != movers[j].Migrations {
			return movers[i].Migrations > movers[j].Migrations
		}
		return movers[i].TID < movers[j].TID
	})
	const maxTaskFindings = 5
	for i, t := range movers {
		if i == maxTaskFindings {
			out = append(out, moreMovers(movers[i:], th))
			break
		}
		out = append(out, bounceFinding(t, s, th, mismatches))
	}
	if f := runqFinding(s, th); f != nil {
		out = append(out, *f)
	}
	if len(mismatches) > 0 && !s.SchedMCOff {
		out = append(out, mismatchFinding(mismatches, s.Sched))
	}
	out = append(out, ThrottleFindings(s.Bandwidth, s.Duration)...)
	if f, ok := consumersFinding(s); ok {
		out = append(out, f)
	}
	finding.Sort(out)
	return out
}

func taskName(t *Task) string {
	if t.PID != 0 && t.PID != t.TID {
		return fmt.Sprintf("%s (pid %d, tid %d)", t.Comm, t.PID, t.TID)
	}
	return fmt.Sprintf("%s (pid %d)", t.Comm, t.TID)
}

// shares lists the initiators in order of importance: "wake-up path 62%, …".
func shares(t *Task) string {
	type kv struct {
		k Kind
		n uint64
	}
	var kinds []kv
	for k := Kind(0); k < NKinds; k++ {
		if t.ByKind[k] > 0 {
			kinds = append(kinds, kv{k, t.ByKind[k]})
		}
	}
	sort.SliceStable(kinds, func(i, j int) bool { return kinds[i].n > kinds[j].n })
	var parts []string
	for _, e := range kinds {
		parts = append(parts, fmt.Sprintf("%s %.0f%%", e.k.Key(), t.Share(e.k)))
	}
	return strings.Join(parts, ", ")
}

// bouncePattern names the commonest way the task is taken away and brought
// back, e.g. "balance away, wakeup back".
func bouncePattern(t *Task) (out, back Kind, ok bool) {
	if t.Bounces == 0 {
		return 0, 0, false
	}
	for k := Kind(0); k < NKinds; k++ {
		if t.BounceOut[k] > t.BounceOut[out] {
			out = k
		}
		if t.BounceBack[k] > t.BounceBack[back] {
			back = k
		}
	}
	return out, back, true
}

// moveCost is what a task's moves measurably cost it in the window.
type moveCost struct {
	hotPerS      float64       // cache-hot moves a second
	cpuPerHot    time.Duration // its CPU time per hot move; 0 when none
	movedWait    time.Duration // mean run-queue wait before a run on a new CPU
	penalty      time.Duration // how much longer a run is after a hot move than after a hot stay
	penaltySE    time.Duration // the standard error of that difference
	penaltyKnown bool          // both kinds of runs timed often enough to compare
	lostPct      float64       // penalty × hot moves, % of its CPU time; 0 unless the penalty is significant (3 SE)
}

// minTimedRuns is how many runs of each kind (after a hot move, after a
// hot stay) a cold-start penalty is computed from.
const minTimedRuns = 20

func costOf(t *Task) moveCost {
	c := moveCost{hotPerS: t.Rate(t.HotMoves)}
	if t.HotMoves > 0 {
		c.cpuPerHot = t.Runtime / time.Duration(t.HotMoves)
	}
	if t.MovedWaits > 0 {
		c.movedWait = t.MovedWait / time.Duration(t.MovedWaits)
	}
	m, st := t.HotMoved, t.HotStayed
	if m.N >= minTimedRuns && st.N >= minTimedRuns {
		c.penaltyKnown = true
		c.penalty = m.Mean() - st.Mean()
		se := math.Sqrt(m.varianceUs2()/float64(m.N) + st.varianceUs2()/float64(st.N))
		c.penaltySE = time.Duration(se * 1e3)
		// Significant: over three standard errors, so that the noise of
		// the many tasks of a busy host seldom passes for a cost.
		if c.penalty > 0 && c.penalty > 3*c.penaltySE && t.Runtime > 0 {
			c.lostPct = 100 * float64(c.penalty) * float64(t.HotMoves) / float64(t.Runtime)
		}
	}
	return c
}

// grade judges a mover by what its moves cost it, and says why in a
// sentence. A move costs a task its warm caches only if it ran recently
// (cache-hot), and that costs it time only if its runs after such moves
// take measurably longer than after staying put. An ordinary task woken on
// either CPU of a small, busy machine moves often and loses nothing
// measurable: noted, not judged.
func grade(t *Task, c moveCost, th Thresholds) (finding.Severity, string) {
	switch {
	case t.Dominant() == KindAffinity && t.Share(KindAffinity) >= 50:
		// Someone changes its CPUs on purpose, over and over: worth a
		// warning however little the task runs.
		return finding.Warning, "Its allowed CPUs are changed on purpose, over and over."
	case t.CPUPct < th.BusyCPUPct:
		return finding.Info, "It barely runs, so each move costs little: noted, not judged."
	case c.penaltyKnown:
		says := fmt.Sprintf("Its runs after a cache-hot move take %s on average, after staying on a warm CPU %s",
			human.Duration(t.HotMoved.Mean()), human.Duration(t.HotStayed.Mean()))
		if c.lostPct < th.WarningLostPct {
			return finding.Info, says + ": its moves cost it no measurable time. Noted, not judged."
		}
		says += fmt.Sprintf(": cold starts cost it %.1f%% of its CPU time.", c.lostPct)
		if c.lostPct >= th.CriticalLostPct && t.Rate(t.Bounces) >= th.CriticalBouncesPerSec && t.CPUPct >= th.CriticalCPUPct {
			return finding.Critical, says
		}
		return finding.Warning, says
	case t.HotMoves > 0 && c.hotPerS >= th.MigrationsPerSec && c.cpuPerHot <= th.HotMoveCPU:
		return finding.Warning, fmt.Sprintf("It moves while cache-hot once every %s of its CPU time (%.0f times/s), and almost never stays on a warm CPU, so what the cold starts cost could not be measured.",
			human.Duration(c.cpuPerHot), c.hotPerS)
	}
	if t.HotMoves == 0 {
		return finding.Info, "None of its moves came within the scheduler's migration cost of its last run, so none cost it warm caches: noted, not judged."
	}
	return finding.Info, fmt.Sprintf("It moves while cache-hot only once every %s of its CPU time, too seldom to cost it measurable time: noted, not judged.", human.Duration(c.cpuPerHot))
}

func bounceFinding(t *Task, s *Snapshot, th Thresholds, mismatches []Mismatch) finding.Finding {
	rate, bounceRate := t.Rate(t.Migrations), t.Rate(t.Bounces)
	dom := t.Dominant()
	cost := costOf(t)
	sev, verdict := grade(t, cost, th)
	title := fmt.Sprintf("%s moved between CPUs %.0f times/s", taskName(t), rate)
	if t.Bounces > 0 {
		title = fmt.Sprintf("%s bounced between CPUs %d and %d: %.0f migrations/s, %.0f bounces/s",
			taskName(t), t.BounceCPUs[0], t.BounceCPUs[1], rate, bounceRate)
	}
	title += ", mostly by " + dom.Phrase()

	ev := map[string]any{
		"migrations":             t.Migrations,
		"migrations_per_s":       human.Round(rate, 1),
		"bounces":                t.Bounces,
		"bounces_per_s":          human.Round(bounceRate, 1),
		"bounce_window_ms":       s.BounceWindow.Milliseconds(),
		"window_s":               human.Round(t.Window.Seconds(), 1),
		"cpu_pct":                human.Round(t.CPUPct, 1),
		"moved_by_third_cpu":     t.Remote,
		"kernel_nr_migrations":   t.KernelTotal,
		"initiators":             shares(t),
		"last_cpu":               t.CPU,
		"cpus_allowed":           t.CPUsAllowed,
		"exited_during_window":   t.Exited,
		"comm":                   t.Comm,
		"initiator_wakeup_pct":   human.Round(t.Share(KindWakeup), 1),
		"initiator_balance_pct":  human.Round(t.Share(KindBalance), 1),
		"initiator_newidle_pct":  human.Round(t.Share(KindNewidle), 1),
		"initiator_stopper_pct":  human.Round(t.Share(KindStopper), 1),
		"initiator_affinity_pct": human.Round(t.Share(KindAffinity), 1),
		"initiator_other_pct":    human.Round(t.Share(KindOther), 1),
	}
	if t.Cpuset != "" {
		ev["cpuset_cpus"] = t.Cpuset
	}
	if t.Cgroup != "" {
		ev["cgroup"] = t.Cgroup
	}
	if out, back, ok := bouncePattern(t); ok {
		ev["bounce_pattern"] = out.Key() + " away, " + back.Key() + " back"
	}
	if w := t.ByKind[KindWakeup]; w > 0 {
		ev["wake_affine_pct"] = human.Round(100*float64(t.WakeAffine)/float64(w), 1)
		ev["wake_wide_pct"] = human.Round(100*float64(t.WakeWide)/float64(w), 1)
		ev["wakee_flips_mean"] = human.Round(t.WakeeFlips, 1)
		ev["waker_flips_max"] = t.WakerFlips
	}
	ev["cpu_ms"] = human.Round(float64(t.Runtime)/1e6, 1)
	ev["moved_runs"] = t.MovedRuns
	ev["hot_moves"] = t.HotMoves
	ev["hot_moves_per_s"] = human.Round(cost.hotPerS, 1)
	ev["hot_window_us"] = s.HotWindow.Microseconds()
	if t.HotMoves > 0 {
		ev["cpu_us_per_hot_move"] = human.Round(float64(cost.cpuPerHot)/1e3, 1)
	}
	if t.MovedWaits > 0 {
		ev["moved_runq_wait_us_mean"] = human.Round(float64(cost.movedWait)/1e3, 1)
	}
	ev["hot_moved_runs_timed"] = t.HotMoved.N
	ev["hot_stayed_runs_timed"] = t.HotStayed.N
	if cost.penaltyKnown {
		ev["hot_moved_run_us_mean"] = human.Round(float64(t.HotMoved.Mean())/1e3, 1)
		ev["hot_stayed_run_us_mean"] = human.Round(float64(t.HotStayed.Mean())/1e3, 1)
		ev["cold_start_us"] = human.Round(float64(cost.penalty)/1e3, 1)
		ev["cold_start_se_us"] = human.Round(float64(cost.penaltySE)/1e3, 1)
		ev["lost_cpu_pct"] = human.Round(cost.lostPct, 1)
	}
	if t.Runq.Count > 0 {
		ev["runq_waits"] = t.Runq.Count
		ev["runq_p99_us"] = human.Round(float64(t.Runq.Quantile(0.99))/1e3, 1)
		ev["runq_max_us"] = human.Round(float64(t.Runq.Max)/1e3, 1)
	}
	if a := t.Affinity; a != nil {
		ev["setaffinity_calls_self"] = a.Self
		ev["setaffinity_calls_other"] = a.Other
		if a.Other > 0 {
			ev["setaffinity_last_caller"] = fmt.Sprintf("%s (pid %d, tid %d)", a.LastCallerComm, a.LastCallerPID, a.LastCallerTID)
		}
	}
	var mm *Mismatch
	for i := range mismatches {
		for _, c := range t.BounceCPUs {
			if _, ok := mismatches[i].Sched[c]; ok && t.Bounces > 0 {
				mm = &mismatches[i]
			}
		}
	}
	if mm != nil {
		ev["hardware_llc_cpus"] = FormatCPUs(mm.Hardware.CPUs)
		ev["scheduler_llc_cpus"] = FormatCPUs(mm.Sched[t.BounceCPUs[0]])
	}

	summary := fmt.Sprintf("In %.1f s the kernel moved %s %d times (%s).", t.Window.Seconds(), taskName(t), t.Migrations, shares(t))
	if t.Bounces > 0 {
		summary += fmt.Sprintf(" %d of the moves undid the previous one within %s (A→B→A).", t.Bounces, human.Duration(s.BounceWindow))
	}
	if t.CPUPct > 0 {
		summary += fmt.Sprintf(" It used %.0f%% of a CPU.", t.CPUPct)
	}
	summary += " " + verdict

	subj := finding.Subject{Role: finding.RoleTask, PID: t.PID, TID: t.TID, Comm: t.Comm, Cgroup: t.Cgroup, Detail: "allowed CPUs " + t.CPUsAllowed}
	if t.Cpuset != "" {
		subj.Detail += ", cpuset " + t.Cpuset
	}
	cpu := t.CPU
	subj.CPU = &cpu
	return finding.Finding{
		ID:           "sched.bounce",
		Investigator: "sched",
		Severity:     sev,
		Title:        title,
		Summary:      summary,
		Mechanism:    mechanism(t, mm != nil),
		Subjects:     []finding.Subject{subj},
		Evidence:     ev,
		Remediation:  remediation(t, mm, s),
		References:   []string{storyRef},
	}
}

func mechanism(t *Task, mismatch bool) string {
	out, back, bounced := bouncePattern(t)
	switch dom := t.Dominant(); {
	case dom == KindAffinity:
		return "Every change of a task's allowed CPUs (sched_setaffinity, a cpuset update) that excludes the CPU it is on forces a migration, through the migration stopper if it is running. Changing it over and over moves the task as often, and each move starts it on cold caches."
	case bounced && (out == KindBalance || out == KindNewidle || out == KindStopper) && back == KindWakeup:
		return "The load balancer pulls the task to another CPU, and the next wake-up places it back beside its waker (wake_affine, select_idle_sibling): balancer and wake-up path undo each other, as in \"The Network Is Slow\". Each move costs the task its warm L1/L2 caches, and throughput drops though no CPU is saturated."
	case dom == KindWakeup && mismatch:
		return "At each wake-up select_task_rq_fair() keeps the task on its previous CPU only if that CPU is idle and cpus_share_cache() says it shares a cache with the target; the scheduler believes these CPUs share none (sd_llc_size too small), so the wake-up pulls the task to its waker's CPU each time. This is the CONFIG_SCHED_MC=n board of \"The Network Is Slow\": the task ping-pongs and loses its warm caches at every move."
	case dom == KindWakeup:
		return "At each wake-up select_task_rq_fair() picks a CPU: wake_affine() favours the waker's CPU, and select_idle_sibling() keeps the previous CPU only if it is idle. A task woken from alternating CPUs while its previous CPU is busy is moved at every wake-up, losing its warm caches each time."
	case dom == KindBalance || dom == KindNewidle:
		return "The load balancer (periodically from SCHED_SOFTIRQ, and when a CPU goes idle) moves runnable tasks to even out load, and treats a task as cache-hot only if it ran within migration_cost_ns. A busy task on an uneven load is moved again and again, each time on cold caches."
	case dom == KindStopper:
		return "The migration stopper (migration/N) moves a running task on behalf of active load balancing, NUMA balancing or exec. Repeated active balancing means the balancer keeps finding the task's CPU overloaded."
	}
	return "RT/DL push-pull or interrupt-context migrations move the task between CPUs; each move starts it on cold caches."
}

func remediation(t *Task, mm *Mismatch, s *Snapshot) []string {
	cpu := t.CPU
	var r []string
	switch t.Dominant() {
	case KindAffinity:
		who := "whatever changes it"
		if a := t.Affinity; a != nil && a.Other > 0 {
			who = fmt.Sprintf("%s (pid %d), which called sched_setaffinity on it last", a.LastCallerComm, a.LastCallerPID)
		} else if a != nil && a.Self > 0 {
			who = "the task itself: it calls sched_setaffinity on itself"
		}
		r = append(r, "Stop the affinity churn at its source: "+who+". Set the affinity once (taskset -pc CPUS "+strconv.Itoa(t.TID)+", or the cpuset of its cgroup) instead of changing it continually.")
	default:
		r = append(r, fmt.Sprintf("Pin the busy thread to one CPU, as the fix in \"The Network Is Slow\" did: taskset -pc %d %d (or CPUAffinity= in its systemd unit, or a cpuset).", cpu, t.TID))
	}
	if mm != nil {
		r = append(r, fmt.Sprintf("Make the scheduler know which CPUs share a cache: CPUs %s share an L%d cache, the scheduler thinks not. Build the kernel with CONFIG_SCHED_MC=y (multi-core scheduler support); then select_idle_sibling() keeps a waking task on its idle previous CPU.", FormatCPUs(mm.Hardware.CPUs), mm.Hardware.Level))
	}
	if out, _, ok := bouncePattern(t); (ok && (out == KindBalance || out == KindNewidle)) || t.Dominant() == KindBalance || t.Dominant() == KindNewidle {
		r = append(r, "Make the load balancer treat recently run tasks as cache-hot for longer: echo 5000000 > /sys/kernel/debug/sched/migration_cost_ns (Linux 5.13+, debugfs; before: sysctl -w kernel.sched_migration_cost_ns=5000000). The default is 500000 (0.5 ms).")
	}
	if t.Dominant() == KindWakeup {
		r = append(r, "Give wake-ups an idle previous CPU: move other busy work off the CPUs this task alternates between (cpusets), or wake it from one CPU (pin the waker, e.g. the NIC's IRQ and its softirq, to the task's CPU).")
	}
	r = append(r, fmt.Sprintf("See each move, the CPU that made it ([NNN]) and its stack, as \"The Network Is Slow\" did: trace-cmd record -T -e sched:sched_migrate_task -f 'pid==%d' sleep 5; trace-cmd report.", t.TID))
	return r
}

func moreMovers(rest []*Task, th Thresholds) finding.Finding {
	var names []string
	var subj []finding.Subject
	for _, t := range rest {
		names = append(names, fmt.Sprintf("%s %.0f/s", taskName(t), t.Rate(t.Migrations)))
		subj = append(subj, finding.Subject{Role: finding.RoleTask, PID: t.PID, TID: t.TID, Comm: t.Comm})
	}
	return finding.Finding{
		ID:           "sched.bounce-more",
		Investigator: "sched",
		Severity:     finding.Info,
		Title:        fmt.Sprintf("%d more tasks moved between CPUs at least %.0f times/s", len(rest), th.MigrationsPerSec),
		Summary:      strings.Join(names, "; "),
		Subjects:     subj,
		Evidence:     map[string]any{"tasks": len(rest)},
	}
}

// runqFinding reports tasks and CPUs whose run-queue latency is
// pathological; low-priority tasks (niced, batch, idle) are expected to
// wait and are left out.
func runqFinding(s *Snapshot, th Thresholds) *finding.Finding {
	type bad struct {
		t   *Task
		p99 uint64
	}
	var tasks []bad
	worst := uint64(0)
	idle := 0 // tasks and CPUs whose long waits ended on idle CPUs
	for _, t := range s.Tasks {
		if t.lowPriority() || t.Runq.Count < th.RunqMinWaits {
			continue
		}
		if p := t.Runq.Quantile(0.99); time.Duration(p) >= th.RunqP99 {
			tasks = append(tasks, bad{t, p})
			worst = max(worst, p)
			if _, low := s.lowCoverage(-1); low || idleExplained(&t.Runq, t.IdleLong) {
				idle++
			}
		}
	}
	var cpus []int
	for cpu, h := range s.CPURunq {
		if h.Count >= th.RunqMinWaits*5 && time.Duration(h.Quantile(0.99)) >= th.RunqP99 {
			cpus = append(cpus, cpu)
			worst = max(worst, h.Quantile(0.99))
			if _, low := s.lowCoverage(cpu); low || idleExplained(&h, s.CPUIdleLong[cpu]) {
				idle++
			}
		}
	}
	if len(tasks) == 0 && len(cpus) == 0 {
		return nil
	}
	// Every long wait on an idle CPU: what the guest saw, told as a note.
	onIdle := idle == len(tasks)+len(cpus)
	sort.Slice(tasks, func(i, j int) bool { return tasks[i].p99 > tasks[j].p99 })
	sort.Ints(cpus)
	sev := finding.Warning
	if time.Duration(worst) >= th.RunqCriticalP99 {
		sev = finding.Critical
	}
	tasksBusy, selfBusy, tipped := s.selfTipped()
	if tipped && sev > finding.Warning {
		// Not critical: wolf itself made the CPUs short (see selfTipped).
		sev = finding.Warning
	}
	if onIdle {
		sev = finding.Info
	}
	var subj []finding.Subject
	var names []string
	for i, b := range tasks {
		if i == 10 {
			break
		}
		subj = append(subj, finding.Subject{Role: finding.RoleTask, PID: b.t.PID, TID: b.t.TID, Comm: b.t.Comm, Cgroup: b.t.Cgroup,
			Detail: fmt.Sprintf("run-queue p99 %.1f ms, max %.1f ms over %d waits", float64(b.p99)/1e6, float64(b.t.Runq.Max)/1e6, b.t.Runq.Count)})
		names = append(names, taskName(b.t))
	}
	ev := map[string]any{"tasks": len(tasks), "worst_p99_us": human.Round(float64(worst)/1e3, 1), "threshold_p99_us": th.RunqP99.Microseconds()}
	for _, cpu := range cpus {
		h := s.CPURunq[cpu]
		c := cpu
		subj = append(subj, finding.Subject{Role: finding.RoleCPU, CPU: &c, Detail: fmt.Sprintf("p99 %.1f ms over %d waits", float64(h.Quantile(0.99))/1e6, h.Count)})
		ev[fmt.Sprintf("cpu%d_p99_us", cpu)] = human.Round(float64(h.Quantile(0.99))/1e3, 1)
	}
	type cg struct {
		name string
		p99  uint64
	}
	var cgs []cg
	for name, h := range s.CgroupRunq {
		if h.Count >= th.RunqMinWaits && time.Duration(h.Quantile(0.99)) >= th.RunqP99 {
			cgs = append(cgs, cg{name, h.Quantile(0.99)})
		}
	}
	sort.Slice(cgs, func(i, j int) bool { return cgs[i].p99 > cgs[j].p99 })
	for i, c := range cgs {
		if i == 5 {
			break
		}
		subj = append(subj, finding.Subject{Role: finding.RoleCgroup, Cgroup: c.name, Detail: fmt.Sprintf("run-queue p99 %.1f ms", float64(c.p99)/1e6)})
	}
	title := fmt.Sprintf("Run-queue latency p99 reaches %.0f ms", float64(worst)/1e6)
	if len(names) > 0 {
		title += ": " + strings.Join(names[:min(3, len(names))], ", ")
		if len(names) > 3 {
			title += fmt.Sprintf(" and %d more", len(names)-3)
		}
		title += " wait that long for a CPU after waking"
	} else {
		title += fmt.Sprintf(" on CPU %s", FormatCPUs(cpus))
	}
	f := &finding.Finding{
		ID:           "sched.runq-latency",
		Investigator: "sched",
		Severity:     sev,
		Title:        title,
		Summary:      fmt.Sprintf("%d task(s) and %d CPU(s) had a run-queue latency p99 of at least %s (from becoming runnable to running).", len(tasks), len(cpus), human.Duration(th.RunqP99)),
		Mechanism:    "A runnable task waits on its CPU's run queue until the scheduler picks it; with more runnable tasks than CPUs, or with higher-priority work hogging a CPU, the wait grows. Tasks that migrate badly wait too, on CPUs the balancer has not evened out.",
		Subjects:     subj,
		Evidence:     ev,
		Remediation: []string{
			"Who used the CPUs meanwhile is measured in the same window: sched's CPU consumers (CPU time per process and cgroup) and, when tasks lost real time, the diagnosis that names them; the histograms runq_latency_us by CPU and cgroup are in the JSON report.",
			"Give the latency-sensitive tasks their own CPUs (cpusets) or more weight (cpu.weight of their cgroup, nice); move batch work to SCHED_BATCH or a lower weight.",
		},
	}
	if tipped {
		ev["tasks_busy_pct"], ev["wolf_busy_pct"] = human.Round(100*tasksBusy, 1), human.Round(100*selfBusy, 1)
		f.Summary += fmt.Sprintf(" The host's tasks used %s of the CPUs and wolf itself %s: the CPUs were short only with wolf's own work, so this is not graded critical.", human.Percent(100*tasksBusy), human.Percent(100*selfBusy))
		if r := s.runnableMean(); r > float64(s.CPUs) && s.CPUs > 0 {
			// The waits say no more: a thread that fell behind while wolf
			// took the CPUs stays runnable as a CPU hog does.
			ev["tasks_runnable_mean"] = human.Round(r, 1)
			f.Summary += fmt.Sprintf(" Their threads were running or runnable %.1f at a time on average for %d CPUs, which does not tell whether they would have been short without wolf: threads that fell behind while wolf ran stay runnable.", r, s.CPUs)
		}
	}
	if cov, low := s.lowCoverage(-1); low {
		ev["cpu_clock_coverage_pct"] = human.Round(100*cov, 1)
	}
	if onIdle {
		ev["cause"] = "idle-cpu"
		f.Title = strings.Replace(f.Title, "Run-queue latency p99 reaches", "Waits for a CPU of up to", 1) + ", on CPUs that were idle or running wolf: not the host's contention"
		f.Summary += fmt.Sprintf(" Most waits of %v or more ended with the CPU leaving its idle task (it had nothing else to run) or wolf's own threads, or the CPUs took too few of their clock samples to have been executing.", time.Duration(IdleLongNs).Round(time.Millisecond))
		f.Mechanism = "A task woken onto an idle CPU runs within microseconds. When it waits milliseconds there, the CPU itself was not executing: a virtual CPU descheduled by its hypervisor (steal), or taking its turn in an emulator such as QEMU without KVM. A task that waited behind wolf waited for wolf's own start-up (verifying and attaching its programs, most of a slow machine's CPU for a few seconds). Neither is run-queue contention among the host's own tasks."
		f.Remediation = []string{"Look at the host, not the guest: CPU steal (mpstat -P ALL 1), overcommit, or emulation instead of hardware virtualization."}
	}
	return f
}

func mismatchFinding(ms []Mismatch, v *SchedView) finding.Finding {
	m := ms[0]
	var parts []string
	cpus := make([]int, 0, len(m.Sched))
	for c := range m.Sched {
		cpus = append(cpus, c)
	}
	sort.Ints(cpus)
	ev := map[string]any{
		"hardware_llc_cpus":  FormatCPUs(m.Hardware.CPUs),
		"hardware_llc_level": m.Hardware.Level,
		"groups":             len(ms),
		"source":             v.Source,
	}
	for _, c := range cpus {
		parts = append(parts, fmt.Sprintf("CPU %d: %s", c, FormatCPUs(m.Sched[c])))
		if n, ok := v.LLCSize[c]; ok {
			ev[fmt.Sprintf("cpu%d_sd_llc_size", c)] = n
		}
	}
	return finding.Finding{
		ID:           "sched.llc-mismatch",
		Investigator: "sched",
		Severity:     finding.Warning,
		Title:        fmt.Sprintf("CPUs %s share an L%d cache, but the scheduler thinks they share none", FormatCPUs(m.Hardware.CPUs), m.Hardware.Level),
		Summary:      "The scheduler's last-level-cache domains (sd_llc_size, sd_llc_id) disagree with the hardware: " + strings.Join(parts, "; ") + ".",
		Mechanism:    "cpus_share_cache() and wake_wide() use the scheduler's LLC domains: CPUs it believes share no cache are never treated as cheap to move between, so select_idle_sibling() will not keep a woken task on its idle previous CPU. That is the CONFIG_SCHED_MC=n board of \"The Network Is Slow\", where tasks bounced between cores at every wake-up.",
		Subjects:     []finding.Subject{{Role: finding.RoleCPU, CPU: &cpus[0], Detail: "first CPU of the group"}},
		Evidence:     ev,
		Remediation: []string{
			"Build the kernel with CONFIG_SCHED_MC=y (multi-core scheduler support), so that the MC domain carries SD_SHARE_LLC.",
			"Check for isolcpus=/nohz_full= or cpuset partitions that cut these CPUs out of the scheduler's domains on purpose.",
		},
		References: []string{storyRef},
	}
}

// Histograms returns the run-queue latency histograms: per CPU, per cgroup
// (the busiest 20) and per task (the worst 10 by p99, plus every task a
// finding names).
func Histograms(s *Snapshot, named map[int]bool) []finding.Histogram {
	var out []finding.Histogram
	cpus := make([]int, 0, len(s.CPURunq))
	for c := range s.CPURunq {
		cpus = append(cpus, c)
	}
	sort.Ints(cpus)
	for _, c := range cpus {
		h := s.CPURunq[c]
		if h.Count == 0 {
			continue
		}
		out = append(out, h.Report("runq_latency_us", "us", map[string]string{"cpu": strconv.Itoa(c)}, 1000))
	}
	type cg struct {
		name string
		h    hist.Log2
	}
	var cgs []cg
	for name, h := range s.CgroupRunq {
		if h.Count > 0 {
			cgs = append(cgs, cg{name, h})
		}
	}
	sort.Slice(cgs, func(i, j int) bool {
		if cgs[i].h.Count != cgs[j].h.Count {
			return cgs[i].h.Count > cgs[j].h.Count
		}
		return cgs[i].name < cgs[j].name
	})
	for i, c := range cgs {
		if i == 20 {
			break
		}
		out = append(out, c.h.Report("runq_latency_us", "us", map[string]string{"cgroup": c.name}, 1000))
	}
	tasks := make([]*Task, 0, len(s.Tasks))
	for _, t := range s.Tasks {
		if t.Runq.Count > 0 {
			tasks = append(tasks, t)
		}
	}
	sort.Slice(tasks, func(i, j int) bool {
		pi, pj := tasks[i].Runq.Quantile(0.99), tasks[j].Runq.Quantile(0.99)
		if pi != pj {
			return pi > pj
		}
		return tasks[i].TID < tasks[j].TID
	})
	for i, t := range tasks {
		if i >= 10 && !named[t.TID] {
			continue
		}
		out = append(out, t.Runq.Report("runq_latency_us", "us", map[string]string{
			"pid": strconv.Itoa(t.PID), "tid": strconv.Itoa(t.TID), "comm": t.Comm,
		}, 1000))
	}
	return out
}
