// Package mmaplock is the lab for a process whose mmap_lock is held long
// and fought over: the livelock of ClickHouse's "The case of the vanishing CPU" in miniature, and the Datadog FOSDEM talk's
// rw-semaphore queue where readers wait behind a writer that waits behind
// a long reader.
//
// The lab runs a child process (its own binary, re-executed) with:
//   - a "holder" thread niced to 19 that loops over madvise(MADV_COLD) and
//     mprotect in turn on a large populated region (4 KiB pages): each
//     call holds the mmap_lock (for reading, then writing) while it walks
//     every page table entry;
//   - two busy threads at normal priority on the holder's CPU, so the
//     holder gets about 1% of it: what takes it milliseconds of CPU
//     becomes a hold of hundreds of milliseconds, off CPU, exactly the
//     write-up's "held 564 s, ran 3.7 s";
//   - a writer (mmap/munmap) and three readers (mincore) on the other CPU,
//     which queue on the lock: readers behind the waiting writer while the
//     holder reads.
//
// Per-VMA locks (6.4+) keep page faults off the mmap_lock on this kernel,
// so, unlike in the write-up, faulting threads do not pile up here; mincore,
// mmap/munmap, mprotect and madvise still take it, as do /proc readers.
//
// The child dies with the lab (PR_SET_PDEATHSIG), exits when its stdin
// closes and after ten minutes whatever happens.
package mmaplock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/testslock"
)

// DefaultMB is the region the holder walks: 512 MiB of 4 KiB pages, which
// takes a few milliseconds of CPU per call here.
const DefaultMB = 512

const startTimeout = 30 * time.Second

type mmapLab struct {
	mb     int
	paused bool
}

// New returns the lab.
func New() lab.Lab { return mmapLab{mb: DefaultMB} }

// NewSized returns the lab with a region of mb MiB (tests use less).
func NewSized(mb int) lab.Lab { return mmapLab{mb: mb} }

// NewPaused returns a lab whose threads wait for Instance.Go before they
// touch the lock, so that tools attached in between see every wait from
// its beginning (comparisons with perf need the same window).
func NewPaused(mb int) lab.Lab { return mmapLab{mb: mb, paused: true} }

func (mmapLab) Name() string { return "mmap-lock" }

func (mmapLab) Summary() string {
	return "a CPU-starved thread holds its process's mmap_lock for long; a writer and readers queue behind it"
}

// Instance is the running lab.
type Instance struct {
	mb    int
	cmd   *exec.Cmd
	stdin io.WriteCloser
	pid   int
	roles map[string][]int
	done  chan struct{}
	// stopped is closed when the child says its threads' last calls
	// returned (Quiesce).
	stopped chan struct{}
	mu      sync.Mutex
	closed  bool
}

// Start implements lab.Lab.
func (m mmapLab) Start(ctx context.Context, opt lab.Options) (_ lab.Instance, err error) {
	if m.mb <= 0 || m.mb > 4096 {
		return nil, fmt.Errorf("mmap-lock: region of %d MiB out of range", m.mb)
	}
	if err := testslock.Check("lab " + m.Name()); err != nil {
		return nil, err
	}
	cmd := lab.ChildCommand(context.Background(), childPart, childComm, strconv.Itoa(m.mb), "GOMAXPROCS=2")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("mmap-lock: child stdin: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("mmap-lock: child stdout: %w", err)
	}
	stderr := &cappedWriter{max: 4096}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("mmap-lock: start child: %w", err)
	}
	in := &Instance{mb: m.mb, cmd: cmd, stdin: stdin, pid: cmd.Process.Pid, roles: map[string][]int{}, done: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(in.done)
	}()
	defer func() {
		if err != nil {
			_ = in.Close()
		}
	}()
	lines := make(chan string, 1)
	go func() {
		r := bufio.NewReader(stdout)
		l, _ := r.ReadString('\n')
		lines <- l
		said := false
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if strings.TrimSpace(l) == stoppedLine && !said {
				close(in.stopped)
				said = true
			}
		}
	}()
	select {
	case l := <-lines:
		if err := in.parseReady(l); err != nil {
			return nil, fmt.Errorf("mmap-lock: %w %s", err, stderr.String())
		}
	case <-in.done:
		return nil, fmt.Errorf("mmap-lock: child exited before it was ready: %s", stderr.String())
	case <-ctx.Done():
		return nil, fmt.Errorf("mmap-lock: waiting for the child: %w", ctx.Err())
	case <-time.After(lab.Scaled(startTimeout)):
		return nil, fmt.Errorf("mmap-lock: waiting for the child: %w after %s", lab.ErrTimeout, lab.Scaled(startTimeout))
	}
	if !m.paused {
		if err := in.Go(); err != nil {
			return nil, err
		}
	}
	if opt.Logf != nil {
		opt.Logf("mmap-lock: child pid %d up: holder %v, writer %v, readers %v", in.pid, in.roles["holder"], in.roles["writer"], in.roles["reader"])
	}
	return in, nil
}

