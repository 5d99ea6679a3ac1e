package sysstat

import (
	"context"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/wolf-investigator/wolf/internal/fact"
	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/procfs"
)

// Options tune a Sampler; the zero value reads the real /proc, /sys and
// /dev/kmsg once per second.
type Options struct {
	ProcRoot string        // "/proc" when empty
	SysRoot  string        // "/sys" when empty
	Kmsg     string        // "/dev/kmsg" when empty; "-" to not read the kernel log
	Interval time.Duration // between run-queue samples; 1 s when zero
	Timeout  time.Duration // per read; procfs.DefaultTimeout when zero
	// Alongside names the investigators watching the same window
	// (Window.Alongside).
	Alongside []string
}

// Tick is one per-interval sample of the run queue (vmstat's r and b).
type Tick struct {
	Running, Blocked int
}

// Sampler watches the system over a window: counters at its start and
// end, the run queue every interval in between, and the kernel log.
type Sampler struct {
	opts    Options
	reader  procfs.Reader
	first   Snapshot
	kmsg    *kmsgTail
	kmsgErr error

	mu    sync.Mutex
	ticks []Tick

	stop chan struct{}
	done chan struct{}
	once sync.Once
	res  Result
}

// Result is the checklist and the findings of one window.
type Result struct {
	Checks   []finding.Check
	Findings []finding.Finding
	Notes    []string
	WindowS  float64 // the window's length in seconds
	// Facts are the window's measurements for the diagnosis stage (the
	// host's CPUs and disks), made from the same window as the findings.
	Facts *fact.Set
}

// Start takes the first snapshot, positions the kernel log at its end and
// starts sampling the run queue. Stop ends the window.
func Start(ctx context.Context, opts Options) *Sampler {
	if opts.ProcRoot == "" {
		opts.ProcRoot = procfs.DefaultRoot
	}
	if opts.SysRoot == "" {
		opts.SysRoot = "/sys"
	}
	if opts.Kmsg == "" {
		opts.Kmsg = "/dev/kmsg"
	}
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	s := &Sampler{opts: opts, reader: procfs.Reader{Root: opts.ProcRoot, Timeout: opts.Timeout},
		stop: make(chan struct{}), done: make(chan struct{})}
	// The log is opened first: a record logged while the counters are
	// read belongs to the window.
	if opts.Kmsg != "-" {
		s.kmsg, s.kmsgErr = openKmsg(opts.Kmsg)
	}
	s.first = s.snapshot(ctx)
	if s.first.Stat != nil {
		s.ticks = append(s.ticks, Tick{s.first.Stat.ProcsRunning, s.first.Stat.ProcsBlocked})
	}
	go s.loop(ctx)
	return s
}

func (s *Sampler) snapshot(ctx context.Context) Snapshot {
	files, errs := readFiles(ctx, s.reader, s.opts.ProcRoot, s.opts.SysRoot)
	snap := ParseFiles(time.Now(), files, errs)
	snap.SelfCPU = selfCPU()
	return snap
}

func (s *Sampler) loop(ctx context.Context) {
	defer close(s.done)
	t := time.NewTicker(s.opts.Interval)
	defer t.Stop()
	path := filepath.Join(s.opts.ProcRoot, "stat")
	for {
		select {
		case <-s.stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		b, err := s.reader.ReadFile(ctx, path)
		if err != nil {
			continue
		}
		st, err := ParseStat(b)
		if err != nil {
			continue
		}
		s.mu.Lock()
		s.ticks = append(s.ticks, Tick{st.ProcsRunning, st.ProcsBlocked})
		s.mu.Unlock()
	}
}

// Stop ends the window: it takes the last snapshot, reads what the kernel
// logged, and analyses the whole. It still works after ctx is cancelled
// (an interrupted doctor still reports what it saw), bounded by the read
// timeouts. Calling it again returns the same result.
func (s *Sampler) Stop(ctx context.Context) Result {
	s.once.Do(func() {
		close(s.stop)
		<-s.done
		ctx := context.WithoutCancel(ctx)
		last := s.snapshot(ctx)
		w := Window{First: s.first, Last: last, Alongside: s.opts.Alongside}
		s.mu.Lock()
		w.Ticks = append([]Tick(nil), s.ticks...)
		s.mu.Unlock()
		if last.Stat != nil {
			w.Ticks = append(w.Ticks, Tick{last.Stat.ProcsRunning, last.Stat.ProcsBlocked})
		}
		switch {
		case s.opts.Kmsg == "-":
			w.Kernel.Unavailable = "not read"
		case s.kmsgErr != nil:
			w.Kernel.Unavailable = s.kmsgErr.Error()
		default:
			log, err := s.kmsg.drain()
			if err != nil {
				log.Unavailable = err.Error()
			}
			w.Kernel = log
		}
		s.res = Analyze(w)
	})
	return s.res
}

// selfCPU is this process's CPU time, every thread's, user and system; 0
// when getrusage fails.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
