package softirq

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/features"
	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/finding/findingtest"
	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/lab/tcpcollapse"
	"github.com/wolf-investigator/wolf/internal/testutil"
)

func requireLive(t *testing.T) {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.Exclusive(t)
}

// runInv runs inv for d and fails the test on error.
func runInv(t *testing.T, inv *Investigator, d time.Duration) *investigator.Result {
	t.Helper()
	res, err := investigator.Run(context.Background(), inv, investigator.Options{Duration: d})
	if err != nil {
		t.Fatalf("softirq.Run: %v", err)
	}
	return res
}

// stallOf is the stall finding of one vector.
func stallOf(fs []finding.Finding, vector string) *finding.Finding {
	for i := range fs {
		if fs[i].ID == "softirq.stall" && fs[i].Evidence["vector"] == vector {
			return &fs[i]
		}
	}
	return nil
}

func histogram(res *investigator.Result, name, vector string) *finding.Histogram {
	for i := range res.Histograms {
		if res.Histograms[i].Name == name && res.Histograms[i].Labels["vector"] == vector {
			return &res.Histograms[i]
		}
	}
	return nil
}

// The acceptance test: the lab collapses receive queues, and wolf
// names the stall, its CPU, the collapse, and the namespace it happened in.
func TestLiveCollapseLab(t *testing.T) {
	requireLive(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	li, err := tcpcollapse.New().Start(ctx, lab.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer li.Close()
	inst := li.(*tcpcollapse.Instance)
	before, err := inst.Counters()
	if err != nil {
		t.Fatal(err)
	}
	res := runInv(t, New(), 4*time.Second)
	after, err := inst.Counters()
	if err != nil {
		t.Fatal(err)
	}
	f := stallOf(res.Findings, "NET_RX")
	if f == nil {
		t.Fatalf("no NET_RX softirq.stall finding: %+v", res.Findings)
	}
	t.Logf("%s: %s", f.Severity, f.Title)
	ev := f.Evidence
	if ev["vector"] != "NET_RX" || ev["cause"] != causeCollapse {
		t.Errorf("vector %v cause %v, want NET_RX tcp-collapse", ev["vector"], ev["cause"])
	}
	if m, _ := ev["max_us"].(float64); m < float64(DefaultThreshold/time.Microsecond) {
		t.Errorf("max_us %v below the threshold", m)
	}
	if n, _ := ev["stalls"].(int); n < 1 {
		t.Errorf("stalls %v", ev["stalls"])
	}
	if ev["netns"] != inst.Netns() {
		t.Errorf("netns %v, want the lab's %d", ev["netns"], inst.Netns())
	}
	// wolf's counter window contains the BPF window and lies inside the
	// lab's own before/after readings.
	got, _ := ev["tcpext_PruneCalled"].(int64)
	if want := after["PruneCalled"] - before["PruneCalled"]; got < 1 || got > want {
		t.Errorf("tcpext_PruneCalled %d, want 1..%d", got, want)
	}
	if s, _ := ev["samples"].(uint64); s == 0 || ev["samples_from"] != "stall" {
		t.Errorf("samples %v from %v", ev["samples"], ev["samples_from"])
	}
	if share, _ := ev["collapse_share_pct"].(float64); share < 50 {
		t.Errorf("collapse share %v%%: the stall samples should be mostly in tcp_collapse", share)
	}
	// Loopback packets are polled by the per-CPU backlog NAPI instances.
	if devs, _ := ev["napi_devices"].([]string); len(devs) == 0 || !strings.HasPrefix(devs[0], "backlog: ") || strings.HasPrefix(devs[0], "backlog: 0 polls") {
		t.Errorf("napi_devices %v", ev["napi_devices"])
	}
	if len(f.Subjects) == 0 || f.Subjects[0].Role != finding.RoleCPU || len(f.Subjects[0].Stack) == 0 {
		t.Errorf("subjects %+v", f.Subjects)
	}
	h := histogram(res, "softirq_runtime_us", "NET_RX")
	if h == nil || h.Max < float64(DefaultThreshold/time.Microsecond) || h.Count == 0 {
		t.Errorf("NET_RX histogram %+v", h)
	}
	if histogram(res, "softirq_wait_us", "NET_RX") == nil {
		t.Error("no NET_RX wait histogram")
	}
	for _, c := range []string{"tracepoint:irq/softirq_entry", "tracepoint:irq/softirq_exit", "tracepoint:irq/softirq_raise", "tracepoint:napi/napi_poll", "perf_event"} {
		if !res.Capabilities[c] {
			t.Errorf("capability %s false", c)
		}
	}
	if res.Overhead.Events == 0 || res.Overhead.BPFRunNs == 0 {
		t.Errorf("overhead %+v", res.Overhead)
	}
	// The stall's samples are a profile: a flame graph of the stall
	// with tcp_collapse in it.
	var inCollapse uint64
	for _, p := range res.Profiles {
		for _, st := range p.Stacks {
			if p.Name == "net_rx_stall_stacks" && slices.ContainsFunc(st.Frames, func(f string) bool { return strings.HasPrefix(f, "tcp_collapse") }) {
				inCollapse += st.Value
			}
		}
	}
	if inCollapse == 0 {
		t.Errorf("no net_rx_stall_stacks sample in tcp_collapse: %d profiles", len(res.Profiles))
	}
}

// A healthy host: no softirq finding at warning or critical.
func TestLiveHealthyHost(t *testing.T) {
	requireLive(t)
	inv := New()
	var unseen uint64
	inv.collected = func(s *Snapshot) {
		for _, n := range s.Unseen {
			unseen += n
		}
	}
	res := runInv(t, inv, 2*time.Second)
	for _, f := range res.Findings {
		if f.Severity >= finding.Warning {
			t.Errorf("healthy host: %s %s (%v)", f.Severity, f.Title, f.Evidence)
		}
	}
	if h := histogram(res, "softirq_runtime_us", "TIMER"); h == nil || h.Count == 0 {
		t.Errorf("no TIMER runs seen in 2 s: %+v", res.Histograms)
	}
	// Runs the kernel did not run BPF for are counted as dropped too
	// (unseen.go): they happen whatever wolf does (RCU runs, a few a
	// second, while other tests load and free BPF programs), so only the
	// rest must be none.
	if res.Overhead.Dropped != unseen {
		t.Errorf("dropped %d on an idle host, %d of them runs the kernel did not run BPF for (notes: %q)", res.Overhead.Dropped, unseen, res.Notes)
	}
}

// buildTarget compiles a small C program whose wolf_work(ms) sleeps ms
// milliseconds; it waits for a byte on stdin, then calls it n times.
func buildTarget(t *testing.T) string {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		cc, err = exec.LookPath("clang")
	}
	testutil.Require(t, err == nil, "needs a C compiler (cc or clang) to build the uprobe target")
	dir := t.TempDir()
	src := filepath.Join(dir, "target.c")
	const prog = `#include <stdlib.h>
#include <time.h>
#include <unistd.h>
__attribute__((noinline)) int wolf_work(int ms)
{
	struct timespec ts = {0, ms * 1000000L};
	nanosleep(&ts, 0);
	return ms;
}
int main(int argc, char **argv)
{
	int n = atoi(argv[1]), ms = atoi(argv[2]), sum = 0;
	char c;
	if (read(0, &c, 1) != 1)
		return 2;
	for (int i = 0; i < n; i++)
		sum += wolf_work(ms);
	return sum == n * ms ? 0 : 1;
}
`
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "target")
	if out, err := exec.Command(cc, "-O1", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", cc, err, out)
	}
	return bin
}

