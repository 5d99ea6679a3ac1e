package bpfcost

import (
	"fmt"
	"strings"
	"time"
)

// Attach kinds, as wolf names where a program runs.
const (
	KindUprobe        = "uprobe"
	KindUretprobe     = "uretprobe"
	KindKprobe        = "kprobe"
	KindKretprobe     = "kretprobe"
	KindTracepoint    = "tracepoint"
	KindRawTracepoint = "raw_tracepoint"
	KindFentry        = "fentry"
	KindFexit         = "fexit"
	KindFmodRet       = "fmod_ret"
	KindTPBTF         = "tp_btf"
	KindLSM           = "lsm"
	KindKprobeMulti   = "kprobe_multi"
	KindKretMulti     = "kretprobe_multi"
	KindUprobeMulti   = "uprobe_multi"
	KindPerfEvent     = "perf_event"
	KindCgroup        = "cgroup"
	KindXDP           = "xdp"
	KindTCX           = "tcx"
	KindNetns         = "netns"
	KindNetfilter     = "netfilter"
	KindNetkit        = "netkit"
	KindIter          = "iter"
	KindStructOps     = "struct_ops"
	KindOther         = "other"
)

// Cost model constants: what a probe costs beyond the program's own run
// time, which the kernel's statistics (run_time_ns) do not include.
const (
	// UprobeTrapNs is the cost of one uprobe trap outside the program: the
	// int3 trap, the uprobe lookup, single-stepping the displaced
	// instruction (ARCHITECTURE.md#reference-numbers: 1.7 µs per hit). It
	// varies with the CPU and the hypervisor: `wolf lab run hot-uprobe`
	// measures it on the machine at hand.
	UprobeTrapNs = 1700
)

// Thresholds decide when a program is flagged.
type Thresholds struct {
	// CostlyPct of one CPU (run time plus estimated trap cost) makes a
	// program costly (warning); CriticalPct makes it critical.
	CostlyPct   float64
	CriticalPct float64
	// HotRunsPerS makes a kretprobe or uprobe "on a hot path".
	HotRunsPerS float64
	// SharedProcs is how many processes running a probed executable make
	// a uprobe's registration a risk to all of them.
	SharedProcs int
	// TrapNs is what one uprobe trap costs outside the program, for the
	// estimate; UprobeTrapNs when zero. TrapSource says where it came
	// from: "reference" (ARCHITECTURE.md#reference-numbers), "measured" (CalibrateTrap on
	// this machine) or "" (given by the user).
	TrapNs     float64
	TrapSource string
}

// DefaultThresholds are the ones wolf bpf and doctor use.
var DefaultThresholds = Thresholds{CostlyPct: 5, CriticalPct: 25, HotRunsPerS: 10000, SharedProcs: 20, TrapNs: UprobeTrapNs, TrapSource: "reference"}

// Attach is one place a program runs, from a BPF link.
type Attach struct {
	LinkID uint32 `json:"link_id,omitempty"`
	Kind   string `json:"kind"`
	// Target is where, in words: "sched/sched_switch", "do_sys_open+0x0",
	// "/usr/lib/x86_64-linux-gnu/libc.so.6:write+0x0", "cgroup 1234".
	Target string `json:"target"`
	// File and Offset for uprobes; Symbol when the file's symbols name it.
	File   string `json:"file,omitempty"`
	Offset uint64 `json:"offset,omitempty"`
	Symbol string `json:"symbol,omitempty"`
	// Missed counts kprobe/kretprobe hits the kernel skipped (for a
	// kretprobe: no free return instance).
	Missed uint64 `json:"missed,omitempty"`
	// SharedBy is, for a uprobe on an executable, how many processes run
	// it; -1 for a shared library (every process that links it).
	SharedBy int `json:"shared_by,omitempty"`
}

// Owner is a process holding a file descriptor of the program or its link.
type Owner struct {
	PID  int    `json:"pid"`
	Comm string `json:"comm"`
}

