// Package fusestall is the lab for hung tasks behind a stalled FUSE daemon:
// the case where the kernel's hung-task report names the victims, while the
// culprit is a task that holds a lock and sleeps, interruptibly and so
// unreported, waiting for a userspace daemon that never answers.
//
// The lab serves a tiny FUSE filesystem itself: it speaks the FUSE wire
// protocol on /dev/fuse from a goroutine of its own process (no libfuse, no
// fusermount), so the "daemon" is this process. The filesystem is a root
// directory with one regular file, data. Some requests are parked (read,
// never answered) until Release or Close:
//
//   - fuse-rwsem parks WRITE requests to data. The offender, a shell doing
//     `echo >> data`, sends its WRITE from fuse_perform_write while
//     fuse_cache_write_iter holds the file's i_rwsem (inode_lock). Victims,
//     more writers of the same file, block in D state in
//     rwsem_down_write_slowpath. OPEN replies carry FOPEN_KEEP_CACHE, or
//     the victims would stall earlier, at open(2), on the page-cache folio
//     the offender keeps locked during its WRITE.
//   - fuse-mutex parks LOOKUP requests of names starting with "stall". The
//     INIT reply does not grant FUSE_PARALLEL_DIROPS, so fuse_lookup holds
//     the directory's fuse_inode mutex (fuse_lock_inode) across the LOOKUP.
//     The offender stats stall-0; victims stat stall-1, stall-2, ... and
//     block in D state in __mutex_lock.
//
// Observed on 6.18 (hung-task detector report, which prints full stacks and,
// with CONFIG_DETECT_HUNG_TASK_BLOCKER, "blocked on an rw-semaphore / a
// mutex likely owned by task sh:<offender>"):
// rwsem victims sleep in rwsem_down_write_slowpath < down_write <
// fuse_file_write_iter (fuse_cache_write_iter is inlined there); mutex
// victims in __mutex_lock < fuse_lock_inode < fuse_lookup < __lookup_slow;
// offenders in request_wait_answer < __fuse_simple_request <
// fuse_perform_write (resp. fuse_lookup_name < fuse_lookup), in state S.
// /proc/PID/stack and wchan omit __sched functions, so there the innermost
// frame is the lock's caller (fuse_file_write_iter, fuse_lock_inode).
//
// Cleanup aborts the FUSE connection first (every parked request then fails
// and every sleeper wakes), then kills and reaps the children, lazily
// unmounts and removes the mount point.
//
// What a kill -9 of the lab process leaves behind (verified on 6.18): the
// children die with it (Pdeathsig SIGKILL; init reaps them). The kernel
// closes our /dev/fuse descriptor, which aborts the connection
// (fuse_dev_release), so nothing stays blocked. But nobody unmounts: a dead
// "fuse.wolflab" mount (source "wolf-lab") stays on its
// /tmp/wolf-fusestall-PID-* directory, and every access to it fails at once
// with ENOTCONN ("Transport endpoint is not connected"). The lab records
// the directory and the mount in its ledger (lab.Ledger) before making
// them, so the next lab to start, or `wolf lab clean`, unmounts and removes
// them once the lab's pid is dead. TestKill9 checks this.
package fusestall

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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
	"golang.org/x/sys/unix"
)

type kind int

const (
	kindRWSem kind = iota
	kindMutex
)

// DefaultVictims is how many victims Start blocks when Options.Victims is 0.
const DefaultVictims = 2

const (
	fsType      = "fuse.wolflab" // "fuse" with subtype "wolflab"
	mountSource = "wolf-lab"
	shell       = "/bin/sh"
)

// mountBase is where mount points are made ("" means os.TempDir()); tests
// point it at a directory of their own.
var mountBase string

type fuseLab struct{ kind kind }

// NewRWSem returns the fuse-rwsem lab: writers hang in D on a FUSE file's
// i_rwsem, held by a writer whose WRITE the daemon never answers.
func NewRWSem() lab.Lab { return fuseLab{kindRWSem} }