// parseReady reads "ready PID role=TID ...".
func (in *Instance) parseReady(l string) error {
	f := strings.Fields(l)
	if len(f) < 2 || f[0] != "ready" || f[1] != strconv.Itoa(in.pid) {
		return fmt.Errorf("child pid %d said %q, want \"ready %d ...\"", in.pid, strings.TrimSpace(l), in.pid)
	}
	for _, kv := range f[2:] {
		k, v, ok := strings.Cut(kv, "=")
		tid, err := strconv.Atoi(v)
		if !ok || err != nil {
			return fmt.Errorf("child said %q", l)
		}
		in.roles[k] = append(in.roles[k], tid)
	}
	if len(in.roles["holder"]) != 1 {
		return errors.New("child named no holder thread")
	}
	return nil
}

// Go lets the child's threads start working (NewPaused labs).
func (in *Instance) Go() error {
	if _, err := io.WriteString(in.stdin, goLine+"\n"); err != nil {
		return fmt.Errorf("mmap-lock: start the child's threads: %w", err)
	}
	return nil
}

// Quiesce makes the child's threads finish their current call and stop
// touching the lock, while the process and its threads live on, and
// returns once the child says every last call has returned, or after
// timeout; comparisons use it to end a window with no wait in flight. A
// starved holder may need seconds to finish its call on a busy host.
func (in *Instance) Quiesce(timeout time.Duration) error {
	if _, err := io.WriteString(in.stdin, stopLine+"\n"); err != nil {
		return fmt.Errorf("mmap-lock: stop the child's threads: %w", err)
	}
	select {
	case <-in.stopped:
		return nil
	case <-in.done:
		return errors.New("mmap-lock: the child exited while its threads stopped")
	case <-time.After(timeout):
		return fmt.Errorf("mmap-lock: the child's threads still working %v after the stop", timeout)
	}
}

// PID is the child process whose mmap_lock is fought over.
func (in *Instance) PID() int { return in.pid }

// Holder is the thread that holds the lock long.
func (in *Instance) Holder() int { return in.roles["holder"][0] }

// Tasks implements lab.Instance: the holder is the offender; the writer
// and readers are the victims.
func (in *Instance) Tasks() lab.Tasks {
	v := append([]int(nil), in.roles["writer"]...)
	v = append(v, in.roles["reader"]...)
	return lab.Tasks{Offender: in.Holder(), Victims: v}
}

// Describe implements lab.Instance.
func (in *Instance) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "mmap-lock: process %s pid %d, region %d MiB of 4 KiB pages\n", childComm, in.pid, in.mb)
	fmt.Fprintf(&b, "holder tid %d (nice 19, CPU 0, starved by spinners %v) loops madvise(MADV_COLD) + mprotect over the region, holding the mmap_lock for each\n",
		in.Holder(), in.roles["spin"])
	fmt.Fprintf(&b, "writer tid %v (mmap/munmap) and readers %v (mincore) queue on the same mmap_lock\n", in.roles["writer"], in.roles["reader"])
	fmt.Fprintf(&b, "see it: wolf locks --pid %d", in.pid)
	return b.String()
}

// Close implements lab.Instance: the child exits when its stdin closes (it
// is killed if it has not after two seconds). Close returns once it is
// gone, so every one of its waits has ended: a killed waiter still takes
// the lock on its way out.
func (in *Instance) Close() error {
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return nil
	}
	in.closed = true
	in.mu.Unlock()
	_ = in.stdin.Close()
	select {
	case <-in.done:
	case <-time.After(2 * time.Second):
		_ = in.cmd.Process.Kill()
		<-in.done
	}
	return nil
}

// cappedWriter keeps the start of the child's stderr for error messages.
type cappedWriter struct {
	mu  sync.Mutex
	b   strings.Builder
	max int
}

func (c *cappedWriter) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.String()
}

func (c *cappedWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.max - c.b.Len(); room > 0 {
		c.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// WhyRoot implements lab.Privileged: nothing the lab does needs root.
func (mmapLab) WhyRoot() string { return "" }
