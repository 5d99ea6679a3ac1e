package hung

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"github.com/wolf-investigator/wolf/internal/bpfrec"
	"github.com/wolf-investigator/wolf/internal/features"
	"github.com/wolf-investigator/wolf/internal/kernelbtf"
	"github.com/wolf-investigator/wolf/internal/lockslow"
	"github.com/wolf-investigator/wolf/internal/probekit"
)

// attachTable is everything hung puts into the kernel. Only the scheduler
// tracepoint and the task iterator are required; without the others the
// investigation still works, with less precision.
var attachTable = []probekit.Attach{
	{Kind: probekit.BTFTracepoint, Target: "sched/sched_switch", Program: "btf_sched_switch", Required: true,
		Why: "the exact time each task entered D state",
		Or:  []probekit.Attach{{Kind: probekit.RawTracepoint, Target: "sched/sched_switch", Program: "on_sched_switch"}}},
	{Kind: probekit.Iter, Target: "task", Program: "dump_tasks", Required: true,
		Why: "walking every task to find the blocked ones, with their stacks and lock owners"},
	{Kind: probekit.RawTracepoint, Target: "lock/contention_begin", Program: "on_contention_begin",
		Why: "the lock a task waits on, on kernels without task->blocker"},
	{Kind: probekit.RawTracepoint, Target: "lock/contention_end", Program: "on_contention_end",
		Why: "the end of a lock wait"},
	{Kind: probekit.RawTracepoint, Target: "sched/sched_process_hang", Program: "on_process_hang",
		Why: "khungtaskd's own reports"},
	{Kind: probekit.RawTracepoint, Target: wqStartTarget, Program: "on_wq_start",
		Why: "kworkers' work functions, on kernels without worker_private"},
	{Kind: probekit.Iter, Target: "task", Program: "dump_mm_queues",
		Why: "mmap_lock wait lists: the lock, the queue order and the latest reader of killable waits that set no task->blocker (mmap, munmap, /proc/PID/cmdline)"},
	{Kind: probekit.Iter, Target: "task_file", Program: "dump_fuse",
		Why: "the requests FUSE daemons owe, with the task that sent each, read from their /dev/fuse"},
}

// Before 5.19 there are no lock:contention_* tracepoints: kprobes on the
// sleeping locks' slow paths stand in for contention_begin, where the
// kernel has kprobes (entries only: see kp_wait in hung.bpf.c).
func init() {
	progs := map[lockslow.Kind]string{lockslow.Mutex: "kp_mutex_wait", lockslow.RWSemRead: "kp_rwsem_read_wait", lockslow.RWSemWrite: "kp_rwsem_write_wait"}
	for _, k := range []lockslow.Kind{lockslow.Mutex, lockslow.RWSemRead, lockslow.RWSemWrite} {
		for _, fn := range lockslow.Funcs[k] {
			attachTable = append(attachTable, probekit.Attach{Kind: probekit.Kprobe, Target: fn, Program: progs[k],
				Why: "the " + k.String() + " a task waits on, where the kernel has no lock:contention_begin", Unless: "lock/contention_begin"})
		}
	}
}

// tableFor is the table to attach on this kernel: where task_struct has
// worker_private (Linux 6.2+) the task iterator reads each kworker's work
// function there, and the workqueue_execute_start program, which runs for
// every work item the host executes, is left out.
//
// Where the kernel records a sleeping lock's waiter in task->blocker, the
// contention programs only add the killable waits' locks (the mmap_lock's
// have an iterator of their own): they are the first the BPF budget
// sheds under a lock storm (probekit.Attach.Shed), begin and end together.
func tableFor(table []probekit.Attach, workerPrivate, blocker bool) []probekit.Attach {
	out := make([]probekit.Attach, 0, len(table))
	for _, a := range table {
		if a.Target == wqStartTarget && workerPrivate {
			continue
		}
		if blocker && (a.Target == "lock/contention_begin" || a.Target == "lock/contention_end") {
			a.Shed = ShedContention
		}
		out = append(out, a)
	}
	return out
}

// ShedContention is the contention rows' rank in the budget's shedding:
// the first to go.
const ShedContention = 1

const wqStartTarget = "workqueue/workqueue_execute_start"

// taskHas says whether the kernel's task_struct has a member by that
// name (worker_private: 6.2+; blocker: 6.16+); false when its BTF cannot
// be read (the programs then attach as on kernels without it).
func taskHas(member string) bool {
	spec, err := kernelbtf.Spec()
	if err != nil {
		return false
	}
	var ts *btf.Struct
	if err := spec.TypeByName("task_struct", &ts); err != nil {
		return false
	}
	for _, m := range ts.Members {
		if m.Name == member {
			return true
		}
	}
	return false
}

// maxHangReports bounds khungtaskd reports kept per window.
const maxHangReports = 4096

// probe owns everything hung attaches to the kernel.
type probe struct {
	kit   *probekit.Probe
	maps  hungMaps
	hangs *probekit.Ring[hungHangEvent]
	notes []string // what hung runs without here, beyond the kit's rows
	// namesAll: task->blocker names every sleeping lock's waiter's lock.
	namesAll bool
}

// hangReport is one sched_process_hang event: khungtaskd reported a task.
type hangReport struct {
	TID, TGID int
	Comm      string
	At        time.Time
}