// NewMutex returns the fuse-mutex lab: lookups hang in D on a FUSE
// directory's inode mutex, held by a lookup the daemon never answers.
func NewMutex() lab.Lab { return fuseLab{kindMutex} }

func (l fuseLab) Name() string {
	if l.kind == kindMutex {
		return "fuse-mutex"
	}
	return "fuse-rwsem"
}

func (l fuseLab) Summary() string {
	if l.kind == kindMutex {
		return "lookups hang in D on a FUSE directory's inode mutex held by a lookup waiting on a stalled FUSE daemon"
	}
	return "writers hang in D on a FUSE file's i_rwsem held by a writer waiting on a stalled FUSE daemon"
}

// Instance is a running fuse-rwsem or fuse-mutex lab. Start returns it as a
// lab.Instance; type-assert to *Instance for AddVictims, Release and
// MountPoint.
type Instance struct {
	name string
	kind kind
	logf func(string, ...any)

	dir     string // temp dir, also the mount point
	dev     string // "major:minor" of the mount, for fusectl and Describe
	fd      int    // /dev/fuse, -1 when not open
	mounted bool
	led     *lab.Ledger // the dir and the mount, for a kill -9
	srv     *server
	serving bool

	mu         sync.Mutex
	closed     bool
	released   bool
	offender   *child
	offReq     parkedReq // the offender's parked request
	victims    []*child
	children   []*child // offender and victims, in start order
	nextVictim int

	closeOnce sync.Once
	closeErr  error
}

type child struct {
	role   string
	cmd    *exec.Cmd
	pid    int
	stderr bytes.Buffer
	done   chan struct{} // closed once reaped
	err    error         // from Wait, valid after done
}

// Start mounts the filesystem, starts the offender and waits until its
// request is parked at the daemon, then starts the victims and waits until
// each sleeps in D on the lock the offender holds.
func (l fuseLab) Start(ctx context.Context, opt lab.Options) (_ lab.Instance, err error) {
	n := opt.Victims
	if n < 0 {
		return nil, fmt.Errorf("fusestall: %d victims", n)
	}
	if n == 0 {
		n = DefaultVictims
	}
	logf := opt.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	in := &Instance{name: l.Name(), kind: l.kind, logf: logf, fd: -1}
	defer func() {
		if err != nil {
			if cerr := in.Close(); cerr != nil {
				err = errors.Join(err, cerr)
			}
		}
	}()
	if err := in.mount(ctx); err != nil {
		return nil, err
	}
	if err := in.startOffender(ctx); err != nil {
		return nil, err
	}
	if _, err := in.addVictims(ctx, n); err != nil {
		return nil, err
	}
	return in, nil
}

func (in *Instance) mount(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("fusestall: start: %w", err)
	}
	led, err := lab.NewLedger(in.name, in.logf)
	if err != nil {
		return fmt.Errorf("fusestall: %w", err)
	}
	in.led = led
	base := mountBase
	if base == "" {
		base = os.TempDir()
	}
	dir := filepath.Join(base, lab.Name("fusestall"))
	if err := led.Add(lab.Dir(dir)); err != nil {
		return fmt.Errorf("fusestall: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		_ = led.Done(lab.Dir(dir))
		return fmt.Errorf("fusestall: mount point: %w", err)
	}
	in.dir = dir
	// O_CLOEXEC: the children must not hold the connection open.
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("fusestall: open /dev/fuse: %w", err)
	}
	in.fd = fd
	in.srv = newServer(fd, in.kind, in.logf)
	// allow_other: the children are root like us, but a person poking at
	// the mount with sudo from elsewhere should see the same thing.
	// No default_permissions: the kernel leaves permission checks to the
	// daemon (which allows everything), so no extra GETATTRs.
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other", fd)
	if err := led.Add(in.mountItem()); err != nil {
		return fmt.Errorf("fusestall: %w", err)
	}
	if err := unix.Mount(mountSource, dir, fsType, unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("fusestall: mount %s: %w", dir, err)
	}
	in.mounted = true
	in.dev = mountDev(ctx, dir)
	// The kernel queued INIT at mount time; reading before the mount would
	// fail (the device is not yet bound to a connection).
	in.serving = true
	go in.srv.serve()
	select {
	case <-in.srv.initDone:
	case <-ctx.Done():
		return fmt.Errorf("fusestall: waiting for FUSE INIT: %w", ctx.Err())
	case <-time.After(lab.Scaled(waitTimeout)):
		return fmt.Errorf("fusestall: waiting for FUSE INIT: %w after %s", errTimeout, lab.Scaled(waitTimeout))
	}
	if in.srv.initErr != nil {
		return fmt.Errorf("fusestall: FUSE INIT: %w", in.srv.initErr)
	}
	in.logf("fusestall: %s mounted at %s (device %s)", fsType, dir, in.dev)
	return nil
}

