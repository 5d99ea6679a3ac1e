package softirq

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/costbench"
	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/lab/tcpcollapse"
	"github.com/wolf-investigator/wolf/internal/overhead"
	"github.com/wolf-investigator/wolf/internal/testutil"
)

var (
	costRounds = flag.Int("cost-rounds", 100, "BenchmarkLoopbackCost: pairs of rounds, with and without wolf")
	costRound  = flag.Duration("cost-round", 200*time.Millisecond, "BenchmarkLoopbackCost: length of one round")
	costPin    = flag.Bool("cost-pin", true, "BenchmarkLoopbackCost: sender on the first CPU, receiver on the last")
	costSettle = flag.Duration("cost-settle", 50*time.Millisecond, "BenchmarkLoopbackCost: pause before each round")
	costHz     = flag.Int("cost-sample-hz", DefaultSampleHz, "BenchmarkLoopbackCost: stack sampling rate while attached (0: none)")
)

// pinThread locks the calling goroutine to its OS thread and that thread
// to cpu; the returned function undoes both.
func pinThread(cpu int) (func(), error) {
	runtime.LockOSThread()
	var orig, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &orig); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("sched_getaffinity: %w", err)
	}
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("pin to CPU %d: %w", cpu, err)
	}
	return func() {
		// A thread whose affinity could not be restored stays locked, so
		// the runtime ends it rather than reuse it pinned.
		if unix.SchedSetaffinity(0, &orig) == nil {
			runtime.UnlockOSThread()
		}
	}, nil
}

// firstLastCPU is the lowest and highest CPU this process may run on.
func firstLastCPU() (int, int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return 0, 0, fmt.Errorf("sched_getaffinity: %w", err)
	}
	first, last := -1, -1
	for cpu := range len(set) * 64 {
		if set.IsSet(cpu) {
			if first < 0 {
				first = cpu
			}
			last = cpu
		}
	}
	if first < 0 {
		return 0, 0, errors.New("no CPU in this process's affinity mask")
	}
	return first, last, nil
}

// loopbackPair is a connected loopback TCP pair of blocking sockets:
// plain read and write system calls, no Go netpoller in between, so a
// round measures the kernel's path and not goroutine hand-offs.
func loopbackPair() (client, server int, err error) {
	ln, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, -1, fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(ln)
	if err := unix.Bind(ln, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return -1, -1, fmt.Errorf("bind: %w", err)
	}
	if err := unix.Listen(ln, 1); err != nil {
		return -1, -1, fmt.Errorf("listen: %w", err)
	}
	addr, err := unix.Getsockname(ln)
	if err != nil {
		return -1, -1, fmt.Errorf("getsockname: %w", err)
	}
	if client, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err != nil {
		return -1, -1, fmt.Errorf("socket: %w", err)
	}
	if err := unix.Connect(client, addr); err != nil {
		unix.Close(client)
		return -1, -1, fmt.Errorf("connect: %w", err)
	}
	if server, _, err = unix.Accept4(ln, unix.SOCK_CLOEXEC); err != nil {
		unix.Close(client)
		return -1, -1, fmt.Errorf("accept: %w", err)
	}
	return client, server, nil
}

// loopbackWorkload streams 64 KiB writes over one loopback TCP connection
// for d and returns bytes per second: every segment is a NET_RX run, so it
// is the workload wolf softirq costs the most. With pin the sender runs on
// the first CPU and the receiver on the last: left to the schedulers,
// whether the two share a CPU changes from round to round and swings
// throughput by tens of percent, which would drown a cost of a few. (On
// loopback the receive softirq runs on the sending CPU.)
func loopbackWorkload(d time.Duration, pin bool) costbench.Workload {
	return func(ctx context.Context) (float64, error) {
		var first, last int
		if pin {
			var err error
			if first, last, err = firstLastCPU(); err != nil {
				return 0, err
			}
		}
		client, server, err := loopbackPair()
		if err != nil {
			return 0, err
		}
		type result struct {
			n   int64
			err error
		}
		got := make(chan result, 1)
		go func() {
			defer unix.Close(server)
			if pin {
				unpin, err := pinThread(last)
				if err != nil {
					got <- result{err: err}
					return
				}
				defer unpin()
			}
			buf := make([]byte, 64<<10)
			var total int64
			for {
				n, err := unix.Read(server, buf)
				if err == unix.EINTR {
					continue
				}
				if err != nil || n == 0 {
					got <- result{total, err}
					return
				}
				total += int64(n)
			}
		}()
		var unpin func()
		if pin {
			if unpin, err = pinThread(first); err != nil {
				unix.Close(client)
				<-got
				return 0, err
			}
		}
		buf := make([]byte, 64<<10)
		start := time.Now()
		var werr error
		for time.Since(start) < d && ctx.Err() == nil {
			if _, err := unix.Write(client, buf); err != nil && err != unix.EINTR {
				werr = fmt.Errorf("write: %w", err)
				break
			}
		}
		_ = unix.Shutdown(client, unix.SHUT_WR) // the reader sees EOF once it has read everything
		r := <-got
		took := time.Since(start)
		unix.Close(client)
		if unpin != nil {
			unpin()
		}
		if werr != nil {
			return 0, werr
		}
		if r.err != nil {
			return 0, fmt.Errorf("read: %w", r.err)
		}
		return float64(r.n) / took.Seconds(), nil
	}
}

