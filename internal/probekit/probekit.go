// Package probekit is how every wolf investigator puts its BPF programs
// into the kernel and takes them out again. An investigator describes its
// object once, as data: the compiled object, the rodata it is configured
// with, and an attach table whose rows name a program, where it attaches,
// whether the investigator can run without it and what is lost if not.
// From that one table the kit
//
//   - loads the programs one at a time over shared maps, so that a program
//     this kernel refuses costs only its own row (or is replaced by the
//     row's alternative, e.g. a raw-tracepoint twin of a BTF program),
//   - attaches them, turning "the verifier said no" and "no such
//     tracepoint" into plain words (see Explain),
//   - yields the investigator's requirements for `wolf check` and the
//     capabilities and notes of its report,
//   - meters what the programs cost (internal/overhead), window by window,
//   - and detaches every link at once, so that the RCU grace periods the
//     kernel waits for on detach overlap instead of adding up.
//
// Nothing is pinned: every object is held only through this process's
// file descriptors, so a kill -9 of wolf detaches everything too.
package probekit

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/overhead"
	"github.com/wolf-investigator/wolf/internal/perfsample"
)

// Kind is how a program attaches.
type Kind int

const (
	// RawTracepoint attaches a raw_tp program to Target's event.
	RawTracepoint Kind = iota + 1
	// BTFTracepoint attaches a tp_btf program; the event is in the
	// program's section, Target names it for people and `wolf check`.
	BTFTracepoint
	// Tracepoint attaches a classic tracepoint program (tracefs).
	Tracepoint
	// Kprobe and Kretprobe attach to the kernel function Target.
	Kprobe
	Kretprobe
	// PerfSample runs the program on a CPU-clock sample of every online
	// CPU, Hz times a second.
	PerfSample
	// Iter makes a BPF iterator of the program; the investigator opens it
	// through Probe.Iter whenever it wants a walk. Target names what it
	// walks ("task").
	Iter
)

func (k Kind) String() string {
	switch k {
	case RawTracepoint:
		return "raw tracepoint"
	case BTFTracepoint:
		return "BTF tracepoint"
	case Tracepoint:
		return "tracepoint"
	case Kprobe:
		return "kprobe"
	case Kretprobe:
		return "kretprobe"
	case PerfSample:
		return "perf event"
	case Iter:
		return "iterator"
	}
	return fmt.Sprintf("kind %d", int(k))
}

// Attach is one row of an investigator's attach table.
type Attach struct {
	Kind Kind
	// Target: "group/event" for the three tracepoint kinds, a kernel
	// function for kprobes, what an iterator walks ("task"), "" for
	// PerfSample.
	Target string
	// Program is the BPF program's name (its C function).
	Program string
	// Required rows fail the run when neither they nor an alternative can
	// load and attach; the others are noted and skipped.
	Required bool
	// Why says what the program is for, in words a user reads when it is
	// missing ("task switches into D state").
	Why string
	// Hz is the sampling rate of a PerfSample row.
	Hz int
	// Or lists alternatives tried in order when this row cannot load or
	// attach: another program for the same purpose, e.g. a raw
	// tracepoint twin of a BTF one, or a kprobe where a tracepoint is
	// missing. Their Required and Why are this row's.
	Or []Attach
	// Unless names the Target of another (earlier) row: this row is
	// loaded and attached only when that one did not attach, and stands
	// in for it. Several rows can stand in for one (kprobes on each of a
	// lock's slow paths where the contention tracepoint is missing).
	// When one of them attaches, the missing row's loss is not noted:
	// the investigator says what the stand-ins do not see (StoodIn).
	Unless string
	// Later rows are loaded (verified) at Open but attached only when the
	// investigator calls Arm with their Target: programs that cost more
	// than the rest and are worth it only once there is something for
	// them to see. Until then they count as capabilities (they load), not
	// as attached.
	Later bool
	// Shed, when not 0, lets the budget detach the row while the
	// programs spend more than the budget with their detail sampled as
	// far as it goes: wolf's cost is then that of the events it must
	// count exactly, and only dropping a program's runs lowers it. Rows
	// of one object with the same Shed go and come back together (a
	// begin and its end); lower values go first, and come back last.
	// For optional rows whose loss the report can say in a line (Why).
	Shed int
	// Duty, on a Shed row, has the budget run the row's group part of the
	// time instead of detaching it for good (budget.go, dutyCycle): once
	// the object's storm sampling (WOLF_STORM) is at its sparsest and the
	// programs still spend over the budget, they run DutyOn of each
	// DutyPeriod, and an event they see stands for 2^DutyShift
	// (wolf_duty in wolf.h): counts become estimates, which the report
	// says. The group's first row detaches first and the others
	// DutyGrace after it (a begin, then its end: the events begun end
	// seen). For rows that time events no other row needs exactly.
	Duty bool
}

