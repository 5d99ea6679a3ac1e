// Package softirq is wolf's softirq investigator, after Cloudflare's "The story of one latency spike": how long each
// softirq vector runs and waits on each CPU, every run above a threshold,
// and, for NET_RX, what the time went to: kernel stacks sampled only while
// the CPU is inside NET_RX, TCP's prune and collapse counters, and drop
// reasons, all from the same window. It also times single functions (the
// write-up's histogram-kernel.stp) with uprobes, or kprobes where the kernel
// has them. The BPF side is softirq.bpf.c; Conclude turns what it saw into
// findings.
package softirq

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/hist"
	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/kallsyms"
	"github.com/wolf-investigator/wolf/internal/kernelbtf"
	"github.com/wolf-investigator/wolf/internal/pace"
	"github.com/wolf-investigator/wolf/internal/perfsample"
	"github.com/wolf-investigator/wolf/internal/probekit"
	"github.com/wolf-investigator/wolf/internal/sysctl"
	"github.com/wolf-investigator/wolf/internal/virt"
)

// DefaultThreshold is the run time from which a softirq run is a stall:
// above netdev_budget_usecs' 2 ms default (8 ms at HZ=250 is the other
// common default), well under the write-up's 23 ms.
const DefaultThreshold = 5 * time.Millisecond

// DefaultSampleHz is how often each CPU is sampled; only samples inside
// NET_RX are kept. 997 Hz gives a 5 ms stall about five stacks while
// staying out of lockstep with the tick.
const DefaultSampleHz = 997

// Investigator watches softirqs. The zero value is not ready; use New.
type Investigator struct {
	Threshold time.Duration // a run at least this long is a stall
	SampleHz  int           // stack sampling frequency; 0 turns it off
	PerCPU    bool          // also report per-CPU histograms
	// PrintHistograms makes text reports end with the histograms drawn
	// (--histograms).
	PrintHistograms bool
	// Func, if set, is a function to time as well (--func); FuncPID
	// limits a user-space one to one process.
	Func    *FuncTarget
	FuncPID int

	// started, if set, is called once everything is attached (tests and
	// the cost benchmark start their workload then); collected sees each
	// window's snapshot before it is concluded (tests).
	started   func()
	collected func(*Snapshot)
}

// New returns an investigator with the defaults.
func New() *Investigator {
	return &Investigator{Threshold: DefaultThreshold, SampleHz: DefaultSampleHz}
}

// Name implements investigator.Investigator.
func (*Investigator) Name() string { return "softirq" }

// Summary implements investigator.Investigator.
func (*Investigator) Summary() string {
	return "softirq run and wait times per vector and CPU, long NET_RX stalls and what caused them (TCP collapse, budget)"
}

// Start reads the counters the first window is measured against, loads
// and attaches. opts.PID is ignored: softirqs belong to CPUs, not tasks.
func (inv *Investigator) Start(ctx context.Context, opts investigator.Options) (investigator.Session, error) {
	if inv.Threshold <= 0 {
		inv.Threshold = DefaultThreshold
	}
	s := &session{inv: *inv, scanner: defaultScanner()}
	// Counters are read before attaching and after the window, so the
	// window they cover contains the one the BPF side saw.
	s.netns, s.netnsErr = s.scanner.scan(ctx)
	s.softnet, s.softnetErr = readSoftnet()
	s.cpu, s.cpuErr = readCPUTimes()

	var extra []*ebpf.Program
	if inv.Func != nil {
		var err error
		if s.fp, err = openFuncProbe(*inv.Func, inv.FuncPID); err != nil {
			return nil, err
		}
		extra = []*ebpf.Program{s.fp.objs.FuncEntry, s.fp.objs.FuncReturn}
	}
	p, err := openProbe(probeConfig{Threshold: inv.Threshold, SampleHz: inv.SampleHz}, extra...)
	if err != nil {
		if s.fp != nil {
			s.fp.close()
		}
		return nil, err
	}
	s.p = p
	// The programs' runs so far, then the kernel's: a run that ends
	// between the two readings is in the first and not the second, so
	// the programs start, if anything, ahead (unseen.go).
	if runs, err := readHists(p.maps.RunHist, NrVectors, 0); err != nil {
		s.kernelRunsErr = err
	} else {
		s.seenRuns = runCounts(runs)
		s.kernelRuns, s.kernelRunsErr = readSoftirqs()
	}
	s.start = time.Now()
	if inv.started != nil {
		inv.started()
	}
	return s, nil
}

