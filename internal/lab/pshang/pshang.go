// Package pshang is the lab for the "ps hangs" incident, with its stall
// already on when wolf starts: a process whose mmap_lock is held for
// reading by a thread asleep on a FUSE file's page, a writer queued
// behind it, and a /proc/PID/cmdline reader (what ps does) queued behind
// the writer. The three write-ups behind it: the ClickHouse story's ps
// hanging on /proc/PID/cmdline, Cloudflare's hung tasks whose offender is
// a reader of a reader-owned rw-semaphore, and the FOSDEM talk's
// rw-semaphore queue where one long reader stalls everyone through a
// waiting writer.
//
// What runs:
//   - the daemon: a goroutine of the lab's process serves a FUSE
//     filesystem (FUSE_ASYNC_READ, like libfuse) with one 4 MiB file and
//     parks every READ of it;
//   - the child (wolf-pshang), re-executed from this binary: thread
//     "memreader" maps the file and reads its own mapping through
//     /proc/self/mem. That read holds the child's mmap_lock for reading
//     (access_remote_vm) while get_user_pages faults the page in;
//     readahead sends a READ and the thread sleeps in D on the page's
//     folio lock (filemap_fault, uninterruptible: only the READ's reply or
//     the connection's abort ends it). Then thread "unmapper", told by
//     the lab once the READ is parked, calls munmap and queues as a writer
//     (D, killable);
//   - the reader (wolf-psreader) reads /proc/CHILD/cmdline: a reader
//     queued behind the writer, in D.
//
// Bounded: the daemon aborts the connection StallMax (at most 50 s) after
// the READ was parked, whatever else happens; Close aborts it first (so
// the folio is unlocked and every sleeper wakes), then kills and reaps
// the processes, unmounts and removes the mount point. If the lab's
// process dies, its /dev/fuse closes and the kernel aborts the connection
// itself; the children die with it (Pdeathsig). A killed lab leaves the
// dead mount on /tmp/wolf-pshang-*: the next Start unmounts and removes it.
package pshang

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/lab/labproc"
	"github.com/wolf-investigator/wolf/internal/testslock"
)

// Lab names and defaults.
const (
	Name       = "ps-hang-fuse"
	childComm  = "wolf-pshang"
	childPart  = "pshang-child"
	dirPrefix  = "wolf-pshang-"
	fsType     = "fuse.wolflab"
	stepTime   = 30 * time.Second
	maxStall   = 50 * time.Second
	childLife  = 10 * time.Minute
	readerPoll = 20 * time.Millisecond
)

// Config sizes the lab.
type Config struct {
	// StallMax is how long the READ stays parked at most, whatever the
	// lab's caller does: the daemon aborts the connection then. Capped
	// at 50 s, so that no task stays in D a minute.
	StallMax time.Duration
	// Readers is how many /proc/PID/cmdline readers queue (default 1).
	Readers int
}

type psLab struct{ cfg Config }

// New returns the lab.
func New() lab.Lab { return psLab{} }

// NewWithConfig returns the lab with cfg.
func NewWithConfig(cfg Config) lab.Lab { return psLab{cfg} }

func (psLab) Name() string { return Name }

func (psLab) Summary() string {
	return "ps hangs: a thread holds its mmap_lock for reading while it waits on a FUSE page, a writer queues, /proc/PID/cmdline readers hang behind"
}

// Instance is the running lab.
type Instance struct {
	cfg  Config
	logf func(string, ...any)

	dir     string
	dev     string
	fd      int
	mounted bool
	srv     *server

	child   *labproc.Child
	goPipe  *os.File // the unmapper's word: one byte and it munmaps
	readers []*labproc.PSReader
	tids    map[string]int // memreader, unmapper

	mu        sync.Mutex
	aborted   bool
	parkedAt  time.Time
	closeOnce sync.Once
	closeErr  error
	watchdog  *time.Timer
}