// Feature is the `wolf check` feature this row needs, named as package
// features names its probes.
func (a Attach) Feature() string {
	switch a.Kind {
	case RawTracepoint, BTFTracepoint, Tracepoint:
		return "tracepoint:" + a.Target
	case Kprobe, Kretprobe:
		return "kprobes"
	case PerfSample:
		return "perf_event"
	case Iter:
		return a.Target + "_iter"
	}
	return a.Kind.String()
}

// Object is everything the kit needs to load an investigator's programs.
type Object struct {
	// Name is the investigator's, for errors ("hung: …").
	Name string
	// Spec reads the compiled object (bpf2go's loadX).
	Spec func() (*ebpf.CollectionSpec, error)
	// Vars sets `const volatile` rodata before loading.
	Vars map[string]any
	// Prepare, when set, adjusts the spec before loading (map sizes).
	Prepare func(*ebpf.CollectionSpec) error
	// Table is the attach table. Programs of the object that no row
	// names are not loaded.
	Table []Attach
	// BTF is a file with the kernel's BTF (for kernels that do not ship
	// it); empty means the running kernel's.
	BTF string
	// Refuse names targets or programs to treat as refused by the kernel,
	// so that tests can walk the paths of kernels that lack them.
	Refuse map[string]bool
	// Load names programs to load but not attach: programs the
	// investigator runs itself (BPF_PROG_TEST_RUN), such as one that
	// reads what the attached programs need. One the kernel refuses is
	// left out (Program returns nil; LoadError says why).
	Load []string
	// BeforeAttach, when set, runs once the maps and the Load programs
	// are loaded, before any row attaches; an error ends Open.
	BeforeAttach func(*Probe) error
	// Extra are programs the investigator loaded and attached itself
	// (uprobes, which the table has no kind for), metered with the
	// object's own.
	Extra []*ebpf.Program
	// Detail says, for the report, what the object's detail gate
	// (WOLF_BUDGET in wolf.h) guards: "stacks of lock waiters and
	// owners". Objects without a gate leave it empty.
	Detail string
	// DetailEvents names the counter (an enumerator of the object's
	// enum stat_index, as CounterNames spells it: "begin") that counts
	// the events the detail is for, so that the report's rate is per
	// event; empty: the gate's own count of the events it was asked for.
	DetailEvents string
	// Storm says, for the report, what the object's storm sampling
	// (WOLF_STORM in wolf.h) times one in N of when the budget is spent
	// with the gates at their longest: "spin lock waits". Objects
	// without it leave it empty.
	Storm string
	// StormDetail: what Storm names is a detail of events that are all
	// counted exactly (hung's exact start of a D sleep, the others' start
	// taken from the scheduler's clock), not events whose counts and sums
	// are estimated from those kept; the report's sampled entry is then
	// not marked estimated.
	StormDetail bool
	// Share names maps the object shares with other objects of this
	// process, and what its programs do with each (shared.go): one
	// investigator's programs keep what another's read.
	Share map[string]ShareRole
}

