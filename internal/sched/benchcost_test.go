package sched

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/costbench"
	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/overhead"
)

// BenchOptions configure the cost benchmark of wolf sched.
type BenchOptions struct {
	Rounds int // with/without pairs, interleaved (costbench.Compare)
	Groups int // messaging groups of 20 senders and 20 receivers
	Loops  int // messages each sender sends each receiver
	// Workload is "perf" (perf bench sched messaging), "go" (the same
	// pattern with threads and pipes, in Go), or "" for perf when it runs
	// here, else go.
	Workload string
	Log      func(format string, args ...any)
}

// ProgramCost is one BPF program's share of wolf's cost in the with-wolf
// rounds, from the kernel's run statistics. wolf samples those (10 % of
// the window, overhead.Meter), so Runs and RunNs cover the sampled
// periods; NsPerEvent is their ratio.
type ProgramCost struct {
	Name       string  `json:"name"`
	Runs       uint64  `json:"runs"`
	RunNs      uint64  `json:"run_ns"`
	NsPerEvent float64 `json:"ns_per_event"`
	Missed     uint64  `json:"recursion_misses"`
}

// BenchReport is the benchmark's result.
type BenchReport struct {
	Workload string            `json:"workload"`
	Unit     string            `json:"unit"`
	Cost     *costbench.Result `json:"cost"` // wall-clock throughput
	// CPUCost compares messages per CPU-second of the workload's own
	// processes: what the work cost in CPU, which other tenants of a
	// shared machine disturb far less than its wall-clock time.
	CPUCost *costbench.Result `json:"cpu_cost"`
	// BPFCPUPct is the BPF programs' run time over the CPU time available
	// during the with-wolf rounds (all CPUs): the direct part of the cost.
	BPFCPUPct float64       `json:"bpf_cpu_pct"`
	TargetPct float64       `json:"target_pct"`
	Programs  []ProgramCost `json:"programs"`
	NsPerEvt  float64       `json:"ns_per_event"` // all programs together
	EventsPS  float64       `json:"events_per_s"` // program runs per second of with-wolf workload
	Notes     []string      `json:"notes,omitempty"`
}

// messagingTotal is perf bench sched messaging's output line.
var messagingTotal = regexp.MustCompile(`Total time:\s+([0-9.]+)\s+\[sec\]`)

// perfWorkload runs perf bench sched messaging once per round and returns
// messages per second.
func perfWorkload(perf string, groups, loops int, cpu func(time.Duration)) costbench.Workload {
	return func(ctx context.Context) (float64, error) {
		cmd := exec.CommandContext(ctx, perf, "bench", "sched", "messaging", "-g", strconv.Itoa(groups), "-l", strconv.Itoa(loops))
		out, err := cmd.CombinedOutput()
		if err == nil && cpu != nil {
			// perf waits for its senders and receivers, so its rusage
			// holds theirs.
			cpu(cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime())
		}
		if err != nil {
			return 0, fmt.Errorf("perf bench sched messaging: %v: %s", err, lastLine(out))
		}
		m := messagingTotal.FindSubmatch(out)
		if m == nil {
			return 0, fmt.Errorf("perf bench sched messaging: no total time in %q", lastLine(out))
		}
		secs, err := strconv.ParseFloat(string(m[1]), 64)
		if err != nil || secs <= 0 {
			return 0, fmt.Errorf("perf bench sched messaging: total time %q", m[1])
		}
		return float64(groups*20*20*loops) / secs, nil
	}
}

func lastLine(b []byte) string {
	s := string(b)
	if len(s) > 200 {
		s = s[len(s)-200:]
	}
	return s
}

// perfWorks finds perf and checks that its messaging benchmark runs here.
func perfWorks(ctx context.Context) (string, error) {
	perf, err := exec.LookPath("perf")
	if err != nil {
		return "", fmt.Errorf("perf not installed (Debian: apt-get install linux-perf): %w", err)
	}
	if _, err := perfWorkload(perf, 1, 1, nil)(ctx); err != nil {
		return "", err
	}
	return perf, nil
}

