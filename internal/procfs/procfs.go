// Package procfs reads /proc without ever hanging wolf.
//
// wolf runs on sick hosts, where a read of /proc can block for minutes:
// /proc/PID/cmdline, environ, maps and smaps take the target's mmap_lock
// (ClickHouse's "The case of the vanishing CPU": `ps` hung exactly there behind a reclaim livelock), and
// /proc/PID/task/TID/stack takes exec_update_lock. So every read here runs
// with a per-call timeout, and this package offers no synchronous reader for
// the mmap_lock files at all: the command line is only available through
// CmdlineIfNotStuck, which first checks that no thread of the target is in
// uninterruptible sleep.
//
// The price of never hanging is an abandoned goroutine. A read() blocked in
// the kernel cannot be interrupted from user space, so when the timeout
// fires the caller gets ErrTimeout and the goroutine (and the OS thread it
// is blocked on) stays behind until the kernel lets go. Those goroutines are
// bounded: at most MaxOutstanding reads may be in flight or stuck at once
// across the process; past that, a read waits for a slot no longer than its
// own timeout and then fails with ErrTooManyStuck instead of piling up
// threads.
package procfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

const (
	// DefaultRoot is where procfs is mounted.
	DefaultRoot = "/proc"
	// DefaultTimeout bounds each read when Reader.Timeout is zero.
	DefaultTimeout = time.Second
	// MaxOutstanding bounds reads in flight plus reads abandoned after a
	// timeout and still blocked in the kernel.
	MaxOutstanding = 32
	// UserHZ is the unit of the tick counts in /proc/PID/stat. Linux fixes
	// it at 100 on every architecture wolf supports.
	UserHZ = 100

	maxFileSize = 1 << 20 // no procfs file wolf reads is bigger
)

var (
	// ErrTimeout: a read did not finish within the timeout; it was
	// abandoned.
	ErrTimeout = errors.New("procfs read timed out (abandoned; the task may be stuck)")
	// ErrTooManyStuck: MaxOutstanding reads are already in flight or stuck.
	ErrTooManyStuck = errors.New("too many procfs reads already stuck or in flight")
	// ErrMayBeStuck: CmdlineIfNotStuck refused to read the command line.
	ErrMayBeStuck = errors.New("refused: the task may be stuck holding or waiting for its mmap_lock")
)

// outstanding is the semaphore behind MaxOutstanding: one slot per read in
// flight or stuck. A variable so tests can shrink it.
var outstanding = make(chan struct{}, MaxOutstanding)

// Outstanding reports how many reads are in flight or stuck right now
// (wolf's own overhead report can show it).
func Outstanding() int { return len(outstanding) }

// Reader reads one procfs tree. The zero value reads /proc with
// DefaultTimeout.
type Reader struct {
	Root    string        // procfs mount point; DefaultRoot when empty (tests point it at a fake tree)
	Timeout time.Duration // per read; DefaultTimeout when zero
}

// TaskID names one thread: PID is the thread-group id (the process), TID
// the thread.
type TaskID struct {
	PID, TID int
}

func (r Reader) root() string {
	if r.Root == "" {
		return DefaultRoot
	}
	return r.Root
}

func (r Reader) timeout() time.Duration {
	if r.Timeout <= 0 {
		return DefaultTimeout
	}
	return r.Timeout
}

// path names a file of a process (tid 0) or of one of its threads.
func (r Reader) path(pid, tid int, file string) string {
	if tid == 0 {
		return filepath.Join(r.root(), strconv.Itoa(pid), file)
	}
	return filepath.Join(r.root(), strconv.Itoa(pid), "task", strconv.Itoa(tid), file)
}

// withTimeout runs fn in a goroutine that is abandoned if it does not finish
// within the reader's timeout (or before ctx ends).
func withTimeout[T any](ctx context.Context, r Reader, what string, fn func() (T, error)) (T, error) {
	var zero T
	timeout := r.timeout()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := ctx.Err(); err != nil {
		return zero, fmt.Errorf("%s: %w", what, err)
	}
	slots := outstanding
	select {
	case slots <- struct{}{}:
	case <-ctx.Done():
		return zero, fmt.Errorf("%s: %w (%d) for %v", what, ErrTooManyStuck, cap(slots), timeout)
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1) // buffered: an abandoned goroutine must not block on send
	go func() {
		v, err := fn()
		// The read is over: free its slot before the caller can see the
		// result, so that Outstanding never counts a read already done.
		<-slots
		done <- result{v, err}
	}()
	select {
	case res := <-done:
		return res.v, res.err
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return zero, fmt.Errorf("%s: %w after %v", what, ErrTimeout, timeout)
		}
		return zero, fmt.Errorf("%s: %w", what, ctx.Err())
	}
}

