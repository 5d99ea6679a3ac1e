package softirq

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/bpfrec"
	"github.com/wolf-investigator/wolf/internal/hist"
	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/perfsample"
)

// NrVectors is NR_SOFTIRQS; Vectors names them in the kernel's order.
const NrVectors = 10

// Vectors are the softirq vectors, as /proc/softirqs and the tracepoints
// name them.
var Vectors = [NrVectors]string{"HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER", "RCU"}

const (
	vecNetRX   = 3
	nrReasons  = 512 // NR_REASONS in softirq.bpf.c
	maxStalls  = 10000
	stackDepth = 32
)

// mainObjects are the programs and maps of the softirq investigation
// proper; funcObjects (funclat.go) those of function latency. Loading
// one set leaves the other's programs out of the kernel.
type mainObjects struct {
	OnSoftirqRaise   *ebpf.Program `ebpf:"on_softirq_raise"`
	OnSoftirqEntry   *ebpf.Program `ebpf:"on_softirq_entry"`
	OnSoftirqExit    *ebpf.Program `ebpf:"on_softirq_exit"`
	OnNapiPoll       *ebpf.Program `ebpf:"on_napi_poll"`
	OnKfreeSkb       *ebpf.Program `ebpf:"on_kfree_skb"`
	OnSample         *ebpf.Program `ebpf:"on_sample"`
	CPUStates        *ebpf.Map     `ebpf:"cpu_states"`
	RunHist          *ebpf.Map     `ebpf:"run_hist"`
	WaitHist         *ebpf.Map     `ebpf:"wait_hist"`
	Stalls           *ebpf.Map     `ebpf:"stalls"`
	Stacks           *ebpf.Map     `ebpf:"stacks"`
	RxStackCounts    *ebpf.Map     `ebpf:"rx_stack_counts"`
	StallStackCounts *ebpf.Map     `ebpf:"stall_stack_counts"`
	NapiStats        *ebpf.Map     `ebpf:"napi_stats"`
	DropReasons      *ebpf.Map     `ebpf:"drop_reasons"`
}

func (o *mainObjects) Close() error {
	var errs []error
	for _, p := range o.programs() {
		if p != nil {
			errs = append(errs, p.Close())
		}
	}
	for _, m := range []*ebpf.Map{o.CPUStates, o.RunHist, o.WaitHist, o.Stalls, o.Stacks, o.RxStackCounts, o.StallStackCounts, o.NapiStats, o.DropReasons} {
		if m != nil {
			errs = append(errs, m.Close())
		}
	}
	return errors.Join(errs...)
}

func (o *mainObjects) programs() []*ebpf.Program {
	return []*ebpf.Program{o.OnSoftirqRaise, o.OnSoftirqEntry, o.OnSoftirqExit, o.OnNapiPoll, o.OnKfreeSkb, o.OnSample}
}

// tracepoints wolf softirq attaches, in attach order: exit before entry,
// because an exit without its entry is skipped, while an entry without its
// exit would be paired with the next one. The optional ones only add detail.
var tracepoints = []struct {
	group, name string
	prog        func(*mainObjects) *ebpf.Program
	required    bool
	what        string
}{
	{"irq", "softirq_exit", func(o *mainObjects) *ebpf.Program { return o.OnSoftirqExit }, true, ""},
	{"irq", "softirq_entry", func(o *mainObjects) *ebpf.Program { return o.OnSoftirqEntry }, true, ""},
	{"irq", "softirq_raise", func(o *mainObjects) *ebpf.Program { return o.OnSoftirqRaise }, false, "no raise-to-entry wait histograms"},
	{"napi", "napi_poll", func(o *mainObjects) *ebpf.Program { return o.OnNapiPoll }, false, "no NAPI work and budget per device"},
	{"skb", "kfree_skb", func(o *mainObjects) *ebpf.Program { return o.OnKfreeSkb }, false, "no packet drop reasons (the reason argument needs Linux 5.17+)"},
}

// probeConfig is what the BPF side is configured with before it loads.
type probeConfig struct {
	Threshold time.Duration
	SampleHz  int // 0: no stack sampling
}