// Requirements lists what the table needs, for `wolf check`: one entry per
// feature, required if any row needing it is.
func Requirements(table []Attach) []investigator.Requirement {
	var out []investigator.Requirement
	at := map[string]int{}
	for _, a := range table {
		f := a.Feature()
		if i, ok := at[f]; ok {
			out[i].Optional = out[i].Optional && !a.Required
			continue
		}
		at[f] = len(out)
		out = append(out, investigator.Requirement{Feature: f, Why: a.Why, Optional: !a.Required})
	}
	return out
}

// Loss is a row that could not be attached.
type Loss struct {
	Attach Attach
	Err    error // why, from the last alternative tried
}

// Probe is an investigator's loaded and attached object.
type Probe struct {
	name  string
	spec  *ebpf.CollectionSpec
	maps  map[string]*ebpf.Map
	progs map[string]*ebpf.Program
	iters map[string]*link.Iter
	extra []*ebpf.Program
	// loadErrs are the Load programs the kernel refused.
	loadErrs map[string]error

	mu       sync.Mutex
	links    []link.Link
	samplers []*perfsample.Sampler
	rings    []interface{ close() }

	attached map[string]bool      // by Target (and "perf_event")
	rowLinks map[string]link.Link // by Target: the link of a row that may be shed
	// armedLinks are the links of the Later rows Arm attached, by Target.
	armedLinks map[string]link.Link
	shed       shedState           // budget.go
	duties     map[int]*dutyRun    // by Shed rank: the duty cycles running (budget.go)
	chosen     map[string]Attach   // by the row's Target: the variant that attached
	stoodIn    map[string][]string // by a missing row's Target: its stand-ins' Targets that attached
	later      map[string]Attach   // by a Later row's Target: the variant that loaded, to attach on Arm
	losses     []Loss
	meter      *overhead.Meter
	counters   counterWindow
	window     uint32 // wolf_window: the window whose maxima the programs keep

	// Shared maps (shared.go): those the probe holds, and of them those
	// its programs write (counted once it attached).
	share   map[string]ShareRole
	writing []string

	// The detail budget (budget.go): the one this probe is under (nil:
	// none, the gate takes everything), what its gate guards, and the
	// gate's counts at the previous Overhead.
	budget       *Budget
	detailWhat   string
	detailEvents int // index of Object.DetailEvents in the counters, -1: none
	detailSeen   struct{ taken, skipped, events uint64 }
	stormWhat    string
	stormDetail  bool
	stormSeen    struct{ seen, kept uint64 }
}

