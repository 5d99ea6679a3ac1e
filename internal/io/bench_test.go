package io

import (
	"context"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
// first second), and --waiters on (the sched_switch and sched_waking
// programs attached from the start).
//
// Run: flock /tmp/wolf-bench.lock go test -run '^$' -bench Overhead -benchtime 1x ./internal/io/
// (one mode: -bench Overhead/waiters=off)
// (as root; WOLF_BENCH_ROUNDS pairs of rounds, default 12).

const roundTime = 2 * time.Second

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

type withWolf struct {
	bpfNs, requests, cpuS []float64
}

func attachIO(b *testing.B, dev string, waiters string, w *withWolf) costbench.Attach {
	return func(ctx context.Context) (func() error, error) {
		iv := New()
		iv.Device, iv.Waiters = dev, waiters
		s, err := iv.Start(ctx, investigator.Options{})
		if err != nil {
			return nil, err
		}
		// Start-up (loading, verifying) is not the steady cost: a first
		// window ends it.
		if _, err := s.Collect(ctx); err != nil {
			s.Close()
			return nil, err
		}
		return func() error {
			defer s.Close()
			res, err := s.Collect(ctx)
			if err != nil {
				return err
			}
			if f := deviceOf(res, dev); f != nil {
				n, _ := f.Evidence["requests"].(uint64)
				w.requests = append(w.requests, float64(n))
			}
			w.bpfNs = append(w.bpfNs, float64(res.Overhead.BPFRunNs))
			w.cpuS = append(w.cpuS, res.Overhead.CPUSeconds)
			if res.Overhead.Dropped != 0 {
				b.Errorf("wolf dropped %d", res.Overhead.Dropped)
			}
			return nil
		}, nil
	}
}

func BenchmarkOverhead(b *testing.B) {
	testutil.RequireRoot(b)
	for _, waiters := range []string{WaitersOff, WaitersAuto, WaitersOn} {
		b.Run("waiters="+waiters, func(b *testing.B) {
			l := testLoop(b)
			for range b.N {
				var w withWolf
				r, err := costbench.Compare(context.Background(), benchRounds(), loopReads(l.Dev, 4), attachIO(b, l.Name, waiters, &w))
				if err != nil {
					b.Fatal(err)
				}
				var ns, reqs, cpu float64
				for i := range w.bpfNs {
					ns += w.bpfNs[i]
					cpu += w.cpuS[i]
				}
				for _, x := range w.requests {
					reqs += x
				}
				perReq := ns / max(reqs, 1)
				b.Logf("%s", r)
				b.Logf("requests/s without wolf: median %.0f; with: %.0f", costbench.Median(r.Baseline), costbench.Median(r.With))
				b.Logf("BPF: %.0f ns per request (%.0f requests, %.3f s of BPF); wolf's process CPU %.3f s over %d rounds",
					perReq, reqs, ns/1e9, cpu, len(w.bpfNs))
				b.Logf("at 50,000 requests/s: BPF %.2f%% of one CPU; throughput slowdown %.2f%% (CI %.2f%% .. %.2f%%)",
					perReq*50000/1e9*100, r.MedianBlockPct, r.CILowPct, r.CIHighPct)
				b.ReportMetric(perReq, "bpf-ns/req")
				b.ReportMetric(perReq*50000/1e9*100, "cpu%@50k")
				b.ReportMetric(r.MedianBlockPct, "slowdown%")
			}
		})
	}
}
