// Package overhead measures what an investigator costs while it runs: wolf's
// own CPU time and the kernel's run statistics for its BPF programs, so
// every report can say what looking cost.
//
// The kernel's run statistics are not free: while they are on, every run of
// every BPF program on the host, wolf's and everybody else's, reads the
// clock twice (about 45 ns per run on this project's 2-core VM, a third of
// a typical wolf program's cost). So once an investigator has attached,
// the meter keeps them on only for a sample of the window, OnPeriod out of
// every OnPeriod+OffPeriod, and scales what it measured to the whole
// window. Only the meter's own on periods are measured: statistics that
// somebody else keeps on (another tool, `wolf bpf`, sysctl
// kernel.bpf_stats_enabled, another investigator's meter) count runs in
// the off periods too, for however long they were on, so those runs are
// left out.
//
// Where events are so dense that the statistics' own cost slows them
// while on (a loop of nothing but system calls under a probe), the
// sampled periods see fewer of them and the estimate comes out low, by up
// to the share the statistics took.
package overhead

import (
	"io"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/finding"
)

// The sampling duty cycle once Track is called: 10 % of the window, the
// first 100 ms of every wall-clock second.
const (
	OnPeriod  = 100 * time.Millisecond
	OffPeriod = 900 * time.Millisecond
)

// Meter is started before an investigator attaches and read after it has
// collected. Its zero value is not usable; call Start.
type Meter struct {
	cpuStart time.Duration
	enable   func() (io.Closer, error)
	// The duty cycle: OnPeriod and OffPeriod, shorter in tests.
	onPeriod, offPeriod time.Duration

	mu     sync.Mutex
	stats  io.Closer // held while statistics are on
	stop   chan struct{}
	done   chan struct{}
	sample *sampled
	laps   lapState
	// last is the latest measured period's, for a budget's feedback.
	last period
}

// period is one measured (on) period: the programs' run time in it, and
// its length.
type period struct {
	run, length time.Duration
	ok          bool
}

// lapState is where the previous Lap left the cumulative readings.
type lapState struct {
	done   bool          // a lap was taken: s.base is counted already
	cpu    time.Duration // process CPU time at the last lap
	raw    stat          // unsampled run statistics at the last lap
	missed uint64        // recursion misses at the last lap
}

// sampled is what the duty cycle measured of the tracked programs.
type sampled struct {
	progs    []*ebpf.Program
	since    time.Time     // Track
	base     stat          // the programs' statistics at Track
	run      time.Duration // run time counted in measured periods
	runs     uint64
	measured time.Duration // length of those periods
}

type stat struct {
	run  time.Duration
	runs uint64
}

// Start notes wolf's CPU time so far and turns on the kernel's BPF run
// statistics (through a BPF_ENABLE_STATS file descriptor: the kernel counts
// enablers and turns statistics off again when the last one closes, or
// when wolf dies, so a previous setting is never lost). They stay on until
// Track starts sampling, or Close. Without them (an old kernel) run times
// read as zero.
func Start() *Meter {
	return start(func() (io.Closer, error) { return ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME)) })
}

func start(enable func() (io.Closer, error)) *Meter {
	m := &Meter{cpuStart: CPUTime(), enable: enable, onPeriod: OnPeriod, offPeriod: OffPeriod}
	m.on()
	return m
}

func (m *Meter) on() {
	if m.stats == nil {
		if st, err := m.enable(); err == nil {
			m.stats = st
		}
	}
}

func (m *Meter) off() {
	if m.stats != nil {
		_ = m.stats.Close()
		m.stats = nil
	}
}

// Track starts the duty cycle over progs, the investigator's attached
// programs: statistics stay on until the current on part of the wall
// clock's cycle ends (at once if it is past), then off for the rest of
// the period, on for OnPeriod, and so on until Finish or Close. Call it once, after
// attaching. If statistics could not be turned on at Start, it does
// nothing and run times read as zero.
func (m *Meter) Track(progs ...*ebpf.Program) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stats == nil || m.sample != nil {
		return
	}
	m.sample = &sampled{progs: progs, since: time.Now(), base: read(progs)}
	m.stop, m.done = make(chan struct{}), make(chan struct{})
	go m.cycle(m.stop, m.done)
}

// cycle alternates measured (on) and unmeasured (off) periods until stop
// closes, then closes done. Only its own on periods count: statistics
// somebody else keeps on during an off period may have been on for any
// part of it, so its runs are left out rather than guessed at.
func (m *Meter) cycle(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	s := m.sample
	last, lastAt, on := s.base, s.since, true
	for {
		wait := m.untilToggle(time.Now(), on)
		stopped := false
		select {
		case <-stop:
			stopped = true
		case <-time.After(wait):
		}
		m.mu.Lock()
		if on {
			// The period ends before the toggle: turning statistics on
			// or off patches the kernel's text and stalls every CPU for
			// a moment, time in which runs go uncounted.
			end := time.Now()
			m.off()
			cur := read(s.progs)
			s.run += cur.run - last.run
			s.runs += cur.runs - last.runs
			s.measured += end.Sub(lastAt)
			m.last = period{run: cur.run - last.run, length: end.Sub(lastAt), ok: true}
		} else if !stopped {
			m.on()
			last, lastAt = read(s.progs), time.Now()
		}
		on = !on
		m.mu.Unlock()
		if stopped {
			return
		}
	}
}

