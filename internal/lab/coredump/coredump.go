// Package coredump is the lab for threads "blocked by coredump": a
// multi-threaded process crashes with core dumps enabled, the kernel parks
// every thread but one in the exit path while that one writes the memory
// image, and a slow dump leaves them parked. The hung-task log then names
// the application's threads, while the offender is the dump and whatever
// consumes it.
//
// How the lab does it. It re-executes its own binary as the crasher
// (lab.ChildCommand): a Go process
// with a few goroutines locked to threads of their own, every thread named
// "wolf-crasher". It points kernel.core_pattern at a handler script of its
// own, "|/bin/sh DIR/handler CRASHERPID %p %i", and makes the crasher panic
// with GOTRACEBACK=crash (SIGABRT, whose default action dumps core). The
// kernel zaps the other threads, waits for them to park, starts the handler
// with a pipe as its stdin and writes the core into the pipe. The handler
// reports in (the dumping pid and tid, and its own pid), then does not read:
// it waits for a shared flock on a file whose exclusive lock the lab holds.
// The pipe fills (64 KiB) and the dumping thread sleeps in pipe_write; the
// stall lasts until the lab drops its lock. Then the handler reads and
// discards the core, the dump ends, and the process exits (SIGABRT, "core
// dumped", though no file was written).
//
// The lab changes core_pattern only for as long as one crash needs: it
// restores the original value as soon as the handler has reported in (the
// kernel reads the pattern once, when the dump starts), and Close restores it
// again if Start failed before. Crashes of other processes meanwhile reach
// the handler too; it refuses them at once (exit without reading, so their
// dump fails with EPIPE and they exit without a core) and never stalls them.
// The crasher runs with RLIMIT_CORE 0, so that if the pattern is a file
// again by the time it crashes no core file is written: on Linux, dumps to
// a pipe ignore RLIMIT_CORE except the value 1 (fs/coredump.c,
// coredump_pipe), dumps to a file need at least a page.
//
// Observed on 6.18 (x86_64), /proc/PID/task/TID/{stat,stack,wchan}:
//
//   - the dumping thread (Tasks().Offender): state S, flags 0x400640
//     (PF_SIGNALED|PF_DUMPCORE|PF_FORKNOEXEC), wchan anon_pipe_write, stack
//     anon_pipe_write < __kernel_write_iter < dump_user_range <
//     elf_core_dump < vfs_coredump < get_signal < arch_do_signal_or_restart.
//   - every other thread (Tasks().Victims): state I, flags 0x400448
//     (PF_SIGNALED|PF_POSTCOREDUMP|PF_FORKNOEXEC; the main thread, which
//     did exec, lacks PF_FORKNOEXEC), wchan do_exit, stack do_exit <
//     do_group_exit < get_signal. coredump_task_exit is inlined into
//     do_exit and schedule is left out, so do_exit is the innermost frame.
//
// State I, not D: since Linux 6.12 (commit b8e753128ed0, "exit: Sleep at
// TASK_IDLE when waiting for application core dump") the parked threads
// sleep in TASK_IDLE, which the hung-task detector skips and the load
// average does not count; before, they slept in TASK_UNINTERRUPTIBLE (D),
// and the detector reported them after hung_task_timeout_secs, with
// "Blocked by coredump." on kernels that print it. The lab accepts either
// state; an investigator must look for PF_POSTCOREDUMP, not for D alone.
//
// Victims are threads of one process: pids in lab.Tasks are thread ids here,
// and Process gives the process (thread group) id. Tasks().Daemon is the
// handler, the task the dumping thread waits on.
//
// What a kill -9 of the lab process leaves behind: nothing, once Start has
// returned. core_pattern is already restored and the temp directory already
// removed (the handler keeps its lock file open). The crasher dies with the
// lab (Pdeathsig SIGKILL interrupts the dump), the kernel drops the lab's
// flock with its descriptors, so the handler reads to EOF and exits. A
// kill -9 during Start, between setting core_pattern and the handler's
// report (a fraction of a second), leaves core_pattern pointing at a
// handler under /tmp/wolf-coredump-PID-*, which refuses every dump: crashes
// on the host would lose their cores (never stall). So the lab records the
// directory and the core_pattern it sets, with the value it found, in its
// ledger (lab.Ledger) before making them: the next lab to start, or `wolf
// lab clean`, puts the pattern back (if it still is the lab's) and removes
// the directory. TestKill9 checks the steady state, TestKill9DuringCrash
// the window.
package coredump

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/sysctl"
	"golang.org/x/sys/unix"
)

