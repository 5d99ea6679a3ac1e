package bpfcost

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/finding/findingtest"
)

// fixture: a host with a hot uprobe+uretprobe pair on libc, a cheap
// tracepoint program, a costly sched_switch program, a hot kretprobe, an
// fentry program, a program with recursion misses, one of wolf's own and
// one attached without a link.
func fixture() *Snapshot {
	libc := "/usr/lib/x86_64-linux-gnu/libc.so.6"
	progs := []Program{
		{ID: 10, Type: "Kprobe", Name: "hot_entry", Attach: []Attach{{Kind: KindUprobe, File: libc, Offset: 0x11a0, Symbol: "write", Target: libc + ":write", SharedBy: -1}},
			Owners: []Owner{{PID: 100, Comm: "agent"}}},
		{ID: 11, Type: "Kprobe", Name: "hot_return", Attach: []Attach{{Kind: KindUretprobe, File: libc, Offset: 0x11a0, Symbol: "write", Target: libc + ":write", SharedBy: -1}},
			Owners: []Owner{{PID: 100, Comm: "agent"}}},
		{ID: 20, Type: "TracePoint", Name: "cheap", Attach: []Attach{{Kind: KindTracepoint, Target: "syscalls/sys_enter_openat"}}},
		{ID: 21, Type: "RawTracepoint", Name: "sched_heavy", Attach: []Attach{{Kind: KindRawTracepoint, Target: "sched_switch"}},
			Owners: []Owner{{PID: 200, Comm: "monitor"}}},
		{ID: 30, Type: "Kprobe", Name: "tcp_ret", Attach: []Attach{{Kind: KindKretprobe, Target: "tcp_recvmsg+0x0", Missed: 7}}},
		{ID: 40, Type: "Tracing", Name: "fentry_prog", Attach: []Attach{{Kind: KindFentry, Target: "do_unlinkat"}}},
		{ID: 50, Type: "Kprobe", Name: "recursive", Attach: []Attach{{Kind: KindKprobe, Target: "bpf_map_lookup_elem+0x0"}}},
		{ID: 60, Type: "RawTracepoint", Name: "on_switch", Attach: []Attach{{Kind: KindRawTracepoint, Target: "sched_switch"}}, Wolf: true,
			Owners: []Owner{{PID: 1, Comm: "wolf"}}},
		{ID: 70, Type: "PerfEvent", Name: "old_bcc"},
	}
	w := 2 * time.Second
	before := map[uint32]Stat{} // statistics were off: every counter starts at zero
	after := map[uint32]Stat{
		10: {Runs: 200000, RunNs: 200000 * 50},          // 100 k/s × 50 ns
		11: {Runs: 200000, RunNs: 200000 * 60},          // same calls
		20: {Runs: 100, RunNs: 100 * 200},               // 50/s
		21: {Runs: 400000, RunNs: 400000 * 1000},        // 200 k/s × 1 µs = 20% of a CPU
		30: {Runs: 60000, RunNs: 60000 * 100},           // 30 k/s kretprobe
		40: {Runs: 10, RunNs: 10 * 100},                 // rare fentry
		50: {Runs: 1000, RunNs: 1000 * 100, Misses: 42}, // recursion misses
		60: {Runs: 400000, RunNs: 400000 * 200},         // wolf's own: 4% of a CPU, not flagged
		70: {Runs: 0},
	}
	return &Snapshot{Programs: progs, Before: before, After: after, Window: w, NumCPU: 4, Kernel: "6.18.0"}
}

func TestMeasure(t *testing.T) {
	cs := Measure(fixture())
	got := map[uint32]Cost{}
	for _, c := range cs {
		got[c.ID] = c
	}
	c := got[21]
	if c.RunsPerS != 200000 || c.AvgNs != 1000 || math.Abs(c.OneCPUPct-20) > 1e-9 || math.Abs(c.CPUPct-5) > 1e-9 {
		t.Errorf("sched_heavy cost %+v", c)
	}
	// The uprobe pays the shared entry trap; the uretprobe only its
	// return, which on 6.11+ x86-64 is a syscall, not a trap.
	if want := returnTraps("6.18.0"); got[10].Traps != 1 || got[11].Traps != want {
		t.Errorf("traps per run: uprobe %v uretprobe %v, want 1 and %v", got[10].Traps, got[11].Traps, want)
	}
	// 100 k/s × 1 trap × 1.7 µs = 17% of a CPU.
	if math.Abs(got[10].TrapPct-17) > 1e-6 {
		t.Errorf("uprobe trap estimate %v%%, want 17%%", got[10].TrapPct)
	}
	// Costliest first, counting the traps: 21 (20%) before 10 (17% of
	// traps + 0.25% run time).
	if cs[0].ID != 21 {
		t.Errorf("first %d, want 21", cs[0].ID)
	}
	if got[50].Misses != 42 {
		t.Errorf("misses %d", got[50].Misses)
	}
}