// probe owns everything the investigation attaches. Nothing is pinned: a
// killed wolf detaches it all with its file descriptors.
type probe struct {
	objs     mainObjects
	links    []link.Link
	sampler  *perfsample.Sampler
	rd       *ringbuf.Reader
	attached map[string]bool
	warnings []string
	clock    monoClock

	mu        sync.Mutex
	stalls    []Stall
	notKept   uint64 // stalls beyond maxStalls: counted, not stored
	readerErr error
	done      chan struct{}
}

func openProbe(cfg probeConfig) (*probe, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("softirq: loading BPF programs needs root: %w", investigator.ErrPrivilege)
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("softirq: raise memlock limit: %w", err)
	}
	spec, err := loadSoftirq()
	if err != nil {
		return nil, fmt.Errorf("softirq: read BPF object: %w", err)
	}
	if err := spec.Variables["threshold_ns"].Set(uint64(cfg.Threshold.Nanoseconds())); err != nil {
		return nil, fmt.Errorf("softirq: configure BPF object: %w", err)
	}
	p := &probe{attached: map[string]bool{}, done: make(chan struct{}), clock: newMonoClock()}
	if err := spec.LoadAndAssign(&p.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("softirq: the kernel's BPF verifier rejected the program (%v): %w", ve, investigator.ErrUnsupported)
		}
		return nil, fmt.Errorf("softirq: load BPF objects: %w", err)
	}
	// The ring buffer reader starts before the first stall can happen.
	rd, err := ringbuf.NewReader(p.objs.Stalls)
	if err != nil {
		p.close()
		return nil, fmt.Errorf("softirq: open ring buffer: %w", err)
	}
	p.rd = rd
	go p.readStalls()
	if err := p.attach(cfg.SampleHz); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// Stall is one softirq run at or above the threshold.
type Stall struct {
	CPU      int           `json:"cpu"`
	Vector   string        `json:"vector"`
	Duration time.Duration `json:"duration_ns"`
	At       time.Time     `json:"at"` // when the run began
	Packets  uint64        `json:"packets"`
	Polls    uint32        `json:"polls"`
	// FullPolls are NAPI polls that used their whole budget.
	FullPolls uint32 `json:"full_polls"`
	PID       int    `json:"pid"` // the task the softirq ran on top of
	TGID      int    `json:"tgid"`
	Comm      string `json:"comm"`
	Samples   int    `json:"samples"` // NET_RX stacks kept from the run
	// CPUSamples are the perf samples that landed during the run, any
	// vector: far fewer than duration × rate means the CPU was not
	// running (a preempted vCPU) or had interrupts disabled.
	CPUSamples int `json:"cpu_samples"`
}

func (p *probe) readStalls() {
	defer close(p.done)
	for {
		rec, err := p.rd.Read()
		if err != nil {
			// ErrFlushed: drain has read everything that was there.
			if !errors.Is(err, ringbuf.ErrClosed) && !errors.Is(err, ringbuf.ErrFlushed) {
				p.mu.Lock()
				p.readerErr = err
				p.mu.Unlock()
			}
			return
		}
		e, err := bpfrec.Decode[softirqStall](rec.RawSample)
		if err != nil {
			continue
		}
		s := Stall{
			CPU:        int(e.Cpu),
			Vector:     vectorName(e.Vec),
			Duration:   time.Duration(e.DurationNs),
			At:         p.clock.wall(e.StartNs),
			Packets:    e.RxWork,
			Polls:      e.RxPolls,
			FullPolls:  e.RxFull,
			PID:        int(e.Pid),
			TGID:       int(e.Tgid),
			Comm:       bpfrec.CString(e.Comm[:]),
			Samples:    int(e.Samples),
			CPUSamples: int(e.CpuSamples),
		}
		p.mu.Lock()
		if len(p.stalls) < maxStalls {
			p.stalls = append(p.stalls, s)
		} else {
			p.notKept++
		}
		p.mu.Unlock()
	}
}

func vectorName(v uint32) string {
	if v < NrVectors {
		return Vectors[v]
	}
	return fmt.Sprintf("vec%d", v)
}

