package softirq

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/wolf-investigator/wolf/internal/features"
	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/hist"
	"github.com/wolf-investigator/wolf/internal/human"
	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/kernelbtf"
	"github.com/wolf-investigator/wolf/internal/probekit"
)

// FuncTarget is a function whose latency --func measures, as in Cloudflare's "The story of one latency spike" (its
// histogram-kernel.stp: a kernel function by name, or a user-space one as
// BINARY:SYMBOL.
type FuncTarget struct {
	Binary string // empty for a kernel function
	Symbol string
}

// Kernel reports whether the target is a kernel function.
func (t FuncTarget) Kernel() bool { return t.Binary == "" }

func (t FuncTarget) String() string {
	if t.Kernel() {
		return t.Symbol
	}
	return t.Binary + ":" + t.Symbol
}

// ParseFuncTarget reads "net_rx_action" or "/usr/bin/app:handle_request".
// It checks the form only; CheckFunc checks that it can be attached.
func ParseFuncTarget(s string) (FuncTarget, error) {
	if s == "" {
		return FuncTarget{}, errors.New("empty function name")
	}
	if bin, sym, ok := strings.Cut(s, ":"); ok {
		if bin == "" || sym == "" || strings.Contains(sym, ":") {
			return FuncTarget{}, fmt.Errorf("%q: want BINARY:SYMBOL for a user-space function", s)
		}
		return FuncTarget{Binary: bin, Symbol: sym}, nil
	}
	if strings.ContainsAny(s, "/ \t") {
		return FuncTarget{}, fmt.Errorf("%q: a kernel function name, or BINARY:SYMBOL", s)
	}
	return FuncTarget{Symbol: s}, nil
}

// ErrBadTarget wraps problems with the target itself (no such binary or
// symbol): bad usage, not a kernel limitation.
var ErrBadTarget = errors.New("bad function target")

// CheckTarget checks, without privileges, that a user-space target's
// binary exists and has the symbol (else the error wraps ErrBadTarget).
// Kernel targets are checked by CheckFunc.
func CheckTarget(t FuncTarget) error {
	if t.Kernel() {
		return nil
	}
	f, err := elf.Open(t.Binary)
	if err != nil {
		return fmt.Errorf("%s: %w: %w", t.Binary, unwrapPath(err), ErrBadTarget)
	}
	defer f.Close()
	if f.Section(".gopclntab") != nil || f.Section(".go.buildinfo") != nil {
		return fmt.Errorf("%s is a Go program: uretprobes corrupt Go stacks (the runtime moves them), so wolf does not time Go functions: %w", t.Binary, ErrBadTarget)
	}
	for _, load := range []func() ([]elf.Symbol, error){f.Symbols, f.DynamicSymbols} {
		syms, _ := load()
		for _, s := range syms {
			if s.Name == t.Symbol && elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
				return nil
			}
		}
	}
	return fmt.Errorf("%s: no function %s in its symbol tables: %w", t.Binary, t.Symbol, ErrBadTarget)
}

// CheckFunc says whether the target can be timed here. For a kernel
// function it needs kprobes (fentry is not used by wolf); without them the
// error wraps investigator.ErrUnsupported and says why in one line. For a
// user-space function it runs CheckTarget and checks that uprobes exist.
func CheckFunc(ctx context.Context, t FuncTarget) error {
	if t.Kernel() {
		kp := features.Probe(ctx, "kprobes")
		if kp.Available {
			return nil
		}
		fe := features.Probe(ctx, "fentry")
		// The first reason of each probe is the decisive one.
		why := fmt.Sprintf("kprobes: %s", firstReason(kp.Detail))
		if fe.Available {
			why += "; fentry works here, but wolf times kernel functions with kprobes only"
		} else {
			why += fmt.Sprintf("; fentry: %s", firstReason(fe.Detail))
		}
		hint := ""
		if t.Symbol == "net_rx_action" {
			hint = "; NET_RX run time from irq:softirq_entry/exit (plain wolf softirq) is net_rx_action's latency"
		}
		return fmt.Errorf("timing kernel function %s needs kprobes or fentry, and this kernel allows neither (%s)%s: %w", t.Symbol, why, hint, investigator.ErrUnsupported)
	}
	if err := CheckTarget(t); err != nil {
		return err
	}
	if st := features.Probe(ctx, "uprobes"); !st.Available {
		return fmt.Errorf("timing %s needs uprobes: %s: %w", t, oneLine(st.Detail), investigator.ErrUnsupported)
	}
	return nil
}

