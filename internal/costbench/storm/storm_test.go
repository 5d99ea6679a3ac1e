//go:build linux

package storm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/bpfcost"
	"github.com/wolf-investigator/wolf/internal/costbench"
	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/lab/memchain"
	"github.com/wolf-investigator/wolf/internal/testutil"
)

// BenchmarkStorm drives the heaviest storms and measures, side by side in
// one run, what wolf doctor costs there against the floor (an empty
// program on each tracepoint doctor attaches to) and, on the lock storms,
// against perf lock contention -b.
//
//	go test -run '^$' -bench Storm -benchtime 1x ./internal/costbench/storm   # root; ~6 min
//
// WOLF_BENCH_BASE names another wolf binary (a change's parent commit,
// built by the caller) measured in the same rounds, as "wolf doctor
// (base)": a change compared with what it changes on one storm.
//
// It takes /tmp/wolf-bench.lock for its whole run, as every benchmark on a
// shared machine does, and the tests' lock (testutil.Exclusive): its
// storms are machine-wide.
func BenchmarkStorm(b *testing.B) {
	testutil.RequireRoot(b)
	unlock := benchLock(b)
	defer unlock()
	// The storms (a memory cgroup at its limit, directory and UDP floods)
	// are what the tests that assert on a quiet machine must not see.
	testutil.Exclusive(b)
	stats, err := costbench.EnableStats()
	if err != nil {
		b.Fatal(err)
	}
	defer stats.Close()
	wolf := buildWolf(b)
	// A second wolf (another commit's, built by the caller) measured in
	// the same rounds: a change compared side by side on one storm.
	base := os.Getenv("WOLF_BENCH_BASE")
	if base != "" {
		if st, err := os.Stat(base); err != nil || st.Mode()&0o111 == 0 {
			b.Fatalf("WOLF_BENCH_BASE=%s: not an executable wolf", base)
		}
	}
	perf := findPerf()
	if perf == "" {
		b.Logf("no perf with BPF skeletons (scripts/perf-bpf/build.sh builds one): the lock storms run without perf lock contention -b")
	}
	var results []*result
	for _, st := range storms() {
		if only := os.Getenv("WOLF_BENCH_STORMS"); only != "" && !strings.Contains(","+only+",", ","+st.name+",") {
			continue
		}
		b.Run(st.name, func(b *testing.B) {
			for range b.N {
				r := runStorm(b, st, wolf, base, perf)
				if r != nil {
					results = append(results, r)
				}
			}
		})
	}
	// Printed, not logged: a benchmark's log shows only with -v.
	fmt.Printf("\n%s", table(results))
	if out := os.Getenv("WOLF_BENCH_OUT"); out != "" {
		js, _ := json.MarshalIndent(results, "", "  ")
		if err := os.WriteFile(out, js, 0o644); err != nil {
			b.Error(err)
		}
	}
}

// A storm and what drives it.
type storm struct {
	name, what string
	// start starts it; stop undoes everything it started.
	start func(ctx context.Context, b *testing.B) (stop func(), err error)
	perf  bool // compare with perf lock contention -b
}

func storms() []storm {
	return []storm{
		{name: "memcg-mmap-lock", what: "the memcg-mmap-lock lab: 32 threads at their memory cgroup's limit fault a file under mmap_lock, a ps-like reader waits",
			start: startLab(memchain.New()), perf: true},
		{name: "dir-convoy", what: "stress-ng --dir 8: eight processes create and remove directories in one parent, a convoy on its i_rwsem and the dentry locks",
			start: startStress("--dir", "8"), perf: true},
		{name: "softirq-flood", what: "stress-ng --udp 2: UDP over loopback, hundreds of thousands of NET_RX softirqs a second (the tcp-collapse lab stalls NET_RX, but at a few prunes a second, not a flood)",
			start: startStress("--udp", "2")},
	}
}

