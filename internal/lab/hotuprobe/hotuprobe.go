// Package hotuprobe is the lab for the costliest probe of the Datadog talk "Performance and reliability pitfalls of eBPF": a uprobe and
// a uretprobe on a function that a process calls in a tight loop. Every
// call traps into the kernel twice (the breakpoint at the entry, the
// trampoline at the return), a cost that the kernel's BPF run statistics do
// not include: the programs themselves run for tens of nanoseconds.
//
// The lab runs `yes` (coreutils) with its output on /dev/null, niced, and
// attaches the two programs of hotuprobe.bpf.c to libc's write() for that
// process only. yes calls write() hundreds of thousands of times a second.
// The child dies with the lab (Pdeathsig), the probes with the lab's file
// descriptors (nothing is pinned), and the lab ends by itself after
// MaxDuration.
package hotuprobe

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/testslock"
)

const (
	// Symbol is the libc function the lab probes.
	Symbol = "write"
	// MaxDuration bounds the lab even if nobody closes it.
	MaxDuration = 10 * time.Minute
)

type hotLab struct{}

// New returns the hot-uprobe lab.
func New() lab.Lab { return hotLab{} }

func (hotLab) Name() string { return "hot-uprobe" }

func (hotLab) Summary() string {
	return "uprobe + uretprobe on libc write() called in a tight loop (the costly probe of \"Performance and reliability pitfalls of eBPF\")"
}

// Instance is a running hot-uprobe lab.
type Instance struct {
	pid      int
	libc     string
	baseline float64 // write() calls/s before the probes
	probed   float64 // and with them
	objs     hotuprobeObjects
	links    []link.Link
	ids      []ebpf.ProgramID
	stop     chan struct{} // closed by Close: the spawning thread exits
	exited   chan struct{} // closed when the child has been reaped
	timer    *time.Timer
	once     sync.Once
	closeMu  sync.Mutex
}

// Start runs yes and attaches the probes to its write() calls.
func (l hotLab) Start(ctx context.Context, opt lab.Options) (_ lab.Instance, err error) {
	if err := testslock.Check("lab " + l.Name()); err != nil {
		return nil, err
	}
	logf := opt.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	yes, err := exec.LookPath("yes")
	if err != nil {
		return nil, fmt.Errorf("hot-uprobe needs coreutils' yes: %w", err)
	}
	libc, err := libraryOf(yes, "libc.so.6")
	if err != nil {
		return nil, err
	}
	ex, err := link.OpenExecutable(libc)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", libc, err)
	}
	_ = rlimit.RemoveMemlock()
	in := &Instance{libc: libc, stop: make(chan struct{}), exited: make(chan struct{})}
	if err := loadHotuprobeObjects(&in.objs, nil); err != nil {
		return nil, fmt.Errorf("hot-uprobe: load BPF: %w", err)
	}
	defer func() {
		if err != nil {
			_ = in.Close()
		}
	}()
	if err := in.spawn(yes); err != nil {
		return nil, err
	}
	if in.baseline, err = in.rate(ctx, rateWindow); err != nil {
		return nil, err
	}
	logf("yes running as pid %d, %.0f write() calls/s; attaching to %s:%s", in.pid, in.baseline, libc, Symbol)
	opts := &link.UprobeOptions{PID: in.pid}
	entry, err := ex.Uprobe(Symbol, in.objs.HotEntry, opts)
	if err != nil {
		return nil, fmt.Errorf("hot-uprobe: uprobe %s:%s: %w", libc, Symbol, err)
	}
	in.links = append(in.links, entry)
	ret, err := ex.Uretprobe(Symbol, in.objs.HotReturn, opts)
	if err != nil {
		return nil, fmt.Errorf("hot-uprobe: uretprobe %s:%s: %w", libc, Symbol, err)
	}
	in.links = append(in.links, ret)
	for _, p := range []*ebpf.Program{in.objs.HotEntry, in.objs.HotReturn} {
		info, err := p.Info()
		if err != nil {
			return nil, fmt.Errorf("hot-uprobe: program info: %w", err)
		}
		id, _ := info.ID()
		in.ids = append(in.ids, id)
	}
	in.timer = time.AfterFunc(MaxDuration, func() { _ = in.Close() })
	if err := lab.WaitFor(ctx, 5*time.Second, "the probes to fire", func() (bool, error) {
		e, r, err := in.Hits()
		return e > 0 && r > 0, err
	}); err != nil {
		return nil, err
	}
	if in.probed, err = in.rate(ctx, rateWindow); err != nil {
		return nil, err
	}
	logf("with the probes: %.0f write() calls/s, %.1f µs more per call", in.probed, in.CostPerCall().Seconds()*1e6)
	return in, nil
}

// rateWindow is how long Start watches the loop's write() rate, before and
// after attaching.
const rateWindow = 500 * time.Millisecond