// counters are the per-CPU counters of struct cpu_state, summed.
type counters struct {
	Entries, Exits, Raises, UnpairedExits  uint64
	Stalls, StallDrops                     uint64
	Samples, SamplesIdle, StackErrors      uint64
	PendingFull, MapFull, NapiPolls, Drops uint64
	FuncCalls, FuncLost                    uint64
}

func readCounters(m *ebpf.Map) (counters, error) {
	var vals []softirqCpuState
	if err := m.Lookup(uint32(0), &vals); err != nil {
		return counters{}, fmt.Errorf("softirq: read counters: %w", err)
	}
	var c counters
	for _, v := range vals {
		c.Entries += v.Entries
		c.Exits += v.Exits
		c.Raises += v.Raises
		c.UnpairedExits += v.UnpairedExits
		c.Stalls += v.Stalls
		c.StallDrops += v.StallDrops
		c.Samples += v.Samples
		c.SamplesIdle += v.SamplesIdle
		c.StackErrors += v.StackErrors
		c.PendingFull += v.PendingFull
		c.MapFull += v.MapFull
		c.NapiPolls += v.NapiPolls
		c.Drops += v.Drops
		c.FuncCalls += v.FuncCalls
		c.FuncLost += v.FuncLost
	}
	return c, nil
}

// hists reads a per-CPU histogram array: [vector][cpu].
func readHists(m *ebpf.Map, n int) ([][]hist.Log2, error) {
	out := make([][]hist.Log2, n)
	for v := 0; v < n; v++ {
		var vals []softirqWolfHist
		if err := m.Lookup(uint32(v), &vals); err != nil {
			return nil, fmt.Errorf("softirq: read histogram %d: %w", v, err)
		}
		for _, h := range vals {
			out[v] = append(out[v], hist.FromSlots(h.Slots[:], h.Count, h.Sum, h.Max))
		}
	}
	return out, nil
}

// rawStack is a sampled stack before symbolization.
type rawStack struct {
	IPs   []uint64
	Count uint64
}

// readStacks reads a stack-count map, resolving ids through the stack map.
func (p *probe) readStacks(counts *ebpf.Map) ([]rawStack, error) {
	var (
		id    uint32
		n     uint64
		out   []rawStack
		frame = make([]uint64, stackDepth)
	)
	it := counts.Iterate()
	for it.Next(&id, &n) {
		if err := p.objs.Stacks.Lookup(id, &frame); err != nil {
			continue // evicted or never stored: the count is lost, not wrong
		}
		ips := make([]uint64, 0, stackDepth)
		for _, ip := range frame {
			if ip == 0 {
				break
			}
			ips = append(ips, ip)
		}
		out = append(out, rawStack{IPs: ips, Count: n})
	}
	if err := it.Err(); err != nil {
		return out, fmt.Errorf("softirq: read stacks: %w", err)
	}
	return out, nil
}

// NAPIStat is the polling of one NAPI instance during the window.
type NAPIStat struct {
	Device  string `json:"device"` // "backlog" for the per-CPU backlog (RPS, loopback, veth)
	Ifindex int    `json:"ifindex,omitempty"`
	CPU     int    `json:"cpu"` // last CPU that polled it
	Polls   uint64 `json:"polls"`
	Work    uint64 `json:"work"` // packets
	Full    uint64 `json:"full_polls"`
	MaxWork uint64 `json:"max_work"`
	Budget  uint64 `json:"budget"`
}

