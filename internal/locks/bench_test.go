package locks

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/costbench"
	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/overhead"
	"github.com/wolf-investigator/wolf/internal/testutil"
)

// The workloads run in a child process (this test binary, re-executed):
// wolf ignores its own process's events, so a workload in the benchmark's
// own threads would measure wolf not looking at it. The child runs the
// workload its argument names (kind:threads:duration) and prints its
// operations per second.
const benchPart = "locks-bench-workload"

func init() {
	lab.Child(benchPart, func(spec string) error {
		rate, err := runBenchChild(spec)
		if err != nil {
			return err
		}
		fmt.Println(rate)
		return nil
	})
}

func runBenchChild(spec string) (float64, error) {
	kind, rest, _ := strings.Cut(spec, ":")
	ts, ds, _ := strings.Cut(rest, ":")
	threads, err := strconv.Atoi(ts)
	if err != nil || threads <= 0 {
		return 0, fmt.Errorf("%s=%q: bad thread count", benchPart, spec)
	}
	d, err := time.ParseDuration(ds)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s=%q: bad duration", benchPart, spec)
	}
	switch kind {
	case "mmap":
		return mmapChurn(threads, d)
	case "append", "log", "dir":
		// tmpfs where there is one: no journal commits in the rounds.
		base := ""
		if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
			base = "/dev/shm"
		}
		dir, err := os.MkdirTemp(base, "wolf-locks-bench")
		if err != nil {
			return 0, err
		}
		defer os.RemoveAll(dir)
		switch kind {
		case "append":
			return fileAppend(dir+"/append", threads, d)
		case "log":
			return logWriter(dir+"/log", threads, d)
		}
		return createUnlink(dir, threads, d)
	}
	return 0, fmt.Errorf("%s=%q: unknown workload", benchPart, spec)
}

// inChild is a workload that runs kind in a child process.
func inChild(kind string, threads int, d time.Duration) costbench.Workload {
	return func(ctx context.Context) (float64, error) {
		cmd := lab.ChildCommand(ctx, benchPart, "wolf-locks-bench", fmt.Sprintf("%s:%d:%s", kind, threads, d), os.Environ()...)
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			return 0, fmt.Errorf("%s workload: %w", kind, err)
		}
		rate, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
		if err != nil {
			return 0, fmt.Errorf("%s workload printed %q: %w", kind, out, err)
		}
		return rate, nil
	}
}

// onThreads runs op on threads OS threads, over and over for d, and
// returns the operations per second they did together; an error ends its
// thread and is returned. op gets the thread's index and how many
// operations it has done.
func onThreads(threads int, d time.Duration, op func(thread, n int) error) (float64, error) {
	var wg sync.WaitGroup
	counts := make([]int, threads)
	errs := make([]error, threads)
	stop := time.Now().Add(d)
	start := time.Now()
	for i := range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			for time.Now().Before(stop) {
				if errs[i] = op(i, counts[i]); errs[i] != nil {
					return
				}
				counts[i]++
			}
		}()
	}
	wg.Wait()
	total := 0
	for i, c := range counts {
		if errs[i] != nil {
			return 0, errs[i]
		}
		total += c
	}
	return float64(total) / time.Since(start).Seconds(), nil
}

// mmapChurn is a contention-heavy workload: threads of this process map
// and unmap a page in a loop, so every call takes the mmap_lock for
// writing (three mmap_lock tracepoint hits) and they contend on it
// (contention_begin/end). It returns calls per second.
func mmapChurn(threads int, d time.Duration) (float64, error) {
	return onThreads(threads, d, func(int, int) error {
		b, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return err
		}
		b[0] = 1 // a fault, under the per-VMA lock
		return unix.Munmap(b)
	})
}

// fileAppend is lock contention of the everyday kind: threads append to
// one file through one shared descriptor, so each write takes the file's
// f_pos_lock and the inode's i_rwsem, and they queue on them. It returns
// writes per second.
func fileAppend(path string, threads int, d time.Duration) (float64, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 512)
	return onThreads(threads, d, func(int, int) error {
		_, err := unix.Write(int(f.Fd()), buf)
		return err
	})
}

// logWriter is a contended log file as services have one: threads each
// build a 4 KiB record (a checksum over it stands for the formatting) and
// append it through one shared descriptor, so the file's f_pos_lock and
// the inode's i_rwsem are contended, but with work between the writes.
// It returns records per second.
func logWriter(path string, threads int, d time.Duration) (float64, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	recs := make([][]byte, threads)
	for i := range recs {
		recs[i] = make([]byte, 4096)
	}
	return onThreads(threads, d, func(i, n int) error {
		rec := recs[i]
		h := uint64(i + n + 1)
		for j := range rec {
			h = h*1099511628211 ^ uint64(j)
			rec[j] = 'a' + byte(h%26)
		}
		if _, err := unix.Write(int(f.Fd()), rec); err != nil {
			return err
		}
		if n%4096 == 4095 { // keep the file small: truncate now and then
			return f.Truncate(0)
		}
		return nil
	})
}