// DefaultVictims is how many goroutines the crasher locks to threads of
// their own when Options.Victims is 0. The Go runtime adds threads of its
// own, so more threads than that park.
const DefaultVictims = 3

// minParked is how many parked threads Start waits for at least.
const minParked = 2

// MaxStall bounds the stall on the handler's side: if the lab lives on but
// never ends, the handler stops waiting after this long. It matches the
// longest `wolf lab run --duration`.
var MaxStall = 24 * time.Hour

const (
	corePatternSysctl = "kernel.core_pattern"
	corePipeLimit     = "kernel.core_pipe_limit"
	// corenameMax is CORENAME_MAX_SIZE: core_pattern holds at most 127 bytes.
	corenameMax = 128
	shell       = "/bin/sh"
)

// afterPatternSet, when set (by a test), runs right after core_pattern is
// set: the window a kill -9 must not leave the host's core dumps broken in.
var afterPatternSet func(pattern string)

// tempBase is where the lab's directory is made ("" means os.TempDir());
// tests point it at a directory of their own.
var tempBase string

type coredumpLab struct{}

// New returns the coredump lab.
func New() lab.Lab { return coredumpLab{} }

func (coredumpLab) Name() string { return "coredump" }

func (coredumpLab) Summary() string {
	return "a crashing multi-threaded process whose threads stay parked in the exit path while a slow core_pattern pipe holds its core dump"
}

// Instance is a running coredump lab. Start returns it as a lab.Instance;
// type-assert to *Instance for Process and Release.
type Instance struct {
	logf func(string, ...any)

	dir         string // temp dir with the handler and its lock; "" once removed
	script      string
	pattern     string // the core_pattern we set
	origPattern string
	pipeLimit   string

	led *lab.Ledger // the directory and core_pattern, for a kill -9

	mu        sync.Mutex
	closed    bool
	released  bool
	restore   func() error // puts core_pattern back; nil when nothing to restore
	lock      *os.File     // held LOCK_EX while the stall lasts; nil once released
	crasher   *child
	dumper    int           // tid that dumps
	handler   int           // pid of the handler, in the initial pid namespace (where the kernel starts it)
	handlerSt time.Duration // its start time (since boot), against pid reuse
	victims   []int
	victimSt  byte // the state the victims were seen in, 'I' or 'D'
	parkedAt  time.Time

	closeOnce sync.Once
	closeErr  error
}

type child struct {
	cmd    *exec.Cmd
	pid    int
	stdin  io.WriteCloser
	stderr *capped
	done   chan struct{} // closed once reaped
	err    error         // from Wait, valid after done
}

// Start starts the crasher, points core_pattern at the lab's handler, makes
// the crasher crash, restores core_pattern once the handler holds the dump,
// and returns when at least two threads are parked with PF_POSTCOREDUMP
// behind the dumping thread. Options.Victims is how many goroutines the
// crasher locks to threads (DefaultVictims when 0).
func (coredumpLab) Start(ctx context.Context, opt lab.Options) (_ lab.Instance, err error) {
	n := opt.Victims
	if n < 0 || n > maxThreads {
		return nil, fmt.Errorf("coredump: %d victims, want 0 to %d", n, maxThreads)
	}
	if n == 0 {
		n = DefaultVictims
	}
	logf := opt.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	in := &Instance{logf: logf}
	defer func() {
		if err != nil {
			if cerr := in.Close(); cerr != nil {
				err = errors.Join(err, cerr)
			}
		}
	}()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("coredump: start: %w", err)
	}
	// Before core_pattern is read: a dead lab's pattern is put back first.
	if in.led, err = lab.NewLedger("coredump", logf); err != nil {
		return nil, fmt.Errorf("coredump: %w", err)
	}
	if err := in.prepare(); err != nil {
		return nil, err
	}
	if err := in.startCrasher(ctx, n); err != nil {
		return nil, err
	}
	if err := in.crash(ctx); err != nil {
		return nil, err
	}
	if err := in.waitParked(ctx); err != nil {
		return nil, err
	}
	return in, nil
}