// goWorkload is perf's messaging pattern without perf: groups of 20
// sender and 20 receiver threads, each receiver on a pipe of its own, each
// sender writing loops 100-byte messages to every receiver of its group.
// The threads block in read and write, so every message is a wake-up and
// most are context switches, as in perf's version.
func goWorkload(groups, loops int, cpu func(time.Duration)) costbench.Workload {
	const fds, msgSize = 20, 100
	return func(ctx context.Context) (float64, error) {
		cpu0 := overhead.CPUTime()
		type pipe struct{ r, w *os.File }
		var pipes []pipe
		defer func() {
			for _, p := range pipes {
				p.r.Close()
				p.w.Close()
			}
		}()
		for i := 0; i < groups*fds; i++ {
			r, w, err := os.Pipe()
			if err != nil {
				return 0, fmt.Errorf("go messaging: %w", err)
			}
			pipes = append(pipes, pipe{r, w})
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make(chan error, 2*groups*fds)
		for g := 0; g < groups; g++ {
			grp := pipes[g*fds : (g+1)*fds]
			for i := 0; i < fds; i++ {
				rfd := int(grp[i].r.Fd()) // Fd() makes it blocking
				wg.Add(1)
				go func() { // receiver
					defer wg.Done()
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					buf := make([]byte, msgSize)
					<-start
					for want := fds * loops * msgSize; want > 0; {
						n, err := unix.Read(rfd, buf[:min(msgSize, want)])
						if err != nil || n == 0 {
							errs <- fmt.Errorf("go messaging: read: %v", err)
							return
						}
						want -= n
					}
				}()
			}
			wfds := make([]int, fds)
			for i := range wfds {
				wfds[i] = int(grp[i].w.Fd())
			}
			for i := 0; i < fds; i++ {
				wg.Add(1)
				go func() { // sender
					defer wg.Done()
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					msg := make([]byte, msgSize)
					<-start
					for l := 0; l < loops; l++ {
						for _, fd := range wfds {
							if _, err := unix.Write(fd, msg); err != nil {
								errs <- fmt.Errorf("go messaging: write: %v", err)
								return
							}
						}
					}
				}()
			}
		}
		t0 := time.Now()
		close(start)
		wg.Wait()
		secs := time.Since(t0).Seconds()
		if cpu != nil {
			cpu(overhead.CPUTime() - cpu0)
		}
		select {
		case err := <-errs:
			return 0, err
		default:
		}
		return float64(groups*fds*fds*loops) / secs, nil
	}
}

// Bench measures what wolf sched costs a scheduler-heavy workload: the
// workload with and without wolf attached, interleaved, in one run; and
// each BPF program's cost per event from the kernel's run statistics.
func Bench(ctx context.Context, o BenchOptions) (*BenchReport, error) {
	if o.Rounds <= 0 || o.Groups <= 0 || o.Loops <= 0 {
		return nil, fmt.Errorf("sched bench: rounds, groups and loops must be positive")
	}
	logf := o.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	rep := &BenchReport{Unit: "messages/s", TargetPct: 3}
	messages := float64(o.Groups * 20 * 20 * o.Loops)
	var attachedNow bool
	var cpuBase, cpuWith []float64 // messages per CPU-second, per round
	cpu := func(d time.Duration) {
		if d <= 0 {
			return
		}
		v := messages / d.Seconds()
		if attachedNow {
			cpuWith = append(cpuWith, v)
		} else {
			cpuBase = append(cpuBase, v)
		}
	}
	var work costbench.Workload
	watchSelf := false
	switch o.Workload {
	case "", "perf":
		perf, err := perfWorks(ctx)
		if err == nil {
			work = perfWorkload(perf, o.Groups, o.Loops, cpu)
			rep.Workload = fmt.Sprintf("perf bench sched messaging -g %d -l %d (%s)", o.Groups, o.Loops, perf)
			break
		}
		if o.Workload == "perf" {
			return nil, err
		}
		rep.Notes = append(rep.Notes, "perf unavailable ("+err.Error()+"): Go messaging workload instead")
		fallthrough
	case "go":
		watchSelf = true // the workload's threads are this process's
		work = goWorkload(o.Groups, o.Loops, cpu)
		rep.Workload = fmt.Sprintf("Go messaging: %d groups × 20 sender and 20 receiver threads over pipes, %d loops (perf bench sched messaging's pattern)", o.Groups, o.Loops)
	default:
		return nil, fmt.Errorf("sched bench: unknown workload %q (perf or go)", o.Workload)
	}
	if _, err := work(ctx); err != nil { // warm-up, and a check that it runs
		return nil, err
	}
	cpuBase = nil
	progs := map[string]*ProgramCost{}
	var withTime time.Duration
	var totalNs, totalRuns uint64 // as wolf sched reported them
	attach := func(ctx context.Context) (func() error, error) {
		s := New()
		s.watchSelf = watchSelf
		ready := make(chan struct{})
		var once sync.Once
		s.attached = func() { once.Do(func() { close(ready) }) }
		var attachedAt time.Time
		s.programs = func(ps map[string]*ebpf.Program) {
			for name, p := range ps {
				run, count, missed := overhead.Programs(p)
				pc := progs[name]
				if pc == nil {
					pc = &ProgramCost{Name: name}
					progs[name] = pc
				}
				pc.Runs += count
				pc.RunNs += uint64(run.Nanoseconds())
				pc.Missed += missed
			}
		}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			res, err := investigator.Run(runCtx, s, investigator.Options{Duration: time.Hour})
			if err == nil {
				totalNs += res.Overhead.BPFRunNs
				totalRuns += res.Overhead.Events
			}
			done <- err
		}()
		select {
		case <-ready:
			attachedAt = time.Now()
			attachedNow = true
		case err := <-done:
			cancel()
			if err == nil {
				err = errors.New("wolf sched ended before attaching")
			}
			return nil, err
		}
		return func() error {
			attachedNow = false
			withTime += time.Since(attachedAt)
			cancel()
			return <-done
		}, nil
	}
	logf("%s, %d rounds with and without wolf sched", rep.Workload, o.Rounds)
	res, err := costbench.Compare(ctx, o.Rounds, work, attach)
	if err != nil {
		return nil, err
	}
	rep.Cost = res
	// The CPU measurements were appended in the order the rounds ran, so
	// their i-th elements are the same pair.
	if len(cpuBase) > 0 && len(cpuWith) > 0 {
		rep.CPUCost = costbench.Summarize(cpuBase, cpuWith)
	}
	for _, pc := range progs {
		if pc.Runs > 0 {
			pc.NsPerEvent = float64(pc.RunNs) / float64(pc.Runs)
		}
		rep.Programs = append(rep.Programs, *pc)
	}
	// Totals from the investigator's own report: its run statistics are
	// sampled (overhead.Meter), and the report scales them to the window.
	runs, ns := totalRuns, totalNs
	sort.Slice(rep.Programs, func(i, j int) bool { return rep.Programs[i].RunNs > rep.Programs[j].RunNs })
	if runs > 0 {
		rep.NsPerEvt = float64(ns) / float64(runs)
	}
	if withTime > 0 {
		rep.EventsPS = float64(runs) / withTime.Seconds()
		rep.BPFCPUPct = 100 * float64(ns) / (float64(withTime.Nanoseconds()) * float64(runtime.NumCPU()))
	}
	if runs == 0 {
		rep.Notes = append(rep.Notes, "BPF run statistics unavailable (kernel.bpf_stats_enabled could not be turned on): no ns per event")
	}
	return rep, nil
}
