// Package bpfcost measures what every BPF program on the host costs, like
// bpftop: for each loaded program (wolf's own included) its type, name,
// attach point, owner, runs per second, nanoseconds per run and share of
// the CPUs, from the kernel's BPF run statistics, which it turns on only
// for the measurement (BPF_ENABLE_STATS: reference-counted, dropped when
// wolf closes it or dies, the sysctl never written). Conclude flags the
// costly programs with the reasons of "Performance and reliability pitfalls of eBPF": uprobes and kretprobes on hot
// paths, fentry detach hangs, uprobe registration against mmap_lock,
// recursion misses.
//
// It loads no BPF program of its own: the kernel already counts.
package bpfcost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/overhead"
	"github.com/wolf-investigator/wolf/internal/sysctl"
)

// Investigator measures every BPF program's cost. The zero value is not
// ready; use New.
type Investigator struct {
	Top        int // programs listed one by one (info findings); 0 lists none
	Thresholds Thresholds
	// Calibrate measures the uprobe trap cost on this machine
	// (CalibrateTrap) when busy uprobes are found, instead of assuming
	// Thresholds.TrapNs.
	Calibrate bool
	// Foreign are programs this process holds that are not wolf's own
	// (a lab's, started in the same process by a test).
	Foreign []uint32
}

// New returns an investigator with the default thresholds and no list
// (what doctor wants); wolf bpf sets Top.
func New() *Investigator { return &Investigator{Thresholds: DefaultThresholds, Calibrate: true} }

// Name implements investigator.Investigator.
func (*Investigator) Name() string { return "bpf" }

// Summary implements investigator.Investigator.
func (*Investigator) Summary() string {
	return "what every BPF program on the host costs (runs/s, ns per run, CPU), and the risky ones"
}

// Requirements implements investigator.Requirer.
func (*Investigator) Requirements() []investigator.Requirement {
	return []investigator.Requirement{
		{Feature: "bpf_stats", Why: "the kernel's run count and run time per program (BPF_ENABLE_STATS, 5.8+)"},
		{Feature: "btf", Why: "names of fentry/fexit and tp_btf attach points", Optional: true},
	}
}

// StatsSysctl reads kernel.bpf_stats_enabled: the administrator's
// setting, which wolf never writes (BPF_ENABLE_STATS holds statistics on
// without changing it).
func StatsSysctl() (int64, error) { return sysctl.ReadInt("kernel.bpf_stats_enabled") }

// Start inventories the programs and reads every program's statistics;
// from then on it samples them once a second, for the runs/s curves.
func (b *Investigator) Start(ctx context.Context, opts investigator.Options) (investigator.Session, error) {
	if b.Thresholds == (Thresholds{}) {
		b.Thresholds = DefaultThresholds
	}
	s := &session{b: *b, opts: opts, meter: overhead.Start()}
	// The meter holds statistics on too; this second, reference-counted
	// hold tells whether the kernel has them at all.
	st, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	s.statsOn = err == nil
	if err == nil {
		s.stats = st
	}
	if s.progs, err = listPrograms(); err != nil {
		s.Close()
		if errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("bpf: listing programs: %w: %w", err, investigator.ErrPrivilege)
		}
		return nil, err
	}
	if s.before, err = sampleStats(); err != nil {
		s.Close()
		return nil, err
	}
	s.started = time.Now()
	s.samples = []Sample{{At: 0, Stats: s.before}}
	s.stop, s.done = make(chan struct{}), make(chan struct{})
	go s.sample()
	return s, nil
}

// session is wolf bpf measuring.
type session struct {
	b       Investigator
	opts    investigator.Options
	meter   *overhead.Meter
	stats   io.Closer
	statsOn bool
	stop    chan struct{}
	done    chan struct{}

	mu      sync.Mutex
	progs   []Program
	before  map[uint32]Stat
	started time.Time
	samples []Sample
}

// sample reads every program's statistics once a second.
func (s *session) sample() {
	defer close(s.done)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
			if s.b.Top <= 0 {
				continue
			}
			if st, err := sampleStats(); err == nil {
				s.mu.Lock()
				s.samples = append(s.samples, Sample{At: time.Since(s.started).Seconds(), Stats: st})
				s.mu.Unlock()
			}
		}
	}
}