// session is softirq attached. Its windows:
//   - the run and wait histograms (per vector and CPU), the counters of
//     cpu_states, drops by reason, sampled stacks and the function-latency
//     histogram are cumulative in the maps: each window is the reading at
//     its Collect minus the previous one (prev), with the window's maxima
//     kept per window by the programs (wolf.h's struct wolf_max);
//   - NAPI stats are the flushed entries plus the CPUs' pending
//     accumulators, windowed the same way (see napiWindow);
//   - stalls cross the ring buffer and are taken per window;
//   - TcpExt, softnet_stat and /proc/stat are read at each Collect: one
//     window's after is the next one's before.
//
// Nothing is detached between windows, so no run is lost at a boundary;
// a run in progress at Collect is counted in the window it ends in.
type session struct {
	inv     Investigator
	scanner netnsScanner
	p       *probe
	fp      *funcProbe
	start   time.Time // the window's

	// The counters the next window is measured against.
	netns      map[uint64]*Netns
	netnsErr   error
	softnet    []Softnet
	softnetErr error
	cpu        CPUTimes
	cpuErr     error
	// The programs' and the kernel's run counts just after attach, and
	// the runs the kernel counted that the programs missed, reported so
	// far (unseen.go).
	seenRuns, kernelRuns [NrVectors]uint64
	kernelRunsErr        error
	unseen               [NrVectors]uint64
	prev                 reading
	napi                 probekit.Since[uint64, NAPIStat]
	tasks                probekit.Since[uint32, TaskTime]
	// Sampled stacks come and go; their bounded maps would fill over
	// hours (see evictStacks).
	idleRx, idleStall probekit.Idle[uint32]
}

// reading is what the maps held at one Collect, cumulative since Start.
type reading struct {
	run, wait [NrVectors][]hist.Log2 // per CPU
	cnt       counters
	drops     [2 * nrReasons]uint64
	rx, stall map[uint32]rawStack
	fn        FuncResult
}

// Close detaches and frees everything.
func (s *session) Close() error {
	if s.p != nil {
		s.p.close()
	}
	if s.fp != nil {
		s.fp.close()
	}
	return nil
}

// Restart begins the window again (investigator.Restarter): a Collect
// whose conclusions are dropped, which moves every reading to now.
// Softirqs delayed by the other investigators' loading are then not the
// window's.
func (s *session) Restart(ctx context.Context) error {
	_, err := s.Collect(ctx)
	return err
}

