package hung

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"

	"github.com/wolf-investigator/wolf/internal/bpfrec"
	"github.com/wolf-investigator/wolf/internal/investigator"
)

// probe owns everything hung attaches to the kernel. close detaches it all;
// and because every link is held only through file descriptors of this
// process (nothing is pinned), a kill -9 of wolf detaches it all too.
type probe struct {
	objs  coreObjects
	links []link.Link
	iter  *link.Iter
	// Optional iterators: mmap_lock wait queues read from the locks, and
	// the requests FUSE daemons owe. Nil when this kernel refused them.
	queues     *link.Iter
	fuse       *link.Iter
	extraProgs []*ebpf.Program
	hangs      *ringbuf.Reader
	attached   map[string]bool // tracepoint name -> attached
	warnings   []string        // optional tracepoints that could not attach

	mu        sync.Mutex
	hangSeen  []hangReport
	readerErr error
	done      chan struct{}
}

// coreObjects is what hung cannot do without: every map, the tracepoint
// programs and the task iterator. The other iterators load on their own
// (loadExtras), so that a kernel refusing one costs only what it shows.
type coreObjects struct {
	hungMaps
	OnSchedSwitch     *ebpf.Program `ebpf:"on_sched_switch"`
	OnContentionBegin *ebpf.Program `ebpf:"on_contention_begin"`
	OnContentionEnd   *ebpf.Program `ebpf:"on_contention_end"`
	OnProcessHang     *ebpf.Program `ebpf:"on_process_hang"`
	OnWqStart         *ebpf.Program `ebpf:"on_wq_start"`
	DumpTasks         *ebpf.Program `ebpf:"dump_tasks"`
}

func (o *coreObjects) Close() error {
	for _, p := range []*ebpf.Program{o.OnSchedSwitch, o.OnContentionBegin, o.OnContentionEnd, o.OnProcessHang, o.OnWqStart, o.DumpTasks} {
		if p != nil {
			_ = p.Close()
		}
	}
	return o.hungMaps.Close()
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
	prog     func(*coreObjects) *ebpf.Program
	required bool
}{
	{"sched_switch", func(o *coreObjects) *ebpf.Program { return o.OnSchedSwitch }, true},
	{"contention_begin", func(o *coreObjects) *ebpf.Program { return o.OnContentionBegin }, false},
	{"contention_end", func(o *coreObjects) *ebpf.Program { return o.OnContentionEnd }, false},
	{"sched_process_hang", func(o *coreObjects) *ebpf.Program { return o.OnProcessHang }, false},
	{"workqueue_execute_start", func(o *coreObjects) *ebpf.Program { return o.OnWqStart }, false},
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
	if err := spec.LoadAndAssign(&p.objs, nil); err != nil {
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
			p.warnings = append(p.warnings, fmt.Sprintf("tracepoint %s unavailable (%v): less precise", tp.name, err))
			continue
		}
		p.links = append(p.links, l)
		p.attached[tp.name] = true
	}
	it, err := link.AttachIter(link.IterOptions{Program: p.objs.DumpTasks})
	if err != nil {
		p.close()
		return nil, fmt.Errorf("hung: create task iterator (needs Linux 5.8+ with BTF: %v): %w", err, investigator.ErrUnsupported)
	}
	p.iter = it
	p.loadExtras(spec)
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

// loadExtras loads and attaches the optional iterators, each on its own:
// what fails is said in the notes and the rest goes on.
func (p *probe) loadExtras(spec *ebpf.CollectionSpec) {
	opts := &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{
		"queue_scratch": p.objs.QueueScratch, "fuse_scratch": p.objs.FuseScratch, "stats": p.objs.Stats,
	}}
	load := func(name, what string) *link.Iter {
		var o struct {
			Prog *ebpf.Program `ebpf:"prog"`
		}
		s := spec.Copy()
		ps, ok := s.Programs[name]
		if !ok {
			return nil
		}
		s.Programs = map[string]*ebpf.ProgramSpec{"prog": ps}
		if err := s.LoadAndAssign(&o, opts); err != nil {
			p.warnings = append(p.warnings, fmt.Sprintf("%s not read: %v", what, err))
			return nil
		}
		it, err := link.AttachIter(link.IterOptions{Program: o.Prog})
		if err != nil {
			_ = o.Prog.Close()
			p.warnings = append(p.warnings, fmt.Sprintf("%s not read: %v", what, err))
			return nil
		}
		p.extraProgs = append(p.extraProgs, o.Prog)
		return it
	}
	p.queues = load("dump_mm_queues", "mmap_lock wait queues (waits that began before wolf and set no task->blocker)")
	p.fuse = load("dump_fuse", "FUSE daemons' pending requests")
}

// scanQueues reads the wait queue of every process's mmap_lock that has
// waiters; nil without the iterator.
func (p *probe) scanQueues(ctx context.Context) ([]hungMmQueueRec, error) {
	if p.queues == nil || ctx.Err() != nil {
		return nil, ctx.Err()
	}
	rc, err := p.queues.Open()
	if err != nil {
		return nil, fmt.Errorf("hung: run mmap_lock queue iterator: %w", err)
	}
	defer rc.Close()
	return bpfrec.ReadAll[hungMmQueueRec](rc)
}

// scanFuse reads the requests every FUSE daemon has pending or in
// processing; nil without the iterator.
func (p *probe) scanFuse(ctx context.Context) ([]hungFuseReqRec, error) {
	if p.fuse == nil || ctx.Err() != nil {
		return nil, ctx.Err()
	}
	rc, err := p.fuse.Open()
	if err != nil {
		return nil, fmt.Errorf("hung: run FUSE iterator: %w", err)
	}
	defer rc.Close()
	return bpfrec.ReadAll[hungFuseReqRec](rc)
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
	return append([]*ebpf.Program{p.objs.OnSchedSwitch, p.objs.OnContentionBegin, p.objs.OnContentionEnd, p.objs.OnProcessHang, p.objs.OnWqStart, p.objs.DumpTasks}, p.extraProgs...)
}

func (p *probe) close() {
	for _, l := range p.links {
		_ = l.Close()
	}
	p.links = nil
	for _, it := range []**link.Iter{&p.iter, &p.queues, &p.fuse} {
		if *it != nil {
			_ = (*it).Close()
			*it = nil
		}
	}
	for _, prog := range p.extraProgs {
		_ = prog.Close()
	}
	p.extraProgs = nil
	if p.hangs != nil {
		_ = p.hangs.Close()
		<-p.done
		p.hangs = nil
	}
	_ = p.objs.Close()
}