// BenchmarkLoopbackCost is the cost check: loopback TCP throughput
// with and without everything wolf softirq attaches (tracepoints and
// 997 Hz stack sampling), interleaved in one run, and the BPF cost per
// event. The programs are loaded once and attached for the rounds with
// wolf only. Besides throughput it reports bytes moved per CPU-second of
// the process (the loopback softirqs run in its context): on a shared
// machine neighbours steal wall time from both sides alike, CPU time less
// so. Slowdowns come per A B B A block with a confidence interval
// (costbench). It runs once whatever b.N is:
//
//	go test -run '^$' -bench LoopbackCost -benchtime 1x ./internal/softirq/ [-args -cost-rounds 100 -cost-round 200ms -cost-pin=true -cost-sample-hz 997]
func BenchmarkLoopbackCost(b *testing.B) {
	testutil.RequireRoot(b)
	testutil.Exclusive(b)
	// Loaded and attached for each round with wolf, before its workload
	// starts: what a round with wolf pays is the programs and the sampling
	// while the workload runs, not the load and verification. The kit
	// keeps run statistics as wolf softirq does: sampled, 10 % of the time.
	var (
		attached   bool
		effWith    []float64 // bytes per CPU-second, wolf attached
		effWithout []float64
		costs      = map[string]*progCost{}
		events     uint64
	)
	attach := func(ctx context.Context) (func() error, error) {
		p, err := openProbe(probeConfig{Threshold: DefaultThreshold, SampleHz: *costHz})
		if err != nil {
			return nil, err
		}
		attached = true
		return func() error {
			attached = false
			p.kit.Detach()
			for _, c := range programCosts(p) {
				if costs[c.name] == nil {
					costs[c.name] = &progCost{name: c.name}
				}
				costs[c.name].run += c.run
				costs[c.name].count += c.count
			}
			if c, err := readCounters(p.maps.CpuStates); err == nil {
				events += c.Entries + c.Exits + c.Raises + c.NapiPolls + c.Drops + c.Samples + c.SamplesIdle
			}
			p.close()
			return nil
		}, nil
	}
	loopback := loopbackWorkload(*costRound, *costPin)
	work := func(ctx context.Context) (float64, error) {
		// Let an attach or detach settle first (perf events opened or
		// closed, an RCU grace period for the links): every round waits
		// alike, with wolf or without.
		time.Sleep(*costSettle)
		cpu0, t0 := overhead.CPUTime(), time.Now()
		v, err := loopback(ctx)
		if cpu := (overhead.CPUTime() - cpu0).Seconds(); err == nil && cpu > 0 {
			eff := v * time.Since(t0).Seconds() / cpu
			if attached {
				effWith = append(effWith, eff)
			} else {
				effWithout = append(effWithout, eff)
			}
		}
		return v, err
	}
	for i := 0; i < b.N; i++ {
		res, err := costbench.Compare(context.Background(), *costRounds, work, attach)
		if err != nil {
			b.Fatal(err)
		}
		if i > 0 {
			continue
		}
		var total progCost
		for _, name := range slices.Sorted(maps.Keys(costs)) {
			c := costs[name]
			total.run += c.run
			total.count += c.count
			b.Logf("%-18s %10d runs sampled %8.1f ns/run", c.name, c.count, float64(c.run.Nanoseconds())/max(float64(c.count), 1))
		}
		b.Logf("throughput without %.0f MB/s, with %.0f MB/s (medians of %d rounds of %v, pinned %v)",
			costbench.Median(res.Baseline)/1e6, costbench.Median(res.With)/1e6, res.Rounds, *costRound, *costPin)
		b.Logf("wall clock: %v", res)
		// effWith and effWithout were appended in the order the rounds
		// ran, so their i-th elements are the same pair.
		cpu := costbench.Summarize(effWithout, effWith)
		b.Logf("per CPU-second: without %.0f MB, with %.0f MB; %v",
			costbench.Median(effWithout)/1e6, costbench.Median(effWith)/1e6, cpu)
		b.Logf("target < 3%%: wall clock shown below it: %v; per CPU-second: %v", res.Below(3), cpu.Below(3))
		b.ReportMetric(res.MedianBlockPct, "slowdown_%")
		b.ReportMetric(res.CIHighPct, "slowdown_ci_high_%")
		b.ReportMetric(cpu.MedianBlockPct, "cpu_slowdown_%")
		b.ReportMetric(cpu.CIHighPct, "cpu_slowdown_ci_high_%")
		// What the kernel's run-time accounting alone costs per run: an
		// empty program on the same tracepoint under the same load.
		if empty, err := emptyProgramCost(loopback); err == nil {
			b.Logf("an empty raw_tp program on softirq_entry measures %.1f ns/run under the same load (run statistics on throughout)", empty)
			b.ReportMetric(empty, "empty_prog_ns/run")
		} else {
			b.Logf("empty program: %v", err)
		}
		b.ReportMetric(res.NoisePct, "noise_%")
		b.ReportMetric(float64(total.run.Nanoseconds())/max(float64(total.count), 1), "bpf_ns/event")
		b.ReportMetric(float64(events)/float64(res.Rounds), "events/round")
	}
}