func (in *Instance) mountItem() lab.Item { return lab.Mount(in.dir, fsType, mountSource) }

// script returns the shell script and its argument for a task of the lab;
// victim numbers start at 1.
func (in *Instance) script(victim int) (script, arg string) {
	if in.kind == kindMutex {
		// test -e is a dash builtin: one stat(2), one LOOKUP.
		return `test -e "$0"`, filepath.Join(in.dir, stallPrefix+"-"+strconv.Itoa(victim))
	}
	// dash opens with O_WRONLY|O_CREAT|O_APPEND and writes once.
	role := "offender"
	if victim > 0 {
		role = "victim"
	}
	return `echo ` + role + ` >> "$0"`, filepath.Join(in.dir, dataName)
}

func (in *Instance) startOffender(ctx context.Context) error {
	script, arg := in.script(0)
	c, err := in.spawn(ctx, "offender", script, arg)
	if err != nil {
		return err
	}
	in.mu.Lock()
	in.offender = c
	in.mu.Unlock()

	// Wait for the daemon to receive the offender's request: from then on
	// the lock is held (it is taken before the request is sent).
	p, err := in.waitParked(ctx, c)
	if err != nil {
		return err
	}
	in.mu.Lock()
	in.offReq = p
	in.mu.Unlock()
	// Then for it to fall asleep in request_wait_answer (S: fuse waits
	// interruptibly first).
	err = lab.WaitFor(ctx, waitTimeout, "the offender to sleep", func() (bool, error) {
		st := taskState(c.pid)
		if st == 0 || st == 'Z' {
			return false, fmt.Errorf("offender pid %d exited", c.pid)
		}
		return st == 'S' || st == 'D', nil
	})
	if err != nil {
		return fmt.Errorf("fusestall: %w", err)
	}
	in.logf("fusestall: offender %s pid %d waits for the daemon (%s); wchan %s",
		comm(c.pid), c.pid, opName(in.offReq.Op), wchan(c.pid))
	return nil
}

// waitParked waits for the daemon to park a request from c.
func (in *Instance) waitParked(ctx context.Context, c *child) (parkedReq, error) {
	deadline := time.After(lab.Scaled(waitTimeout))
	for {
		select {
		case p := <-in.srv.stalls:
			if p.PID == c.pid {
				return p, nil
			}
			in.logf("fusestall: request parked for pid %d, not the offender %d", p.PID, c.pid)
		case <-c.done:
			return parkedReq{}, fmt.Errorf("fusestall: offender pid %d exited before its request reached the daemon: %v %s",
				c.pid, c.err, strings.TrimSpace(c.stderr.String()))
		case <-ctx.Done():
			return parkedReq{}, fmt.Errorf("fusestall: waiting for the offender's request: %w", ctx.Err())
		case <-deadline:
			return parkedReq{}, fmt.Errorf("fusestall: waiting for the offender's request: %w after %s", errTimeout, lab.Scaled(waitTimeout))
		}
	}
}

