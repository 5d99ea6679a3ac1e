package io

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/costbench"
	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/testutil"
)

// What wolf io costs block I/O, with and without it attached, rounds
// interleaved (internal/costbench): four threads read a loop device of
// the benchmark's own 4 KiB at a time with O_DIRECT, as fast as the host
// lets them (about 50,000 requests a second on the development VM), for
// roundTime a round. Besides the throughput's slowdown, each round with
// wolf reports the BPF run time per request the kernel measured
// (kernel.bpf_stats, wolf's overhead meter), and what that is in one CPU
// at 50,000 requests a second: the budget is 1%.
//
// Three runs: --waiters off (the request programs alone), the default
// (waiters armed when something holds I/O back or a disk is busy half of
// a second, which this saturated loop device is: it arms them within the
// first second, a sixteenth of the time; each side's round in this mode
// measures after a first, unmeasured round of the workload), and
// --waiters on (the sched_switch and sched_waking
// programs attached from the start).
//
// Beside wolf's own meter, every side is also measured by one instrument:
// the kernel's run statistics (turned on for the run) of the programs its
// process holds, per request the kernel completed on the device in its
// rounds (/proc/diskstats), program by program. WOLF_BENCH_BASE names
// another wolf binary (a change's parent, built by the caller): its
// `wolf io` runs as a third side in the same rounds, the order of the
// sides rotating each round, so that a change is compared with what it
// changes on one machine in one hold of the lock, not across runs.
//
// A fourth side, the floor, runs the workload with an empty program on
// each tracepoint wolf io's hot programs use (costbench.AttachFloor):
// what any program there costs, in the same rounds. Each wolf side's
// programs are then also told as the floor their runs would cost and
// the work above it.
//
// Run: flock /tmp/wolf-bench.lock go test -run '^$' -bench Overhead -benchtime 1x ./internal/io/
// (one mode: -bench Overhead/waiters=off)
// (as root; WOLF_BENCH_ROUNDS rounds, default 12;
// WOLF_BENCH_BASE=/tmp/wolf-base to measure a base build beside).

const roundTime = 2 * time.Second

// settleTime is how long both wolf sides run before a round is measured:
// the second baseRound's WaitPrograms waits for the programs to be still.
const settleTime = time.Second