func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// firstReason is a probe's detail up to its first "; ", on one line.
func firstReason(detail string) string {
	r, _, _ := strings.Cut(oneLine(detail), "; ")
	return r
}

// funcObjects are the function-latency programs and their maps.
type funcObjects struct {
	FuncEntry  *ebpf.Program `ebpf:"func_entry"`
	FuncReturn *ebpf.Program `ebpf:"func_return"`
	FuncCalls  *ebpf.Map     `ebpf:"func_calls"`
	FuncHist   *ebpf.Map     `ebpf:"func_hist"`
	CPUStates  *ebpf.Map     `ebpf:"cpu_states"`
	// Window is wolf_window (wolf.h) of this object of its own.
	Window *ebpf.Map `ebpf:".data.wolf_window"`
}

func (o *funcObjects) Close() error {
	var errs []error
	for _, p := range []*ebpf.Program{o.FuncEntry, o.FuncReturn} {
		if p != nil {
			errs = append(errs, p.Close())
		}
	}
	for _, m := range []*ebpf.Map{o.FuncCalls, o.FuncHist, o.CPUStates, o.Window} {
		if m != nil {
			errs = append(errs, m.Close())
		}
	}
	return errors.Join(errs...)
}

// funcProbe times one function. It is loaded apart from the kit's
// object (the kit has no uprobe kind, and a uprobe's attach needs its own
// deadline), with maps of its own.
type funcProbe struct {
	target FuncTarget
	objs   funcObjects
	links  []link.Link
	window uint32 // wolf_window of its object
}

// attachTimeout bounds a uprobe attach: registering a uprobe takes the
// mmap_lock of every process mapping the binary (the Datadog talk "Performance and reliability pitfalls of eBPF"), and one may be
// stuck holding it.
const attachTimeout = 5 * time.Second

func openFuncProbe(t FuncTarget, pid int) (*funcProbe, error) {
	spec, err := loadSoftirq()
	if err != nil {
		return nil, fmt.Errorf("softirq: read BPF object: %w", err)
	}
	if err := spec.Variables["func_tgid"].Set(uint32(pid)); err != nil {
		return nil, fmt.Errorf("softirq: configure BPF object: %w", err)
	}
	fp := &funcProbe{target: t}
	if err := spec.LoadAndAssign(&fp.objs, kernelbtf.Options()); err != nil {
		return nil, fmt.Errorf("softirq: load function-latency programs: %w", err)
	}
	type attached struct {
		links []link.Link
		err   error
	}
	done := make(chan attached, 1)
	abandoned := make(chan struct{})
	go func() {
		ls, err := fp.attach(pid)
		select {
		case done <- attached{ls, err}:
		case <-abandoned:
			for _, l := range ls {
				_ = l.Close()
			}
		}
	}()
	select {
	case a := <-done:
		if a.err != nil {
			fp.close()
			return nil, a.err
		}
		fp.links = a.links
	case <-time.After(attachTimeout):
		close(abandoned)
		fp.close()
		return nil, fmt.Errorf("softirq: attaching to %s did not finish within %v (a process mapping it may hold its mmap_lock)", t, attachTimeout)
	}
	return fp, nil
}

func (fp *funcProbe) attach(pid int) ([]link.Link, error) {
	t := fp.target
	if t.Kernel() {
		entry, err := link.Kprobe(t.Symbol, fp.objs.FuncEntry, nil)
		if err != nil {
			return nil, fmt.Errorf("softirq: kprobe %s: %v: %w", t.Symbol, err, investigator.ErrUnsupported)
		}
		ret, err := link.Kretprobe(t.Symbol, fp.objs.FuncReturn, nil)
		if err != nil {
			entry.Close()
			return nil, fmt.Errorf("softirq: kretprobe %s: %v: %w", t.Symbol, err, investigator.ErrUnsupported)
		}
		return []link.Link{entry, ret}, nil
	}
	ex, err := link.OpenExecutable(t.Binary)
	if err != nil {
		return nil, fmt.Errorf("softirq: %s: %v: %w", t.Binary, err, ErrBadTarget)
	}
	opts := &link.UprobeOptions{PID: pid}
	// The return probe first: an entry without its return would be held
	// until the thread's next call.
	ret, err := ex.Uretprobe(t.Symbol, fp.objs.FuncReturn, opts)
	if err != nil {
		return nil, fmt.Errorf("softirq: uretprobe %s: %w", t, err)
	}
	entry, err := ex.Uprobe(t.Symbol, fp.objs.FuncEntry, opts)
	if err != nil {
		ret.Close()
		return nil, fmt.Errorf("softirq: uprobe %s: %w", t, err)
	}
	return []link.Link{ret, entry}, nil
}