// Collect concludes the window since Start or the previous Collect.
func (s *session) Collect(ctx context.Context) (*investigator.Result, error) {
	inv, p, fp := &s.inv, s.p, s.fp
	now := time.Now()
	window := now.Sub(s.start)

	// The window's maxima stop here; the maps are read after.
	w, err := p.kit.EndWindow()
	if err != nil {
		return nil, err
	}
	snap := &Snapshot{
		Window:      window,
		Threshold:   inv.Threshold,
		Settings:    ReadSettings(sysctl.ReadInt, sysctl.Read),
		RaiseTraced: p.kit.Attached("irq/softirq_raise"),
		StealPct:    -1,
		Virtual:     virt.Detect(),
		Slowdown:    pace.Slowdown(),
		SelfTGID:    os.Getpid(),
	}
	if cpus, err := perfsample.OnlineCPUs(); err == nil {
		snap.CPUs = len(cpus)
	}
	if s.cpuErr == nil {
		if after, err := readCPUTimes(); err == nil {
			snap.StealPct = StealPct(s.cpu, after)
			s.cpu = after
		}
	}
	if p.kit.Attached("perf_event") {
		snap.SampleHz = inv.SampleHz
	}
	var cur reading
	if cur.cnt, err = readCounters(p.maps.CpuStates); err != nil {
		return nil, err
	}
	// The kernel's count first: it counts a run as it enters, the
	// programs as it ends (unseen.go).
	kernelRuns, kernelRunsErr := readSoftirqs()
	runs, err := readHists(p.maps.RunHist, NrVectors, w)
	if err != nil {
		return nil, err
	}
	waits, err := readHists(p.maps.WaitHist, NrVectors, w)
	if err != nil {
		return nil, err
	}
	copy(cur.run[:], runs)
	copy(cur.wait[:], waits)
	if s.kernelRunsErr == nil && kernelRunsErr == nil {
		var kernel, seen [NrVectors]uint64
		counts := runCounts(cur.run[:])
		for vec := range NrVectors {
			kernel[vec] = probekit.Sub(kernelRuns[vec], s.kernelRuns[vec])
			seen[vec] = probekit.Sub(counts[vec], s.seenRuns[vec])
		}
		// A histogram per possible CPU: how many runs can be in flight.
		snap.Unseen = unseenRuns(kernel, seen, len(cur.run[0]), &s.unseen)
	}
	for vec := range NrVectors {
		snap.Run[vec] = subHists(cur.run[vec], s.prev.run[vec])
		snap.Wait[vec] = subHists(cur.wait[vec], s.prev.wait[vec])
	}
	cnt := cur.cnt.sub(s.prev.cnt)
	stalls, notKept, ringErr := p.takeStalls()
	if ringErr != nil {
		return nil, fmt.Errorf("softirq: ring buffer: %w", ringErr)
	}
	// The share of the sampler's timer samples that landed in the window.
	if snap.SampleHz > 0 && p.sampledCPUs > 0 && window > time.Second {
		want := window.Seconds() * float64(snap.SampleHz) * float64(p.sampledCPUs)
		snap.SampleCoverage = min(float64(cnt.Samples+cnt.SamplesIdle)/want, 1)
	}
	snap.Stalls = stalls
	snap.StallsLost = cnt.StallDrops + notKept
	napi, err := p.readNAPI(w)
	if err != nil {
		return nil, fmt.Errorf("softirq: read NAPI stats: %w", err)
	}
	snap.NAPI = napiList(s.napi.Step(napi, napiWindow))
	tasks, err := p.readTasks()
	if err != nil {
		return nil, fmt.Errorf("softirq: read softirq time per task: %w", err)
	}
	snap.Tasks = taskList(s.tasks.Step(tasks, taskWindow))
	if p.kit.Attached("skb/kfree_skb") {
		if cur.drops, err = p.readDrops(); err != nil {
			return nil, err
		}
		snap.Drops = dropsByName(cur.drops, s.prev.drops)
	}
	var symsErr error
	if snap.SampleHz > 0 {
		if cur.rx, err = p.readStacks(p.maps.RxStackCounts); err != nil {
			return nil, err
		}
		if cur.stall, err = p.readStacks(p.maps.StallStackCounts); err != nil {
			return nil, err
		}
		rx, st := subStacks(cur.rx, s.prev.rx), subStacks(cur.stall, s.prev.stall)
		s.evictStacks(cur.rx, cur.stall)
		var syms *kallsyms.Table
		if len(rx)+len(st) > 0 {
			// Only NET_RX samples need symbols: an idle host skips the
			// parse. Not ctx's deadline: after Ctrl-C the report is still
			// wanted. Its values, though: a run's shared kernel symbols.
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), kallsyms.ReadTimeout())
			syms, symsErr = kallsyms.Load(sctx)
			cancel()
		}
		snap.RxStacks, snap.StallStacks = symbolize(syms, rx), symbolize(syms, st)
	}

	// Counters after, which the next window starts from.
	if s.netnsErr == nil {
		after := s.rescan(ctx)
		snap.Netns = NetnsDeltas(s.netns, after)
		s.netns = after
	} else {
		snap.NetnsNote = s.netnsErr.Error()
	}
	if s.softnetErr == nil {
		if after, err := readSoftnet(); err == nil {
			snap.Softnet = SoftnetDeltas(s.softnet, after)
			s.softnet = after
		}
	}

	if inv.collected != nil {
		inv.collected(snap)
	}
	fs, facts := ConcludeFacts(snap)
	res := &investigator.Result{
		Findings:     fs,
		Facts:        facts,
		Histograms:   Histograms(snap, inv.PerCPU),
		Profiles:     Profiles(snap),
		Capabilities: p.kit.Capabilities(p.table),
		Notes:        p.kit.Notes(),
	}
	if _, ok := res.Capabilities["perf_event"]; !ok {
		res.Capabilities["perf_event"] = false // sampling off (--sample-hz 0)
	}
	if n := unseenNote(snap.Unseen); n != "" {
		res.Notes = append(res.Notes, n)
	}
	if snap.NetnsNote != "" {
		res.Notes = append(res.Notes, "no TcpExt counters: "+snap.NetnsNote)
	}
	if symsErr != nil {
		res.Notes = append(res.Notes, fmt.Sprintf("stacks left unsymbolized: %v", symsErr))
	}
	if fp != nil {
		if cur.fn, err = fp.result(); err != nil {
			return nil, err
		}
		fr := cur.fn.sub(s.prev.fn)
		f, h := FuncFinding(fr, window)
		res.Findings = append(res.Findings, f)
		res.Histograms = append(res.Histograms, h)
		finding.Sort(res.Findings)
		cnt.FuncCalls = fr.Hist.Count
		cnt.FuncLost = fr.Lost
		if inv.Func.Kernel() {
			res.Capabilities["kprobes"] = true
		} else {
			res.Capabilities["uprobes"] = true
		}
	}
	if symsErr != nil {
		res.Capabilities["kallsyms"] = false
	}
	events := cnt.Entries + cnt.Exits + cnt.Raises + cnt.NapiPolls + cnt.Drops + cnt.Samples + cnt.SamplesIdle + 2*cnt.FuncCalls
	dropped := cnt.StallDrops + notKept + cnt.StackErrors + cnt.PendingFull + cnt.MapFull
	for _, n := range snap.Unseen {
		dropped += n
	}
	res.Overhead = p.kit.Overhead(events, dropped)
	s.prev, s.start = cur, now
	return res, nil
}