// Open loads o's programs, attaches them as its table says, and starts
// metering them. It fails with investigator.ErrPrivilege without root,
// and with investigator.ErrUnsupported when a required row cannot attach
// (the error says why, in plain words).
func Open(o Object) (*Probe, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%s: loading BPF programs needs root: %w", o.Name, investigator.ErrPrivilege)
	}
	// Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK.
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("%s: raise memlock limit: %w", o.Name, err)
	}
	spec, err := o.Spec()
	if err != nil {
		return nil, fmt.Errorf("%s: read BPF object: %w", o.Name, err)
	}
	for name, v := range o.Vars {
		vs, ok := spec.Variables[name]
		if !ok {
			return nil, fmt.Errorf("%s: the BPF object has no variable %s", o.Name, name)
		}
		if err := vs.Set(v); err != nil {
			return nil, fmt.Errorf("%s: configure %s: %w", o.Name, name, err)
		}
	}
	if o.Prepare != nil {
		if err := o.Prepare(spec); err != nil {
			return nil, fmt.Errorf("%s: %w", o.Name, err)
		}
	}
	if err := CheckTable(spec, o.Table); err != nil {
		return nil, fmt.Errorf("%s: %w", o.Name, err)
	}
	for _, name := range o.Load {
		if _, ok := spec.Programs[name]; !ok {
			return nil, fmt.Errorf("%s: the BPF object has no program %s to load", o.Name, name)
		}
	}
	var opts ebpf.CollectionOptions
	opts.Cache = btf.NewCache()
	if o.BTF != "" {
		kt, err := btf.LoadSpec(o.BTF)
		if err != nil {
			return nil, fmt.Errorf("%s: read kernel BTF from %s: %w", o.Name, o.BTF, err)
		}
		opts.Programs.KernelTypes = kt
	}

	// The meter starts before anything attaches, so that wolf's CPU time
	// includes loading and the first runs are counted.
	p := &Probe{
		name: o.Name, spec: spec,
		progs: map[string]*ebpf.Program{}, iters: map[string]*link.Iter{},
		attached: map[string]bool{}, chosen: map[string]Attach{}, stoodIn: map[string][]string{},
		rowLinks: map[string]link.Link{}, later: map[string]Attach{}, armedLinks: map[string]link.Link{},
		extra: o.Extra, meter: overhead.Start(), detailWhat: o.Detail, detailEvents: -1,
		stormWhat:   o.Storm,
		stormDetail: o.StormDetail,
	}
	if err := p.loadMaps(opts, o.Share); err != nil {
		p.Close()
		return nil, err
	}
	if o.DetailEvents != "" {
		names, err := p.CounterNames()
		if err != nil {
			p.Close()
			return nil, err
		}
		for i, n := range names {
			if n == o.DetailEvents {
				p.detailEvents = i
			}
		}
		if p.detailEvents < 0 {
			p.Close()
			return nil, fmt.Errorf("%s: no counter %q for the detail's events", o.Name, o.DetailEvents)
		}
	}
	// Under the budget before anything attaches: a storm is sampled
	// from its first event.
	if b := CurrentBudget(); b != nil {
		b.join(p)
		p.budget = b
	}
	for _, name := range o.Load {
		if _, err := p.program(name, opts); err != nil {
			if p.loadErrs == nil {
				p.loadErrs = map[string]error{}
			}
			p.loadErrs[name] = err
		}
	}
	if o.BeforeAttach != nil {
		if err := o.BeforeAttach(p); err != nil {
			p.Close()
			return nil, err
		}
	}
	for _, row := range o.Table {
		if row.Unless != "" && p.attached[row.Unless] {
			continue // what it stands in for is there
		}
		var err error
		if row.Later {
			err = p.loadRow(row, opts, o.Refuse)
		} else {
			err = p.attachRow(row, opts, o.Refuse)
		}
		if err == nil {
			if row.Unless != "" {
				p.stoodIn[row.Unless] = append(p.stoodIn[row.Unless], row.Target)
			}
			continue
		}
		if row.Required {
			p.Close()
			return nil, fmt.Errorf("%s: %s %s (%s): %s: %w", o.Name, row.Kind, row.Target, row.Why, Explain(err), investigator.ErrUnsupported)
		}
		p.losses = append(p.losses, Loss{Attach: row, Err: err})
	}
	p.meter.Track(p.metered()...)
	p.markWriters()
	return p, nil
}

// LoadError is why the kernel refused a program of Object.Load, nil if it
// loaded.
func (p *Probe) LoadError(program string) error { return p.loadErrs[program] }

// CheckTable says whether every row's program is in the object, so that a
// renamed C function fails the tests rather than a user's run.
func CheckTable(spec *ebpf.CollectionSpec, table []Attach) error {
	var missing []string
	var check func(a Attach)
	check = func(a Attach) {
		if _, ok := spec.Programs[a.Program]; !ok {
			missing = append(missing, a.Program)
		}
		for _, alt := range a.Or {
			check(alt)
		}
	}
	for _, a := range table {
		check(a)
	}
	if len(missing) > 0 {
		return fmt.Errorf("attach table names programs the BPF object lacks: %s", strings.Join(missing, ", "))
	}
	return nil
}