// read returns the contents of a procfs file, bounded in time and size.
func (r Reader) read(ctx context.Context, path string) ([]byte, error) {
	return withTimeout(ctx, r, "reading "+path, func() ([]byte, error) {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return io.ReadAll(io.LimitReader(f, maxFileSize))
	})
}

// readDir lists the numeric entries (pids or tids) of a procfs directory.
func (r Reader) readDir(ctx context.Context, dir string) ([]int, error) {
	return withTimeout(ctx, r, "listing "+dir, func() ([]int, error) {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return nil, err
		}
		ids := make([]int, 0, len(ents))
		for _, e := range ents {
			if id, err := strconv.Atoi(e.Name()); err == nil && id > 0 {
				ids = append(ids, id)
			}
		}
		sort.Ints(ids)
		return ids, nil
	})
}

// Processes lists the process ids (thread-group ids) in the tree.
func (r Reader) Processes(ctx context.Context) ([]int, error) {
	return r.readDir(ctx, r.root())
}

// Threads lists the thread ids of process pid.
func (r Reader) Threads(ctx context.Context, pid int) ([]int, error) {
	return r.readDir(ctx, filepath.Join(r.root(), strconv.Itoa(pid), "task"))
}

// Tasks lists every thread of every process. Processes that exit while
// being listed are skipped. When some process's threads cannot be listed in
// time, its main thread is still reported and the error names what was
// missed; the list returned is then partial but usable.
func (r Reader) Tasks(ctx context.Context) ([]TaskID, error) {
	pids, err := r.Processes(ctx)
	if err != nil {
		return nil, fmt.Errorf("procfs: %w", err)
	}
	var (
		tasks []TaskID
		errs  []error
	)
	for _, pid := range pids {
		if err := ctx.Err(); err != nil {
			return tasks, fmt.Errorf("procfs: listing tasks: %w", err)
		}
		tids, err := r.Threads(ctx, pid)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue // exited
		case err != nil:
			errs = append(errs, err)
			tasks = append(tasks, TaskID{PID: pid, TID: pid})
			continue
		}
		for _, tid := range tids {
			tasks = append(tasks, TaskID{PID: pid, TID: tid})
		}
	}
	if len(errs) > 0 {
		return tasks, fmt.Errorf("procfs: listing tasks: %w", errors.Join(errs...))
	}
	return tasks, nil
}

// Comm returns the command name of a process (tid 0) or thread.
func (r Reader) Comm(ctx context.Context, pid, tid int) (string, error) {
	b, err := r.read(ctx, r.path(pid, tid, "comm"))
	if err != nil {
		return "", fmt.Errorf("procfs: comm: %w", err)
	}
	return strings.TrimRight(string(b), "\n"), nil
}

// Wchan returns the kernel function the task sleeps in, or "" when it is
// not sleeping (the kernel prints "0").
func (r Reader) Wchan(ctx context.Context, pid, tid int) (string, error) {
	b, err := r.read(ctx, r.path(pid, tid, "wchan"))
	if err != nil {
		return "", fmt.Errorf("procfs: wchan: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if s == "0" {
		s = ""
	}
	return s, nil
}

// Stack returns the kernel stack of a thread, innermost frame first, as
// "func+0x1f" (the "[<0>] " prefix and the "/0x80" function size are
// dropped; a module suffix " [mod]" is kept). It needs root, and it takes
// the target's exec_update_lock, so it may time out on a stuck task.
func (r Reader) Stack(ctx context.Context, pid, tid int) ([]string, error) {
	b, err := r.read(ctx, r.path(pid, tid, "stack"))
	if err != nil {
		return nil, fmt.Errorf("procfs: stack: %w", err)
	}
	return ParseStack(b), nil
}

// ParseStack parses the contents of /proc/PID/task/TID/stack.
func ParseStack(b []byte) []string {
	var frames []string
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "[<") {
			if i := strings.Index(line, ">]"); i >= 0 {
				line = strings.TrimSpace(line[i+2:])
			}
		}
		fn, mod, _ := strings.Cut(line, " ")
		if i := strings.LastIndexByte(fn, '/'); i > 0 && strings.Contains(fn[:i], "+") {
			fn = fn[:i]
		}
		if mod != "" {
			fn += " " + strings.TrimSpace(mod)
		}
		frames = append(frames, fn)
	}
	return frames
}