// victimFrames are the functions a blocked victim may sleep in, as procfs
// shows it. /proc/PID/stack and wchan leave out __sched functions
// (stack_trace_save_tsk filters them), so the lock's own slow path
// (rwsem_down_write_slowpath, __mutex_lock) never appears there: the
// innermost frame is the caller that took the lock. fuse_cache_write_iter
// (which the compiler may inline into fuse_file_write_iter, as on 6.18)
// sleeps uninterruptibly only in inode_lock, a down_write of i_rwsem;
// fuse_lock_inode only in mutex_lock.
func (in *Instance) victimFrames() []string {
	if in.kind == kindMutex {
		return []string{"fuse_lock_inode"}
	}
	// The write path takes the inode lock; on 5.10 the victim's write
	// returns and its close blocks on the same lock in fuse_flush.
	return []string{"fuse_cache_write_iter", "fuse_file_write_iter", "fuse_flush"}
}

// AddVictims starts n more victims and returns their pids once each sleeps
// in D behind the offender. It fails after Release or Close.
func (in *Instance) AddVictims(n int) ([]int, error) {
	return in.addVictims(context.Background(), n)
}

func (in *Instance) addVictims(ctx context.Context, n int) ([]int, error) {
	in.mu.Lock()
	released := in.released
	in.mu.Unlock()
	if released {
		return nil, errors.New("fusestall: add victims: released, nothing would block")
	}
	var pids []int
	for range n {
		in.mu.Lock()
		in.nextVictim++
		num := in.nextVictim
		in.mu.Unlock()
		script, arg := in.script(num)
		c, err := in.spawn(ctx, "victim", script, arg)
		if err != nil {
			return pids, err
		}
		in.mu.Lock()
		in.victims = append(in.victims, c)
		in.mu.Unlock()
		frames := in.victimFrames()
		err = lab.WaitFor(ctx, waitTimeout, fmt.Sprintf("victim pid %d to block in D in %s", c.pid, strings.Join(frames, " or ")), func() (bool, error) {
			select {
			case <-c.done:
				return false, fmt.Errorf("victim exited: %v %s", c.err, strings.TrimSpace(c.stderr.String()))
			default:
			}
			if taskState(c.pid) != 'D' {
				return false, nil
			}
			// D alone could be a page fault during exec, or another
			// lock; the innermost frame says it is ours. Without
			// /proc/PID/stack (CONFIG_STACKTRACE=n) wchan says the same.
			if fns := waitFrames(stackFuncs(c.pid)); len(fns) > 0 {
				return slices.Contains(frames, fns[0]), nil
			}
			return slices.Contains(frames, wchan(c.pid)), nil
		})
		if err != nil {
			return pids, fmt.Errorf("fusestall: %w (state %c, wchan %s, stack %s)",
				err, taskState(c.pid), wchan(c.pid), strings.Join(stackFuncs(c.pid), " < "))
		}
		in.logf("fusestall: victim %s pid %d in D, wchan %s", comm(c.pid), c.pid, wchan(c.pid))
		pids = append(pids, c.pid)
	}
	return pids, nil
}

// spawn starts a child shell. Children die with the lab (Pdeathsig). Caveat
// of Pdeathsig: it fires when the forking *thread* exits; Go threads only
// exit when a goroutine locked to one ends without unlocking, so don't call
// Start or AddVictims from such a goroutine.
func (in *Instance) spawn(ctx context.Context, role, script, arg string) (*child, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("fusestall: start %s: %w", role, err)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return nil, fmt.Errorf("fusestall: start %s: lab closed", role)
	}
	c := &child{role: role, done: make(chan struct{})}
	cmd := exec.Command(shell, "-c", script, arg)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}
	cmd.Stderr = &c.stderr
	cmd.WaitDelay = time.Second
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("fusestall: start %s: %w", role, err)
	}
	c.cmd, c.pid = cmd, cmd.Process.Pid
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	in.children = append(in.children, c)
	return c, nil
}