// prepare writes the handler and takes the lock it will wait on.
func (in *Instance) prepare() error {
	orig, err := sysctl.Read(corePatternSysctl)
	if err != nil {
		return fmt.Errorf("coredump: read core_pattern: %w", err)
	}
	in.origPattern = orig
	in.pipeLimit, _ = sysctl.Read(corePipeLimit)
	// The kernel runs the handler with PATH=/sbin:/usr/sbin:/bin:/usr/bin
	// and no environment: name the tools by absolute path.
	flock, err := lookAbs("flock")
	if err != nil {
		return fmt.Errorf("coredump: the handler needs flock(1) (util-linux): %w", err)
	}
	cat, err := lookAbs("cat")
	if err != nil {
		return fmt.Errorf("coredump: the handler needs cat(1): %w", err)
	}
	if _, err := os.Stat(shell); err != nil {
		return fmt.Errorf("coredump: the handler needs %s: %w", shell, err)
	}

	base := tempBase
	if base == "" {
		base = os.TempDir()
	}
	dir := filepath.Join(base, lab.Name("coredump"))
	if err := in.led.Add(lab.Tree(dir)); err != nil {
		return fmt.Errorf("coredump: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		_ = in.led.Done(lab.Tree(dir))
		return fmt.Errorf("coredump: temp dir: %w", err)
	}
	in.dir = dir
	// core_pattern is split at spaces and expands '%': the path must have
	// neither. The kernel resolves it in the initial mount namespace.
	if strings.ContainsAny(dir, " \t\n%'\\") {
		return fmt.Errorf("coredump: temp dir %q has a character core_pattern cannot carry; set TMPDIR", dir)
	}
	lockPath := filepath.Join(dir, "lock")
	in.script = filepath.Join(dir, "handler")
	body := handlerScript(lockPath, filepath.Join(dir, "report"), flock, cat, MaxStall)
	if err := os.WriteFile(in.script, []byte(body), 0o700); err != nil {
		return fmt.Errorf("coredump: write handler: %w", err)
	}
	// O_CLOEXEC (os.OpenFile's default): the crasher must not share this
	// lock, or the handler would wait for the crasher to die, which waits
	// for the handler.
	f, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("coredump: lock file: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return fmt.Errorf("coredump: lock %s: %w", lockPath, err)
	}
	in.mu.Lock()
	in.lock = f
	in.mu.Unlock()
	return nil
}

func lookAbs(name string) (string, error) {
	for _, d := range []string{"/usr/bin", "/bin", "/usr/sbin", "/sbin"} {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in /usr/bin, /bin, /usr/sbin, /sbin", name)
}

// handlerScript is the core_pattern handler. The kernel runs it as root,
// from kthreadd, with the core on stdin and no other descriptor:
// $1 is the lab's crasher, $2 the pid that dumps (%p), $3 its dumping thread
// (%i), both as the crasher's pid namespace (ours) sees them.
func handlerScript(lock, report, flock, cat string, maxStall time.Duration) string {
	secs := int64(maxStall / time.Second)
	if secs < 1 {
		secs = 1
	}
	return fmt.Sprintf(`# wolf lab coredump: core_pattern handler; see package coredump.
# Not the lab's crasher: refuse the dump at once (the kernel's writes then
# fail with EPIPE); never make anyone else wait.
[ "$2" = "$1" ] || exit 0
exec 9<%s || exit 0
echo "$2 $3 $$" >%s || exit 0
# Read nothing while the lab holds its exclusive lock: the pipe fills, the
# dumping thread sleeps in pipe_write, the other threads stay parked. The
# lock goes when the lab releases it or dies; -w bounds the wait anyway.
%s -s -w %d 9
exec %s >/dev/null
`, shQuote(lock), shQuote(report), shQuote(flock), secs, shQuote(cat))
}

func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// startCrasher re-executes this binary as the crasher and waits until its
// threads are up.
func (in *Instance) startCrasher(ctx context.Context, threads int) error {
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return errors.New("coredump: start crasher: lab closed")
	}
	c := &child{stderr: &capped{max: 16 << 10}, done: make(chan struct{})}
	// The crasher dies with the lab (Pdeathsig fires when the thread that
	// forked exits; Go threads live on unless a locked goroutine ends, so
	// don't call Start from one).
	cmd := lab.ChildCommand(context.Background(), crasherPart, crasherComm, strconv.Itoa(threads), "PATH=/usr/sbin:/usr/bin:/sbin:/bin")
	cmd.Stderr = c.stderr // the crash prints every goroutine: keep the start
	stdin, err := cmd.StdinPipe()
	if err != nil {
		in.mu.Unlock()
		return fmt.Errorf("coredump: crasher stdin: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		in.mu.Unlock()
		return fmt.Errorf("coredump: crasher stdout: %w", err)
	}
	if err := cmd.Start(); err != nil {
		in.mu.Unlock()
		return fmt.Errorf("coredump: start crasher: %w", err)
	}
	c.cmd, c.pid, c.stdin = cmd, cmd.Process.Pid, stdin
	in.crasher = c
	in.mu.Unlock()
	lines := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(stdout).ReadString('\n')
		lines <- l
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	// No core file ever, whatever happens to core_pattern meanwhile (the
	// crasher sets it on itself too; see runCrasher).
	if err := unix.Prlimit(c.pid, unix.RLIMIT_CORE, &unix.Rlimit{}, nil); err != nil {
		return fmt.Errorf("coredump: crasher pid %d: set RLIMIT_CORE 0: %w", c.pid, err)
	}

	select {
	case l := <-lines:
		if f := strings.Fields(l); len(f) != 2 || f[0] != readyLine || f[1] != strconv.Itoa(c.pid) {
			select { // for its exit status, if it exits
			case <-c.done:
			case <-time.After(time.Second):
			}
			return fmt.Errorf("coredump: crasher pid %d said %q, want %q (%v) %s",
				c.pid, l, readyLine+" "+strconv.Itoa(c.pid), c.err, c.stderr.head())
		}
	case <-ctx.Done():
		return fmt.Errorf("coredump: waiting for the crasher to start: %w", ctx.Err())
	case <-time.After(lab.Scaled(waitTimeout)):
		return fmt.Errorf("coredump: waiting for the crasher to start: %w after %s", errTimeout, lab.Scaled(waitTimeout))
	}
	in.logf("coredump: crasher pid %d up, %d threads", c.pid, len(tids(c.pid)))
	return nil
}

// crash sets core_pattern, makes the crasher crash, waits for the handler to
// report in and restores core_pattern.
func (in *Instance) crash(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("coredump: crash: %w", err)
	}
	c := in.crasher
	in.pattern = fmt.Sprintf("|%s %s %d %%p %%i", shell, in.script, c.pid)
	if len(in.pattern) >= corenameMax {
		return fmt.Errorf("coredump: core_pattern %q is longer than %d bytes; use a shorter TMPDIR", in.pattern, corenameMax-1)
	}
	item := lab.Sysctl(corePatternSysctl, in.pattern, in.origPattern)
	if err := in.led.Add(item); err != nil {
		return fmt.Errorf("coredump: %w", err)
	}
	restore, err := sysctl.Set(corePatternSysctl, in.pattern)
	if err != nil {
		_ = in.led.Done(item)
		return fmt.Errorf("coredump: set core_pattern: %w", err)
	}
	in.mu.Lock()
	in.restore = restore
	in.mu.Unlock()
	in.logf("coredump: %s = %q (was %q)", corePatternSysctl, in.pattern, in.origPattern)
	if afterPatternSet != nil {
		afterPatternSet(in.pattern)
	}

	if err := ctx.Err(); err != nil {
		return fmt.Errorf("coredump: crash: %w", err)
	}
	if _, err := io.WriteString(c.stdin, crashLine+"\n"); err != nil {
		return fmt.Errorf("coredump: tell crasher pid %d to crash: %w", c.pid, err)
	}

	report := filepath.Join(in.dir, "report")
	var pid, tid, handler int
	err = lab.WaitFor(ctx, waitTimeout, "the core_pattern handler to take the dump", func() (bool, error) {
		select {
		case <-c.done:
			return false, fmt.Errorf("crasher pid %d exited (%v) and no handler reported: no dump through the pipe (kernel.core_pipe_limit %s? see dmesg) %s",
				c.pid, c.err, in.pipeLimit, c.stderr.head())
		default:
		}
		b, err := os.ReadFile(report)
		if err != nil || !bytes.HasSuffix(b, []byte("\n")) { // not yet, or half written
			return false, nil
		}
		if _, err := fmt.Sscan(string(b), &pid, &tid, &handler); err != nil {
			return false, fmt.Errorf("handler report %q: %w", b, err)
		}
		return true, nil
	})
	if errors.Is(err, errTimeout) {
		return fmt.Errorf("coredump: %w (is this process in a mount namespace of its own? the kernel runs the handler in the initial one; see also dmesg)", err)
	}
	if err != nil {
		return fmt.Errorf("coredump: %w", err)
	}
	if pid != c.pid {
		return fmt.Errorf("coredump: the handler took the dump of pid %d, want the crasher %d", pid, c.pid)
	}
	st, _ := processStart(handler)
	in.mu.Lock()
	in.dumper, in.handler, in.handlerSt = tid, handler, st
	in.mu.Unlock()
	in.logf("coredump: handler pid %d holds the dump of thread %d of pid %d", handler, tid, pid)

	// The kernel read the pattern when the dump began: the host needs it
	// back now, not when the lab ends.
	if err := in.restorePattern(); err != nil {
		return err
	}
	in.logf("coredump: %s restored to %q", corePatternSysctl, in.origPattern)
	// The handler holds its lock file open: the directory can go, so that a
	// kill -9 of the lab from now on leaves nothing on disk.
	in.removeDir()
	return nil
}

// waitParked waits until every thread but the dumper sleeps in the exit
// path with PF_POSTCOREDUMP, at least minParked of them, and the dumper
// sleeps waiting for room in the pipe.
func (in *Instance) waitParked(ctx context.Context) error {
	c := in.crasher
	var victims []int
	var state byte
	err := lab.WaitFor(ctx, waitTimeout, fmt.Sprintf("the threads of pid %d to park in the exit path behind a dumper blocked on the pipe", c.pid), func() (bool, error) {
		all := tids(c.pid)
		if !slices.Contains(all, in.dumper) {
			return false, fmt.Errorf("dumping thread %d is not a thread of pid %d (threads %v)", in.dumper, c.pid, all)
		}
		victims, state = victims[:0], 0
		for _, tid := range all {
			if tid == in.dumper {
				continue
			}
			st, ok := readTaskStat(c.pid, tid)
			// I: TASK_IDLE since Linux 6.12; D before (see the package doc).
			// PF_POSTCOREDUMP since 5.16; before, a zapped thread parks in
			// exit_mm with only PF_EXITING.
			if !ok || st.Flags&(pfPostCoredump|pfExiting) == 0 || (st.State != 'I' && st.State != 'D') {
				return false, nil
			}
			victims, state = append(victims, tid), st.State
		}
		// The dumper is still filling the pipe right after the dump
		// starts: ready once it sleeps for room in it.
		d, ok := readTaskStat(c.pid, in.dumper)
		return len(victims) >= minParked && ok && d.State == 'S', nil
	})
	if err != nil {
		return fmt.Errorf("coredump: %w", err)
	}
	st, _ := readTaskStat(c.pid, in.dumper)
	in.mu.Lock()
	in.victims, in.victimSt, in.parkedAt = slices.Clone(victims), state, time.Now()
	in.mu.Unlock()
	in.logf("coredump: %d threads of pid %d parked in state %c with PF_POSTCOREDUMP behind thread %d (state %c, wchan %s)",
		len(victims), c.pid, state, in.dumper, st.State, wchan(c.pid, in.dumper))
	return nil
}

// restorePattern puts core_pattern back once; later calls do nothing. The
// original value is written whatever the current one is: someone who
// changed it meanwhile changed a value the lab owned.
func (in *Instance) restorePattern() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.restore == nil {
		return nil
	}
	if err := in.restore(); err != nil {
		return fmt.Errorf("coredump: restore core_pattern %q: %w", in.origPattern, err)
	}
	in.restore = nil
	if err := in.led.Done(lab.Sysctl(corePatternSysctl, in.pattern, in.origPattern)); err != nil {
		in.logf("coredump: %v", err)
	}
	return nil
}

