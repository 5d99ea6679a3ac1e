// Package finding is wolf's result model: the findings an investigator
// concludes with, the histograms behind them, and the report that carries
// both. Its JSON form is the contract in ARCHITECTURE.md#the-json-contract that scripts, the HTML
// report and the tests read, so fields are only ever added, never renamed.
package finding

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"
)

// Severity ranks findings. The zero value is Info so that a finding built
// without thinking about severity never shouts.
type Severity int

const (
	Info Severity = iota
	Warning
	Critical
)

func (s Severity) String() string {
	switch s {
	case Critical:
		return "critical"
	case Warning:
		return "warning"
	default:
		return "info"
	}
}

// MarshalJSON writes the severity as its name ("critical", …).
func (s Severity) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// UnmarshalJSON accepts the names written by MarshalJSON.
func (s *Severity) UnmarshalJSON(b []byte) error {
	var name string
	if err := json.Unmarshal(b, &name); err != nil {
		return fmt.Errorf("severity: %w", err)
	}
	v, err := ParseSeverity(name)
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// ParseSeverity turns "critical", "warning" or "info" into a Severity.
func ParseSeverity(name string) (Severity, error) {
	switch name {
	case "critical":
		return Critical, nil
	case "warning":
		return Warning, nil
	case "info":
		return Info, nil
	}
	return Info, fmt.Errorf("unknown severity %q (want critical, warning or info)", name)
}

// Subject roles, as ARCHITECTURE.md#subject-roles lists them.
const (
	RoleOffender = "offender" // the task everyone else is waiting for
	RoleVictim   = "victim"   // a task hung behind the offender
	RoleOwner    = "owner"    // the owner of a contended lock
	RoleWaiter   = "waiter"   // a task waiting for a lock
	RoleHolder   = "holder"   // a task holding a lock for long
	RoleCgroup   = "cgroup"
	RoleCPU      = "cpu"
	RoleTask     = "task"
	// Roles that diagnoses add: the lock a chain runs through, a FUSE (or
	// other user-space) daemon a chain ends at, and the root cause.
	RoleLock   = "lock"
	RoleDaemon = "daemon"
	// A block device (Subject.Device), and a consumer of a saturated
	// resource (a process using the CPUs, a cgroup reading a device).
	RoleDevice   = "device"
	RoleConsumer = "consumer"
)

// Subject is a task, cgroup or CPU a finding is about.
type Subject struct {
	Role   string   `json:"role"`
	PID    int      `json:"pid,omitempty"` // thread-group id (what ps calls PID)
	TID    int      `json:"tid,omitempty"` // thread id
	Comm   string   `json:"comm,omitempty"`
	Cgroup string   `json:"cgroup,omitempty"`
	CPU    *int     `json:"cpu,omitempty"`
	State  string   `json:"state,omitempty"` // e.g. "D" for uninterruptible sleep
	Detail string   `json:"detail,omitempty"`
	Stack  []string `json:"stack,omitempty"` // innermost frame first, "func+0x1f [module]"

	// Join keys: what the diagnosis stage joins findings on, besides pid,
	// tid and cgroup. All optional.
	CgroupID uint64 `json:"cgroup_id,omitempty"` // the cgroup's kernfs id (its directory's inode)
	Lock     string `json:"lock,omitempty"`      // role lock, or the lock a task waits on or holds: "mmap_lock of x (pid 5)"
	LockAddr string `json:"lock_addr,omitempty"` // that lock's address, "0xffff…"
	Device   string `json:"device,omitempty"`    // a block device's kernel name, "vda"
	// Evidence is this subject's own numbers (a waiter's wait, a holder's
	// hold and where its time went), keys with units as Finding.Evidence.
	Evidence map[string]any `json:"evidence,omitempty"`

	// Workload names the container and pod the cgroup or task is in, as
	// their users know them; filled after the investigators, from the
	// cgroup's path and the container runtimes (internal/containers).
	Workload
}

// Workload is the container and pod a cgroup or task belongs to. Every
// field is optional: a cgroup of no container has none, and without a
// runtime to ask only what the cgroup's path tells is there (the runtime,
// the container id, the pod's uid and QoS class).
type Workload struct {
	Runtime     string `json:"runtime,omitempty"`      // "docker", "containerd", "cri-o", "podman", "cri" (a Kubernetes runtime the path does not tell)
	ContainerID string `json:"container_id,omitempty"` // the full id
	Container   string `json:"container,omitempty"`    // the container's name (in Kubernetes, its name in the pod)
	Image       string `json:"image,omitempty"`
	Pod         string `json:"pod,omitempty"`       // the pod's name (a Kubernetes pod or a podman pod)
	Namespace   string `json:"namespace,omitempty"` // the Kubernetes namespace
	PodUID      string `json:"pod_uid,omitempty"`
	QoS         string `json:"qos,omitempty"` // the Kubernetes QoS class: "guaranteed", "burstable", "besteffort"
	// Label says it all in words, as the text and HTML show it:
	// "pod clickhouse-0 (ns prod), container server".
	Label string `json:"workload,omitempty"`
}

// Finding is one conclusion: a verdict a person can act on, the evidence
// that supports it, the mechanism behind it and what to do about it.
type Finding struct {
	ID           string         `json:"id"`           // stable, "investigator.kind", e.g. "hung.lock-owner"
	Investigator string         `json:"investigator"` // "hung", "audit", …
	Severity     Severity       `json:"severity"`
	Title        string         `json:"title"`   // one line
	Summary      string         `json:"summary"` // a sentence or two
	Mechanism    string         `json:"mechanism,omitempty"`
	Subjects     []Subject      `json:"subjects,omitempty"`
	Evidence     map[string]any `json:"evidence,omitempty"` // keys carry units: blocked_s, max_us
	Remediation  []string       `json:"remediation,omitempty"`
	References   []string       `json:"references,omitempty"`
	// ExplainedBy names the diagnoses (Diagnosis.Ref) whose chain this
	// finding is part of; the renderers fold it under them.
	ExplainedBy []string `json:"explained_by,omitempty"`
}

// Relation names how one hop of a diagnosis chain leads to the next. Each
// is a kernel mechanism, not a correlation: see internal/diagnose.
type Relation string

const (
	// WaitsOn: a task sleeps until a lock, a page-cache folio, a FUSE
	// request or an I/O completes.
	WaitsOn Relation = "waits_on"
	// HeldBy: a lock is held by a task (reader-owned rw-semaphores name
	// their latest reader only: Likely).
	HeldBy Relation = "held_by"
	// SpendsHold: where a holder's wall time went while others waited for
	// what it holds: on CPU, waiting for a CPU, throttled, in reclaim,
	// in I/O, blocked on something else.
	SpendsHold Relation = "spends_hold"
	// ConstrainedBy: a task is held back by a limit or a shared resource:
	// its cgroup's memory limit or CPU quota, a saturated host, softirq
	// work on its CPU.
	ConstrainedBy Relation = "constrained_by"
	// UsedBy: a saturated resource's capacity went to a consumer (a
	// process on the CPUs, a cgroup's reclaim, a cgroup's reads of a
	// device), measured in the same window.
	UsedBy Relation = "used_by"
)

// Hop is one link of a diagnosis chain: From relates to To, with the
// numbers that show it.
type Hop struct {
	From     Subject        `json:"from"`
	Relation Relation       `json:"relation"`
	To       Subject        `json:"to"`
	Evidence map[string]any `json:"evidence,omitempty"`
	// Text says the hop in words, numbers included.
	Text string `json:"text"`
	// Mechanism is why the relation is a cause, in a sentence.
	Mechanism string `json:"mechanism,omitempty"`
	// Likely marks a hop the kernel cannot state exactly (the latest
	// reader of a reader-owned rw-semaphore, an attribution over the
	// window rather than per event).
	Likely bool `json:"likely,omitempty"`
	// Findings are the IDs of the findings the hop was read from.
	Findings []string `json:"findings,omitempty"`
}

// Diagnosis is a root cause and the chain of hops from the tasks that
// suffer (the victims) to it, joined across investigators.
type Diagnosis struct {
	// Ref identifies the diagnosis within its report ("D1"), for
	// Finding.ExplainedBy.
	Ref string `json:"ref"`
	// ID is the kind of root cause, stable: "diagnose.memcg-limit",
	// "diagnose.cpu-quota", "diagnose.fuse-daemon", …
	ID       string   `json:"id"`
	Severity Severity `json:"severity"`
	Title    string   `json:"title"`   // the root cause in one line
	Summary  string   `json:"summary"` // the chain in a few sentences
	Root     Subject  `json:"root"`
	Chain    []Hop    `json:"chain"`
	// Subjects are everyone the chain names: victims, the waiters queued
	// with them, the lock, its holder, the cgroup or daemon at the root.
	Subjects []Subject `json:"subjects"`
	// Explains lists the IDs of the findings this diagnosis accounts for.
	Explains []string `json:"explains"`
	// Confidence is "certain" when every hop is exact, "likely" when one
	// is not; Confirm says what would settle it.
	Confidence  string   `json:"confidence"`
	Confirm     []string `json:"confirm,omitempty"`
	Remediation []string `json:"remediation,omitempty"`
	References  []string `json:"references,omitempty"`
	// Attribution is the share (0..1) of the victims' lost time that the
	// chain traces to the root, by measured attribution: a hold split by
	// where the holder's time went, a saturated resource's time split by
	// its consumers.
	Attribution float64 `json:"attribution,omitempty"`
	// Rivals are the other causes the same victims' time traces to, most
	// likely first, each with its share and why it is not the root.
	Rivals []Rival `json:"rivals,omitempty"`
}

// Rival is a cause a diagnosis ranked below its root.
type Rival struct {
	ID    string  `json:"id"` // the diagnosis kind it would have been
	Root  Subject `json:"root"`
	Share float64 `json:"share"` // of the victims' lost time, 0..1
	Text  string  `json:"text"`  // one line: "not the host's CPUs: 70% of their time went to …"
}

// Bucket is one cumulative histogram bucket: Count observations were <= LE.
type Bucket struct {
	LE    float64 `json:"le"`
	Count uint64  `json:"count"`
}

// Histogram is a distribution aggregated in the kernel.
type Histogram struct {
	Name    string            `json:"name"`
	Unit    string            `json:"unit"`
	Labels  map[string]string `json:"labels,omitempty"`
	Count   uint64            `json:"count"`
	Sum     float64           `json:"sum"`
	Max     float64           `json:"max"`
	Buckets []Bucket          `json:"buckets"`
}

// Profile is a stack aggregation: how many samples (or how much time) each
// distinct stack collected, e.g. the stacks sampled while a thread held its
// mmap_lock, or the kernel stacks of blocked tasks. Flame graphs, folded
// files and pprof exports are drawn from it.
type Profile struct {
	Name   string            `json:"name"` // "mmap_lock_profile", "net_rx_stacks", …
	Unit   string            `json:"unit"` // what Value counts: "samples", "ns", "tasks"
	Labels map[string]string `json:"labels,omitempty"`
	// PeriodNs is the sampling period when Unit is "samples" (10101010 ns
	// at 99 Hz), so that samples can be turned into CPU time; 0 otherwise.
	PeriodNs int64        `json:"period_ns,omitempty"`
	Stacks   []StackCount `json:"stacks"`
}

// StackCount is one stack of a profile and what it collected.
type StackCount struct {
	// Frames are outermost first, as flame graphs and the folded format
	// draw them (Subject.Stack is innermost first, as the kernel prints).
	// The first frames may be synthetic roots: the process, the lock mode.
	Frames []string `json:"frames"`
	Value  uint64   `json:"value"`
}

// Total is the sum of every stack's value.
func (p *Profile) Total() uint64 {
	var n uint64
	for _, s := range p.Stacks {
		n += s.Value
	}
	return n
}

// Timeline is what happened to one subject over the run, e.g. the CPUs a
// task was moved between and when.
type Timeline struct {
	Name   string            `json:"name"` // "migrations", …
	Labels map[string]string `json:"labels,omitempty"`
	// Unit names what Value is: "cpu" for a task's CPU after each event.
	Unit   string          `json:"unit"`
	Events []TimelineEvent `json:"events"`
	// Dropped counts events that happened but were not kept (bounded
	// buffers), so a sparse timeline is not mistaken for a quiet one.
	Dropped uint64 `json:"dropped,omitempty"`
}

// TimelineEvent is one point of a timeline.
type TimelineEvent struct {
	AtS   float64 `json:"at_s"`            // seconds since the report started
	Value float64 `json:"value"`           // the new value from AtS on (a CPU number, a depth)
	Label string  `json:"label,omitempty"` // what caused it: "wakeup", "load balance"
}

// Check is one line of doctor's system checklist (load, per-CPU time,
// memory, PSI, disk, network, kernel log), read from /proc and /sys over
// the run. Severity Info means the area looked fine.
type Check struct {
	Area     string         `json:"area"` // "load", "cpu", "memory", "psi", "disk", "network", "kernel log"
	Severity Severity       `json:"severity"`
	Summary  string         `json:"summary"`          // one line, numbers included
	Values   map[string]any `json:"values,omitempty"` // keys carry units, as Evidence
}

// Overhead is what wolf itself cost while it looked.
type Overhead struct {
	CPUSeconds float64 `json:"cpu_s"`
	BPFRunNs   uint64  `json:"bpf_run_ns"`
	Events     uint64  `json:"events"`
	Dropped    uint64  `json:"dropped"`

	// What follows says what the window cost apart from start-up, against
	// the budget (--max-cpu). The report's are set by the command that
	// ran the window; an investigator's result carries only Sampled.

	// StartupS and StartupCPUS are the time and CPU wolf took to load,
	// verify and attach its programs, before the window (counted in
	// CPUSeconds, not in WindowCPUS).
	StartupS    float64 `json:"startup_s,omitempty"`
	StartupCPUS float64 `json:"startup_cpu_s,omitempty"`
	// WindowCPUS is wolf's process CPU time from the window's start to
	// the report (the window and concluding it); CPUPct is that over
	// the window, in percent of one CPU.
	WindowCPUS float64 `json:"window_cpu_s,omitempty"`
	CPUPct     float64 `json:"cpu_one_cpu_pct,omitempty"`
	// BPFPct is BPFRunNs over the window, in percent of one CPU.
	BPFPct float64 `json:"bpf_one_cpu_pct,omitempty"`
	// BudgetPct is the BPF budget, in percent of one CPU (0: none).
	// BudgetBit says the budget made some investigator sample (Sampled
	// says which and at what rate); OverBudget that the programs spent
	// more than the budget all the same (what they keep exact costs
	// more than the budget on this host's event rate).
	BudgetPct  float64 `json:"budget_one_cpu_pct,omitempty"`
	BudgetBit  bool    `json:"budget_bit,omitempty"`
	OverBudget bool    `json:"over_budget,omitempty"`
	// Sampled lists the investigators whose expensive detail (stacks,
	// records) was sampled in the window, and at what rate.
	Sampled []Sampling `json:"sampled,omitempty"`
	// Shed lists the programs the budget detached for part of the
	// window: what they see was not seen meanwhile.
	Shed []Shedding `json:"shed,omitempty"`
}

// Shedding is one program the budget detached for DetachedS seconds of
// the window (Ongoing: still detached at its end). DutyPct, when not 0:
// rather than detached for good, the program ran that percentage of each
// second (a duty cycle, Ongoing while it goes on), and what it counts is
// estimated from what it saw, each event standing for 100/DutyPct.
type Shedding struct {
	Investigator string  `json:"investigator"`
	Target       string  `json:"target"`
	Why          string  `json:"why"`
	DetachedS    float64 `json:"detached_s"`
	Ongoing      bool    `json:"ongoing,omitempty"`
	DutyPct      float64 `json:"duty_pct,omitempty"`
}

// Sampling is one investigator's detail sampled under the budget: of
// Events eligible for it, Detailed got it. Their counts, sums and
// histograms stay exact; what the detail feeds (stacks, per-owner
// records) is a sample.
type Sampling struct {
	Investigator string  `json:"investigator"`
	What         string  `json:"what"`
	Events       uint64  `json:"events"`
	Detailed     uint64  `json:"detailed"`
	Rate         float64 `json:"rate"` // Detailed / Events
	// IntervalUs is the least time between two detailed events on one
	// CPU at the end of the window, in microseconds.
	IntervalUs float64 `json:"interval_us"`
	// Estimated: not a detail but the events themselves were sampled
	// (a storm's spin lock waits, timed one in N): the counts, sums and
	// histograms of what is sampled are estimated from the events kept,
	// each standing for those skipped beside it.
	Estimated bool `json:"estimated,omitempty"`
}

// Add accumulates another investigator's overhead into o.
func (o *Overhead) Add(p Overhead) {
	o.CPUSeconds += p.CPUSeconds
	o.BPFRunNs += p.BPFRunNs
	o.Events += p.Events
	o.Dropped += p.Dropped
	o.Sampled = append(o.Sampled, p.Sampled...)
	o.Shed = append(o.Shed, p.Shed...)
}

// Report is the whole result of one wolf command.
type Report struct {
	WolfVersion string      `json:"wolf_version"`
	Command     string      `json:"command"`
	Kernel      string      `json:"kernel"`
	Host        string      `json:"host"`
	StartedAt   time.Time   `json:"started_at"`
	DurationS   float64     `json:"duration_s"`
	Findings    []Finding   `json:"findings"`
	Histograms  []Histogram `json:"histograms"`
	// Profiles and Timelines are the data behind flame graphs and
	// migration charts; absent when no investigator collected any.
	Profiles  []Profile  `json:"profiles,omitempty"`
	Timelines []Timeline `json:"timelines,omitempty"`
	// Diagnoses join the findings into root-cause chains, worst first;
	// empty when nothing chains (a healthy host has none).
	Diagnoses []Diagnosis `json:"diagnoses"`
	// Checklist is doctor's system overview; other commands leave it out.
	Checklist    []Check         `json:"checklist,omitempty"`
	Capabilities map[string]bool `json:"capabilities"`
	Overhead     Overhead        `json:"overhead"`
	// Errors lists investigators that failed; the rest of the report
	// still stands.
	Errors []string `json:"errors,omitempty"`
	// Notes say what an investigator could not do on this kernel or in
	// this run (a tracepoint missing, owner stacks unavailable): the
	// report is complete but less detailed.
	Notes []string `json:"notes,omitempty"`
}

// Sort orders findings by severity (critical first), then investigator and
// title, so that the same situation always prints the same way.
func Sort(fs []Finding) {
	sort.SliceStable(fs, func(i, j int) bool {
		if fs[i].Severity != fs[j].Severity {
			return fs[i].Severity > fs[j].Severity
		}
		if fs[i].Investigator != fs[j].Investigator {
			return fs[i].Investigator < fs[j].Investigator
		}
		return fs[i].Title < fs[j].Title
	})
}

// Worst returns the highest severity among fs, and false when fs is empty.
func Worst(fs []Finding) (Severity, bool) {
	if len(fs) == 0 {
		return Info, false
	}
	w := Info
	for _, f := range fs {
		if f.Severity > w {
			w = f.Severity
		}
	}
	return w, true
}

// Number reads an evidence value as a float, whatever numeric type the
// investigator stored it as.
func Number(v any) (float64, bool) {
	switch x := v.(type) {
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case uint64:
		return float64(x), true
	case uint32:
		return float64(x), true
	case int32:
		return float64(x), true
	case float64:
		return x, true
	case float32:
		return float64(x), true
	}
	return 0, false
}