// Cgroup is one line of /proc/PID/cgroup.
type Cgroup struct {
	Hierarchy   int      // 0 for the cgroup v2 unified hierarchy
	Controllers []string // empty for v2; may be a name= entry for named v1 hierarchies
	Path        string   // relative to the hierarchy's mount point
}

// Cgroup returns the cgroups of a process (tid 0) or thread.
func (r Reader) Cgroup(ctx context.Context, pid, tid int) ([]Cgroup, error) {
	b, err := r.read(ctx, r.path(pid, tid, "cgroup"))
	if err != nil {
		return nil, fmt.Errorf("procfs: cgroup: %w", err)
	}
	return ParseCgroup(b)
}

// ParseCgroup parses the contents of /proc/PID/cgroup.
func ParseCgroup(b []byte) ([]Cgroup, error) {
	var out []Cgroup
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			return nil, fmt.Errorf("procfs: cgroup line %q: want hierarchy:controllers:path", line)
		}
		h, err := strconv.Atoi(parts[0])
		if err != nil {
			return nil, fmt.Errorf("procfs: cgroup line %q: %w", line, err)
		}
		c := Cgroup{Hierarchy: h, Path: parts[2]}
		if parts[1] != "" {
			c.Controllers = strings.Split(parts[1], ",")
		}
		out = append(out, c)
	}
	return out, nil
}

// Stat is the part of /proc/PID/stat wolf uses.
type Stat struct {
	PID        int
	Comm       string
	State      byte // R, S, D, T, t, Z, X, I, ...; see StateName
	PPID       int
	PGRP       int
	Session    int
	Flags      uint64 // PF_* flags; PF_KTHREAD is 0x00200000
	MinFlt     uint64
	MajFlt     uint64
	UTime      time.Duration // user CPU time
	STime      time.Duration // system CPU time
	Priority   int64
	Nice       int64
	NumThreads int
	StartTime  time.Duration // since boot
	CPU        int           // CPU it last ran on; -1 when the kernel did not say
	RTPriority uint64
	Policy     uint64
	BlkioDelay time.Duration // aggregated block I/O delay (needs delayacct)
}

// PFKthread is the task flag marking kernel threads.
const PFKthread = 0x00200000

// Kthread reports whether the task is a kernel thread.
func (s Stat) Kthread() bool { return s.Flags&PFKthread != 0 }

// Stat returns /proc/PID/stat (tid 0: the process, with CPU times summed
// over its threads) or /proc/PID/task/TID/stat.
func (r Reader) Stat(ctx context.Context, pid, tid int) (Stat, error) {
	b, err := r.read(ctx, r.path(pid, tid, "stat"))
	if err != nil {
		return Stat{}, fmt.Errorf("procfs: stat: %w", err)
	}
	return ParseStat(b)
}

// ParseStat parses /proc/PID/stat. The command name is between the first
// '(' and the last ')': it may itself hold spaces and parentheses.
func ParseStat(b []byte) (Stat, error) {
	var s Stat
	open := bytes.IndexByte(b, '(')
	closing := bytes.LastIndexByte(b, ')')
	if open < 1 || closing < open {
		return s, fmt.Errorf("procfs: stat %q: no (comm)", truncate(b))
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return s, fmt.Errorf("procfs: stat pid: %w", err)
	}
	s.PID = pid
	s.Comm = string(b[open+1 : closing])
	f := strings.Fields(string(b[closing+1:]))
	if len(f) < 20 || len(f[0]) != 1 {
		return s, fmt.Errorf("procfs: stat of %d: %d fields after comm, want at least 20", pid, len(f))
	}
	s.State = f[0][0]
	num := func(i int) int64 {
		if i >= len(f) {
			return 0
		}
		v, perr := strconv.ParseInt(f[i], 10, 64)
		if perr != nil && err == nil {
			err = fmt.Errorf("procfs: stat of %d field %d %q: %w", pid, i+3, f[i], perr)
		}
		return v
	}
	unum := func(i int) uint64 {
		if i >= len(f) {
			return 0
		}
		v, perr := strconv.ParseUint(f[i], 10, 64)
		if perr != nil && err == nil {
			err = fmt.Errorf("procfs: stat of %d field %d %q: %w", pid, i+3, f[i], perr)
		}
		return v
	}
	ticks := func(i int) time.Duration { return time.Duration(unum(i)) * time.Second / UserHZ }
	// f[i] is field i+3 of proc(5).
	s.PPID = int(num(1))
	s.PGRP = int(num(2))
	s.Session = int(num(3))
	s.Flags = unum(6)
	s.MinFlt = unum(7)
	s.MajFlt = unum(9)
	s.UTime = ticks(11)
	s.STime = ticks(12)
	s.Priority = num(15)
	s.Nice = num(16)
	s.NumThreads = int(num(17))
	s.StartTime = ticks(19)
	s.CPU = -1
	if len(f) > 36 {
		s.CPU = int(num(36))
	}
	s.RTPriority = unum(37)
	s.Policy = unum(38)
	s.BlkioDelay = ticks(39)
	if err != nil {
		return Stat{}, err
	}
	return s, nil
}