// Close stops sampling and lets the statistics go off (if nobody else
// holds them on).
func (s *session) Close() error {
	if s.stop != nil {
		close(s.stop)
		<-s.done
		s.stop = nil
	}
	if s.stats != nil {
		_ = s.stats.Close()
		s.stats = nil
	}
	s.meter.Close()
	return nil
}

// Collect concludes the window since Start or the previous Collect.
func (s *session) Collect(ctx context.Context) (*investigator.Result, error) {
	b, opts := &s.b, s.opts
	res := &investigator.Result{Capabilities: map[string]bool{"bpf_stats": s.statsOn}}
	s.mu.Lock()
	defer s.mu.Unlock()
	after, err := sampleStats()
	window := time.Since(s.started)
	if err != nil {
		return nil, err
	}
	progs, before := s.progs, s.before
	// The window's last half second is the final sample's.
	samples := slices.DeleteFunc(s.samples, func(x Sample) bool { return x.At > 0 && window.Seconds()-x.At < 0.5 })
	defer func() {
		s.before, s.started = after, time.Now()
		s.samples = []Sample{{At: 0, Stats: after}}
		if now, err := listPrograms(); err == nil {
			s.progs = now
		}
	}()
	// Programs loaded during the window join the list; programs unloaded
	// during it stay, marked gone.
	if later, err := listPrograms(); err == nil {
		have := map[uint32]bool{}
		for _, p := range progs {
			have[p.ID] = true
		}
		for _, p := range later {
			if !have[p.ID] {
				p.Created = true
				progs = append(progs, p)
			}
		}
	}
	r := &resolver{}
	links, err := listLinks(r)
	if err != nil {
		res.Notes = append(res.Notes, "links: "+err.Error())
	}
	owners, fdAttaches, err := scanOwners(ctx)
	if err != nil {
		res.Notes = append(res.Notes, "owners unknown: "+err.Error())
	}
	self := os.Getpid()
	for i := range progs {
		p := &progs[i]
		p.Attach = withFDAttaches(r, links[p.ID], fdAttaches[p.ID])
		p.Owners = owners[p.ID]
		if _, ok := after[p.ID]; !ok {
			p.Gone = true
		}
		// wolf's own: held by this process (doctor's other investigators),
		// unless declared foreign. Another wolf process is someone else.
		p.Wolf = heldBy(p, self) && !slices.Contains(b.Foreign, p.ID)
	}
	th := b.Thresholds
	if b.Calibrate && busyUprobes(progs, before, after) {
		if d, err := CalibrateTrap(); err == nil {
			th.TrapNs, th.TrapSource = float64(d.Nanoseconds()), "measured"
			res.Capabilities["uprobes"] = true
		} else {
			res.Notes = append(res.Notes, fmt.Sprintf("uprobe trap cost not measured (%v): estimates assume %.0f ns", err, th.TrapNs))
		}
	}
	snap := &Snapshot{
		Programs: progs, Before: before, After: after, Window: window,
		NumCPU: runtime.NumCPU(), Kernel: kernelRelease(), StatsOff: !res.Capabilities["bpf_stats"],
		Top: b.Top, PID: opts.PID,
	}
	if snap.StatsOff {
		res.Notes = append(res.Notes, "the kernel would not turn on BPF run statistics: run counts and times read as zero")
	}
	res.Findings = Conclude(snap, th)
	samples = append(samples, Sample{At: window.Seconds(), Stats: after})
	res.Timelines = RateTimelines(snap, samples, min(b.Top, maxTimelines))
	// wolf bpf loads no program: its cost is the CPU of two samples and
	// the /proc walk; its events are the programs it measured.
	res.Overhead = s.meter.Lap(uint64(len(after)), 0)
	return res, nil
}

// busyUprobes says whether some program other than wolf's ran on a
// uprobe during the window: only then is the trap cost worth measuring.
func busyUprobes(progs []Program, before, after map[uint32]Stat) bool {
	for i := range progs {
		p := &progs[i]
		if !p.Wolf && p.has(KindUprobe, KindUretprobe, KindUprobeMulti) && after[p.ID].Runs > before[p.ID].Runs {
			return true
		}
	}
	return false
}

func kernelRelease() string {
	var uts unix.Utsname
	if unix.Uname(&uts) != nil {
		return ""
	}
	return strings.TrimRight(string(uts.Release[:]), "\x00")
}