// loadMaps creates every map of the object (and its rodata, configured),
// once, but for the shared ones, which it takes from the process's;
// programs are then loaded one by one against them.
func (p *Probe) loadMaps(opts ebpf.CollectionOptions, share map[string]ShareRole) error {
	repl, held, err := shareMaps(p.name, p.spec, share)
	if err != nil {
		return err
	}
	p.share = held
	only := &ebpf.CollectionSpec{Maps: p.spec.Maps, Variables: p.spec.Variables, Types: p.spec.Types, ByteOrder: p.spec.ByteOrder}
	opts.MapReplacements = repl
	coll, err := ebpf.NewCollectionWithOptions(only, opts)
	if err != nil {
		return fmt.Errorf("%s: create BPF maps: %w", p.name, err)
	}
	p.maps = coll.Maps
	return nil
}

// program loads one program against the shared maps (once).
func (p *Probe) program(name string, opts ebpf.CollectionOptions) (*ebpf.Program, error) {
	if prog, ok := p.progs[name]; ok {
		return prog, nil
	}
	ps := p.spec.Programs[name]
	one := &ebpf.CollectionSpec{
		Maps:      p.spec.Maps,
		Programs:  map[string]*ebpf.ProgramSpec{name: ps},
		Types:     p.spec.Types,
		ByteOrder: p.spec.ByteOrder,
	}
	opts.MapReplacements = p.maps
	coll, err := ebpf.NewCollectionWithOptions(one, opts)
	if err != nil {
		return nil, err
	}
	prog := coll.DetachProgram(name)
	coll.Close()
	p.progs[name] = prog
	return prog, nil
}

// attachRow tries a row, then its alternatives, until one attaches.
func (p *Probe) attachRow(row Attach, opts ebpf.CollectionOptions, refuse map[string]bool) error {
	var err error
	for _, a := range append([]Attach{row}, row.Or...) {
		if refuse[a.Target] || refuse[a.Program] {
			err = fmt.Errorf("refused for a test: %w", ebpf.ErrNotSupported)
			continue
		}
		var l link.Link
		if l, err = p.attachOne(a, opts); err == nil {
			p.attached[row.Target] = true
			if a.Kind == PerfSample {
				p.attached["perf_event"] = true
			}
			// The budget's controller may shed and restore rows
			// (budget.go) while later ones attach.
			p.mu.Lock()
			p.chosen[row.Target] = a
			if row.Shed != 0 && l != nil {
				p.rowLinks[row.Target] = l
				p.shed.rows = append(p.shed.rows, shedRow{attach: row, rank: row.Shed, duty: row.Duty})
			}
			p.mu.Unlock()
			return nil
		}
	}
	return err
}

// loadRow loads a Later row's program (or an alternative's) for Arm.
func (p *Probe) loadRow(row Attach, opts ebpf.CollectionOptions, refuse map[string]bool) error {
	var err error
	for _, a := range append([]Attach{row}, row.Or...) {
		if refuse[a.Target] || refuse[a.Program] {
			err = fmt.Errorf("refused for a test: %w", ebpf.ErrNotSupported)
			continue
		}
		if _, err = p.program(a.Program, opts); err == nil {
			p.later[row.Target] = a
			return nil
		}
	}
	return err
}

// Arm attaches the Later row with this Target, once; it fails when the
// row's program did not load at Open (its loss is in the notes).
func (p *Probe) Arm(target string) error {
	p.mu.Lock()
	a, ok := p.later[target]
	done := p.attached[target]
	p.mu.Unlock()
	if !ok {
		return fmt.Errorf("%s: %s was not loaded", p.name, target)
	}
	if done {
		return nil
	}
	l, err := p.attachOne(a, ebpf.CollectionOptions{})
	if err != nil {
		return fmt.Errorf("%s: attach %s: %s", p.name, target, Explain(err))
	}
	p.mu.Lock()
	p.attached[target] = true
	p.chosen[target] = a
	if l != nil {
		p.armedLinks[target] = l
	}
	p.mu.Unlock()
	return nil
}

