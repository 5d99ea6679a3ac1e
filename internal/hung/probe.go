package hung

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"

	"github.com/wolf-investigator/wolf/internal/bpfrec"
	"github.com/wolf-investigator/wolf/internal/features"
	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/kernelbtf"
	"github.com/wolf-investigator/wolf/internal/lockslow"
)

// probe owns everything hung attaches to the kernel. close detaches it all;
// and because every link is held only through file descriptors of this
// process (nothing is pinned), a kill -9 of wolf detaches it all too.
type probe struct {
	objs     hungObjects
	links    []link.Link
	kprobes  *lockslow.Probes // lock waits where the contention tracepoints are missing
	iter     *link.Iter
	hangs    *ringbuf.Reader
	attached map[string]bool // tracepoint name -> attached
	warnings []string        // optional tracepoints that could not attach

	mu        sync.Mutex
	hangSeen  []hangReport
	readerErr error
	done      chan struct{}
}

// hangReport is one sched_process_hang event: khungtaskd reported a task.
type hangReport struct {
	TID, TGID int
	Comm      string
	At        time.Time
}

// optional tracepoints: the investigation still works without them, with
// less precision; required ones fail the run.
var tracepoints = []struct {
	name     string
	prog     func(*hungObjects) *ebpf.Program
	required bool
}{
	{"sched_switch", func(o *hungObjects) *ebpf.Program { return o.OnSchedSwitch }, true},
	{"contention_begin", func(o *hungObjects) *ebpf.Program { return o.OnContentionBegin }, false},
	{"contention_end", func(o *hungObjects) *ebpf.Program { return o.OnContentionEnd }, false},
	{"sched_process_hang", func(o *hungObjects) *ebpf.Program { return o.OnProcessHang }, false},
	{"workqueue_execute_start", func(o *hungObjects) *ebpf.Program { return o.OnWqStart }, false},
}

func openProbe(useBlocker bool) (*probe, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("hung: loading BPF programs needs root: %w", investigator.ErrPrivilege)
	}
	// Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK.
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("hung: raise memlock limit: %w", err)
	}
	p := &probe{attached: map[string]bool{}, done: make(chan struct{})}
	spec, err := loadHung()
	if err != nil {
		return nil, fmt.Errorf("hung: read BPF object: %w", err)
	}
	if err := spec.Variables["use_blocker"].Set(useBlocker); err != nil {
		return nil, fmt.Errorf("hung: configure BPF object: %w", err)
	}
	if err := spec.LoadAndAssign(&p.objs, kernelbtf.Options()); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("hung: the kernel's BPF verifier rejected the program (%v): %w", ve, investigator.ErrUnsupported)
		}
		return nil, fmt.Errorf("hung: load BPF objects: %w", err)
	}
	for _, tp := range tracepoints {
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: tp.name, Program: tp.prog(&p.objs)})
		if err != nil {
			if tp.required {
				p.close()
				return nil, fmt.Errorf("hung: attach raw tracepoint %s (%v): %w", tp.name, err, investigator.ErrUnsupported)
			}
			if !strings.HasPrefix(tp.name, "contention_") { // said below, with what replaces them
				p.warnings = append(p.warnings, fmt.Sprintf("tracepoint %s unavailable (%v): less precise", tp.name, err))
			}
			continue
		}
		p.links = append(p.links, l)
		p.attached[tp.name] = true
	}
	// Without task->blocker the lock of a task already blocked when wolf
	// starts is unknown: said, as check says it.
	if useBlocker {
		if st := features.Probe(context.Background(), "task_blocker"); !st.Available {
			p.warnings = append(p.warnings, "the lock a task blocked before wolf started waits on is unknown (task->blocker is Linux 6.16+, blocker_mutex 6.14): such tasks are grouped by where they wait")
		}
	}
	// Before 5.19 there are no lock:contention_* tracepoints: kprobes on the
	// sleeping locks' slow paths tell the same for mutexes and
	// rw-semaphores, where the kernel has kprobes.
	if !p.attached["contention_begin"] {
		kp, err := lockslow.Attach(context.Background(), map[lockslow.Kind]*ebpf.Program{
			lockslow.Mutex: p.objs.KpMutexWait, lockslow.RWSemRead: p.objs.KpRwsemReadWait, lockslow.RWSemWrite: p.objs.KpRwsemWriteWait,
		})
		if err != nil {
			p.warnings = append(p.warnings, fmt.Sprintf("the lock a task began waiting on while wolf ran is unknown: no lock:contention_* tracepoints (Linux 5.19+) and no kprobes on the lock slow paths (%v)", err))
		} else {
			p.kprobes = kp
			p.attached["lock_slowpath_kprobes"] = true
			p.warnings = append(p.warnings, fmt.Sprintf("no lock:contention_* tracepoints (Linux 5.19+): waits on mutexes and rw-semaphores seen through kprobes on %s; other locks' waiters are not tied to their lock", strings.Join(kp.Funcs, ", ")))
		}
	}
	it, err := link.AttachIter(link.IterOptions{Program: p.objs.DumpTasks})
	if err != nil {
		p.close()
		return nil, fmt.Errorf("hung: create task iterator (needs Linux 5.8+ with BTF: %v): %w", err, investigator.ErrUnsupported)
	}
	p.iter = it
	rd, err := ringbuf.NewReader(p.objs.Hangs)
	if err != nil {
		p.close()
		return nil, fmt.Errorf("hung: open ring buffer: %w", err)
	}
	p.hangs = rd
	go p.readHangs()
	return p, nil
}