func (fp *funcProbe) detach() {
	for _, l := range fp.links {
		_ = l.Close()
	}
	fp.links = nil
}

func (fp *funcProbe) close() {
	fp.detach()
	_ = fp.objs.Close()
}

// FuncResult is what timing a function saw.
type FuncResult struct {
	Target FuncTarget
	Hist   hist.Log2 // ns
	Lost   uint64    // returns without a recorded entry (calls in flight at attach)
}

// result ends the window and reads the function's histogram: cumulative
// since the probe was loaded, with the ended window's maximum (the caller
// subtracts its previous reading).
func (fp *funcProbe) result() (FuncResult, error) {
	r := FuncResult{Target: fp.target}
	w := fp.window
	if err := fp.objs.Window.Update(uint32(0), w+1, ebpf.UpdateAny); err != nil {
		return r, fmt.Errorf("softirq: start the next function-latency window: %w", err)
	}
	fp.window = w + 1
	var vals []softirqWolfHist
	if err := fp.objs.FuncHist.Lookup(uint32(0), &vals); err != nil {
		return r, fmt.Errorf("softirq: read function histogram: %w", err)
	}
	for i := range vals {
		h := hist.FromBPF(&vals[i], w)
		r.Hist.Merge(&h)
	}
	if c, err := readCounters(fp.objs.CPUStates); err == nil {
		r.Lost = c.FuncLost
	}
	return r, nil
}

// sub is the window since an earlier reading.
func (r FuncResult) sub(earlier FuncResult) FuncResult {
	out := r
	out.Hist = r.Hist.Sub(&earlier.Hist)
	out.Lost = probekit.Sub(r.Lost, earlier.Lost)
	return out
}

// FuncFinding reports a function's latency the way histogram-kernel.stp
// printed it: count, min-ish (p50), average and max, with the log2
// histogram in the report's histograms.
func FuncFinding(r FuncResult, window time.Duration) (finding.Finding, finding.Histogram) {
	h := r.Hist
	hg := h.Report("func_latency_us", "us", map[string]string{"func": r.Target.String()}, 1000)
	kind := "user-space function (uprobe)"
	if r.Target.Kernel() {
		kind = "kernel function (kprobe)"
	}
	f := finding.Finding{
		ID:           "softirq.func-latency",
		Investigator: "softirq",
		Severity:     finding.Info,
		Title: fmt.Sprintf("%s: %d calls in %s, avg %s, p99 %s, max %s", r.Target, h.Count, human.Duration(window),
			human.Duration(time.Duration(h.Mean())), human.Duration(time.Duration(h.Quantile(0.99))), human.Duration(time.Duration(h.Max))),
		Summary: fmt.Sprintf("Latency of %s %s, from entry to return, outermost calls only (recursion folded); the log2 histogram is func_latency_us in --format json.", kind, r.Target),
		Evidence: map[string]any{
			"func":       r.Target.String(),
			"calls":      h.Count,
			"avg_us":     human.Round(h.Mean()/1e3, 2),
			"p50_us":     us(time.Duration(h.Quantile(0.5))),
			"p99_us":     us(time.Duration(h.Quantile(0.99))),
			"max_us":     us(time.Duration(h.Max)),
			"total_ms":   ms(time.Duration(h.Sum)),
			"lost_calls": r.Lost,
		},
	}
	if h.Count == 0 {
		f.Title = fmt.Sprintf("%s was not called in %s", r.Target, human.Duration(window))
	}
	return f, hg
}