// Program is one loaded BPF program and where it runs.
type Program struct {
	ID      uint32    `json:"id"`
	Type    string    `json:"type"`
	Name    string    `json:"name"`
	Tag     string    `json:"tag"`
	UID     int64     `json:"uid"` // -1 when unknown
	Loaded  time.Time `json:"loaded,omitzero"`
	Maps    int       `json:"maps"`
	Attach  []Attach  `json:"attach,omitempty"`
	Owners  []Owner   `json:"owners,omitempty"`
	Wolf    bool      `json:"wolf"` // held by a wolf process
	Gone    bool      `json:"gone,omitempty"`
	Created bool      `json:"created,omitempty"` // loaded during the window
}

// Stat is the kernel's run statistics of one program at one moment.
type Stat struct {
	RunNs  uint64
	Runs   uint64
	Misses uint64
}

// Snapshot is what one measurement saw; Conclude needs nothing else.
type Snapshot struct {
	Programs []Program
	Before   map[uint32]Stat
	After    map[uint32]Stat
	Window   time.Duration
	NumCPU   int
	Kernel   string // release, "6.18.0-…", for the fixes the Datadog talk names
	// StatsOff is set when the kernel would not turn run statistics on:
	// run times and counts are then all zero.
	StatsOff bool
	Top      int // list this many programs as info findings; 0: none
	PID      int // only programs this process holds; 0: all
}

// Cost is one program's measured cost over the window.
type Cost struct {
	Program
	Runs      uint64  `json:"runs"`
	RunNs     uint64  `json:"run_ns"`
	Misses    uint64  `json:"recursion_misses"`
	RunsPerS  float64 `json:"runs_per_s"`
	AvgNs     float64 `json:"avg_ns_per_run"`
	OneCPUPct float64 `json:"one_cpu_pct"` // run time as % of one CPU
	CPUPct    float64 `json:"cpu_pct"`     // run time as % of all CPUs
	// TrapPct estimates, as % of one CPU, what uprobe traps cost on top
	// of the run time (not measured: runs × UprobeTrapNs).
	TrapPct float64 `json:"trap_one_cpu_pct_estimate,omitempty"`
	Traps   float64 `json:"traps_per_run,omitempty"` // uprobe traps each run costs
}

// TotalOneCPUPct is run time plus estimated trap cost, in % of one CPU.
func (c *Cost) TotalOneCPUPct() float64 { return c.OneCPUPct + c.TrapPct }

// Kinds lists the program's attach kinds, or its program type when it has
// no link.
func (p *Program) Kinds() []string {
	var ks []string
	for _, a := range p.Attach {
		ks = append(ks, a.Kind)
	}
	return ks
}

func (p *Program) has(kinds ...string) bool {
	for _, a := range p.Attach {
		for _, k := range kinds {
			if a.Kind == k {
				return true
			}
		}
	}
	return false
}

// Where says where the program runs, in one line.
func (p *Program) Where() string {
	if len(p.Attach) == 0 {
		return "attach point unknown (not attached through a BPF link)"
	}
	// The same event on every CPU (perf_event sampling) reads once, counted.
	var parts []string
	count := map[string]int{}
	for _, a := range p.Attach {
		w := a.Kind + " " + a.Target
		if count[w] == 0 {
			parts = append(parts, w)
		}
		count[w]++
	}
	for i, w := range parts {
		if n := count[w]; n > 1 {
			parts[i] = fmt.Sprintf("%s (×%d)", w, n)
		}
	}
	if len(parts) > 3 {
		parts = append(parts[:3], fmt.Sprintf("and %d more", len(parts)-3))
	}
	return strings.Join(parts, ", ")
}

// Who names the processes holding the program.
func (p *Program) Who() string {
	if len(p.Owners) == 0 {
		return "no process holds it (pinned or attached without a file descriptor)"
	}
	var parts []string
	for _, o := range p.Owners {
		parts = append(parts, fmt.Sprintf("%s (pid %d)", o.Comm, o.PID))
	}
	if len(parts) > 3 {
		parts = append(parts[:3], fmt.Sprintf("and %d more", len(parts)-3))
	}
	return strings.Join(parts, ", ")
}

// Label is "wolf's own" or the program's name.
func (p *Program) Label() string {
	name := p.Name
	if name == "" {
		name = "(unnamed)"
	}
	s := fmt.Sprintf("%s program %d %q", strings.ToLower(p.Type), p.ID, name)
	if p.Wolf {
		s = "wolf's own " + s
	}
	return s
}
