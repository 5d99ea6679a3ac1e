package softirq

import (
	"fmt"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/bpfrec"
	"github.com/wolf-investigator/wolf/internal/hist"
	"github.com/wolf-investigator/wolf/internal/kernelbtf"
	"github.com/wolf-investigator/wolf/internal/perfsample"
	"github.com/wolf-investigator/wolf/internal/probekit"
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

// attachRows are the tracepoints, in attach order: exit before entry,
// because an exit without its entry is skipped, while an entry without its
// exit would be paired with the next one. The optional ones only add
// detail.
var attachRows = []probekit.Attach{
	{Kind: probekit.RawTracepoint, Target: "irq/softirq_exit", Program: "on_softirq_exit", Required: true,
		Why: "when each softirq handler ends"},
	{Kind: probekit.RawTracepoint, Target: "irq/softirq_entry", Program: "on_softirq_entry", Required: true,
		Why: "when each softirq handler starts (run time per vector and CPU)"},
	// Under a softirq flood these two run hundreds of thousands of times
	// a second: the BPF budget sheds them (probekit.Attach.Shed) before
	// anything the stalls are measured with.
	{Kind: probekit.RawTracepoint, Target: "irq/softirq_raise", Program: "on_softirq_raise",
		Why: "raise-to-run wait per vector", Shed: 2},
	{Kind: probekit.RawTracepoint, Target: "napi/napi_poll", Program: "on_napi_poll",
		Why: "NAPI work against budget per device", Shed: 4},
	{Kind: probekit.RawTracepoint, Target: "skb/kfree_skb", Program: "on_kfree_skb",
		Why: "packet drops by reason (the reason argument needs Linux 5.17+)"},
}

// attachTable is the table for a sampling rate: stack sampling is a row
// only when it is on.
func attachTable(sampleHz int) []probekit.Attach {
	t := slices.Clone(attachRows)
	if sampleHz > 0 {
		t = append(t, probekit.Attach{Kind: probekit.PerfSample, Program: "on_sample", Hz: sampleHz,
			Why: "kernel stacks sampled while a CPU is inside NET_RX (what a stall spent its time in)"})
	}
	return t
}

// probeConfig is what the BPF side is configured with before it loads.
type probeConfig struct {
	Threshold time.Duration
	SampleHz  int // 0: no stack sampling
}

// probe owns everything the investigation attaches, through the kit.
type probe struct {
	kit    *probekit.Probe
	table  []probekit.Attach
	maps   softirqMaps
	stalls *probekit.Ring[softirqStall]
	// sampledCPUs is how many CPUs the sampler runs on (0: no sampling),
	// for the share of its timer samples that landed (CPUs not executing
	// take none).
	sampledCPUs int
}

// openProbe loads and attaches the programs; extra are programs attached
// outside the kit (function latency) to meter with them.
func openProbe(cfg probeConfig, extra ...*ebpf.Program) (*probe, error) {
	p := &probe{table: attachTable(cfg.SampleHz)}
	kit, err := probekit.Open(probekit.Object{
		Name:  "softirq",
		Spec:  loadSoftirq,
		Vars:  map[string]any{"threshold_ns": uint64(cfg.Threshold.Nanoseconds())},
		Table: p.table,
		Extra: extra,
		BTF:   kernelbtf.External(),
	})
	if err != nil {
		return nil, err
	}
	p.kit = kit
	if kit.Attached("perf_event") {
		if cpus, err := perfsample.OnlineCPUs(); err == nil {
			p.sampledCPUs = len(cpus)
		}
	}
	if err := kit.AssignMaps(&p.maps); err != nil {
		kit.Close()
		return nil, err
	}
	if p.stalls, err = probekit.OpenRing[softirqStall](kit, "stalls", maxStalls); err != nil {
		kit.Close()
		return nil, err
	}
	return p, nil
}

func (p *probe) close() { p.kit.Close() }

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

// takeStalls returns the stalls the ring buffer delivered since the
// previous call, and how many it could not keep.
func (p *probe) takeStalls() ([]Stall, uint64, error) {
	evs, lost, err := p.stalls.Take()
	clock := newMonoClock()
	out := make([]Stall, 0, len(evs))
	for _, e := range evs {
		out = append(out, Stall{
			CPU:        int(e.Cpu),
			Vector:     vectorName(e.Vec),
			Duration:   time.Duration(e.DurationNs),
			At:         clock.wall(e.StartNs),
			Packets:    e.RxWork,
			Polls:      e.RxPolls,
			FullPolls:  e.RxFull,
			PID:        int(e.Pid),
			TGID:       int(e.Tgid),
			Comm:       bpfrec.CString(e.Comm[:]),
			Samples:    int(e.Samples),
			CPUSamples: int(e.CpuSamples),
		})
	}
	return out, lost, err
}

func vectorName(v uint32) string {
	if v < NrVectors {
		return Vectors[v]
	}
	return fmt.Sprintf("vec%d", v)
}

// counters are the per-CPU counters of struct cpu_state, summed. They are
// not in a WOLF_STATS array: the hot ones (entries, exits, raises, polls)
// sit in the cache line every softirq entry and exit touches anyway, and a
// stats array would cost each event a second map lookup and line.
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

// sub is what the counters counted since an earlier reading.
func (c counters) sub(e counters) counters {
	s := probekit.Sub
	return counters{
		Entries: s(c.Entries, e.Entries), Exits: s(c.Exits, e.Exits), Raises: s(c.Raises, e.Raises),
		UnpairedExits: s(c.UnpairedExits, e.UnpairedExits), Stalls: s(c.Stalls, e.Stalls),
		StallDrops: s(c.StallDrops, e.StallDrops), Samples: s(c.Samples, e.Samples),
		SamplesIdle: s(c.SamplesIdle, e.SamplesIdle), StackErrors: s(c.StackErrors, e.StackErrors),
		PendingFull: s(c.PendingFull, e.PendingFull), MapFull: s(c.MapFull, e.MapFull),
		NapiPolls: s(c.NapiPolls, e.NapiPolls), Drops: s(c.Drops, e.Drops),
		FuncCalls: s(c.FuncCalls, e.FuncCalls), FuncLost: s(c.FuncLost, e.FuncLost),
	}
}

// readHists reads a per-CPU histogram array: [vector][cpu], cumulative,
// with window w's maxima.
func readHists(m *ebpf.Map, n int, w uint32) ([][]hist.Log2, error) {
	out := make([][]hist.Log2, n)
	for v := 0; v < n; v++ {
		var vals []softirqWolfHist
		if err := m.Lookup(uint32(v), &vals); err != nil {
			return nil, fmt.Errorf("softirq: read histogram %d: %w", v, err)
		}
		for i := range vals {
			out[v] = append(out[v], hist.FromBPF(&vals[i], w))
		}
	}
	return out, nil
}

// rawStack is a sampled stack before symbolization.
type rawStack struct {
	IPs   []uint64
	Count uint64
}

// readStacks reads a stack-count map by stack id, resolving ids through
// the stack map. Counts are cumulative.
func (p *probe) readStacks(counts *ebpf.Map) (map[uint32]rawStack, error) {
	var (
		id    uint32
		n     uint64
		out   = map[uint32]rawStack{}
		frame = make([]uint64, stackDepth)
	)
	it := counts.Iterate()
	for it.Next(&id, &n) {
		if err := p.maps.Stacks.Lookup(id, &frame); err != nil {
			continue // evicted or never stored: the count is lost, not wrong
		}
		ips := make([]uint64, 0, stackDepth)
		for _, ip := range frame {
			if ip == 0 {
				break
			}
			ips = append(ips, ip)
		}
		out[id] = rawStack{IPs: ips, Count: n}
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

// readNAPI reads, per NAPI instance (by its napi_struct), the flushed
// stats plus what the CPUs still accumulate (the BPF side flushes only
// when a CPU moves on to another instance): polls, work and full polls
// cumulative, MaxWork window w's.
func (p *probe) readNAPI(w uint32) (map[uint64]NAPIStat, error) {
	out := map[uint64]NAPIStat{}
	add := func(key uint64, v *softirqNapiStat) {
		if v.Polls == 0 {
			return
		}
		n := out[key]
		n.Polls += v.Polls
		n.Work += v.Work
		n.Full += v.Full
		n.MaxWork = max(n.MaxWork, probekit.WindowMax(v.MaxWork.V, v.MaxWork.Win, w))
		n.Budget, n.CPU, n.Ifindex = v.Budget, int(v.Cpu), int(v.Ifindex)
		if name := bpfrec.CString(v.Dev[:]); name != "" || n.Device == "" {
			n.Device = name
		}
		out[key] = n
	}
	err := readFlushedAndPending(p, p.maps.NapiStats, add, func(c *softirqCpuState) {
		if c.NapiKey != 0 {
			add(c.NapiKey, &c.NapiAcc)
		}
	})
	return out, err
}

// readFlushedAndPending gives add every entry of a map the BPF side
// flushes to, then gives pending each CPU's state, whose accumulator holds
// what that CPU has not flushed yet (it flushes only when it moves on to
// another key).
func readFlushedAndPending[K, V any](p *probe, flushed *ebpf.Map, add func(K, *V), pending func(*softirqCpuState)) error {
	var (
		key K
		v   V
	)
	it := flushed.Iterate()
	for it.Next(&key, &v) {
		add(key, &v)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("flushed: %w", err)
	}
	var cpus []softirqCpuState
	if err := p.maps.CpuStates.Lookup(uint32(0), &cpus); err != nil {
		return fmt.Errorf("pending on the CPUs: %w", err)
	}
	for i := range cpus {
		pending(&cpus[i])
	}
	return nil
}

// napiWindow is the window's polling per instance, from two readings of
// flushed-plus-pending stats. That sum only grows, but a flush between
// reading napi_stats and reading the CPUs' accumulators is seen in
// neither: what was kept (keep) is the larger of the two readings, so
// such a flush is counted in the next window, not twice.
func napiWindow(cur, prev NAPIStat, _ bool) (NAPIStat, NAPIStat) {
	d := cur
	d.Polls = probekit.Sub(cur.Polls, prev.Polls)
	d.Work = probekit.Sub(cur.Work, prev.Work)
	d.Full = probekit.Sub(cur.Full, prev.Full)
	keep := cur
	keep.Polls, keep.Work, keep.Full = max(cur.Polls, prev.Polls), max(cur.Work, prev.Work), max(cur.Full, prev.Full)
	return d, keep
}

// readDrops returns the cumulative drops by reason: index + nrReasons
// inside NET_RX.
func (p *probe) readDrops() ([2 * nrReasons]uint64, error) {
	var out [2 * nrReasons]uint64
	for idx := uint32(0); idx < 2*nrReasons; idx++ {
		var vals []uint64
		if err := p.maps.DropReasons.Lookup(idx, &vals); err != nil {
			return out, fmt.Errorf("softirq: read drop reasons: %w", err)
		}
		for _, v := range vals {
			out[idx] += v
		}
	}
	return out, nil
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

// TaskTime is the softirq time that ran on top of one task (the task
// current on the CPU when the handler ran: it resumed only after), per
// vector, in a window.
type TaskTime struct {
	TID, TGID int
	Comm      string
	Runs      uint64
	NS        [NrVectors]uint64
}

// Total is the task's softirq time, all vectors.
func (t TaskTime) Total() time.Duration {
	var sum uint64
	for _, v := range t.NS {
		sum += v
	}
	return time.Duration(sum)
}

// readTasks reads, per task, the flushed softirq time plus what the CPUs
// still accumulate for the task each last ran on top of, cumulative.
func (p *probe) readTasks() (map[uint32]TaskTime, error) {
	out := map[uint32]TaskTime{}
	add := func(tid uint32, v *softirqTaskSoftirq) {
		if v.Runs == 0 {
			return
		}
		t := out[tid]
		t.TID, t.TGID = int(tid), int(v.Tgid)
		if c := bpfrec.CString(v.Comm[:]); c != "" {
			t.Comm = c
		}
		t.Runs += v.Runs
		for i := range t.NS {
			t.NS[i] += v.Ns[i]
		}
		out[tid] = t
	}
	err := readFlushedAndPending(p, p.maps.TaskSoftirqs, add, func(c *softirqCpuState) {
		if t := uint32(c.VictimId); t != 0 {
			add(t, &c.VictimAcc)
		}
	})
	return out, err
}

// taskWindow is the window's softirq time per task, from two readings of
// flushed-plus-pending sums, like napiWindow: a flush between the two
// reads is counted in the next window, not twice.
func taskWindow(cur, prev TaskTime, _ bool) (TaskTime, TaskTime) {
	d, keep := cur, cur
	d.Runs, keep.Runs = probekit.Envelope(cur.Runs, prev.Runs)
	for i := range cur.NS {
		d.NS[i], keep.NS[i] = probekit.Envelope(cur.NS[i], prev.NS[i])
	}
	return d, keep
}