func TestUretprobeAlone(t *testing.T) {
	s := fixture()
	s.Programs = s.Programs[1:2] // only the uretprobe: it pays the entry trap
	for _, c := range []struct {
		kernel string
		want   float64
	}{{"6.18.0", 1 + returnTraps("6.18.0")}, {"5.15.0", 2}} {
		s.Kernel = c.kernel
		cs := Measure(s)
		if len(cs) != 1 || cs[0].Traps != c.want {
			t.Fatalf("%s: costs %+v, want one uretprobe with %v traps per run", c.kernel, cs, c.want)
		}
	}
}

func TestConclude(t *testing.T) {
	fs := Conclude(fixture(), DefaultThresholds)
	costly := findingtest.All(fs, "bpf.costly-program")
	if len(costly) != 1 || costly[0].Evidence["prog_id"] != uint32(21) || costly[0].Severity != finding.Warning {
		t.Errorf("costly: %+v", costly)
	} else if costly[0].Subjects[0].PID != 200 || costly[0].Subjects[0].Role != "owner" {
		t.Errorf("costly subjects %+v", costly[0].Subjects)
	}
	hot := findingtest.All(fs, "bpf.hot-uprobe")
	if len(hot) != 2 {
		t.Fatalf("hot uprobes: %d, want 2: %+v", len(hot), hot)
	}
	for _, f := range hot {
		if f.Severity < finding.Warning || !strings.Contains(f.Title, "libc.so.6:write") || !strings.Contains(f.Summary, "estimate") {
			t.Errorf("hot uprobe finding %q / %q", f.Title, f.Summary)
		}
	}
	kret := findingtest.All(fs, "bpf.hot-kretprobe")
	if len(kret) != 1 || kret[0].Evidence["kprobe_missed"] != uint64(7) {
		t.Errorf("kretprobe: %+v", kret)
	}
	if m := findingtest.All(fs, "bpf.recursion-misses"); len(m) != 1 || m[0].Evidence["recursion_misses"] != uint64(42) {
		t.Errorf("misses: %+v", m)
	}
	fe := findingtest.All(fs, "bpf.fentry-detach")
	if len(fe) != 1 || fe[0].Severity != finding.Info {
		t.Errorf("fentry on 6.18: %+v", fe)
	}
	sh := findingtest.All(fs, "bpf.uprobe-shared-file")
	if len(sh) != 1 || sh[0].Severity != finding.Info || sh[0].Evidence["file"] != "/usr/lib/x86_64-linux-gnu/libc.so.6" {
		t.Errorf("shared file: %+v", sh)
	}
	own := findingtest.All(fs, "bpf.wolf-own")
	if len(own) != 1 || own[0].Evidence["runs"] != uint64(400000) {
		t.Errorf("wolf's own: %+v", own)
	}
	// wolf's own program costs 4% of a CPU on sched_switch: never flagged.
	for _, f := range fs {
		if f.Evidence["prog_id"] == uint32(60) && f.ID != "bpf.program" {
			t.Errorf("wolf's own program flagged: %s", f.Title)
		}
	}
	if len(findingtest.All(fs, "bpf.summary")) != 1 || len(findingtest.All(fs, "bpf.program")) != 0 {
		t.Errorf("summary/list: %d/%d", len(findingtest.All(fs, "bpf.summary")), len(findingtest.All(fs, "bpf.program")))
	}
}

func TestConcludeOldKernel(t *testing.T) {
	s := fixture()
	s.Kernel = "5.15.0-91-generic"
	fs := Conclude(s, DefaultThresholds)
	if fe := findingtest.All(fs, "bpf.fentry-detach"); len(fe) != 1 || fe[0].Severity != finding.Warning {
		t.Errorf("fentry on 5.15: %+v", fe)
	}
	if sh := findingtest.All(fs, "bpf.uprobe-shared-file"); len(sh) != 1 || sh[0].Severity != finding.Warning {
		t.Errorf("hot uprobe on a shared library on 5.15: %+v", sh)
	}
}

func TestTopListsAndPID(t *testing.T) {
	s := fixture()
	s.Top = 3
	fs := Conclude(s, DefaultThresholds)
	list := findingtest.All(fs, "bpf.program")
	if len(list) != 3 || list[0].Evidence["prog_id"] != uint32(21) {
		t.Fatalf("list %+v", list)
	}
	// A program without a link says so.
	s.Top = 100
	var noLink bool
	for _, f := range findingtest.All(Conclude(s, DefaultThresholds), "bpf.program") {
		if f.Evidence["prog_id"] == uint32(70) {
			noLink = strings.Contains(f.Title, "attach point unknown (not attached through a BPF link)")
		}
	}
	if !noLink {
		t.Error("program 70 not listed as attached without a link")
	}
	s.PID = 100
	cs := Measure(s)
	if len(cs) != 2 || cs[0].Owners[0].PID != 100 {
		t.Errorf("--pid 100: %+v", cs)
	}
}