// rescan reads every network namespace's counters again: the namespaces
// of the previous reading through the same tasks where the full scan did
// not reach them (it is bounded in time), and namespaces new since.
func (s *session) rescan(ctx context.Context) map[uint64]*Netns {
	after, _ := s.scanner.scan(context.WithoutCancel(ctx))
	if after == nil {
		after = map[uint64]*Netns{}
	}
	for inode, n := range s.scanner.reread(context.WithoutCancel(ctx), s.netns) {
		if after[inode] == nil {
			after[inode] = n
		}
	}
	return after
}

// subHists is the window of per-CPU histograms (the maxima are already
// the window's).
func subHists(cur, prev []hist.Log2) []hist.Log2 {
	out := make([]hist.Log2, len(cur))
	for i := range cur {
		if i < len(prev) {
			out[i] = cur[i].Sub(&prev[i])
		} else {
			out[i] = cur[i]
		}
	}
	return out
}

// evictStacks deletes the stacks whose sample counts have not changed for
// probekit.IdleAfter readings from the count maps and from cur (so that
// they count from zero if they come back), and from the stack map once
// neither count map has them. A sample taken between the reading and the
// delete is lost with them: after three windows without one, rare.
func (s *session) evictStacks(rx, stall map[uint32]rawStack) {
	p := s.p
	var gone []uint32
	for _, m := range []struct {
		cur, prev map[uint32]rawStack
		idle      *probekit.Idle[uint32]
		counts    *ebpf.Map
	}{{rx, s.prev.rx, &s.idleRx, p.maps.RxStackCounts}, {stall, s.prev.stall, &s.idleStall, p.maps.StallStackCounts}} {
		for id, st := range m.cur {
			if m.idle.Step(id, st.Count != m.prev[id].Count) {
				_ = m.counts.Delete(id)
				delete(m.cur, id)
				gone = append(gone, id)
			}
		}
		m.idle.End()
	}
	for _, id := range gone {
		_, inRx := rx[id]
		_, inStall := stall[id]
		if !inRx && !inStall {
			_ = p.maps.Stacks.Delete(id)
		}
	}
}

// subStacks is the window's samples per stack.
func subStacks(cur, prev map[uint32]rawStack) []rawStack {
	var out []rawStack
	for id, st := range cur {
		if n := probekit.Sub(st.Count, prev[id].Count); n > 0 {
			out = append(out, rawStack{IPs: st.IPs, Count: n})
		}
	}
	return out
}