// StateName spells out a task state letter.
func StateName(state byte) string {
	switch state {
	case 'R':
		return "running"
	case 'S':
		return "sleeping"
	case 'D':
		return "uninterruptible sleep"
	case 'T':
		return "stopped"
	case 't':
		return "tracing stop"
	case 'Z':
		return "zombie"
	case 'X':
		return "dead"
	case 'I':
		return "idle"
	case 'P':
		return "parked"
	case 'W':
		return "waking"
	case 'K':
		return "wakekill"
	}
	return "unknown state " + strconv.Quote(string(state))
}

// Status is the part of /proc/PID/status wolf uses; Fields holds every
// line, keyed by the name before the colon.
type Status struct {
	Name                     string
	State                    byte
	Tgid, Pid, PPid          int
	Threads                  int
	VoluntaryCtxtSwitches    uint64
	NonvoluntaryCtxtSwitches uint64
	Fields                   map[string]string
}

// Status returns /proc/PID/status or /proc/PID/task/TID/status.
func (r Reader) Status(ctx context.Context, pid, tid int) (Status, error) {
	b, err := r.read(ctx, r.path(pid, tid, "status"))
	if err != nil {
		return Status{}, fmt.Errorf("procfs: status: %w", err)
	}
	return ParseStatus(b)
}

// ParseStatus parses /proc/PID/status.
func ParseStatus(b []byte) (Status, error) {
	s := Status{Fields: map[string]string{}}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		s.Fields[k] = strings.TrimSpace(v)
	}
	var err error
	atoi := func(k string) int {
		v, ok := s.Fields[k]
		if !ok {
			return 0
		}
		n, perr := strconv.Atoi(v)
		if perr != nil && err == nil {
			err = fmt.Errorf("procfs: status %s %q: %w", k, v, perr)
		}
		return n
	}
	s.Name = s.Fields["Name"]
	if st := s.Fields["State"]; st != "" {
		s.State = st[0]
	}
	s.Tgid = atoi("Tgid")
	s.Pid = atoi("Pid")
	s.PPid = atoi("PPid")
	s.Threads = atoi("Threads")
	s.VoluntaryCtxtSwitches = uint64(atoi("voluntary_ctxt_switches"))
	s.NonvoluntaryCtxtSwitches = uint64(atoi("nonvoluntary_ctxt_switches"))
	if err != nil {
		return Status{}, err
	}
	if _, ok := s.Fields["Pid"]; !ok {
		return Status{}, fmt.Errorf("procfs: status %q: no Pid line", truncate(b))
	}
	return s, nil
}

// CmdlineIfNotStuck returns the command line of process pid, split at NUL
// bytes. Reading /proc/PID/cmdline takes the target's mmap_lock, which
// hangs the reader when the target is stuck, so it first lists the threads
// and reads each one's state, and refuses with ErrMayBeStuck when any is in
// uninterruptible sleep (D), where it may hold or wait for that lock. Even
// then the read itself runs with the timeout: another task may hold the
// lock. Kernel threads have an empty command line.
func (r Reader) CmdlineIfNotStuck(ctx context.Context, pid int) ([]string, error) {
	tids, err := r.Threads(ctx, pid)
	if err != nil {
		return nil, fmt.Errorf("procfs: cmdline of %d: cannot check its threads first: %w", pid, err)
	}
	for _, tid := range tids {
		st, err := r.Stat(ctx, pid, tid)
		if errors.Is(err, fs.ErrNotExist) {
			continue // thread exited meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("procfs: cmdline of %d: cannot read the state of thread %d: %w", pid, tid, err)
		}
		if st.State == 'D' {
			return nil, fmt.Errorf("procfs: cmdline of %d: thread %d (%s) is in uninterruptible sleep: %w", pid, tid, st.Comm, ErrMayBeStuck)
		}
	}
	b, err := r.read(ctx, filepath.Join(r.root(), strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return nil, fmt.Errorf("procfs: cmdline: %w", err)
	}
	b = bytes.TrimRight(b, "\x00")
	if len(b) == 0 {
		return nil, nil
	}
	return strings.Split(string(b), "\x00"), nil
}

func truncate(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "…"
	}
	return string(b)
}