func (p *probe) readHangs() {
	defer close(p.done)
	for {
		rec, err := p.hangs.Read()
		if err != nil {
			if !errors.Is(err, ringbuf.ErrClosed) {
				p.mu.Lock()
				p.readerErr = err
				p.mu.Unlock()
			}
			return
		}
		e, err := bpfrec.Decode[hungHangEvent](rec.RawSample)
		if err != nil {
			continue
		}
		p.mu.Lock()
		p.hangSeen = append(p.hangSeen, hangReport{TID: int(e.Tid), TGID: int(e.Tgid), Comm: bpfrec.CString(e.Comm[:]), At: time.Now()})
		p.mu.Unlock()
	}
}

// hangReports returns khungtaskd's reports seen so far.
func (p *probe) hangReports() []hangReport {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]hangReport(nil), p.hangSeen...)
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
		_ = p.objs.Wanted.Update(tid, one, ebpf.UpdateAny)
	}
	defer func() {
		for _, tid := range want {
			_ = p.objs.Wanted.Delete(tid)
		}
	}()
	rc, err := p.iter.Open()
	if err != nil {
		return nil, fmt.Errorf("hung: run task iterator: %w", err)
	}
	defer rc.Close()
	return bpfrec.ReadAll[hungTaskRec](rc)
}

// stats sums the per-CPU counters.
func (p *probe) stats() (map[string]uint64, error) {
	names := []string{"d_sleeps", "contentions", "hang_events", "hang_drops", "map_full", "wq_starts", "records"}
	out, err := bpfrec.Counters(p.objs.Stats, names)
	if err != nil {
		return nil, fmt.Errorf("hung: %w", err)
	}
	return out, nil
}

// programs lists wolf's hung programs, for the overhead meter.
func (p *probe) programs() []*ebpf.Program {
	return []*ebpf.Program{p.objs.OnSchedSwitch, p.objs.OnContentionBegin, p.objs.OnContentionEnd, p.objs.OnProcessHang, p.objs.OnWqStart, p.objs.DumpTasks,
		p.objs.KpMutexWait, p.objs.KpRwsemReadWait, p.objs.KpRwsemWriteWait}
}

func (p *probe) close() {
	for _, l := range p.links {
		_ = l.Close()
	}
	p.links = nil
	p.kprobes.Close()
	p.kprobes = nil
	if p.iter != nil {
		_ = p.iter.Close()
		p.iter = nil
	}
	if p.hangs != nil {
		_ = p.hangs.Close()
		<-p.done
		p.hangs = nil
	}
	_ = p.objs.Close()
}