func (in *Instance) removeDir() error {
	in.mu.Lock()
	dir := in.dir
	in.dir = ""
	in.mu.Unlock()
	if dir == "" {
		return nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("coredump: remove %s: %w", dir, err)
	}
	if err := in.led.Done(lab.Tree(dir)); err != nil {
		in.logf("coredump: %v", err)
	}
	return nil
}

// Release ends the stall: the handler reads the rest of the core, the dump
// completes, and the crasher exits. Close does it too.
func (in *Instance) Release() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.releaseLocked()
}

func (in *Instance) releaseLocked() {
	if in.lock == nil {
		return
	}
	// Closing the descriptor drops the flock.
	in.lock.Close()
	in.lock = nil
	in.released = true
}

// Process is the crasher's process id (thread group id): lab.Tasks holds its
// thread ids.
func (in *Instance) Process() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.crasher == nil {
		return 0
	}
	return in.crasher.pid
}

// Tasks: the dumping thread is the offender, the handler that does not read
// its pipe the daemon, the parked threads the victims (all thread ids of
// Process()).
func (in *Instance) Tasks() lab.Tasks {
	in.mu.Lock()
	defer in.mu.Unlock()
	return lab.Tasks{Offender: in.dumper, Daemon: in.handler, Victims: slices.Clone(in.victims)}
}