func startLab(l lab.Lab) func(context.Context, *testing.B) (func(), error) {
	return func(ctx context.Context, b *testing.B) (func(), error) {
		in, err := l.Start(ctx, lab.Options{})
		if err != nil {
			return nil, err
		}
		return func() { _ = in.Close() }, nil
	}
}

// startStress runs stress-ng with args (one stressor) until stopped.
func startStress(args ...string) func(context.Context, *testing.B) (func(), error) {
	return func(ctx context.Context, b *testing.B) (func(), error) {
		sng, err := exec.LookPath("stress-ng")
		if err != nil {
			return nil, fmt.Errorf("stress-ng: %w", err)
		}
		args := append(args, "--timeout", "600s", "--temp-path", b.TempDir(), "-q")
		cmd := exec.CommandContext(ctx, sng, args...)
		cmd.SysProcAttr = &unix.SysProcAttr{Setpgid: true, Pdeathsig: unix.SIGKILL}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		return func() {
			_ = unix.Kill(-cmd.Process.Pid, unix.SIGKILL)
			_ = cmd.Wait()
		}, nil
	}
}

// The phases' lengths: the measured window, and the settling before it.
const (
	window = 8 * time.Second
	settle = 2 * time.Second
)

// tool is one side of the comparison, summed over the rounds.
type tool struct {
	Name      string  `json:"name"`
	Runs      uint64  `json:"runs"`        // its programs' runs
	RunNs     uint64  `json:"run_ns"`      // their run time
	Events    uint64  `json:"events"`      // tracepoint hits on its tracepoints (the floor's runs there)
	CPUNs     uint64  `json:"cpu_ns"`      // its process's CPU in the windows
	ReportNs  uint64  `json:"report_ns"`   // and from the windows' start to its exit
	WindowS   float64 `json:"window_s"`    // the windows' length
	Rounds    int     `json:"rounds"`      //
	Diagnosis string  `json:"diagnosis"`   // wolf: the first diagnosis of its last report
	BudgetBit bool    `json:"budget_bit"`  // wolf: its budget made it sample
	Reported  float64 `json:"bpf_pct_rep"` // wolf: bpf_one_cpu_pct its report said
}

type result struct {
	Storm string           `json:"storm"`
	What  string           `json:"what"`
	Tools map[string]*tool `json:"tools"`
	// ByProgram: wolf's programs by name over the rounds.
	ByProgram map[string]costbench.Stat `json:"by_program"`
	// BaseByProgram: the same for the base wolf (WOLF_BENCH_BASE), if any.
	BaseByProgram map[string]costbench.Stat `json:"base_by_program,omitempty"`
	// Tracepoints doctor attached to.
	Tracepoints []string `json:"tracepoints"`
}

