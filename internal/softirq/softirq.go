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
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf/btf"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/kallsyms"
	"github.com/wolf-investigator/wolf/internal/overhead"
	"github.com/wolf-investigator/wolf/internal/sysctl"
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
	// the cost benchmark start their workload then).
	started func()
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

// Start reads the counters the window is measured against, loads and
// attaches. opts.PID is ignored: softirqs belong to CPUs, not tasks.
func (inv *Investigator) Start(ctx context.Context, opts investigator.Options) (investigator.Session, error) {
	if inv.Threshold <= 0 {
		inv.Threshold = DefaultThreshold
	}
	s := &session{inv: *inv, meter: overhead.Start()}
	// Counters are read before attaching and after the window, so the
	// window they cover contains the one the BPF side saw.
	s.scanner = defaultScanner()
	s.netnsBefore, s.netnsErr = s.scanner.scan(ctx)
	s.softnetBefore, s.softnetErr = readSoftnet()
	s.cpuBefore, s.cpuErr = readCPUTimes()

	var err error
	if s.p, err = openProbe(probeConfig{Threshold: inv.Threshold, SampleHz: inv.SampleHz}); err != nil {
		s.meter.Close()
		return nil, err
	}
	if inv.Func != nil {
		if s.fp, err = openFuncProbe(*inv.Func, inv.FuncPID); err != nil {
			s.Close()
			return nil, err
		}
	}
	tracked := s.p.objs.programs()
	if s.fp != nil {
		tracked = append(tracked, s.fp.objs.FuncEntry, s.fp.objs.FuncReturn)
	}
	s.meter.Track(tracked...)
	s.start = time.Now()
	if inv.started != nil {
		inv.started()
	}
	return s, nil
}

// session is softirq attached.
type session struct {
	inv           Investigator
	meter         *overhead.Meter
	scanner       netnsScanner
	netnsBefore   map[uint64]*Netns
	netnsErr      error
	softnetBefore []Softnet
	softnetErr    error
	cpuBefore     CPUTimes
	cpuErr        error
	p             *probe
	fp            *funcProbe
	start         time.Time
}

// Close detaches and frees everything.
func (s *session) Close() error {
	// The meter's duty cycle reads the programs' statistics in the
	// background: stop it before the programs close under it.
	s.meter.Close()
	if s.fp != nil {
		s.fp.close()
	}
	if s.p != nil {
		s.p.close()
	}
	return nil
}

// Collect concludes the window since Start.
func (s *session) Collect(ctx context.Context) (*investigator.Result, error) {
	inv, p, fp := &s.inv, s.p, s.fp
	scanner, netnsBefore, netnsErr := s.scanner, s.netnsBefore, s.netnsErr
	softnetBefore, softnetErr, cpuBefore, cpuErr := s.softnetBefore, s.softnetErr, s.cpuBefore, s.cpuErr
	window := time.Since(s.start)

	snap := &Snapshot{
		Window:      window,
		Threshold:   inv.Threshold,
		Settings:    ReadSettings(sysctl.ReadInt, sysctl.Read),
		RaiseTraced: p.attached["irq/softirq_raise"],
		StealPct:    -1,
	}
	if cpuErr == nil {
		if after, err := readCPUTimes(); err == nil {
			snap.StealPct = StealPct(cpuBefore, after)
		}
	}
	if p.attached["perf_event"] {
		snap.SampleHz = inv.SampleHz
	}
	runs, err := readHists(p.objs.RunHist, NrVectors)
	if err != nil {
		return nil, err
	}
	waits, err := readHists(p.objs.WaitHist, NrVectors)
	if err != nil {
		return nil, err
	}
	copy(snap.Run[:], runs)
	copy(snap.Wait[:], waits)
	cnt, err := readCounters(p.objs.CPUStates)
	if err != nil {
		return nil, err
	}
	stalls, notKept := p.takeStalls()
	snap.Stalls = stalls
	snap.StallsLost = cnt.StallDrops + notKept
	if snap.NAPI, err = p.readNAPI(); err != nil {
		return nil, fmt.Errorf("softirq: read NAPI stats: %w", err)
	}
	if p.attached["skb/kfree_skb"] {
		drops, err := p.readDrops()
		if err != nil {
			return nil, err
		}
		var names map[uint32]string
		if len(drops[0])+len(drops[1]) > 0 {
			names = dropReasonNames() // parsing BTF costs: only when needed
		}
		for i := range drops {
			snap.Drops[i] = map[string]int{}
			for r, n := range drops[i] {
				snap.Drops[i][reasonName(names, r)] += int(n)
			}
		}
	}
	var symsErr error
	if snap.SampleHz > 0 {
		rx, err := p.readStacks(p.objs.RxStackCounts)
		if err != nil {
			return nil, err
		}
		st, err := p.readStacks(p.objs.StallStackCounts)
		if err != nil {
			return nil, err
		}
		var syms *kallsyms.Table
		if len(rx)+len(st) > 0 {
			// Only NET_RX samples need symbols: an idle host skips the
			// parse. Not ctx: after Ctrl-C the report is still wanted.
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			syms, symsErr = kallsyms.Load(sctx)
			cancel()
		}
		snap.RxStacks, snap.StallStacks = symbolize(syms, rx), symbolize(syms, st)
	}

	// Counters after.
	if netnsErr == nil {
		snap.Netns = NetnsDeltas(netnsBefore, scanner.reread(context.Background(), netnsBefore))
	} else {
		snap.NetnsNote = netnsErr.Error()
	}
	if softnetErr == nil {
		if after, err := readSoftnet(); err == nil {
			snap.Softnet = SoftnetDeltas(softnetBefore, after)
		}
	}

	res := &investigator.Result{
		Findings:     Conclude(snap),
		Histograms:   Histograms(snap, inv.PerCPU),
		Profiles:     Profiles(snap),
		Capabilities: map[string]bool{},
		Notes:        p.warnings,
	}
	if snap.NetnsNote != "" {
		res.Notes = append(res.Notes, "no TcpExt counters: "+snap.NetnsNote)
	}
	if symsErr != nil {
		res.Notes = append(res.Notes, fmt.Sprintf("stacks left unsymbolized: %v", symsErr))
	}
	for _, tp := range tracepoints {
		res.Capabilities["tracepoint:"+tp.group+"/"+tp.name] = p.attached[tp.group+"/"+tp.name]
	}
	res.Capabilities["perf_event"] = p.attached["perf_event"]
	progs := p.objs.programs()
	if fp != nil {
		fr, err := fp.result()
		if err != nil {
			return nil, err
		}
		f, h := FuncFinding(fr, window)
		res.Findings = append(res.Findings, f)
		res.Histograms = append(res.Histograms, h)
		finding.Sort(res.Findings)
		progs = append(progs, fp.objs.FuncEntry, fp.objs.FuncReturn)
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
	res.Overhead = s.meter.Lap(events, dropped, progs...)
	return res, nil
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
func dropReasonNames() map[uint32]string {
	spec, err := btf.LoadKernelSpec()
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