type target struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

func startTarget(t *testing.T, bin string, calls, ms int) *target {
	t.Helper()
	cmd := exec.Command(bin, strconv.Itoa(calls), strconv.Itoa(ms))
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return &target{cmd, in}
}

func (tg *target) goAndWait(t *testing.T) {
	if _, err := tg.stdin.Write([]byte{1}); err != nil {
		t.Error(err)
		return
	}
	if err := tg.cmd.Wait(); err != nil {
		t.Errorf("target: %v", err)
	}
}

// --func BINARY:SYMBOL times a user-space function with uprobes: every
// call counted, each at least as long as it sleeps, and --pid keeps only
// that process's calls.
func TestLiveFuncUprobe(t *testing.T) {
	requireLive(t)
	st := features.Probe(context.Background(), "uprobes")
	testutil.Require(t, st.Available, "needs uprobes: "+st.Detail)
	bin := buildTarget(t)
	tgt := FuncTarget{Binary: bin, Symbol: "wolf_work"}
	if err := CheckFunc(context.Background(), tgt); err != nil {
		t.Fatal(err)
	}
	for _, filter := range []bool{false, true} {
		a := startTarget(t, bin, 12, 3)
		b := startTarget(t, bin, 5, 1)
		inv := New()
		inv.SampleHz = 0
		inv.Func = &tgt
		want := uint64(17)
		if filter {
			inv.FuncPID = a.cmd.Process.Pid
			want = 12
		}
		inv.started = func() {
			a.goAndWait(t)
			b.goAndWait(t)
		}
		res := runInv(t, inv, time.Second)
		f := findingtest.First(res.Findings, "softirq.func-latency")
		if f == nil {
			t.Fatalf("no func-latency finding: %+v", res.Findings)
		}
		t.Logf("filter=%v: %s", filter, f.Title)
		if f.Evidence["calls"] != want {
			t.Errorf("filter=%v: calls %v, want %d", filter, f.Evidence["calls"], want)
		}
		minUS := 1000.0
		if filter {
			minUS = 3000
		}
		if p50, _ := f.Evidence["p50_us"].(float64); p50 < minUS {
			t.Errorf("filter=%v: p50 %v µs, but every call sleeps at least %v µs", filter, p50, minUS)
		}
		if m, _ := f.Evidence["max_us"].(float64); m > 1e6 {
			t.Errorf("max %v µs", m)
		}
		var h *finding.Histogram
		for i := range res.Histograms {
			if res.Histograms[i].Name == "func_latency_us" {
				h = &res.Histograms[i]
			}
		}
		if h == nil || h.Labels["func"] != tgt.String() || h.Count != want {
			t.Errorf("histogram %+v", h)
		}
		if !res.Capabilities["uprobes"] {
			t.Error("uprobes capability not reported")
		}
	}
}