func rounds() int {
	if n, err := strconv.Atoi(os.Getenv("WOLF_BENCH_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return 2
}

// The base wolf's rows are named after wolf's with this suffix.
const baseSuffix = " (base)"

func runStorm(b *testing.B, st storm, wolf, base, perf string) *result {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	stop, err := st.start(ctx, b)
	if err != nil {
		b.Skipf("%s: %v", st.name, err)
		return nil
	}
	defer stop()
	time.Sleep(5 * time.Second) // the storm builds up
	r := &result{Storm: st.name, What: st.what, Tools: map[string]*tool{}, ByProgram: map[string]costbench.Stat{}}
	// The first phase is wolf's: it tells which tracepoints the floor
	// goes on. Then the order rotates, so that neither side always
	// follows the other.
	tps := wolfPhase(ctx, b, r, wolf, nil, "")
	if len(tps) == 0 {
		b.Fatalf("%s: wolf attached to no tracepoint", st.name)
	}
	r.Tracepoints = tps
	floor, err := costbench.AttachFloor(tps)
	if err != nil {
		b.Fatal(err)
	}
	defer floor.Close()
	phases := []func(){
		func() { floorPhase(b, r, floor) },
		func() { wolfPhase(ctx, b, r, wolf, floor, "") },
	}
	if base != "" {
		r.BaseByProgram = map[string]costbench.Stat{}
		phases = append(phases, func() { wolfPhase(ctx, b, r, base, floor, baseSuffix) })
	}
	if st.perf && perf != "" {
		phases = append(phases, func() { perfPhase(ctx, b, r, perf, floor) })
	}
	for i := range rounds() {
		for j := range phases {
			phases[(i+j)%len(phases)]()
		}
	}
	return r
}

func (r *result) tool(name string) *tool {
	t := r.Tools[name]
	if t == nil {
		t = &tool{Name: name}
		r.Tools[name] = t
	}
	return t
}

// floorPhase: only the empty programs.
func floorPhase(b *testing.B, r *result, f *costbench.Floor) {
	a := costbench.ReadStats(f.IDs())
	time.Sleep(window)
	d := costbench.Since(a, costbench.ReadStats(f.IDs()))
	t := r.tool("floor")
	t.Runs += d.Runs
	t.RunNs += d.RunNs
	t.Events += d.Runs
	t.WindowS += window.Seconds()
	t.Rounds++
}

// wolfPhase runs wolf doctor and measures its programs and process over a
// window once everything is attached; with a floor, the tracepoints' hits
// too. Its rows are named with suffix (baseSuffix for the base wolf). It
// returns the tracepoints doctor's programs are attached to.
func wolfPhase(ctx context.Context, b *testing.B, r *result, wolf string, f *costbench.Floor, suffix string) []string {
	out := filepath.Join(b.TempDir(), "doctor.json")
	d := settle + window + 4*time.Second
	cmd := exec.CommandContext(ctx, wolf, "doctor", "--duration", d.String(), "--format", "json", "--output", out)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	pid := cmd.Process.Pid
	ids, err := costbench.WaitPrograms(pid, 1500*time.Millisecond, 60*time.Second)
	if err != nil {
		_ = cmd.Process.Kill()
		b.Fatal(err)
	}
	tps := tracepointsOf(ids)
	time.Sleep(settle)
	cpu0, _ := costbench.ProcessCPU(pid)
	a := costbench.ReadStats(ids)
	var fa, ca map[ebpf.ProgramID]costbench.Stat
	if f != nil {
		fa = costbench.ReadStats(f.IDs())
		ca = costbench.ReadStats(f.IDsOf("contention_begin", "contention_end"))
	}
	time.Sleep(window)
	cpu1, _ := costbench.ProcessCPU(pid)
	dw := costbench.Since(a, costbench.ReadStats(ids))
	var df, dc costbench.Delta
	if f != nil {
		df = costbench.Since(fa, costbench.ReadStats(f.IDs()))
		dc = costbench.Since(ca, costbench.ReadStats(f.IDsOf("contention_begin", "contention_end")))
	}
	if err := cmd.Wait(); err != nil {
		b.Fatalf("wolf doctor: %v: %s", err, stderr.String())
	}
	if f == nil {
		return tps // the first phase only learns the tracepoints
	}
	total := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	t := r.tool("wolf doctor" + suffix)
	t.Runs += dw.Runs
	t.RunNs += dw.RunNs
	t.Events += df.Runs
	t.CPUNs += uint64(cpu1 - cpu0)
	t.ReportNs += uint64(max(total-cpu0, 0))
	t.WindowS += window.Seconds()
	t.Rounds++
	// Its programs on perf's two tracepoints, per hit there: what wolf
	// pays for the lock events perf lock contention sees.
	c := r.tool("wolf doctor" + suffix + ", lock:contention_* only")
	for n, s := range dw.ByName {
		if strings.Contains(n, "contention") {
			c.Runs += s.Runs
			c.RunNs += s.RunNs
		}
	}
	c.Events += dc.Runs
	c.WindowS += window.Seconds()
	c.Rounds++
	byProgram := r.ByProgram
	if suffix != "" {
		byProgram = r.BaseByProgram
	}
	for n, s := range dw.ByName {
		p := byProgram[n]
		p.Name = n
		p.Runs += s.Runs
		p.RunNs += s.RunNs
		byProgram[n] = p
	}
	var rep struct {
		Diagnoses []struct {
			ID string `json:"id"`
		} `json:"diagnoses"`
		Overhead struct {
			BPFPct    float64 `json:"bpf_one_cpu_pct"`
			BudgetBit bool    `json:"budget_bit"`
		} `json:"overhead"`
	}
	if js, err := os.ReadFile(out); err == nil && json.Unmarshal(js, &rep) == nil {
		t.Diagnosis = ""
		if len(rep.Diagnoses) > 0 {
			t.Diagnosis = rep.Diagnoses[0].ID
		}
		t.BudgetBit = t.BudgetBit || rep.Overhead.BudgetBit
		t.Reported = rep.Overhead.BPFPct
	}
	return tps
}

// perfPhase runs perf lock contention -b system-wide over the window.
func perfPhase(ctx context.Context, b *testing.B, r *result, perf string, f *costbench.Floor) {
	d := settle + window + 2*time.Second
	cmd := exec.CommandContext(ctx, perf, "lock", "contention", "-b", "-a", "--", "sleep", strconv.Itoa(int(d.Seconds())))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	pid := cmd.Process.Pid
	ids, err := costbench.WaitPrograms(pid, time.Second, 30*time.Second)
	if err != nil {
		_ = cmd.Process.Kill()
		b.Fatal(err)
	}
	time.Sleep(settle)
	cpu0, _ := costbench.ProcessCPU(pid)
	a := costbench.ReadStats(ids)
	// perf's events: the hits of its two tracepoints.
	fids := f.IDsOf("contention_begin", "contention_end")
	fa := costbench.ReadStats(fids)
	time.Sleep(window)
	cpu1, _ := costbench.ProcessCPU(pid)
	dp := costbench.Since(a, costbench.ReadStats(ids))
	df := costbench.Since(fa, costbench.ReadStats(fids))
	if err := cmd.Wait(); err != nil {
		b.Fatalf("perf lock contention -b: %v: %s", err, stderr.String())
	}
	total := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	t := r.tool("perf lock contention -b")
	t.Runs += dp.Runs
	t.RunNs += dp.RunNs
	t.Events += df.Runs
	t.CPUNs += uint64(cpu1 - cpu0)
	t.ReportNs += uint64(max(total-cpu0, 0))
	t.WindowS += window.Seconds()
	t.Rounds++
}

// tracepointsOf names the raw tracepoints (and BTF tracepoints) programs
// ids are attached to.
func tracepointsOf(ids []ebpf.ProgramID) []string {
	links, err := bpfcost.Links()
	if err != nil {
		return nil
	}
	seen := map[string]bool{}
	for _, id := range ids {
		for _, a := range links[uint32(id)] {
			if a.Kind != bpfcost.KindRawTracepoint && a.Kind != bpfcost.KindTPBTF {
				continue
			}
			tp := a.Target
			if i := strings.LastIndexByte(tp, '/'); i >= 0 {
				tp = tp[i+1:]
			}
			if tp != "" && tp != "?" {
				seen[tp] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for tp := range seen {
		out = append(out, tp)
	}
	sort.Strings(out)
	return out
}

// table is the results as the README shows them.
func table(rs []*result) string {
	var s strings.Builder
	s.WriteString("| storm | tool | events/s | BPF ns/event | BPF ms per 1 M events | process ms per 1 M events | BPF % of one CPU | process % of one CPU |\n")
	s.WriteString("|---|---|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		for _, name := range []string{"floor", "wolf doctor", "wolf doctor, lock:contention_* only",
			"wolf doctor" + baseSuffix, "wolf doctor" + baseSuffix + ", lock:contention_* only", "perf lock contention -b"} {
			t := r.Tools[name]
			if t == nil || t.WindowS == 0 || t.Events == 0 {
				continue
			}
			perM := func(ns uint64) float64 { return float64(ns) / float64(t.Events) } // ns per event = ms per 1 M events
			proc := "–"
			procPct := "–"
			if name == "wolf doctor" || name == "wolf doctor"+baseSuffix || name == "perf lock contention -b" {
				proc = fmt.Sprintf("%.0f", perM(t.CPUNs))
				procPct = fmt.Sprintf("%.2f", float64(t.CPUNs)/t.WindowS/1e7)
			}
			fmt.Fprintf(&s, "| %s | %s | %.0f | %.0f | %.0f | %s | %.2f | %s |\n", r.Storm, name,
				float64(t.Events)/t.WindowS, float64(t.RunNs)/float64(max(t.Runs, 1)), perM(t.RunNs), proc,
				float64(t.RunNs)/t.WindowS/1e7, procPct)
		}
	}
	for _, r := range rs {
		if w := r.Tools["wolf doctor"]; w != nil {
			fmt.Fprintf(&s, "\n%s: doctor's first diagnosis %s; its report said BPF %.2f%% of one CPU, budget bit %v; tracepoints %s\n",
				r.Storm, w.Diagnosis, w.Reported, w.BudgetBit, strings.Join(r.Tracepoints, ", "))
			names := make([]string, 0, len(r.ByProgram))
			for n := range r.ByProgram {
				names = append(names, n)
			}
			sort.Slice(names, func(i, j int) bool { return r.ByProgram[names[i]].RunNs > r.ByProgram[names[j]].RunNs })
			bw := r.Tools["wolf doctor"+baseSuffix]
			if bw != nil {
				fmt.Fprintf(&s, "%s: the base's first diagnosis %s; its report said BPF %.2f%% of one CPU, budget bit %v\n",
					r.Storm, bw.Diagnosis, bw.Reported, bw.BudgetBit)
			}
			for _, n := range names[:min(len(names), 12)] {
				p := r.ByProgram[n]
				fmt.Fprintf(&s, "  %-24s %8.0f runs/s %6.0f ns/run %5.2f%% of one CPU", n, float64(p.Runs)/w.WindowS,
					float64(p.RunNs)/float64(max(p.Runs, 1)), float64(p.RunNs)/w.WindowS/1e7)
				if q, ok := r.BaseByProgram[n]; ok && bw != nil && bw.WindowS > 0 {
					fmt.Fprintf(&s, "   base %8.0f runs/s %6.0f ns/run %5.2f%%", float64(q.Runs)/bw.WindowS,
						float64(q.RunNs)/float64(max(q.Runs, 1)), float64(q.RunNs)/bw.WindowS/1e7)
				}
				s.WriteString("\n")
			}
		}
	}
	return s.String()
}

// buildWolf builds cmd/wolf into the benchmark's temporary directory.
func buildWolf(b *testing.B) string {
	bin := filepath.Join(b.TempDir(), "wolf")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/wolf-investigator/wolf/cmd/wolf")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("go build wolf: %v: %s", err, out)
	}
	return bin
}

// findPerf is a perf that has BPF skeletons: $WOLF_PERF, else the one
// scripts/perf-bpf/build.sh cached.
func findPerf() string {
	if p := os.Getenv("WOLF_PERF"); p != "" {
		return p
	}
	dir := os.Getenv("WOLF_PERF_CACHE")
	if dir == "" {
		dir = "/var/cache/wolf-perf"
	}
	ms, _ := filepath.Glob(filepath.Join(dir, "perf-*", "util", "bpf_skel", "lock_contention.skel.h"))
	for _, m := range ms {
		p := filepath.Join(filepath.Dir(filepath.Dir(filepath.Dir(m))), "perf")
		if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// benchLock takes /tmp/wolf-bench.lock: two measurements never overlap on
// a shared machine.
func benchLock(b *testing.B) func() {
	f, err := os.OpenFile("/tmp/wolf-bench.lock", os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		b.Fatal(err)
	}
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		b.Logf("waiting for /tmp/wolf-bench.lock (another benchmark runs)")
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
			b.Fatal(err)
		}
	}
	return func() { _ = f.Close() }
}
