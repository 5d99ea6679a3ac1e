package softirq

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/wolf-investigator/wolf/internal/costbench"
	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/lab/tcpcollapse"
	"github.com/wolf-investigator/wolf/internal/overhead"
	"github.com/wolf-investigator/wolf/internal/testutil"
)

var (
	costRounds = flag.Int("cost-rounds", 10, "BenchmarkLoopbackCost: pairs of rounds, with and without wolf")
	costRound  = flag.Duration("cost-round", time.Second, "BenchmarkLoopbackCost: length of one round")
)

// loopbackWorkload streams 64 KiB writes over one loopback TCP connection
// for d and returns bytes per second: every segment is a NET_RX run, so it
// is the workload wolf softirq costs the most.
func loopbackWorkload(d time.Duration) costbench.Workload {
	return func(ctx context.Context) (float64, error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		defer ln.Close()
		var (
			wg       sync.WaitGroup
			received int64
			rerr     error
		)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := ln.Accept()
			if err != nil {
				rerr = err
				return
			}
			defer c.Close()
			received, rerr = io.Copy(io.Discard, c)
		}()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return 0, err
		}
		buf := make([]byte, 64<<10)
		start := time.Now()
		for time.Since(start) < d && ctx.Err() == nil {
			if _, err := c.Write(buf); err != nil {
				c.Close()
				return 0, err
			}
		}
		c.Close()
		wg.Wait()
		took := time.Since(start)
		if rerr != nil && !errors.Is(rerr, net.ErrClosed) {
			return 0, rerr
		}
		return float64(received) / took.Seconds(), nil
	}
}

// BenchmarkLoopbackCost is the cost check: loopback TCP throughput
// with and without everything wolf softirq attaches (tracepoints and
// 997 Hz stack sampling), interleaved in one run, and the BPF cost per
// event. Besides throughput it reports bytes moved per CPU-second of the
// process (the loopback softirqs run in its context): on a shared machine
// neighbours steal wall time from both sides alike, CPU time less so. It
// runs once whatever b.N is:
//
//	go test -run '^$' -bench LoopbackCost -benchtime 1x ./internal/softirq/ [-args -cost-rounds 20 -cost-round 500ms]
func BenchmarkLoopbackCost(b *testing.B) {
	testutil.RequireRoot(b)
	testutil.Exclusive(b)
	meter := overhead.Start() // BPF run statistics on for the whole run
	defer meter.Close()
	var (
		mu         sync.Mutex
		perRun     []progCost
		events     uint64
		attached   bool
		effWith    []float64 // bytes per CPU-second, wolf attached
		effWithout []float64
	)
	attach := func(ctx context.Context) (func() error, error) {
		p, err := openProbe(probeConfig{Threshold: DefaultThreshold, SampleHz: DefaultSampleHz})
		if err != nil {
			return nil, err
		}
		attached = true
		return func() error {
			attached = false
			p.detach()
			mu.Lock()
			perRun = append(perRun, programCosts(p)...)
			if c, err := readCounters(p.objs.CPUStates); err == nil {
				events += c.Entries + c.Exits + c.Raises + c.NapiPolls + c.Drops + c.Samples + c.SamplesIdle
			}
			mu.Unlock()
			p.close()
			return nil
		}, nil
	}
	loopback := loopbackWorkload(*costRound)
	work := func(ctx context.Context) (float64, error) {
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
		byName := map[string]*progCost{}
		var order []string
		var total progCost
		for _, c := range perRun {
			a := byName[c.name]
			if a == nil {
				a = &progCost{name: c.name}
				byName[c.name] = a
				order = append(order, c.name)
			}
			a.run += c.run
			a.count += c.count
			total.run += c.run
			total.count += c.count
		}
		for _, n := range order {
			a := byName[n]
			b.Logf("%-18s %10d runs %8.1f ns/run", n, a.count, float64(a.run.Nanoseconds())/max(float64(a.count), 1))
		}
		b.Logf("throughput without %.0f MB/s, with %.0f MB/s (medians of %d rounds of %v); slowdown %.2f%%, baseline noise %.2f%%",
			costbench.Median(res.Baseline)/1e6, costbench.Median(res.With)/1e6, res.Rounds, *costRound, res.SlowdownPct, res.NoisePct)
		cpuSlow := 100 * (1 - costbench.Median(effWith)/costbench.Median(effWithout))
		b.Logf("per CPU-second: without %.0f MB, with %.0f MB; slowdown %.2f%%",
			costbench.Median(effWithout)/1e6, costbench.Median(effWith)/1e6, cpuSlow)
		b.ReportMetric(res.SlowdownPct, "slowdown_%")
		b.ReportMetric(cpuSlow, "cpu_slowdown_%")
		// What the kernel's run-time accounting alone costs per run: an
		// empty program on the same tracepoint under the same load.
		if empty, err := emptyProgramCost(loopback); err == nil {
			b.Logf("an empty raw_tp program on softirq_entry measures %.1f ns/run under the same load", empty)
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
	for _, prog := range p.objs.programs() {
		if prog == nil {
			continue
		}
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
		res, err := inv.Run(context.Background(), investigator.Options{Duration: 5 * time.Second})
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