// Describe says what was set, who dumps and who waits.
func (in *Instance) Describe() string {
	pid := in.Process()
	t := in.Tasks()
	in.mu.Lock()
	state, parkedAt, released, closed := in.victimSt, in.parkedAt, in.released, in.closed
	in.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "coredump: %s was %q for one crash (back to %q once the dump had begun)\n",
		corePatternSysctl, in.pattern, in.origPattern)
	fmt.Fprintf(&b, "process %s pid %d crashed with SIGABRT (Go panic, GOTRACEBACK=crash); thread %d dumps its core into a pipe that the handler, pid %d, does not read",
		crasherComm, pid, t.Offender, t.Daemon)
	if !closed {
		fmt.Fprintf(&b, " (wchan %s)", wchan(pid, t.Offender))
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "%d other threads (tids %s) are parked in do_exit (coredump_task_exit) in state %c with PF_POSTCOREDUMP since %s",
		len(t.Victims), joinInts(t.Victims), state, parkedAt.Format(time.TimeOnly))
	if state == 'I' {
		b.WriteString(" (TASK_IDLE, Linux 6.12 and later: the hung-task detector skips them)")
	}
	b.WriteString("\n")
	switch {
	case closed:
		b.WriteString("closed: dump released, process gone, core_pattern restored")
	case released:
		b.WriteString("released: the handler drains the dump, the process exits")
	default:
		b.WriteString("it stays so until the lab ends; then the handler drains the dump and the process exits")
	}
	return b.String()
}