type progCost struct {
	name  string
	run   time.Duration
	count uint64
}

func programCosts(p *probe) []progCost {
	var out []progCost
	for _, prog := range p.kit.Programs() {
		info, err := prog.Info()
		if err != nil {
			continue
		}
		run, count, _ := overhead.Programs(prog)
		out = append(out, progCost{name: info.Name, run: run, count: count})
	}
	return out
}

// BenchmarkCollapseByRmem checks the seed's remediation on the lab: the
// same slow reader of tiny segments with net.ipv4.tcp_rmem's maximum at
// 32 MiB (the seed's) and at 4 MiB (its fix), reporting NET_RX's longest
// run and how many runs reached the 5 ms threshold. Once, whatever b.N:
//
//	go test -run '^$' -bench CollapseByRmem -benchtime 1x ./internal/softirq/
func BenchmarkCollapseByRmem(b *testing.B) {
	testutil.RequireRoot(b)
	testutil.Exclusive(b)
	for _, mib := range []int{32, 4} {
		l := tcpcollapse.New()
		l.RmemMax = mib << 20
		l.Unread = min(l.Unread, l.RmemMax/8)
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		inst, err := l.Start(ctx, lab.Options{})
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		inv := New()
		inv.SampleHz = 0
		res, err := investigator.Run(context.Background(), inv, investigator.Options{Duration: 5 * time.Second})
		inst.Close()
		if err != nil {
			b.Fatal(err)
		}
		var maxUS float64
		var runs uint64
		for _, h := range res.Histograms {
			if h.Name == "softirq_runtime_us" && h.Labels["vector"] == "NET_RX" {
				maxUS, runs = h.Max, h.Count
			}
		}
		stalls, steal := 0, -1.0
		for _, f := range res.Findings {
			if f.ID == "softirq.stall" && f.Evidence["vector"] == "NET_RX" {
				stalls, _ = f.Evidence["stalls"].(int)
				steal, _ = f.Evidence["steal_pct"].(float64)
			}
		}
		note := ""
		if steal >= 0 {
			note = fmt.Sprintf(" (hypervisor steal %.1f%%)", steal)
		}
		b.Logf("tcp_rmem max %2d MiB: NET_RX max %.1f ms over %d runs; %d runs >= 5 ms in 5 s%s", mib, maxUS/1000, runs, stalls, note)
		b.ReportMetric(maxUS, fmt.Sprintf("max_us@%dMiB", mib))
	}
}

func emptyProgramCost(work costbench.Workload) (float64, error) {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.RawTracepoint,
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	})
	if err != nil {
		return 0, err
	}
	defer prog.Close()
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return 0, err
	}
	defer stats.Close()
	l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "softirq_entry", Program: prog})
	if err != nil {
		return 0, err
	}
	_, werr := work(context.Background())
	l.Close()
	if werr != nil {
		return 0, werr
	}
	run, n, _ := overhead.Programs(prog)
	if n == 0 {
		return 0, errors.New("the empty program never ran")
	}
	return float64(run.Nanoseconds()) / float64(n), nil
}