// Start implements lab.Lab.
func (l psLab) Start(ctx context.Context, opt lab.Options) (_ lab.Instance, err error) {
	if err := testslock.Check("lab " + l.Name()); err != nil {
		return nil, err
	}
	cfg := l.cfg
	if cfg.StallMax <= 0 || cfg.StallMax > maxStall {
		cfg.StallMax = maxStall
	}
	if cfg.Readers <= 0 {
		cfg.Readers = 1
	}
	if opt.Victims > 0 {
		cfg.Readers = min(opt.Victims, 8)
	}
	logf := opt.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	in := &Instance{cfg: cfg, logf: logf, fd: -1, tids: map[string]int{}}
	defer func() {
		if err != nil {
			err = errors.Join(err, in.Close())
		}
	}()
	sweep(logf)
	if err := in.mount(ctx); err != nil {
		return nil, err
	}
	if err := in.startChild(ctx); err != nil {
		return nil, err
	}
	if err := in.stall(ctx); err != nil {
		return nil, err
	}
	return in, nil
}

func (in *Instance) mount(ctx context.Context) error {
	dir, err := os.MkdirTemp("", dirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return fmt.Errorf("pshang: mount point: %w", err)
	}
	in.dir = dir
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("pshang: open /dev/fuse: %w", err)
	}
	in.fd = fd
	in.srv = newServer(fd, in.logf)
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other", fd)
	if err := unix.Mount("wolf-lab", dir, fsType, unix.MS_NOSUID|unix.MS_NODEV|unix.MS_RDONLY, opts); err != nil {
		return fmt.Errorf("pshang: mount %s: %w", dir, err)
	}
	in.mounted = true
	// Serve before touching the mount: anything that reaches it (a
	// stat) waits for INIT, which only the daemon answers.
	go in.srv.serve()
	select {
	case err := <-in.srv.initDone:
		if err != nil {
			return fmt.Errorf("pshang: FUSE INIT: %w", err)
		}
	case <-ctx.Done():
		return fmt.Errorf("pshang: FUSE INIT: %w", ctx.Err())
	case <-time.After(stepTime):
		return fmt.Errorf("pshang: FUSE INIT: %w after %s", lab.ErrTimeout, stepTime)
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err == nil {
		in.dev = fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	}
	in.logf("pshang: FUSE filesystem at %s (device %s)", dir, in.dev)
	return nil
}

func (in *Instance) startChild(ctx context.Context) error {
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("pshang: %w", err)
	}
	in.goPipe = w
	c, err := labproc.Start(labproc.Spec{Part: childPart, Name: childComm, Arg: filepath.Join(in.dir, fileName), MaxLife: childLife, ExtraFiles: []*os.File{r}})
	_ = r.Close() // the child's now: its end alone tells the unmapper we are gone
	if err != nil {
		return fmt.Errorf("pshang: %w", err)
	}
	in.child = c
	l, err := c.WaitLine(ctx, "ready", stepTime)
	if err != nil {
		return fmt.Errorf("pshang: %w", err)
	}
	for _, kv := range strings.Fields(l)[1:] {
		k, v, _ := strings.Cut(kv, "=")
		if n, err := strconv.Atoi(v); err == nil {
			in.tids[k] = n
		}
	}
	if in.tids["memreader"] == 0 || in.tids["unmapper"] == 0 {
		return fmt.Errorf("pshang: child said %q", l)
	}
	return nil
}

