// Package overhead measures what an investigator costs while it runs: wolf's
// own CPU time and the kernel's run statistics for its BPF programs, so
// every report can say what looking cost.
package overhead

import (
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/finding"
)

// Meter is started before an investigator attaches and read after it has
// collected. Its zero value is not usable; call Start.
type Meter struct {
	cpuStart time.Duration
	stats    interface{ Close() error }
}

// Start notes wolf's CPU time so far and turns on the kernel's BPF run
// statistics (kernel.bpf_stats_enabled) for as long as the meter is open.
// The kernel counts enablers and turns statistics off again when the last
// one closes, or when wolf dies, so a previous setting is never lost.
// Without them (an old kernel) run times read as zero.
func Start() *Meter {
	m := &Meter{cpuStart: CPUTime()}
	if st, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME)); err == nil {
		m.stats = st
	}
	return m
}

// Close turns the run statistics off again (if this meter turned them on).
func (m *Meter) Close() {
	if m.stats != nil {
		_ = m.stats.Close()
		m.stats = nil
	}
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

// Finish reads the meter: CPU time since Start, the BPF run time and
// recursion misses of progs, plus the investigator's own event and drop
// counts (ring-buffer drops, full maps).
func (m *Meter) Finish(events, dropped uint64, progs ...*ebpf.Program) finding.Overhead {
	run, _, missed := Programs(progs...)
	return finding.Overhead{
		CPUSeconds: (CPUTime() - m.cpuStart).Seconds(),
		BPFRunNs:   uint64(run.Nanoseconds()),
		Events:     events,
		Dropped:    dropped + missed,
	}
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