// Close restores core_pattern (first, whatever else fails), releases the
// handler, waits for the crasher to finish its dump and exit (killing it if
// it does not), waits for the handler to exit and removes the temp dir.
// Safe to call more than once and concurrently; later calls return the
// first call's result.
func (in *Instance) Close() error {
	in.closeOnce.Do(func() { in.closeErr = in.close() })
	return in.closeErr
}

func (in *Instance) close() error {
	var errs []error
	if err := in.restorePattern(); err != nil {
		errs = append(errs, err)
	}
	in.mu.Lock()
	in.closed = true
	in.releaseLocked()
	c := in.crasher
	in.mu.Unlock()

	if c != nil {
		// A crasher that has not crashed yet exits on EOF.
		c.stdin.Close()
		select {
		case <-c.done:
		case <-time.After(waitTimeout):
			// SIGKILL interrupts the dump (dump_interrupted) and ends
			// the process.
			_ = c.cmd.Process.Signal(syscall.SIGKILL)
			select {
			case <-c.done:
				errs = append(errs, fmt.Errorf("coredump: crasher pid %d still dumping %s after release; killed", c.pid, waitTimeout))
			case <-time.After(waitTimeout):
				errs = append(errs, fmt.Errorf("coredump: crasher pid %d not reaped %s after SIGKILL", c.pid, waitTimeout))
			}
		}
		if c.err != nil {
			in.logf("coredump: crasher pid %d ended: %v", c.pid, c.err)
		}
	}

	if err := in.waitHandler(); err != nil {
		errs = append(errs, err)
	}
	if err := in.removeDir(); err != nil {
		errs = append(errs, err)
	}
	if in.led != nil {
		if err := in.led.Close(); err != nil {
			errs = append(errs, fmt.Errorf("coredump: %w", err))
		}
	}
	return errors.Join(errs...)
}