func TestHealthyHostNoWarnings(t *testing.T) {
	s := fixture()
	s.Programs = []Program{s.Programs[2], s.Programs[7]} // a cheap tracepoint and wolf's own
	for _, f := range Conclude(s, DefaultThresholds) {
		if f.Severity >= finding.Warning {
			t.Errorf("healthy host: %s %s", f.Severity, f.Title)
		}
	}
}

func TestLoadedDuringWindowAndCounterReset(t *testing.T) {
	s := &Snapshot{
		Programs: []Program{{ID: 1, Type: "Kprobe", Name: "new", Created: true}, {ID: 2, Type: "Kprobe", Name: "reset"}},
		Before:   map[uint32]Stat{2: {Runs: 100, RunNs: 1000}},
		After:    map[uint32]Stat{1: {Runs: 10, RunNs: 100}, 2: {Runs: 5, RunNs: 50}},
		Window:   time.Second, NumCPU: 1,
	}
	got := map[uint32]Cost{}
	for _, c := range Measure(s) {
		got[c.ID] = c
	}
	if got[1].Runs != 10 || got[2].Runs != 0 {
		t.Errorf("new %d runs (want 10), reset %d (want 0)", got[1].Runs, got[2].Runs)
	}
}

func TestFdinfoProgID(t *testing.T) {
	info := "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1057\nprog_type:\t5\nprog_jited:\t1\nprog_tag:\tabc\nmemlock:\t4096\nprog_id:\t22009\nrun_time_ns:\t0\n"
	if id, ok := fdinfoProgID(info); !ok || id != 22009 {
		t.Errorf("prog_id %d %v", id, ok)
	}
	link := "link_type:\tperf\nlink_id:\t5\nprog_tag:\tabc\nprog_id:\t7\n"
	if id, ok := fdinfoProgID(link); !ok || id != 7 {
		t.Errorf("link prog_id %d %v", id, ok)
	}
	if _, ok := fdinfoProgID("pos:\t0\n"); ok {
		t.Error("prog_id found in a file without one")
	}
}

func TestKernelAtLeast(t *testing.T) {
	for _, c := range []struct {
		rel  string
		want bool
	}{{"6.18.44-fc", true}, {"6.9.0", true}, {"6.8.12", false}, {"5.15.0-91-generic", false}, {"garbage", true}} {
		if got := kernelAtLeast(c.rel, 6, 9); got != c.want {
			t.Errorf("%s >= 6.9: %v", c.rel, got)
		}
	}
}

func TestRateTimelines(t *testing.T) {
	s := fixture()
	samples := []Sample{
		{At: 0, Stats: map[uint32]Stat{21: {Runs: 0}}},
		{At: 1, Stats: map[uint32]Stat{21: {Runs: 150000}}},
		{At: 2, Stats: s.After},
	}
	tls := RateTimelines(s, samples, 2)
	if len(tls) != 2 || tls[0].Labels["prog_id"] != "21" || tls[0].Unit != "runs/s" {
		t.Fatalf("timelines %+v", tls)
	}
	ev := tls[0].Events
	if len(ev) != 2 || ev[0].Value != 150000 || ev[1].Value != 250000 || ev[1].AtS != 2 {
		t.Errorf("sched_heavy curve %+v, want 150000 then 250000 runs/s", ev)
	}
}

// The hot-uprobe lab on arm64 under QEMU: 5143 hits/s, under the rate
// that makes a path hot, but each trap is slow there: ~68% of a CPU in
// traps. Hot by cost; the same rate with cheap traps is not.
func TestHotUprobeByCost(t *testing.T) {
	libc := "/lib/aarch64-linux-gnu/libc.so.6"
	c := &Cost{Program: Program{ID: 489, Type: "Kprobe", Name: "hot_entry",
		Attach: []Attach{{Kind: KindUprobe, File: libc, Symbol: "write", Target: libc + ":write", SharedBy: -1}}},
		RunsPerS: 5143, AvgNs: 3321, OneCPUPct: 1.71, TrapPct: 68, Traps: 1}
	if f, ok := hotUprobe(c, DefaultThresholds); !ok || f.Severity < finding.Warning {
		t.Errorf("68%% of a CPU in traps at 5143 hits/s: %v %+v", ok, f)
	}
	c.OneCPUPct, c.TrapPct = 0.5, 0.9
	if f, ok := hotUprobe(c, DefaultThresholds); ok {
		t.Errorf("1.4%% of a CPU at 5143 hits/s called hot: %s", f.Title)
	}
}