func benchRounds() int {
	if n, err := strconv.Atoi(os.Getenv("WOLF_BENCH_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return 12
}

// loopReads is the workload: threads read dev for roundTime; requests a
// second.
func loopReads(dev string, threads int) costbench.Workload {
	return func(ctx context.Context) (float64, error) {
		fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_DIRECT, 0)
		if err != nil {
			return 0, err
		}
		defer unix.Close(fd)
		var n atomic.Int64
		var wg sync.WaitGroup
		var ferr atomic.Value
		stop := time.Now().Add(roundTime)
		for range threads {
			wg.Add(1)
			go func() {
				defer wg.Done()
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				buf, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
				if err != nil {
					ferr.Store(err)
					return
				}
				defer unix.Munmap(buf)
				for i := 0; ; i++ {
					if i%256 == 0 && time.Now().After(stop) {
						return
					}
					if _, err := unix.Pread(fd, buf, rand.Int64N(4096)*4096); err != nil {
						ferr.Store(err)
						return
					}
					n.Add(1)
				}
			}()
		}
		start := time.Now()
		wg.Wait()
		if e, ok := ferr.Load().(error); ok {
			return 0, e
		}
		return float64(n.Load()) / time.Since(start).Seconds(), nil
	}
}

// arm is one side of the comparison with wolf attached: this build (in
// the test process) or the base wolf (WOLF_BENCH_BASE, a process of its
// own), summed over its rounds.
type arm struct {
	name string
	// What wolf's own meter said (this build only): BPF run time and the
	// device's requests, per round.
	meterNs, meterReqs []float64
	cpuS               float64
	// The kernel's run statistics of the programs the side's process
	// holds, by program name, over the rounds; and the requests the
	// kernel completed on the device meanwhile (/proc/diskstats).
	progs map[string]costbench.Stat
	reqs  uint64
	with  []float64 // throughput per round
}

// programStats reads the run statistics of the programs process pid holds.
func programStats(pid int) map[ebpf.ProgramID]costbench.Stat {
	ids, err := costbench.HeldPrograms(pid)
	if err != nil {
		return nil
	}
	return costbench.ReadStats(ids)
}

// addSince adds the programs' runs between a and b to the arm: a program
// loaded meanwhile (the waiter programs, armed during the round) counts
// from zero (the statistics are on from the benchmark's start).
func (a *arm) addSince(x, y map[ebpf.ProgramID]costbench.Stat) {
	for id, s := range y {
		p := x[id]
		if s.Runs < p.Runs || s.RunNs < p.RunNs {
			continue
		}
		t := a.progs[s.Name]
		t.Name = s.Name
		t.Runs += s.Runs - p.Runs
		t.RunNs += s.RunNs - p.RunNs
		a.progs[s.Name] = t
	}
}

// warmUp runs the workload once, unmeasured, in the default mode: the
// busy disk arms the waiters in its first second or two, and the round
// then measures the steady state a long-running wolf is in.
func warmUp(ctx context.Context, waiters string, work costbench.Workload) error {
	if waiters != WaitersAuto {
		return nil
	}
	_, err := work(ctx)
	return err
}

// floorTracepoints are the tracepoints of wolf io's programs that run per
// request or per context switch, by program name.
var floorTracepoints = map[string]string{
	"rq_insert":    "block_rq_insert",
	"rq_issue":     "block_rq_issue",
	"rq_complete":  "block_rq_complete",
	"sched_switch": "sched_switch",
	"sched_waking": "sched_waking",
}

// floorRound runs one round of the workload with only the floor attached
// (for that round: it is no part of the other sides' rounds); its
// programs are named by their tracepoints.
func floorRound(ctx context.Context, tps []string, dev string, work costbench.Workload, a *arm) (float64, error) {
	f, err := costbench.AttachFloor(tps)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	x, n0 := costbench.ReadStats(f.IDs()), completed(dev)
	v, err := work(ctx)
	if err != nil {
		return 0, err
	}
	y := costbench.ReadStats(f.IDs())
	a.reqs += completed(dev) - n0
	for _, tp := range tps {
		ids := f.IDsOf(tp)
		dd := costbench.Since(pick(x, ids), pick(y, ids))
		t := a.progs[tp]
		t.Name = tp
		t.Runs += dd.Runs
		t.RunNs += dd.RunNs
		a.progs[tp] = t
	}
	return v, nil
}

// pick is the statistics of programs ids.
func pick(m map[ebpf.ProgramID]costbench.Stat, ids []ebpf.ProgramID) map[ebpf.ProgramID]costbench.Stat {
	out := map[ebpf.ProgramID]costbench.Stat{}
	for _, id := range ids {
		if s, ok := m[id]; ok {
			out[id] = s
		}
	}
	return out
}

// completed is the requests the kernel completed on dev so far.
func completed(dev string) uint64 {
	ds, err := readDisks()
	if err != nil {
		return 0
	}
	d := ds[dev]
	return d.Reads + d.Writes + d.Discards
}

// thisRound runs one round of the workload with this build's io attached.
func thisRound(ctx context.Context, b *testing.B, dev, waiters string, work costbench.Workload, a *arm) (float64, error) {
	iv := New()
	iv.Device, iv.Waiters = dev, waiters
	s, err := iv.Start(ctx, investigator.Options{})
	if err != nil {
		return 0, err
	}
	defer s.Close()
	// Start-up (loading, verifying) is not the steady cost: a first
	// window ends it.
	if _, err := s.Collect(ctx); err != nil {
		return 0, err
	}
	// Settle as long as the base side does (WaitPrograms: its programs
	// unchanged for a second): io's first looks at the request rate, which
	// start its duty cycle, come in that time, and a round begun before
	// them pays the issue programs in full where the base's does not.
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(settleTime):
	}
	if err := warmUp(ctx, waiters, work); err != nil {
		return 0, err
	}
	if waiters == WaitersAuto { // the meter's window starts after it
		if _, err := s.Collect(ctx); err != nil {
			return 0, err
		}
	}
	x, n0 := programStats(os.Getpid()), completed(dev)
	v, err := work(ctx)
	if err != nil {
		return 0, err
	}
	a.addSince(x, programStats(os.Getpid()))
	a.reqs += completed(dev) - n0
	res, err := s.Collect(ctx)
	if err != nil {
		return 0, err
	}
	if f := deviceOf(res, dev); f != nil {
		n, _ := f.Evidence["requests"].(uint64)
		a.meterReqs = append(a.meterReqs, float64(n))
	}
	a.meterNs = append(a.meterNs, float64(res.Overhead.BPFRunNs))
	a.cpuS += res.Overhead.CPUSeconds
	if res.Overhead.Dropped != 0 {
		b.Errorf("wolf dropped %d", res.Overhead.Dropped)
	}
	return v, nil
}