func openProbe(useBlocker bool, btfPath string) (*probe, error) {
	blocker := features.Probe(context.Background(), "task_blocker")
	kit, err := probekit.Open(probekit.Object{
		Name:  "hung",
		Spec:  loadHung,
		Vars:  map[string]any{"use_blocker": useBlocker},
		Table: tableFor(attachTable, taskHas("worker_private"), useBlocker && taskHas("blocker")),
		BTF:   btfPath,
		// On a storm of D sleeps (a memcg storm's page faults and lock
		// waits), one in N is stamped: the others' start comes from the
		// scheduler's clock, as for tasks asleep before wolf started.
		Storm:       "exact D-sleep start times",
		StormDetail: true,
	})
	if err != nil {
		return nil, err
	}
	// task->blocker (6.16+) names the lock of every sleeping lock's
	// waiter, whenever its wait began: no end need name it (preend.go).
	p := &probe{kit: kit, namesAll: useBlocker && blocker.Available}
	// Without task->blocker the lock of a task already blocked when wolf
	// starts is unknown: said, as check says it.
	if useBlocker {
		if !blocker.Available {
			p.notes = append(p.notes, "the lock a task blocked before wolf started waits on is unknown (task->blocker is Linux 6.16+, blocker_mutex 6.14): such tasks are grouped by where they wait")
		}
	}
	if fns := kit.StoodIn("lock/contention_begin"); len(fns) > 0 {
		p.notes = append(p.notes, fmt.Sprintf("no lock:contention_* tracepoints (Linux 5.19+): waits on mutexes and rw-semaphores seen through kprobes on %s; other locks' waiters are not tied to their lock", strings.Join(fns, ", ")))
	}
	if err := kit.AssignMaps(&p.maps); err != nil {
		kit.Close()
		return nil, err
	}
	if p.hangs, err = probekit.OpenRing[hungHangEvent](kit, "hangs", maxHangReports); err != nil {
		kit.Close()
		return nil, err
	}
	return p, nil
}

// Notes are the kit's (rows that could not attach) and hung's own. The
// end of a lock wait needs no note of its own where kprobes stand in for
// its beginning: the iterator checks the wait against the task's stack.
func (p *probe) Notes() []string {
	var out []string
	stoodIn := len(p.kit.StoodIn("lock/contention_begin")) > 0
	for _, n := range p.kit.Notes() {
		if stoodIn && strings.Contains(n, "lock/contention_end") {
			continue
		}
		out = append(out, n)
	}
	return append(out, p.notes...)
}

// hangReports returns khungtaskd's reports since the previous call, and
// how many could not be kept.
func (p *probe) hangReports() ([]hangReport, uint64) {
	evs, lost, _ := p.hangs.Take()
	out := make([]hangReport, 0, len(evs))
	now := time.Now()
	for _, e := range evs {
		out = append(out, hangReport{TID: int(e.Tid), TGID: int(e.Tgid), Comm: bpfrec.CString(e.Comm[:]), At: now})
	}
	return out, lost
}

// scan walks every task once. It returns the tasks in D state and, in any
// state, the tasks whose tids are in want (lock owners being followed).
func (p *probe) scan(ctx context.Context, want []uint32) ([]hungTaskRec, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	one := uint8(1)
	for _, tid := range want {
		// The map is bounded (256); a full map only loses a chain hop.
		_ = p.maps.Wanted.Update(tid, one, ebpf.UpdateAny)
	}
	defer func() {
		for _, tid := range want {
			_ = p.maps.Wanted.Delete(tid)
		}
	}()
	rc, err := p.kit.Iter("dump_tasks").Open()
	if err != nil {
		return nil, fmt.Errorf("hung: run task iterator: %w", err)
	}
	defer rc.Close()
	return bpfrec.ReadAll[hungTaskRec](rc)
}

// scanQueues reads the wait queue of every process's mmap_lock that has
// waiters; nil without the iterator.
func (p *probe) scanQueues(ctx context.Context) ([]hungMmQueueRec, error) {
	it := p.kit.Iter("dump_mm_queues")
	if it == nil || ctx.Err() != nil {
		return nil, ctx.Err()
	}
	rc, err := it.Open()
	if err != nil {
		return nil, fmt.Errorf("hung: run mmap_lock queue iterator: %w", err)
	}
	defer rc.Close()
	return bpfrec.ReadAll[hungMmQueueRec](rc)
}

// scanFuse reads the requests every FUSE daemon has pending or in
// processing; nil without the iterator.
func (p *probe) scanFuse(ctx context.Context) ([]hungFuseReqRec, error) {
	it := p.kit.Iter("dump_fuse")
	if it == nil || ctx.Err() != nil {
		return nil, ctx.Err()
	}
	rc, err := it.Open()
	if err != nil {
		return nil, fmt.Errorf("hung: run FUSE iterator: %w", err)
	}
	defer rc.Close()
	return bpfrec.ReadAll[hungFuseReqRec](rc)
}

// counts are the window's events and drops, for wolf's own cost.
func (p *probe) counts() (events, dropped uint64) {
	c, err := p.kit.WindowCounters()
	if err != nil {
		return 0, 0
	}
	events = c[hungStatIndexSTAT_D_SLEEPS] + c[hungStatIndexSTAT_CONTENTIONS] + c[hungStatIndexSTAT_HANG_EVENTS] + c[hungStatIndexSTAT_WQ_STARTS]
	dropped = c[hungStatIndexSTAT_HANG_DROPS] + c[hungStatIndexSTAT_MAP_FULL]
	return events, dropped
}