// Disarm detaches the Later row with this Target that Arm attached (Arm
// attaches it again): for programs run part of the time only. Closing
// the link waits for the tracepoint's RCU grace period.
func (p *Probe) Disarm(target string) error {
	p.mu.Lock()
	l := p.armedLinks[target]
	delete(p.armedLinks, target)
	if l != nil {
		p.links = slices.DeleteFunc(p.links, func(x link.Link) bool { return x == l })
		p.attached[target] = false
	}
	p.mu.Unlock()
	if l == nil {
		return nil
	}
	if err := l.Close(); err != nil {
		return fmt.Errorf("%s: detach %s: %w", p.name, target, err)
	}
	return nil
}

// Armable says whether the Later row with this Target loaded, and can be
// armed.
func (p *Probe) Armable(target string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.later[target]
	return ok
}

func (p *Probe) attachOne(a Attach, opts ebpf.CollectionOptions) (link.Link, error) {
	prog, err := p.program(a.Program, opts)
	if err != nil {
		return nil, err
	}
	var l link.Link
	switch a.Kind {
	case RawTracepoint:
		_, event, _ := strings.Cut(a.Target, "/")
		l, err = link.AttachRawTracepoint(link.RawTracepointOptions{Name: event, Program: prog})
	case BTFTracepoint:
		l, err = link.AttachTracing(link.TracingOptions{Program: prog})
	case Tracepoint:
		group, event, _ := strings.Cut(a.Target, "/")
		l, err = link.Tracepoint(group, event, prog, nil)
	case Kprobe:
		l, err = link.Kprobe(a.Target, prog, nil)
	case Kretprobe:
		l, err = link.Kretprobe(a.Target, prog, nil)
	case PerfSample:
		s, err := perfsample.Attach(prog, a.Hz)
		if err != nil {
			return nil, err
		}
		p.mu.Lock()
		p.samplers = append(p.samplers, s)
		p.mu.Unlock()
		return nil, nil
	case Iter:
		it, err := link.AttachIter(link.IterOptions{Program: prog})
		if err != nil {
			return nil, err
		}
		p.iters[a.Program] = it
		return nil, nil
	default:
		return nil, fmt.Errorf("unknown attach kind %v", a.Kind)
	}
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.links = append(p.links, l)
	p.mu.Unlock()
	return l, nil
}

// Map returns the object's map by name, nil if it has none.
func (p *Probe) Map(name string) *ebpf.Map { return p.maps[name] }

// Program returns a loaded program by name, nil if it was not loaded.
func (p *Probe) Program(name string) *ebpf.Program { return p.progs[name] }

// Programs lists the loaded programs, for the overhead meter.
func (p *Probe) Programs() []*ebpf.Program {
	names := make([]string, 0, len(p.progs))
	for n := range p.progs {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]*ebpf.Program, len(names))
	for i, n := range names {
		out[i] = p.progs[n]
	}
	return out
}

// metered are the programs the meter reads: the object's and Extra.
func (p *Probe) metered() []*ebpf.Program {
	return append(p.Programs(), p.extra...)
}

// Iter returns the iterator made of program, nil if it could not be made.
func (p *Probe) Iter(program string) *link.Iter { return p.iters[program] }

// Attached says whether the row with this Target attached (through any
// of its alternatives). "perf_event" says whether a PerfSample row did.
func (p *Probe) Attached(target string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.attached[target]
}

// Chosen returns the variant that attached for the row with this Target.
func (p *Probe) Chosen(target string) (Attach, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a, ok := p.chosen[target]
	return a, ok
}