// baseRound runs one round with the base wolf's io watching dev.
func baseRound(ctx context.Context, bin, dev, waiters string, work costbench.Workload, a *arm) (float64, error) {
	cmd := exec.CommandContext(ctx, bin, "io", "--device", dev, "--waiters", waiters, "--duration", "10m",
		"--format", "json", "--output", os.DevNull)
	cmd.SysProcAttr = &unix.SysProcAttr{Pdeathsig: unix.SIGKILL}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	// Attached once its programs stop growing (the waiter programs, armed
	// later, count from zero in addSince).
	if _, err := costbench.WaitPrograms(cmd.Process.Pid, time.Second, time.Minute); err != nil {
		return 0, err
	}
	if err := warmUp(ctx, waiters, work); err != nil {
		return 0, err
	}
	x, n0 := programStats(cmd.Process.Pid), completed(dev)
	v, err := work(ctx)
	if err != nil {
		return 0, err
	}
	a.addSince(x, programStats(cmd.Process.Pid))
	a.reqs += completed(dev) - n0
	return v, nil
}

func BenchmarkOverhead(b *testing.B) {
	testutil.RequireRoot(b)
	base := os.Getenv("WOLF_BENCH_BASE")
	if base != "" {
		if st, err := os.Stat(base); err != nil || st.Mode()&0o111 == 0 {
			b.Fatalf("WOLF_BENCH_BASE=%s: not an executable wolf", base)
		}
	}
	stats, err := costbench.EnableStats()
	if err != nil {
		b.Fatal(err)
	}
	defer stats.Close()
	var tps []string
	for _, tp := range floorTracepoints {
		tps = append(tps, tp)
	}
	sort.Strings(tps)
	for _, waiters := range []string{WaitersOff, WaitersAuto, WaitersOn} {
		b.Run("waiters="+waiters, func(b *testing.B) {
			l := testLoop(b)
			work := loopReads(l.Dev, 4)
			ctx := context.Background()
			for range b.N {
				this := &arm{name: "wolf", progs: map[string]costbench.Stat{}}
				old := &arm{name: "wolf (base)", progs: map[string]costbench.Stat{}}
				fl := &arm{name: "floor", progs: map[string]costbench.Stat{}}
				var without []float64
				phases := []func() error{
					func() error {
						v, err := work(ctx)
						without = append(without, v)
						return err
					},
					func() error {
						v, err := thisRound(ctx, b, l.Name, waiters, work, this)
						this.with = append(this.with, v)
						return err
					},
					func() error {
						v, err := floorRound(ctx, tps, l.Name, work, fl)
						fl.with = append(fl.with, v)
						return err
					},
				}
				if base != "" {
					phases = append(phases, func() error {
						v, err := baseRound(ctx, base, l.Name, waiters, work, old)
						old.with = append(old.with, v)
						return err
					})
				}
				// Each round runs every side once; the order rotates, so
				// that no side always follows another.
				for i := range benchRounds() {
					for j := range phases {
						if err := phases[(i+j)%len(phases)](); err != nil {
							b.Fatal(err)
						}
					}
				}
				var ns, reqs float64
				for i := range this.meterNs {
					ns += this.meterNs[i]
				}
				for _, x := range this.meterReqs {
					reqs += x
				}
				perReq := ns / max(reqs, 1)
				r := costbench.Summarize(without, this.with)
				b.Logf("%s", r)
				b.Logf("requests/s without wolf: median %.0f; with: %.0f", costbench.Median(without), costbench.Median(this.with))
				b.Logf("BPF (wolf's meter): %.0f ns per request (%.0f requests, %.3f s of BPF); wolf's process CPU %.3f s over %d rounds",
					perReq, reqs, ns/1e9, this.cpuS, len(this.meterNs))
				b.Logf("at 50,000 requests/s: BPF %.2f%% of one CPU; throughput slowdown %.2f%% (CI %.2f%% .. %.2f%%)",
					perReq*50000/1e9*100, r.MedianBlockPct, r.CILowPct, r.CIHighPct)
				sides := []*arm{this}
				if base != "" {
					sides = append(sides, old)
					rb := costbench.Summarize(without, old.with)
					b.Logf("base: requests/s median %.0f; throughput slowdown %.2f%% (CI %.2f%% .. %.2f%%)",
						costbench.Median(old.with), rb.MedianBlockPct, rb.CILowPct, rb.CIHighPct)
				}
				// The floor: an empty program's ns a run on each
				// tracepoint, and its runs per request.
				floorNs := map[string]float64{}
				line := "floor (bpf_stats, empty programs):"
				for _, tp := range tps {
					st := fl.progs[tp]
					if st.Runs == 0 {
						continue
					}
					floorNs[tp] = float64(st.RunNs) / float64(st.Runs)
					line += fmt.Sprintf(" %s %.0f ns/run %.2f runs/request,", tp, floorNs[tp], float64(st.Runs)/float64(max(fl.reqs, 1)))
				}
				b.Logf("%s", strings.TrimSuffix(line, ","))
				// Both sides by one instrument: the kernel's run statistics
				// of the programs each process holds, per request the
				// kernel completed on the device in its rounds.
				for _, a := range sides {
					var total uint64
					names := make([]string, 0, len(a.progs))
					for n, st := range a.progs {
						total += st.RunNs
						names = append(names, n)
					}
					sort.Strings(names)
					line := fmt.Sprintf("%s (bpf_stats): %.0f ns per request (%d requests), %.2f%% of one CPU at 50,000 requests/s;",
						a.name, float64(total)/float64(max(a.reqs, 1)), a.reqs, float64(total)/float64(max(a.reqs, 1))*50000/1e9*100)
					for _, n := range names {
						st := a.progs[n]
						if st.Runs == 0 {
							continue
						}
						line += fmt.Sprintf(" %s %.0f ns/run %.2f runs/request,", n, float64(st.RunNs)/float64(st.Runs), float64(st.Runs)/float64(max(a.reqs, 1)))
					}
					b.Logf("%s", strings.TrimSuffix(line, ","))
					// The same runs of empty programs, and the work
					// above them.
					var fns float64
					line = ""
					for _, n := range names {
						st := a.progs[n]
						f, ok := floorNs[floorTracepoints[n]]
						if st.Runs == 0 || !ok {
							continue
						}
						fns += f * float64(st.Runs)
						line += fmt.Sprintf(" %s %.0f ns/run,", n, float64(st.RunNs)/float64(st.Runs)-f)
					}
					reqs := float64(max(a.reqs, 1))
					b.Logf("%s: the floor of its runs %.0f ns per request, above it %.0f; above the floor a run:%s",
						a.name, fns/reqs, (float64(total)-fns)/reqs, strings.TrimSuffix(line, ","))
					if a == this {
						b.ReportMetric(float64(total)/float64(max(a.reqs, 1)), "bpfstat-ns/req")
					} else {
						b.ReportMetric(float64(total)/float64(max(a.reqs, 1)), "base-bpfstat-ns/req")
					}
				}
				b.ReportMetric(perReq, "bpf-ns/req")
				b.ReportMetric(perReq*50000/1e9*100, "cpu%@50k")
				b.ReportMetric(r.MedianBlockPct, "slowdown%")
			}
		})
	}
}