// createUnlink is a busy spool directory (a mail queue, a build's temporary
// files): threads create, write and remove files in one directory, so the
// directory's i_rwsem is taken for writing by every create and unlink.
// It returns files per second.
func createUnlink(dir string, threads int, d time.Duration) (float64, error) {
	buf := make([]byte, 512)
	return onThreads(threads, d, func(i, n int) error {
		name := fmt.Sprintf("%s/f%d-%d", dir, i, n)
		fd, err := unix.Open(name, unix.O_CREAT|unix.O_WRONLY|unix.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		_, err = unix.Write(fd, buf)
		unix.Close(fd)
		if err != nil {
			return err
		}
		return unix.Unlink(name)
	})
}

// benchRounds is WOLF_BENCH_ROUNDS, the pairs of rounds each comparison
// runs (default 12: six A B B A blocks, the fewest a 95 % interval needs).
func benchRounds() int {
	if n, err := strconv.Atoi(os.Getenv("WOLF_BENCH_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return 12
}

// BenchmarkOverheadFileAppend: i_rwsem contention, wolf locks attached or not.
//
//	go test -run '^$' -bench Overhead -benchtime 1x ./internal/locks
func BenchmarkOverheadFileAppend(b *testing.B) {
	benchOverhead(b, inChild("append", 4, time.Second))
}

// BenchmarkOverheadLogWriter: a contended log file, with work between writes.
func BenchmarkOverheadLogWriter(b *testing.B) {
	benchOverhead(b, inChild("log", 4, time.Second))
}

// BenchmarkOverheadSpoolDir: creates and unlinks in one directory.
func BenchmarkOverheadSpoolDir(b *testing.B) {
	benchOverhead(b, inChild("dir", 4, time.Second))
}

// BenchmarkOverheadMmapChurn measures what `wolf locks` costs the
// workload: rounds with and without it attached, interleaved, plus the
// BPF run time per event from the kernel's statistics.
//
//	go test -run '^$' -bench OverheadMmapChurn -benchtime 1x ./internal/locks
func BenchmarkOverheadMmapChurn(b *testing.B) {
	benchOverhead(b, inChild("mmap", 4, time.Second))
}

func benchOverhead(b *testing.B, work costbench.Workload) {
	testutil.RequireRoot(b)
	testutil.Exclusive(b)
	for range b.N {
		var progs struct {
			sync.Mutex
			runNs, runs uint64
		}
		attach := func(ctx context.Context) (func() error, error) {
			l := New()
			ctx, cancel := context.WithCancel(ctx)
			attached := make(chan struct{})
			var once sync.Once
			done := make(chan error, 1)
			go func() {
				res, err := investigator.Run(ctx, l, investigator.Options{Duration: time.Hour,
					Progress: func(float64) { once.Do(func() { close(attached) }) }})
				if err == nil {
					progs.Lock()
					progs.runNs += res.Overhead.BPFRunNs
					progs.runs += res.Overhead.Events
					progs.Unlock()
				}
				done <- err
			}()
			select {
			case <-attached:
			case err := <-done:
				cancel()
				return nil, err
			}
			return func() error { cancel(); return <-done }, nil
		}
		r, err := costbench.Compare(context.Background(), benchRounds(), work, attach)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(r.MedianBlockPct, "slowdown_%")
		b.ReportMetric(r.CIHighPct, "slowdown_ci_high_%")
		b.ReportMetric(r.NoisePct, "noise_%")
		b.ReportMetric(costbench.Median(r.Baseline), "ops/s_without")
		b.ReportMetric(costbench.Median(r.With), "ops/s_with")
		if progs.runs > 0 {
			b.ReportMetric(float64(overhead.PerEvent(time.Duration(progs.runNs), progs.runs)), "bpf_ns/event")
		}
		b.Logf("wolf locks: %v (target < 5%%: shown below it: %v)", r, r.Below(5))
	}
}

// emptyAttach attaches a program that does nothing to every tracepoint
// wolf locks uses: the floor any tracepoint-based tool pays (the kernel
// computing the tracepoint's arguments, calling out to BPF), to compare
// wolf's cost with.
func emptyAttach(ctx context.Context) (func() error, error) {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.RawTracepoint,
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	})
	if err != nil {
		return nil, err
	}
	var links []link.Link
	detach := func() error {
		for _, l := range links {
			_ = l.Close()
		}
		return prog.Close()
	}
	for _, tp := range []string{"contention_begin", "contention_end", "mmap_lock_acquire_returned", "mmap_lock_released"} {
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: tp, Program: prog})
		if err != nil {
			_ = detach()
			return nil, err
		}
		links = append(links, l)
	}
	return detach, nil
}

// The floor: empty programs on the same tracepoints, same workloads.
//
//	go test -run '^$' -bench 'Overhead|Floor' -benchtime 1x ./internal/locks
func BenchmarkFloorFileAppend(b *testing.B) { benchFloor(b, inChild("append", 4, time.Second)) }
func BenchmarkFloorMmapChurn(b *testing.B)  { benchFloor(b, inChild("mmap", 4, time.Second)) }
func BenchmarkFloorLogWriter(b *testing.B)  { benchFloor(b, inChild("log", 4, time.Second)) }
func BenchmarkFloorSpoolDir(b *testing.B)   { benchFloor(b, inChild("dir", 4, time.Second)) }

func benchFloor(b *testing.B, work costbench.Workload) {
	testutil.RequireRoot(b)
	testutil.Exclusive(b)
	for range b.N {
		r, err := costbench.Compare(context.Background(), benchRounds(), work, emptyAttach)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("empty programs: %v", r)
		b.ReportMetric(r.MedianBlockPct, "slowdown_%")
		b.ReportMetric(r.CIHighPct, "slowdown_ci_high_%")
		b.ReportMetric(r.NoisePct, "noise_%")
	}
}