// stall puts the chain in place, one link at a time, each checked.
func (in *Instance) stall(ctx context.Context) error {
	pid := in.child.PID()
	if err := in.child.Send("read"); err != nil {
		return err
	}
	// 1. The memreader's READ reaches the daemon and is parked.
	select {
	case p := <-in.srv.reads:
		in.mu.Lock()
		in.parkedAt = p.since
		in.watchdog = time.AfterFunc(in.cfg.StallMax, func() {
			in.logf("pshang: watchdog: the READ has been parked %s, aborting the connection", in.cfg.StallMax)
			in.abort()
		})
		in.mu.Unlock()
		if p.pid != in.tids["memreader"] {
			in.logf("pshang: READ parked for tid %d, expected the memreader %d", p.pid, in.tids["memreader"])
		}
	case <-in.child.Done():
		return fmt.Errorf("pshang: the child exited before its READ reached the daemon")
	case <-ctx.Done():
		return fmt.Errorf("pshang: waiting for the READ: %w", ctx.Err())
	case <-time.After(stepTime):
		return fmt.Errorf("pshang: waiting for the READ: %w after %s", lab.ErrTimeout, stepTime)
	}
	if err := in.waitD(ctx, pid, in.tids["memreader"], "the memreader to sleep on the folio"); err != nil {
		return err
	}
	// 2. The writer queues behind it: the unmapper, armed in the child
	// before the memreader read, munmaps at our word (see child.go).
	if _, err := in.goPipe.Write([]byte{'g'}); err != nil {
		return fmt.Errorf("pshang: telling the unmapper to go: %w", err)
	}
	if err := in.waitD(ctx, pid, in.tids["unmapper"], "the unmapper to queue for the mmap_lock"); err != nil {
		return err
	}
	// 3. ps-like readers queue behind the writer.
	for range in.cfg.Readers {
		r, err := labproc.StartPSReader(ctx, pid, readerPoll, childLife)
		if err != nil {
			return fmt.Errorf("pshang: %w", err)
		}
		in.readers = append(in.readers, r)
		if err := in.waitD(ctx, r.PID(), r.PID(), "the cmdline reader to queue behind the writer"); err != nil {
			return err
		}
	}
	in.logf("pshang: %s", in.Describe())
	return nil
}

// waitD waits until a thread sleeps in D.
func (in *Instance) waitD(ctx context.Context, pid, tid int, what string) error {
	err := lab.WaitFor(ctx, stepTime, what, func() (bool, error) {
		in.mu.Lock()
		aborted := in.aborted
		in.mu.Unlock()
		if aborted {
			// Nothing will block any more: say so now, not at the
			// step's timeout.
			return false, fmt.Errorf("the stall ended before the chain was in place: the watchdog aborted the READ after %s (StallMax); set-up on this machine needs a longer StallMax", in.cfg.StallMax)
		}
		st := labproc.ThreadState(pid, tid)
		if st == 0 || st == 'Z' {
			return false, fmt.Errorf("tid %d exited", tid)
		}
		return st == 'D', nil
	})
	if err != nil {
		return fmt.Errorf("pshang: %w (state %c, wchan %s)", err, labproc.ThreadState(pid, tid), labproc.Wchan(pid, tid))
	}
	return nil
}

// Tasks implements lab.Instance: the memreader holds the lock (offender),
// the daemon is this process, the writer and the readers are victims.
func (in *Instance) Tasks() lab.Tasks {
	t := lab.Tasks{Offender: in.tids["memreader"], Daemon: os.Getpid(), Victims: []int{in.tids["unmapper"]}}
	for _, r := range in.readers {
		t.Victims = append(t.Victims, r.PID())
	}
	return t
}

// PID is the child whose mmap_lock is held.
func (in *Instance) PID() int { return in.child.PID() }

// TID returns a child thread's tid by role: memreader or unmapper.
func (in *Instance) TID(role string) int { return in.tids[role] }

// Readers are the /proc/PID/cmdline readers' pids.
func (in *Instance) Readers() []int {
	var out []int
	for _, r := range in.readers {
		out = append(out, r.PID())
	}
	return out
}