// readNAPI reads the flushed per-instance stats and adds what each CPU
// still accumulates (the BPF side flushes only when a CPU moves on to
// another instance).
func (p *probe) readNAPI() ([]NAPIStat, error) {
	byKey := map[uint64]softirqNapiStat{}
	var (
		key uint64
		v   softirqNapiStat
	)
	it := p.objs.NapiStats.Iterate()
	for it.Next(&key, &v) {
		byKey[key] = v
	}
	if err := it.Err(); err != nil {
		return nil, err
	}
	var cpus []softirqCpuState
	if err := p.objs.CPUStates.Lookup(uint32(0), &cpus); err != nil {
		return nil, fmt.Errorf("read pending NAPI stats: %w", err)
	}
	for _, c := range cpus {
		byKey[c.NapiKey] = addNAPI(byKey[c.NapiKey], c.NapiAcc, c.NapiKey != 0)
	}
	keys := make([]uint64, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []NAPIStat
	for _, k := range keys {
		v := byKey[k]
		if v.Polls == 0 {
			continue
		}
		name := bpfrec.CString(v.Dev[:])
		if name == "" {
			name = "backlog"
		}
		out = append(out, NAPIStat{Device: name, Ifindex: int(v.Ifindex), CPU: int(v.Cpu), Polls: v.Polls, Work: v.Work, Full: v.Full, MaxWork: v.MaxWork, Budget: v.Budget})
	}
	return out, nil
}

// addNAPI adds a CPU's pending accumulator to a flushed entry.
func addNAPI(flushed, acc softirqNapiStat, pending bool) softirqNapiStat {
	if !pending || acc.Polls == 0 {
		return flushed
	}
	if flushed.Polls == 0 {
		return acc
	}
	flushed.Polls += acc.Polls
	flushed.Work += acc.Work
	flushed.Full += acc.Full
	flushed.MaxWork = max(flushed.MaxWork, acc.MaxWork)
	flushed.Budget, flushed.Cpu = acc.Budget, acc.Cpu
	return flushed
}

// readDrops returns drops by reason: [0] outside NET_RX, [1] inside.
func (p *probe) readDrops() ([2]map[uint32]uint64, error) {
	out := [2]map[uint32]uint64{{}, {}}
	for idx := uint32(0); idx < 2*nrReasons; idx++ {
		var vals []uint64
		if err := p.objs.DropReasons.Lookup(idx, &vals); err != nil {
			return out, fmt.Errorf("softirq: read drop reasons: %w", err)
		}
		var sum uint64
		for _, v := range vals {
			sum += v
		}
		if sum > 0 {
			out[idx/nrReasons][idx%nrReasons] = sum
		}
	}
	return out, nil
}

func (p *probe) takeStalls() ([]Stall, uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Stall(nil), p.stalls...), p.notKept
}

// attach connects the loaded programs to their tracepoints and, with
// sampleHz > 0, starts stack sampling. Optional sources that fail become
// warnings; a required one that fails is an error, and nothing is left
// attached then.
func (p *probe) attach(sampleHz int) error {
	p.warnings = nil
	clear(p.attached)
	for _, tp := range tracepoints {
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: tp.name, Program: tp.prog(&p.objs)})
		if err != nil {
			if tp.required {
				p.detach()
				return fmt.Errorf("softirq: attach raw tracepoint %s/%s (%v): %w", tp.group, tp.name, err, investigator.ErrUnsupported)
			}
			p.warnings = append(p.warnings, fmt.Sprintf("tracepoint %s/%s unavailable (%v): %s", tp.group, tp.name, err, tp.what))
			continue
		}
		p.links = append(p.links, l)
		p.attached[tp.group+"/"+tp.name] = true
	}
	if sampleHz > 0 {
		s, err := perfsample.Attach(p.objs.OnSample, sampleHz)
		if err != nil {
			p.warnings = append(p.warnings, fmt.Sprintf("no stack sampling in NET_RX (%v): stalls are attributed by counters only", err))
		} else {
			p.sampler = s
			p.attached["perf_event"] = true
		}
	}
	return nil
}

// detach stops every event source but keeps the maps readable.
func (p *probe) detach() {
	if p.sampler != nil {
		p.sampler.Close()
		p.sampler = nil
	}
	for _, l := range p.links {
		_ = l.Close()
	}
	p.links = nil
}

func (p *probe) close() {
	p.detach()
	if p.rd != nil {
		_ = p.rd.Close()
		<-p.done // the reader has stopped, drained or closed
		p.rd = nil
	}
	_ = p.objs.Close()
}

// monoClock converts bpf_ktime_get_ns (CLOCK_MONOTONIC) to wall time.
type monoClock struct {
	wallAt time.Time
	monoAt int64
}

func newMonoClock() monoClock {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return monoClock{wallAt: time.Now(), monoAt: ts.Nano()}
}

func (c monoClock) wall(mono uint64) time.Time {
	return c.wallAt.Add(time.Duration(int64(mono) - c.monoAt))
}