// Release answers every parked request and stops parking new ones: the
// offender's operation completes, it drops its lock, and the victims go
// through one after the other. The children then exit on their own.
func (in *Instance) Release() {
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return
	}
	in.released = true
	in.mu.Unlock()
	in.srv.release()
}

// MountPoint is where the lab's filesystem is mounted.
func (in *Instance) MountPoint() string { return in.dir }

// Tasks: the offender, the daemon (this process: a goroutine of ours reads
// /dev/fuse) and the victims.
func (in *Instance) Tasks() lab.Tasks {
	in.mu.Lock()
	defer in.mu.Unlock()
	t := lab.Tasks{Daemon: os.Getpid()}
	if in.offender != nil {
		t.Offender = in.offender.pid
	}
	for _, v := range in.victims {
		t.Victims = append(t.Victims, v.pid)
	}
	return t
}

// Describe says who holds what and who waits.
func (in *Instance) Describe() string {
	t := in.Tasks()
	in.mu.Lock()
	req, released, closed := in.offReq, in.released, in.closed
	in.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "%s: FUSE filesystem %s at %s (device %s), served by this process pid %d (thread %d reads /dev/fuse)\n",
		in.name, fsType, in.dir, in.dev, t.Daemon, in.srv.tid.Load())
	what, frame := "the i_rwsem of "+filepath.Join(in.dir, dataName)+" (inode_lock in fuse_cache_write_iter)",
		"rwsem_down_write_slowpath (procfs shows fuse_file_write_iter)"
	if in.kind == kindMutex {
		what, frame = "the fuse_inode mutex of directory "+in.dir+" (fuse_lock_inode in fuse_lookup)",
			"__mutex_lock (procfs shows fuse_lock_inode)"
	}
	detail := opName(req.Op)
	if req.Op == opLookup {
		detail += " " + strconv.Quote(req.Name)
	}
	fmt.Fprintf(&b, "offender: %s pid %d holds %s and sleeps in request_wait_answer on %s, parked by the daemon since %s\n",
		comm(t.Offender), t.Offender, what, detail, req.Since.Format(time.TimeOnly))
	fmt.Fprintf(&b, "victims: pids %s block in D in %s on that lock\n", joinInts(t.Victims), frame)
	switch {
	case closed:
		b.WriteString("closed: connection aborted, tasks killed, mount removed")
	case released:
		b.WriteString("released: parked requests answered, tasks drain")
	default:
		b.WriteString("it stays so until the lab ends; then the connection is aborted and everything removed")
	}
	return b.String()
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}

// Close aborts the FUSE connection, kills and reaps the children, unmounts
// and removes the mount point. Safe to call more than once and
// concurrently; later calls return the first call's result.
func (in *Instance) Close() error {
	in.closeOnce.Do(func() { in.closeErr = in.close() })
	return in.closeErr
}