func TestCheckFuncBadTargets(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tg := range []FuncTarget{
		{Binary: "/nonexistent/app", Symbol: "main"},
		{Binary: self, Symbol: "main.main"}, // a Go program
		{Binary: "/bin/sh", Symbol: "wolf_no_such_function"},
	} {
		if err := CheckFunc(context.Background(), tg); !errors.Is(err, ErrBadTarget) {
			t.Errorf("%s: %v, want ErrBadTarget", tg, err)
		}
	}
}

// Kernel functions need kprobes (or fentry); without them CheckFunc says
// why in one line, and with them the kprobe pair times real calls.
func TestKernelFunc(t *testing.T) {
	testutil.RequireRoot(t)
	kp := features.Probe(context.Background(), "kprobes")
	err := CheckFunc(context.Background(), FuncTarget{Symbol: "net_rx_action"})
	if !kp.Available {
		if !errors.Is(err, investigator.ErrUnsupported) {
			t.Fatalf("no kprobes, yet CheckFunc says %v", err)
		}
		msg := err.Error()
		if strings.Contains(msg, "\n") || !strings.Contains(msg, "kprobes") || !strings.Contains(msg, "softirq_entry/exit") {
			t.Errorf("reason %q", msg)
		}
		t.Logf("as expected here: %v", err)
		return
	}
	if err != nil {
		t.Fatalf("kprobes available, CheckFunc: %v", err)
	}
	testutil.Require(t, runtime.GOARCH == "amd64", "the kprobe check times __x64_sys_getppid")
	testutil.Exclusive(t)
	inv := New()
	inv.SampleHz = 0
	inv.Func = &FuncTarget{Symbol: "__x64_sys_getppid"}
	inv.started = func() {
		for i := 0; i < 100; i++ {
			syscall.Getppid()
		}
	}
	res := runInv(t, inv, 500*time.Millisecond)
	f := findingtest.First(res.Findings, "softirq.func-latency")
	if f == nil || f.Evidence["calls"].(uint64) < 100 {
		t.Errorf("finding %+v", f)
	}
}

// bpftraceScript measures what wolf measures for NET_RX, the same way:
// entry and exit of the same tracepoints, per CPU.
const bpftraceScript = `BEGIN { printf("ready\n"); }
tracepoint:irq:softirq_entry /args->vec == 3/ { @start[cpu] = nsecs; }
tracepoint:irq:softirq_exit /args->vec == 3 && @start[cpu] != 0/ { @n = count(); @sum = sum(nsecs - @start[cpu]); @start[cpu] = 0; }
END { clear(@start); }
`