// taskList is the window's tasks that softirq work ran on top of, most
// time first.
func taskList(byTID map[uint32]TaskTime) []TaskTime {
	out := make([]TaskTime, 0, len(byTID))
	for _, t := range byTID {
		if t.Runs > 0 {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if a, b := out[i].Total(), out[j].Total(); a != b {
			return a > b
		}
		return out[i].TID < out[j].TID
	})
	return out
}

// napiList is the window's instances that were polled, in a stable order.
func napiList(byKey map[uint64]NAPIStat) []NAPIStat {
	keys := make([]uint64, 0, len(byKey))
	for k, v := range byKey {
		if v.Polls > 0 {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	out := make([]NAPIStat, 0, len(keys))
	for _, k := range keys {
		n := byKey[k]
		if n.Device == "" {
			n.Device = "backlog"
		}
		out = append(out, n)
	}
	return out
}

// dropsByName is the window's drops by reason name: [0] outside NET_RX,
// [1] inside.
func dropsByName(cur, prev [2 * nrReasons]uint64) [2]map[string]int {
	var out [2]map[string]int
	var names map[uint32]string
	for i := range out {
		out[i] = map[string]int{}
	}
	for idx := range cur {
		n := probekit.Sub(cur[idx], prev[idx])
		if n == 0 {
			continue
		}
		if names == nil {
			names = dropReasonNames() // parsing BTF costs: only when needed
		}
		out[idx/nrReasons][reasonName(names, uint32(idx%nrReasons))] += int(n)
	}
	return out
}

// ReadSettings reads the sysctls the analysis quotes; unknown ones are -1.
func ReadSettings(readInt func(string) (int64, error), read func(string) (string, error)) Settings {
	s := UnknownSettings()
	if v, err := read("net.ipv4.tcp_rmem"); err == nil {
		if f := strings.Fields(v); len(f) == 3 {
			for i := range f {
				if n, err := strconv.ParseInt(f[i], 10, 64); err == nil {
					s.TCPRmem[i] = n
				}
			}
		}
	}
	for name, dst := range map[string]*int64{
		"net.core.netdev_budget":       &s.NetdevBudget,
		"net.core.netdev_budget_usecs": &s.NetdevBudgetUsecs,
		"net.core.dev_weight":          &s.DevWeight,
		"net.core.netdev_max_backlog":  &s.MaxBacklog,
	} {
		if v, err := readInt(name); err == nil {
			*dst = v
		}
	}
	return s
}

// symbolize names the frames of raw stacks; without symbols the
// addresses stay hexadecimal.
func symbolize(syms *kallsyms.Table, raw []rawStack) []Stack {
	out := make([]Stack, 0, len(raw))
	for _, r := range raw {
		var frames []string
		if syms != nil {
			frames = syms.SymbolizeStack(r.IPs)
		} else {
			for _, ip := range r.IPs {
				frames = append(frames, fmt.Sprintf("%#x", ip))
			}
		}
		out = append(out, Stack{Frames: frames, Count: r.Count})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Count > out[j].Count })
	return out
}

// dropReasonNames maps enum skb_drop_reason values to names from the
// kernel's BTF ("SKB_DROP_REASON_NO_SOCKET" → "NO_SOCKET"); nil without BTF.
//
// Once per process: drops happen on every host, so nearly every Collect
// asks, and loading the kernel's BTF costs milliseconds and megabytes.
var dropReasonNames = sync.OnceValue(readDropReasonNames)

func readDropReasonNames() map[uint32]string {
	spec, err := kernelbtf.Spec()
	if err != nil {
		return nil
	}
	var e *btf.Enum
	if err := spec.TypeByName("skb_drop_reason", &e); err != nil {
		return nil
	}
	out := map[uint32]string{}
	for _, v := range e.Values {
		out[uint32(v.Value)] = strings.TrimPrefix(strings.TrimPrefix(v.Name, "SKB_DROP_REASON_"), "SKB_")
	}
	return out
}

func reasonName(names map[uint32]string, r uint32) string {
	if n, ok := names[r]; ok {
		return n
	}
	if r == nrReasons-1 {
		return "OTHER"
	}
	return "reason_" + strconv.Itoa(int(r))
}