func (in *Instance) close() error {
	in.mu.Lock()
	in.closed = true
	kids := slices.Clone(in.children)
	in.mu.Unlock()
	var errs []error

	// 1. Abort the connection, so that every parked request ends
	// (ECONNABORTED), its sender wakes and drops its lock, and whatever
	// comes next fails with ENOTCONN instead of waiting. fusectl's abort
	// file does it when /sys/fs/fuse/connections is mounted; umount with
	// MNT_FORCE always does (fuse_umount_begin calls fuse_abort_conn), and
	// if nothing holds the mount open, unmounts it too.
	if in.mounted {
		if in.dev != "" {
			in.fusectlAbort()
		}
		switch err := unix.Unmount(in.dir, unix.MNT_FORCE); {
		case err == nil:
			in.mounted = false
			in.done(in.mountItem())
		case errors.Is(err, unix.EBUSY): // children still hold files: aborted, not unmounted
		default:
			errs = append(errs, fmt.Errorf("fusestall: abort %s (umount MNT_FORCE): %w", in.dir, err))
		}
	}

	// 2. Kill and reap the children. After the abort none of them waits
	// for the daemon any more, so SIGKILL takes effect at once.
	for _, c := range kids {
		_ = c.cmd.Process.Signal(syscall.SIGKILL) // ErrProcessDone if already reaped
	}
	deadline := time.After(waitTimeout)
	for _, c := range kids {
		select {
		case <-c.done:
		case <-deadline:
			errs = append(errs, fmt.Errorf("fusestall: %s pid %d not reaped %s after SIGKILL (state %c, wchan %s)",
				c.role, c.pid, waitTimeout, taskState(c.pid), wchan(c.pid)))
		}
	}

	// 3. Detach the mount (lazily: it is gone from the namespace now and
	// from the kernel once the last reference drops).
	if in.mounted {
		if err := unix.Unmount(in.dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("fusestall: umount %s: %w", in.dir, err))
		} else {
			in.mounted = false
			in.done(in.mountItem())
		}
	}

	// 4. The reader returns once the connection is gone (ENODEV). Only
	// then may the descriptor be closed: closing it under a blocked read
	// would let the number be reused and read from something else.
	readerDone := true
	if in.serving {
		select {
		case <-in.srv.done:
			if in.srv.readErr != nil {
				errs = append(errs, fmt.Errorf("fusestall: daemon: %w", in.srv.readErr))
			}
		case <-time.After(waitTimeout):
			readerDone = false
			errs = append(errs, fmt.Errorf("fusestall: daemon reader still blocked on /dev/fuse %s after abort; leaking fd %d", waitTimeout, in.fd))
		}
	}
	if in.srv != nil {
		in.srv.stopWrites()
	}
	if in.fd >= 0 && readerDone {
		if err := unix.Close(in.fd); err != nil {
			errs = append(errs, fmt.Errorf("fusestall: close /dev/fuse: %w", err))
		}
		in.fd = -1
	}

	// 5. The mount point.
	if in.dir != "" && !in.mounted {
		if err := os.Remove(in.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("fusestall: remove %s: %w", in.dir, err))
		} else {
			in.done(lab.Dir(in.dir))
		}
	}
	if in.led != nil {
		if in.dir != "" && !in.mounted {
			// Never mounted (Start failed before): nothing to unmount.
			in.done(in.mountItem())
		}
		if err := in.led.Close(); err != nil {
			errs = append(errs, fmt.Errorf("fusestall: %w", err))
		}
	}
	return errors.Join(errs...)
}

// done records in the ledger that it is undone.
func (in *Instance) done(it lab.Item) {
	if in.led != nil {
		if err := in.led.Done(it); err != nil {
			in.logf("fusestall: %v", err)
		}
	}
}

// WhyRoot implements lab.Privileged.
func (fuseLab) WhyRoot() string { return "mounts a FUSE file system that it serves itself" }

// fusectlAbort writes to /sys/fs/fuse/connections/N/abort if fusectl is
// mounted; N is the kernel's dev_t of the mount (MKDEV: major<<20|minor).
func (in *Instance) fusectlAbort() {
	maj, minor, ok := strings.Cut(in.dev, ":")
	if !ok {
		return
	}
	ma, err1 := strconv.ParseUint(maj, 10, 32)
	mi, err2 := strconv.ParseUint(minor, 10, 32)
	if err1 != nil || err2 != nil {
		return
	}
	p := fmt.Sprintf("/sys/fs/fuse/connections/%d/abort", ma<<20|mi)
	if err := os.WriteFile(p, []byte("1"), 0); err == nil {
		in.logf("fusestall: aborted connection via %s", p)
	}
}

// Stalls implements lab.Stalling: the victims sleep in D for the lab's run.
func (fuseLab) Stalls() bool { return true }