// The check against the reference: bpftrace, on the same tracepoints over
// the same window (it attaches before wolf and detaches after; the load
// runs while both are attached), counts the same NET_RX runs and the
// same total run time within 5 %.
func TestBpftraceAgrees(t *testing.T) {
	testutil.RequireRoot(t)
	bt, err := exec.LookPath("bpftrace")
	// .ci/run installs bpftrace, so under WOLF_REQUIRE_BPF=1 its absence fails.
	testutil.Require(t, err == nil, "needs bpftrace (Debian: apt-get install bpftrace)")
	testutil.Exclusive(t)
	if testutil.RaceEnabled {
		// The loopback load runs in this process: under the detector it
		// makes other NET_RX runs (fewer, 5.6 µs each instead of 4.5),
		// and the two sums came 5-6 % apart in every run here instead
		// of 3 %. The full tier makes the comparison, without -race.
		t.Skip("a comparison of measurements: made without -race")
	}
	cmd := exec.Command(bt, "-e", bpftraceScript)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	rd := bufio.NewReader(out)
	ready := make(chan error, 1)
	go func() {
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				ready <- fmt.Errorf("bpftrace ended before attaching: %v (stderr %q)", err, stderr.String())
				return
			}
			if strings.TrimSpace(line) == "ready" {
				ready <- nil
				return
			}
		}
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("bpftrace did not attach in 30 s (stderr %q)", stderr.String())
	}

	inv := New()
	inv.started = func() {
		if _, err := loopbackWorkload(1500*time.Millisecond, false)(context.Background()); err != nil {
			t.Error(err)
		}
	}
	res := runInv(t, inv, 2500*time.Millisecond)
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(rd)
	_ = cmd.Wait()
	field := func(name string) float64 {
		m := regexp.MustCompile(`(?m)^@` + name + `: (\d+)`).FindSubmatch(rest)
		if m == nil {
			t.Fatalf("no @%s in bpftrace's output %q (stderr %q)", name, rest, stderr.String())
		}
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		return v
	}
	btN, btSum := field("n"), field("sum")
	h := histogram(res, "softirq_runtime_us", "NET_RX")
	if h == nil {
		t.Fatal("no NET_RX histogram")
	}
	wolfN, wolfSum := float64(h.Count), h.Sum*1000 // µs → ns
	t.Logf("NET_RX runs: wolf %.0f, bpftrace %.0f; run time: wolf %.2f ms, bpftrace %.2f ms", wolfN, btN, wolfSum/1e6, btSum/1e6)
	if btN < 1000 {
		t.Fatalf("the load made only %.0f NET_RX runs", btN)
	}
	if d := (wolfN - btN) / btN; d > 0.05 || d < -0.05 {
		t.Errorf("counts differ by %.1f%%", 100*d)
	}
	// Each tool's interval holds a program of the other: tracepoint
	// programs run in attach order at entry and at exit, so one tool's
	// entry-to-exit includes the other's entry program and the other's
	// includes this one's exit program. The gap is that asymmetry, a
	// fraction of a microsecond per run (more on a loaded machine, with
	// colder caches): allowed up to 1 µs a run beyond the 5%.
	slack := 0.05*btSum + 1000*btN
	if d := wolfSum - btSum; d > slack || d < -slack {
		t.Errorf("run-time sums differ by %.1f%% (%.0f ns a run)", 100*d/btSum, d/btN)
	}
}

// Every NAPI poll the tracepoint saw is in the per-instance stats, flushed
// to the map or still pending in a CPU's accumulator.
func TestLiveNAPIAccounting(t *testing.T) {
	p := probeLoopback(t)
	c, err := readCounters(p.maps.CpuStates)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := p.readNAPI(0)
	if err != nil {
		t.Fatal(err)
	}
	var polls uint64
	for _, n := range ns {
		polls += n.Polls
	}
	if c.NapiPolls < 100 || polls != c.NapiPolls || c.MapFull != 0 {
		t.Errorf("napi_poll fired %d times, stats hold %d polls (%+v), map full %d", c.NapiPolls, polls, ns, c.MapFull)
	}
}

// Loopback traffic this process sends is received in softirq work that
// runs in its own context: its threads show in the time per task, with
// NET_RX time, flushed and pending together.
func TestLiveTaskSoftirqTime(t *testing.T) {
	p := probeLoopback(t)
	ts, err := p.readTasks()
	if err != nil {
		t.Fatal(err)
	}
	var own TaskTime
	for _, x := range ts {
		if x.TGID == os.Getpid() {
			own.Runs += x.Runs
			own.NS[vecNetRX] += x.NS[vecNetRX]
		}
		if x.TID == 0 {
			t.Errorf("the idle task counted: %+v", x)
		}
	}
	if own.Runs == 0 || own.NS[vecNetRX] == 0 {
		t.Errorf("no NET_RX time on top of this process (%d tasks: %+v)", len(ts), ts)
	}
}

// probeLoopback attaches the probe, runs 300 ms of loopback traffic and
// detaches, leaving the maps to read; the probe closes with the test.
func probeLoopback(t *testing.T) *probe {
	t.Helper()
	requireLive(t)
	p, err := openProbe(probeConfig{Threshold: DefaultThreshold})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.close)
	if _, err := loopbackWorkload(300*time.Millisecond, false)(context.Background()); err != nil {
		t.Fatal(err)
	}
	p.kit.Detach()
	return p
}