// AssignMaps fills a bpf2go maps struct (fields *ebpf.Map tagged
// `ebpf:"name"`) with the probe's maps. The probe keeps owning them: do not
// close the struct.
func (p *Probe) AssignMaps(to any) error {
	tmp := &ebpf.Collection{Maps: map[string]*ebpf.Map{}}
	for n, m := range p.maps {
		tmp.Maps[n] = m
	}
	if err := tmp.Assign(to); err != nil {
		return fmt.Errorf("%s: %w", p.name, err)
	}
	return nil
}

// Capabilities are the report's: one entry per row's feature (attached or
// not), "perf_event" for sampling rows.
func (p *Probe) Capabilities(table []Attach) map[string]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]bool{}
	for _, a := range table {
		_, loaded := p.later[a.Target]
		out[a.Feature()] = out[a.Feature()] || p.attached[a.Target] || loaded
	}
	return out
}

// Losses lists the optional rows that could not attach.
func (p *Probe) Losses() []Loss { return append([]Loss(nil), p.losses...) }

// StoodIn lists the Targets of the rows that attached in place of the row
// with this Target (see Attach.Unless); nil when it attached itself or
// nothing stood in for it.
func (p *Probe) StoodIn(target string) []string {
	return append([]string(nil), p.stoodIn[target]...)
}

// Notes says, one line per optional row that could not attach, what the
// investigator does without it and why, for the report's notes. A row
// others stood in for is left to the investigator to tell.
func (p *Probe) Notes() []string {
	var out []string
	for _, l := range p.losses {
		if len(p.stoodIn[l.Attach.Target]) > 0 {
			continue
		}
		what := strings.TrimSpace(l.Attach.Kind.String() + " " + l.Attach.Target)
		out = append(out, fmt.Sprintf("%s unavailable (%s): %s not seen", what, Explain(l.Err), l.Attach.Why))
	}
	return out
}

// Overhead is what the programs cost since Open or the previous call,
// with the investigator's own event and drop counts for that window.
func (p *Probe) Overhead(events, dropped uint64) finding.Overhead {
	o := p.meter.Lap(events, dropped, p.metered()...)
	if s := p.sampling(); s != nil {
		o.Sampled = append(o.Sampled, *s)
	}
	if s := p.stormSampling(); s != nil {
		o.Sampled = append(o.Sampled, *s)
	}
	o.Shed = p.sheddings()
	return o
}

// Detach takes every program out of the kernel's hooks, all at once: each
// link's release waits for an RCU grace period (synchronize_rcu for
// tracepoints, RCU-tasks for perf events and uprobes), and releasing them
// side by side lets those waits overlap. Maps and programs stay, so that
// what they hold can still be read.
func (p *Probe) Detach() {
	p.stopDuty(false)
	p.mu.Lock()
	links, samplers := p.links, p.samplers
	p.links, p.samplers = nil, nil
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, l := range links {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = l.Close()
		}()
	}
	for _, s := range samplers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.Close()
		}()
	}
	wg.Wait()
}

// Close detaches (if not yet done), stops the meter, closes ring readers,
// iterators, programs and maps. It is safe to call more than once.
func (p *Probe) Close() {
	// Out of the budget first: once leave returns, its controller (which
	// holds the budget's lock while it sheds or restores) touches p's
	// links no more, and Detach closes every one.
	if p.budget != nil {
		p.budget.leave(p)
		p.budget = nil
	}
	p.Detach()
	if p.meter != nil {
		p.meter.Close()
	}
	p.mu.Lock()
	rings := p.rings
	p.rings = nil
	p.mu.Unlock()
	for _, r := range rings {
		r.close()
	}
	for n, it := range p.iters {
		_ = it.Close()
		delete(p.iters, n)
	}
	for n, prog := range p.progs {
		_ = prog.Close()
		delete(p.progs, n)
	}
	for n, m := range p.maps {
		_ = m.Close()
		delete(p.maps, n)
	}
	p.releaseShared()
}

// ErrNoCounters is returned by Counters for objects without a stats map.
var ErrNoCounters = errors.New("the BPF object has no stats map")
