package reclaim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/costbench"
	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/lab/memcgstress"
	"github.com/wolf-investigator/wolf/internal/memcg"
	"github.com/wolf-investigator/wolf/internal/overhead"
	"github.com/wolf-investigator/wolf/internal/procfs"
	"github.com/wolf-investigator/wolf/internal/testutil"
)

// What wolf reclaim costs the workloads it watches, with and without it
// attached, rounds interleaved (internal/costbench). Two workloads:
//
//   - ReadThrough: dd streams a 256 MiB file through a 32 MiB memory
//     cgroup, so that nearly every page read is charged, and every 32 or so
//     a reclaim call with its batches runs: the most vmscan events per unit
//     of work a workload can make. Throughput: MB/s.
//   - MemcgStress: the memcg-stress lab; throughput: its worker's page
//     faults per second.
//
// Run: go test -run '^$' -bench Overhead -benchtime 1x ./internal/reclaim/
// (as root; each takes about a minute).

const costRounds = 6

// attachWolf starts the investigator for as long as a round lasts.
func attachWolf(b *testing.B, events *[]float64, bpfNs *[]float64) costbench.Attach {
	return func(ctx context.Context) (func() error, error) {
		iv := New()
		up := make(chan struct{})
		iv.attached = func() { close(up) }
		ctx, cancel := context.WithCancel(ctx)
		type out struct {
			res *investigator.Result
			err error
		}
		done := make(chan out, 1)
		go func() {
			res, err := investigator.Run(ctx, iv, investigator.Options{Duration: time.Hour})
			done <- out{res, err}
		}()
		select {
		case <-up:
		case o := <-done:
			cancel()
			return nil, fmt.Errorf("wolf reclaim did not attach: %v", o.err)
		}
		return func() error {
			cancel()
			o := <-done
			if o.err != nil {
				return o.err
			}
			*events = append(*events, float64(o.res.Overhead.Events))
			*bpfNs = append(*bpfNs, float64(o.res.Overhead.BPFRunNs))
			if o.res.Overhead.Dropped != 0 {
				b.Errorf("wolf dropped %d events", o.res.Overhead.Dropped)
			}
			return nil
		}, nil
	}
}

func report(b *testing.B, r *costbench.Result, unit string, events, bpfNs []float64, round time.Duration) {
	var ev, ns float64
	for i := range events {
		ev += events[i]
		ns += bpfNs[i]
	}
	perEvent := float64(overhead.PerEvent(time.Duration(ns), uint64(ev)))
	evPerS := ev / (float64(len(events)) * round.Seconds())
	b.Logf("baseline %v %s, with wolf %v %s", r.Baseline, unit, r.With, unit)
	b.Logf("slowdown %.1f%% (noise %.1f%%), %.0f vmscan events/s, %.0f ns of BPF per event, %.2f%% of one CPU in BPF",
		r.SlowdownPct, r.NoisePct, evPerS, perEvent, 100*evPerS*perEvent/1e9)
	b.ReportMetric(r.SlowdownPct, "slowdown_%")
	b.ReportMetric(r.NoisePct, "noise_%")
	b.ReportMetric(perEvent, "bpf_ns/event")
	b.ReportMetric(evPerS, "events/s")
}

func benchGate(b *testing.B) memcg.Hierarchy {
	testutil.RequireRoot(b)
	h, err := memcg.Find(context.Background(), procfs.Reader{})
	testutil.Require(b, err == nil, fmt.Sprintf("needs the memory cgroup controller: %v", err))
	testutil.Exclusive(b)
	return h
}

func BenchmarkOverheadReadThrough(b *testing.B) {
	h := benchGate(b)
	dir, err := os.MkdirTemp("/var/tmp", "wolf-reclaim-bench-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "data")
	if out, err := exec.Command("dd", "if=/dev/zero", "of="+file, "bs=1M", "count=256", "conv=fsync").CombinedOutput(); err != nil {
		b.Fatalf("dd: %v: %s", err, out)
	}
	// Out of the page cache, where writing it charged it to our cgroup:
	// the reads must charge the bench cgroup, page by page.
	f, err := os.Open(file)
	if err != nil {
		b.Fatal(err)
	}
	err = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	f.Close()
	if err != nil {
		b.Fatal(err)
	}
	cg := "/wolf-reclaim-bench-" + strconv.Itoa(os.Getpid())
	if err := os.Mkdir(h.Dir(cg), 0o755); err != nil {
		b.Fatal(err)
	}
	defer os.Remove(h.Dir(cg))
	limitFile := "memory.max"
	if h.Version == 1 {
		limitFile = "memory.limit_in_bytes"
	}
	if err := os.WriteFile(filepath.Join(h.Dir(cg), limitFile), []byte(strconv.Itoa(32<<20)), 0); err != nil {
		b.Fatal(err)
	}
	procs := filepath.Join(h.Dir(cg), "cgroup.procs")
	const round = 3 * time.Second
	work := func(ctx context.Context) (float64, error) {
		start := time.Now()
		var bytes float64
		for time.Since(start) < round {
			// The shell moves itself into the cgroup, then becomes dd.
			cmd := exec.CommandContext(ctx, "sh", "-c", `echo $$ > "$1" && exec dd if="$2" of=/dev/null bs=1M 2>/dev/null`, "sh", procs, file)
			if out, err := cmd.CombinedOutput(); err != nil {
				return 0, fmt.Errorf("dd: %v: %s", err, out)
			}
			bytes += 256 << 20
		}
		return bytes / 1e6 / time.Since(start).Seconds(), nil
	}
	var events, bpfNs []float64
	b.ResetTimer()
	for range b.N {
		r, err := costbench.Compare(context.Background(), costRounds, work, attachWolf(b, &events, &bpfNs))
		if err != nil {
			b.Fatal(err)
		}
		report(b, r, "MB/s", events, bpfNs, round)
	}
}

func BenchmarkOverheadMemcgStress(b *testing.B) {
	benchGate(b)
	li, err := memcgstress.New().Start(context.Background(), lab.Options{Logf: b.Logf})
	if err != nil {
		b.Fatal(err)
	}
	defer li.Close()
	pid := li.(*memcgstress.Instance).PID()
	const round = 3 * time.Second
	faults := func() (uint64, error) {
		st, err := procfs.Reader{}.Stat(context.Background(), pid, 0)
		if errors.Is(err, os.ErrNotExist) {
			return 0, fmt.Errorf("the lab's worker %d is gone", pid)
		}
		return st.MinFlt + st.MajFlt, err
	}
	work := func(ctx context.Context) (float64, error) {
		f0, err := faults()
		if err != nil {
			return 0, err
		}
		start := time.Now()
		select {
		case <-time.After(round):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		f1, err := faults()
		if err != nil {
			return 0, err
		}
		return float64(f1-f0) / time.Since(start).Seconds(), nil
	}
	var events, bpfNs []float64
	b.ResetTimer()
	for range b.N {
		r, err := costbench.Compare(context.Background(), costRounds, work, attachWolf(b, &events, &bpfNs))
		if err != nil {
			b.Fatal(err)
		}
		report(b, r, "faults/s", events, bpfNs, round)
	}
}
