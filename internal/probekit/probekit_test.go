package probekit_test

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/probekit"
	"github.com/wolf-investigator/wolf/internal/probekit/kittest"
	"github.com/wolf-investigator/wolf/internal/testutil"
)

var (
	switchRow  = probekit.Attach{Kind: probekit.RawTracepoint, Target: "sched/sched_switch", Program: "on_switch", Required: true, Why: "task switches"}
	missingRow = probekit.Attach{Kind: probekit.BTFTracepoint, Target: "wolf/wolf_no_such_tracepoint", Program: "on_missing", Why: "nothing real"}
)

func TestRequirementsFromTable(t *testing.T) {
	table := []probekit.Attach{
		switchRow,
		{Kind: probekit.BTFTracepoint, Target: "sched/sched_switch", Program: "btf_on_switch", Why: "again"},
		missingRow,
		{Kind: probekit.PerfSample, Program: "x", Hz: 99, Why: "stacks"},
		{Kind: probekit.Iter, Target: "task", Program: "y", Required: true, Why: "walk"},
	}
	got := probekit.Requirements(table)
	want := []investigator.Requirement{
		{Feature: "tracepoint:sched/sched_switch", Why: "task switches"},
		{Feature: "tracepoint:wolf/wolf_no_such_tracepoint", Why: "nothing real", Optional: true},
		{Feature: "perf_event", Why: "stacks", Optional: true},
		{Feature: "task_iter", Why: "walk"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("requirement %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestCheckTable(t *testing.T) {
	spec, err := kittest.Spec()
	if err != nil {
		t.Fatal(err)
	}
	if err := probekit.CheckTable(spec, []probekit.Attach{switchRow, missingRow}); err != nil {
		t.Fatal(err)
	}
	bad := switchRow
	bad.Or = []probekit.Attach{{Kind: probekit.RawTracepoint, Target: "sched/sched_switch", Program: "renamed_in_c"}}
	if err := probekit.CheckTable(spec, []probekit.Attach{bad}); err == nil || !strings.Contains(err.Error(), "renamed_in_c") {
		t.Fatalf("want the missing program named, got %v", err)
	}
}

func open(t *testing.T, table []probekit.Attach, refuse map[string]bool) (*probekit.Probe, error) {
	t.Helper()
	testutil.RequireRoot(t)
	return probekit.Open(probekit.Object{
		Name: "kittest", Spec: kittest.Spec, Table: table, Refuse: refuse,
		Vars: map[string]any{"target_tgid": uint32(os.Getpid())},
	})
}

// switchSome makes this process switch out a few dozen times.
func switchSome() {
	for range 50 {
		time.Sleep(100 * time.Microsecond)
	}
}

func TestOpenCountsAndNotesLosses(t *testing.T) {
	p, err := open(t, []probekit.Attach{switchRow, missingRow}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if !p.Attached("sched/sched_switch") || p.Attached("wolf/wolf_no_such_tracepoint") {
		t.Fatalf("attached: switch %v, missing %v", p.Attached("sched/sched_switch"), p.Attached("wolf/wolf_no_such_tracepoint"))
	}
	notes := p.Notes()
	if len(notes) != 1 || !strings.Contains(notes[0], "wolf/wolf_no_such_tracepoint") || !strings.Contains(notes[0], "nothing real not seen") {
		t.Fatalf("notes: %q", notes)
	}
	caps := p.Capabilities([]probekit.Attach{switchRow, missingRow})
	if !caps["tracepoint:sched/sched_switch"] || caps["tracepoint:wolf/wolf_no_such_tracepoint"] {
		t.Fatalf("capabilities: %v", caps)
	}
	switchSome()
	c, err := p.WindowCounters()
	if err != nil {
		t.Fatal(err)
	}
	named, err := p.Named(c)
	if err != nil {
		t.Fatal(err)
	}
	if named["mine"] < 10 || named["switches"] < named["mine"] || len(named) != 5 {
		t.Fatalf("counters: %v", named)
	}
	if c[kittest.StatMine] != named["mine"] {
		t.Fatalf("generated index and BTF name disagree: %d vs %d", c[kittest.StatMine], named["mine"])
	}
	// The next window starts from zero.
	c2, err := p.WindowCounters()
	if err != nil {
		t.Fatal(err)
	}
	if c2[kittest.StatMine] >= c[kittest.StatMine] {
		t.Fatalf("second window counted the first again: %d after %d", c2[kittest.StatMine], c[kittest.StatMine])
	}
	if ov := p.Overhead(0, 0); ov.Events == 0 {
		t.Fatalf("no runs metered: %+v", ov)
	}
}

func TestAlternativeReplacesRefusedRow(t *testing.T) {
	row := probekit.Attach{Kind: probekit.BTFTracepoint, Target: "sched/sched_switch", Program: "btf_on_switch", Required: true, Why: "task switches",
		Or: []probekit.Attach{{Kind: probekit.RawTracepoint, Target: "sched/sched_switch", Program: "on_switch"}}}
	p, err := open(t, []probekit.Attach{row}, map[string]bool{"btf_on_switch": true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	a, ok := p.Chosen("sched/sched_switch")
	if !ok || a.Program != "on_switch" || p.Program("btf_on_switch") != nil {
		t.Fatalf("chosen %+v %v", a, ok)
	}
	if len(p.Notes()) != 0 {
		t.Fatalf("an alternative that attached is no loss: %q", p.Notes())
	}
}

// A row with Unless stands in for a missing one (kprobes where a
// tracepoint is missing): attached only when that row is not, and then
// the missing row is no loss of its own.
func TestStandInForMissingRow(t *testing.T) {
	standIn := probekit.Attach{Kind: probekit.RawTracepoint, Target: "sched/sched_switch", Program: "on_switch", Why: "the same, another way",
		Unless: "wolf/wolf_no_such_tracepoint"}
	p, err := open(t, []probekit.Attach{missingRow, standIn}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if !p.Attached("sched/sched_switch") || len(p.Notes()) != 0 {
		t.Fatalf("stand-in attached %v, notes %q", p.Attached("sched/sched_switch"), p.Notes())
	}
	if got := p.StoodIn("wolf/wolf_no_such_tracepoint"); len(got) != 1 || got[0] != "sched/sched_switch" {
		t.Fatalf("StoodIn %q", got)
	}
	p.Close()

	// The row it stands in for is there: the stand-in is not even loaded.
	unneeded := probekit.Attach{Kind: probekit.BTFTracepoint, Target: "sched/sched_switch_btf", Program: "btf_on_switch", Unless: "sched/sched_switch"}
	q, err := open(t, []probekit.Attach{switchRow, unneeded}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if q.Program("btf_on_switch") != nil || q.Attached("sched/sched_switch_btf") || len(q.StoodIn("sched/sched_switch")) != 0 || len(q.Notes()) != 0 {
		t.Fatalf("a stand-in for a row that attached was loaded: notes %q", q.Notes())
	}
}

// A Later row loads at Open and counts nothing until it is armed; a
// Later row that cannot load is a loss like any optional row.
func TestLaterRowArmed(t *testing.T) {
	later := switchRow
	later.Required, later.Later = false, true
	lost := missingRow
	lost.Later = true
	p, err := open(t, []probekit.Attach{later, lost}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Attached(later.Target) || !p.Armable(later.Target) || p.Armable(lost.Target) {
		t.Fatalf("before Arm: attached %v, armable %v, missing armable %v", p.Attached(later.Target), p.Armable(later.Target), p.Armable(lost.Target))
	}
	if caps := p.Capabilities([]probekit.Attach{later, lost}); !caps["tracepoint:sched/sched_switch"] || caps["tracepoint:wolf/wolf_no_such_tracepoint"] {
		t.Fatalf("capabilities: %v", caps)
	}
	if n := p.Notes(); len(n) != 1 || !strings.Contains(n[0], "wolf/wolf_no_such_tracepoint") {
		t.Fatalf("notes: %q", n)
	}
	switchSome()
	c, err := p.WindowCounters()
	if err != nil {
		t.Fatal(err)
	}
	if c[kittest.StatMine] != 0 {
		t.Fatalf("a Later row ran before Arm: %d", c[kittest.StatMine])
	}
	if err := p.Arm(later.Target); err != nil {
		t.Fatal(err)
	}
	if err := p.Arm(later.Target); err != nil {
		t.Fatalf("a second Arm: %v", err)
	}
	if err := p.Arm(lost.Target); err == nil {
		t.Fatal("armed a row that did not load")
	}
	switchSome()
	if c, err = p.WindowCounters(); err != nil {
		t.Fatal(err)
	}
	if !p.Attached(later.Target) || c[kittest.StatMine] < 10 {
		t.Fatalf("after Arm: attached %v, counted %d", p.Attached(later.Target), c[kittest.StatMine])
	}
}

func TestRequiredRowFails(t *testing.T) {
	req := missingRow
	req.Required = true
	_, err := open(t, []probekit.Attach{switchRow, req}, nil)
	if !errors.Is(err, investigator.ErrUnsupported) || !strings.Contains(err.Error(), "wolf/wolf_no_such_tracepoint (nothing real)") {
		t.Fatalf("want ErrUnsupported naming the row, got %v", err)
	}
}

// Close leaves nothing of the probe in the kernel.
func TestCloseLeavesNothing(t *testing.T) {
	p, err := open(t, []probekit.Attach{switchRow}, nil)
	if err != nil {
		t.Fatal(err)
	}
	info, err := p.Program("on_switch").Info()
	if err != nil {
		t.Fatal(err)
	}
	id, _ := info.ID()
	p.Close()
	p.Close()
	// The kernel frees a program after its last reference goes, with an
	// RCU grace period in between.
	deadline := time.Now().Add(5 * time.Second)
	for {
		prog, err := ebpf.NewProgramFromID(id)
		if err != nil {
			break
		}
		prog.Close()
		if time.Now().After(deadline) {
			t.Fatalf("program %d still loaded after Close", id)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestExplain(t *testing.T) {
	cases := []struct {
		err  error
		want string
	}{
		// Debian's 5.10 names the helpers it does not know by number.
		{&ebpf.VerifierError{Log: []string{"0: (85) call unknown#158", "invalid func unknown#158", "processed 3 insns"}}, "bpf_get_current_task_btf (Linux 5.11+)"},
		{&ebpf.VerifierError{Log: []string{"invalid func unknown#999"}}, "helper #999 (newer than this kernel)"},
		// A poisoned CO-RE relocation (xfs's tracepoint record where xfs is not loaded).
		{&ebpf.VerifierError{Log: []string{"25: (85) call unknown#195896080", "invalid func unknown#195896080"}}, "not in this kernel's BTF"},
		{&ebpf.VerifierError{Log: []string{"unknown func bpf_get_current_task_btf#158"}}, "bpf_get_current_task_btf (Linux 5.11+)"},
		{&ebpf.VerifierError{Log: []string{"BPF_STX uses reserved fields"}}, "atomic fetch operations (Linux 5.12+)"},
		{&ebpf.VerifierError{Log: []string{"R2 unbounded memory access, make sure to bounds check any such access", "processed 90 insns"}}, "could not prove an access in bounds"},
		{os.ErrNotExist, "this kernel does not have it"},
		// A loader that quoted the verifier instead of wrapping it.
		{errors.New("sched: the kernel's BPF verifier rejected the program (load program: invalid argument: invalid func unknown#158 (9 line(s) omitted))"), "bpf_get_current_task_btf (Linux 5.11+)"},
	}
	for _, c := range cases {
		if got := probekit.Explain(c.err); !strings.Contains(got, c.want) {
			t.Errorf("Explain(%v) = %q, want it to contain %q", c.err, got, c.want)
		}
	}
}

// Two objects of one process that share a map see one kernel map: what
// the writer's programs count, the reader reads; it lives until the last
// of them closes, and Written says whether a writer is open.
func TestSharedMap(t *testing.T) {
	testutil.RequireRoot(t)
	obj := func(table []probekit.Attach, role probekit.ShareRole) probekit.Object {
		return probekit.Object{Name: "kittest", Spec: kittest.Spec, Table: table,
			Vars:  map[string]any{"target_tgid": uint32(os.Getpid())},
			Share: map[string]probekit.ShareRole{"stats": role}}
	}
	if probekit.Written("stats") {
		t.Fatal("a shared map is written before any probe opened")
	}
	reader, err := probekit.Open(obj(nil, probekit.Reads))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	if probekit.Written("stats") {
		t.Fatal("a reader alone writes the shared map")
	}
	writer, err := probekit.Open(obj([]probekit.Attach{switchRow}, probekit.Writes))
	if err != nil {
		t.Fatal(err)
	}
	if !probekit.Written("stats") {
		t.Fatal("the writer is open: Written says no")
	}
	// A second writer keeps a map of its own: closing the first leaves
	// the shared one without a writer.
	second, err := probekit.Open(obj([]probekit.Attach{switchRow}, probekit.Writes))
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	switchSome()
	c, err := reader.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if c[kittest.StatMine] < 10 {
		t.Fatalf("the reader sees %d of the writer's switches", c[kittest.StatMine])
	}
	writer.Close()
	if probekit.Written("stats") {
		t.Fatal("the writer closed: Written still says yes (the second writer shares its map)")
	}
	// The map outlives the writer: the reader still reads it.
	if c2, err := reader.Counters(); err != nil || c2[kittest.StatMine] < c[kittest.StatMine] {
		t.Fatalf("after the writer closed: %v, %v", c2, err)
	}
	// A probe whose definition of the map differs is refused.
	bad := obj(nil, probekit.Reads)
	bad.Prepare = func(spec *ebpf.CollectionSpec) error {
		spec.Maps["stats"].MaxEntries++
		return nil
	}
	if p, err := probekit.Open(bad); err == nil || !strings.Contains(err.Error(), "shared map stats differs") {
		if p != nil {
			p.Close()
		}
		t.Fatalf("a different definition of a shared map: %v", err)
	}
	// With its last user gone the map is gone: the other definition makes
	// a new one.
	reader.Close()
	p, err := probekit.Open(bad)
	if err != nil {
		t.Fatalf("the shared map outlived its users: %v", err)
	}
	p.Close()
}