// Describe implements lab.Instance.
func (in *Instance) Describe() string {
	t := in.Tasks()
	return fmt.Sprintf("%s: FUSE filesystem at %s served by this process (pid %d)\n"+
		"child %s pid %d: memreader tid %d holds its mmap_lock for reading, asleep (D) on a folio its READ is filling; unmapper tid %d queued as a writer\n"+
		"cmdline readers %v queued behind the writer\n"+
		"the daemon aborts the connection %s after the READ was parked at the latest",
		Name, in.dir, t.Daemon, childComm, in.PID(), in.tids["memreader"], in.tids["unmapper"], in.Readers(), in.cfg.StallMax)
}

// Release answers the parked READ, as a daemon coming back to life would:
// the memreader's fault completes, it drops the lock, and the writer and
// the readers go through one after the other. The lab stays up until
// Close.
func (in *Instance) Release() {
	in.mu.Lock()
	if in.watchdog != nil {
		in.watchdog.Stop()
	}
	in.mu.Unlock()
	in.srv.release()
}

// abort ends every request on the connection: the parked READ fails, its
// folio is unlocked, and every task in the chain runs again.
func (in *Instance) abort() {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.aborted || !in.mounted {
		return
	}
	in.aborted = true
	if in.dev != "" {
		var ma, mi uint64
		if _, err := fmt.Sscanf(in.dev, "%d:%d", &ma, &mi); err == nil {
			_ = os.WriteFile(fmt.Sprintf("/sys/fs/fuse/connections/%d/abort", ma<<20|mi), []byte("1"), 0)
		}
	}
	// Always also a forced unmount: fuse_umount_begin aborts the
	// connection whether or not fusectl is mounted.
	if err := unix.Unmount(in.dir, unix.MNT_FORCE); err == nil {
		in.mounted = false
	}
}

// Close implements lab.Instance.
func (in *Instance) Close() error {
	in.closeOnce.Do(func() { in.closeErr = in.close() })
	return in.closeErr
}

func (in *Instance) close() error {
	var errs []error
	in.mu.Lock()
	if in.watchdog != nil {
		in.watchdog.Stop()
	}
	in.mu.Unlock()
	// The connection first: nothing else can wake the memreader.
	in.abort()
	for _, r := range in.readers {
		if err := r.Close(time.Second, 10*time.Second); err != nil {
			errs = append(errs, fmt.Errorf("pshang: %w", err))
		}
	}
	if in.goPipe != nil {
		_ = in.goPipe.Close()
	}
	if in.child != nil {
		if err := in.child.Close(2*time.Second, 10*time.Second); err != nil {
			errs = append(errs, fmt.Errorf("pshang: %w", err))
		}
	}
	in.mu.Lock()
	mounted := in.mounted
	in.mu.Unlock()
	if mounted {
		if err := unix.Unmount(in.dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("pshang: umount %s: %w", in.dir, err))
		}
	}
	if in.srv != nil && in.fd >= 0 {
		select {
		case <-in.srv.done:
			in.srv.stopWrites()
			_ = unix.Close(in.fd)
			in.fd = -1
		case <-time.After(10 * time.Second):
			errs = append(errs, fmt.Errorf("pshang: daemon still reading /dev/fuse 10 s after the abort; leaving fd %d open", in.fd))
		}
	} else if in.fd >= 0 {
		_ = unix.Close(in.fd)
	}
	if in.dir != "" {
		if err := os.Remove(in.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("pshang: %w", err))
		}
	}
	return errors.Join(errs...)
}

// sweep removes the dead mounts and mount points of labs that were killed.
func sweep(logf func(string, ...any)) {
	ents, _ := os.ReadDir(os.TempDir())
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), dirPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pid, _, _ := strings.Cut(rest, "-")
		if n, err := strconv.Atoi(pid); err != nil || n == os.Getpid() || unix.Kill(n, 0) != unix.ESRCH {
			continue
		}
		dir := filepath.Join(os.TempDir(), e.Name())
		_ = unix.Unmount(dir, unix.MNT_DETACH)
		if err := os.Remove(dir); err == nil {
			logf("pshang: removed %s, left by a lab that was killed", dir)
		}
	}
}