// WhyRoot implements lab.Privileged.
func (coredumpLab) WhyRoot() string {
	return "sets kernel.core_pattern to a handler of its own for one crash"
}

// waitHandler waits for the handler to exit: it is the kernel's child (of
// kthreadd), not ours, so poll /proc. Once the dump is over its cat reads
// EOF at once.
func (in *Instance) waitHandler() error {
	in.mu.Lock()
	pid, start, dir := in.handler, in.handlerSt, in.dir
	in.mu.Unlock()
	if pid == 0 && dir != "" {
		// Start failed before the report was read; the handler may have
		// written it since.
		var p, t int
		if b, err := os.ReadFile(filepath.Join(dir, "report")); err == nil {
			if _, err := fmt.Sscan(string(b), &p, &t, &pid); err == nil {
				start, _ = processStart(pid)
			}
		}
	}
	if pid == 0 || start == 0 {
		return nil
	}
	err := lab.WaitFor(context.Background(), waitTimeout, fmt.Sprintf("handler pid %d to exit", pid), func() (bool, error) {
		return !alive(pid, start), nil
	})
	if err != nil {
		_ = unix.Kill(pid, unix.SIGKILL)
		return fmt.Errorf("coredump: %w; killed", err)
	}
	return nil
}

// capped keeps the first max bytes written to it and drops the rest.
type capped struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// head returns the first lines written, for error messages.
func (c *capped) head() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	lines := strings.SplitN(c.buf.String(), "\n", 4)
	return strings.TrimSpace(strings.Join(lines[:min(len(lines), 3)], " | "))
}

// Stalls implements lab.Stalling: the parked threads sleep in D for the
// lab's run on kernels before 6.12 (in TASK_IDLE since).
func (coredumpLab) Stalls() bool { return true }