// untilToggle is how long the current period lasts from now. Periods are
// aligned to the wall clock: every meter is on for the first OnPeriod of
// each OnPeriod+OffPeriod (the first 100 ms of every second), so the
// meters of investigators running side by side (wolf watch, doctor) are
// on at the same moments. The kernel counts enablers, so statistics are
// then on 10% of the time whatever the number of meters; unaligned, five
// meters kept them on about 30% of it.
func (m *Meter) untilToggle(now time.Time, on bool) time.Duration {
	period := m.onPeriod + m.offPeriod
	into := now.Sub(now.Truncate(period))
	if on {
		// Tracking began past this period's on part: the on period
		// ends at once and the cycle joins the others.
		return max(m.onPeriod-into, 0)
	}
	return period - into
}

// read sums the statistics of progs.
func read(progs []*ebpf.Program) stat {
	run, runs, _ := Programs(progs...)
	return stat{run, runs}
}

// LastPeriod is what the tracked programs cost in the latest measured
// period: their run time and the period's length. ok is false before the
// first period has ended (or without run statistics).
func (m *Meter) LastPeriod() (run, length time.Duration, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last.run, m.last.length, m.last.ok
}

// Close stops the duty cycle and turns the run statistics off again (if
// this meter turned them on).
func (m *Meter) Close() {
	m.mu.Lock()
	stop, done := m.stop, m.done
	m.stop = nil
	m.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
	m.mu.Lock()
	m.off()
	m.mu.Unlock()
}

// Programs sums the kernel's statistics over progs (nil entries are
// skipped): total run time, runs, and runs the kernel skipped because a
// program was already running on that CPU (recursion misses, which are
// events wolf lost).
func Programs(progs ...*ebpf.Program) (run time.Duration, count, missed uint64) {
	for _, p := range progs {
		if p == nil {
			continue
		}
		if st, err := p.Stats(); err == nil {
			run += st.Runtime
			count += st.RunCount
			missed += st.RecursionMisses
		}
	}
	return run, count, missed
}

// Finish reads the meter (see Lap) and stops it.
func (m *Meter) Finish(events, dropped uint64, progs ...*ebpf.Program) finding.Overhead {
	m.Close()
	return m.Lap(events, dropped, progs...)
}

// Lap reads the window since Start or the previous Lap: CPU time, the BPF
// run time and recursion misses of progs, plus the investigator's own
// event and drop counts (ring-buffer drops, full maps) for that window;
// events 0 means "the programs' runs". Once Track has sampled, run time and
// runs are the window's sample scaled to the window (runs before Track,
// when statistics were on throughout, count in the first lap as they
// are). The duty cycle goes on, so a long-running investigator can read
// one window after another.
func (m *Meter) Lap(events, dropped uint64, progs ...*ebpf.Program) finding.Overhead {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	cumRun, cumRuns, missed := Programs(progs...)
	run, runs := cumRun-m.laps.raw.run, cumRuns-m.laps.raw.runs
	if s := m.sample; s != nil && s.measured > 0 {
		scale := max(float64(now.Sub(s.since))/float64(s.measured), 1)
		run = time.Duration(float64(s.run) * scale)
		runs = uint64(float64(s.runs) * scale)
		if !m.laps.done {
			run += s.base.run
			runs += s.base.runs
		}
		s.run, s.runs, s.measured, s.since = 0, 0, 0, now
	}
	cpu := CPUTime()
	if events == 0 {
		events = runs
	}
	if missed >= m.laps.missed {
		dropped += missed - m.laps.missed
	}
	out := finding.Overhead{
		CPUSeconds: (cpu - m.cpuStart - m.laps.cpu).Seconds(),
		BPFRunNs:   uint64(run.Nanoseconds()),
		Events:     events,
		Dropped:    dropped,
	}
	m.laps = lapState{done: true, cpu: cpu - m.cpuStart, raw: stat{cumRun, cumRuns}, missed: missed}
	return out
}

// PerEvent is the average BPF cost of one program run, the figure the
// issues' cost targets are stated in.
func PerEvent(run time.Duration, count uint64) time.Duration {
	if count == 0 {
		return 0
	}
	return run / time.Duration(count)
}

// CPUTime is the CPU time (user + system) this process has used.
func CPUTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