// Writes is how many write() calls the looping process has made
// (/proc/PID/io syscw: the kernel's count, independent of the probes).
func (in *Instance) Writes() (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", in.pid))
	if err != nil {
		return 0, fmt.Errorf("hot-uprobe: %w", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "syscw: "); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, errors.New("hot-uprobe: no syscw in /proc/PID/io")
}

func (in *Instance) rate(ctx context.Context, d time.Duration) (float64, error) {
	a, err := in.Writes()
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(d):
	}
	b, err := in.Writes()
	if err != nil {
		return 0, err
	}
	return float64(b-a) / time.Since(t0).Seconds(), nil
}

// Rates are the loop's write() calls per second before the probes were
// attached and with them (measured by Start).
func (in *Instance) Rates() (before, with float64) { return in.baseline, in.probed }

// CostPerCall is what the probes add to each write() call, from the two
// rates (the loop is CPU-bound, so the time per call is 1/rate): the
// traps and the programs together, measured, not estimated.
func (in *Instance) CostPerCall() time.Duration {
	if in.baseline <= 0 || in.probed <= 0 {
		return 0
	}
	return time.Duration((1/in.probed - 1/in.baseline) * 1e9)
}

// spawn starts yes from a goroutine locked to its thread until Close, so
// that Pdeathsig (which follows the thread that forked) fires only when the
// lab ends or wolf dies.
func (in *Instance) spawn(yes string) error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with this goroutine
		null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		if err != nil {
			started <- err
			close(in.exited)
			return
		}
		cmd := exec.Command(yes, "wolf-hot-uprobe")
		cmd.Stdout = null
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		err = cmd.Start()
		null.Close()
		if err != nil {
			started <- fmt.Errorf("hot-uprobe: start yes: %w", err)
			close(in.exited)
			return
		}
		in.pid = cmd.Process.Pid
		// Niced: the lab shows a cost, it need not take a CPU from others.
		_ = unix.Setpriority(unix.PRIO_PROCESS, in.pid, 19)
		started <- nil
		<-in.stop
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		close(in.exited)
	}()
	return <-started
}

// libraryOf finds the file of library lib (a DT_NEEDED name) that exe
// loads, in the usual library directories.
func libraryOf(exe, lib string) (string, error) {
	f, err := elf.Open(exe)
	if err != nil {
		return "", fmt.Errorf("hot-uprobe: %w", err)
	}
	defer f.Close()
	libs, _ := f.ImportedLibraries()
	found := false
	for _, l := range libs {
		found = found || l == lib
	}
	if !found {
		return "", fmt.Errorf("hot-uprobe: %s does not link %s (needs %v)", exe, lib, libs)
	}
	for _, dir := range []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"} {
		p := filepath.Join(dir, lib)
		if _, err := os.Stat(p); err == nil {
			return filepath.EvalSymlinks(p)
		}
	}
	return "", fmt.Errorf("hot-uprobe: %s not found in the library directories", lib)
}

// PID is the process whose write() calls are probed.
func (in *Instance) PID() int { return in.pid }

// Library is the probed libc's path.
func (in *Instance) Library() string { return in.libc }

// ProgramIDs are the kernel ids of the entry and return programs.
func (in *Instance) ProgramIDs() []ebpf.ProgramID { return in.ids }

// Hits returns how often each program ran (they count themselves).
func (in *Instance) Hits() (entries, returns uint64, err error) {
	in.closeMu.Lock()
	defer in.closeMu.Unlock()
	if in.objs.Hits == nil {
		return 0, 0, errors.New("hot-uprobe: lab closed")
	}
	for slot, dst := range []*uint64{&entries, &returns} {
		var per []uint64
		if err := in.objs.Hits.Lookup(uint32(slot), &per); err != nil {
			return 0, 0, fmt.Errorf("hot-uprobe: read hits: %w", err)
		}
		for _, v := range per {
			*dst += v
		}
	}
	return entries, returns, nil
}

// Describe implements lab.Instance.
func (in *Instance) Describe() string {
	return fmt.Sprintf("yes (pid %d) writes to /dev/null in a loop; a uprobe and a uretprobe on %s:%s\n"+
		"(BPF programs %v) trap on every call: %.0f calls/s before, %.0f with them, %.1f µs more per call.\n"+
		"Try: wolf bpf --duration 5s", in.pid, in.libc, Symbol, in.ids, in.baseline, in.probed, in.CostPerCall().Seconds()*1e6)
}

// Tasks implements lab.Instance: the offender holds the probes (this
// process), the victim is the probed loop.
func (in *Instance) Tasks() lab.Tasks {
	return lab.Tasks{Offender: os.Getpid(), Victims: []int{in.pid}}
}

// Close detaches the probes and ends the child. Safe to call more than once.
func (in *Instance) Close() error {
	in.once.Do(func() {
		if in.timer != nil {
			in.timer.Stop()
		}
		in.closeMu.Lock()
		for _, l := range in.links {
			_ = l.Close()
		}
		_ = in.objs.Close()
		in.objs = hotuprobeObjects{}
		in.closeMu.Unlock()
		close(in.stop)
		if in.pid != 0 {
			<-in.exited
		}
	})
	return nil
}

// WhyRoot implements lab.Privileged.
func (hotLab) WhyRoot() string { return "loads BPF programs and attaches uprobes to libc's write()" }
