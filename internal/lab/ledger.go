package lab

// The ledger: what a running lab put on the machine that would outlive it,
// written down before it is made, so that what a lab killed with SIGKILL
// left behind can be undone by the next lab and by `wolf lab clean`.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/procfs"
	"github.com/wolf-investigator/wolf/internal/sysctl"
	"github.com/wolf-investigator/wolf/internal/testslock"
)

// DefaultStateDir is where ledgers live: on tmpfs, so they vanish with a
// reboot, as mounts, cgroups and sysctl values do.
const DefaultStateDir = "/run/wolf/labs"

// StateDir is where ledgers are kept; tests point it at a directory of
// their own.
var StateDir = DefaultStateDir

// Kinds of things a lab leaves.
const (
	KindMount   = "mount"   // a mount point; unmounted (lazily) if it still has FSType and Source
	KindDir     = "dir"     // an empty directory; removed
	KindTree    = "tree"    // a directory and what it holds; removed unless a mount is at or under it
	KindFile    = "file"    // a file; removed
	KindCgroup  = "cgroup"  // a cgroup directory; its processes killed, then removed
	KindSysctl  = "sysctl"  // a sysctl the lab set to Value; set back to Orig if it still holds Value
	KindProcess = "process" // a process that does not die with the lab; killed if it is still the same one
	// KindLoop is a loop device (Source, "/dev/loopN") bound to a lab's
	// backing file (Path): unbound if it still is, then removed if it is
	// unbound (a removed device takes its queue's settings with it: the
	// throttle rules, the bdi's dirty limits a lab set on it).
	KindLoop = "loop"
)

// Item is one thing a lab leaves behind if it dies.
type Item struct {
	Kind string `json:"kind"`
	// Path is a mount point, directory, file or cgroup directory, or a
	// sysctl's name. The base name of a path must start with "wolf-" and
	// carry the owner's pid ("wolf-fusestall-1234-..."): Clean removes
	// nothing that is not named so.
	Path   string `json:"path"`
	FSType string `json:"fstype,omitempty"` // KindMount
	Source string `json:"source,omitempty"` // KindMount; KindLoop: the device
	Value  string `json:"value,omitempty"`  // KindSysctl: what the lab set
	Orig   string `json:"orig,omitempty"`   // KindSysctl: what was there before
	PID    int    `json:"pid,omitempty"`    // KindProcess
	// Start is KindProcess's start time since boot, against pid reuse.
	Start time.Duration `json:"start_ns,omitempty"`
}

// Mount, Dir, Tree, File, Cgroup, Sysctl and Process make Items.
func Mount(point, fstype, source string) Item {
	return Item{Kind: KindMount, Path: point, FSType: fstype, Source: source}
}
func Dir(path string) Item { return Item{Kind: KindDir, Path: path} }

// Loop records loop device dev ("/dev/loop3") bound to backing, a file of
// the lab's.
func Loop(dev, backing string) Item { return Item{Kind: KindLoop, Path: backing, Source: dev} }
func Tree(path string) Item         { return Item{Kind: KindTree, Path: path} }
func File(path string) Item         { return Item{Kind: KindFile, Path: path} }
func Cgroup(path string) Item       { return Item{Kind: KindCgroup, Path: path} }
func Sysctl(name, value, orig string) Item {
	return Item{Kind: KindSysctl, Path: name, Value: value, Orig: orig}
}

// Process records pid, which must be alive; its start time tells it from
// a later process with the same pid.
func Process(pid int) (Item, error) {
	st, err := proc.Stat(context.Background(), pid, 0)
	if err != nil {
		return Item{}, fmt.Errorf("lab: process %d: %w", pid, err)
	}
	return Item{Kind: KindProcess, Path: st.Comm, PID: pid, Start: st.StartTime}, nil
}

func (it Item) String() string {
	switch it.Kind {
	case KindMount:
		return fmt.Sprintf("mount %s (%s %s)", it.Path, it.FSType, it.Source)
	case KindSysctl:
		return fmt.Sprintf("sysctl %s = %q (was %q)", it.Path, it.Value, it.Orig)
	case KindLoop:
		return fmt.Sprintf("loop device %s on %s", it.Source, it.Path)
	case KindProcess:
		return fmt.Sprintf("process %s pid %d", it.Path, it.PID)
	}
	return it.Kind + " " + it.Path
}

// Name returns a name for something a lab makes: "wolf-WHAT-PID-RANDOM",
// the pid being this process's, so that Clean can tell whose it is. Labs
// choose their names with it (rather than os.MkdirTemp's) so that the
// name can go into the ledger before the thing exists.
func Name(what string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("wolf-%s-%d-%s", what, os.Getpid(), hex.EncodeToString(b[:]))
}

// Ledger is a running lab's record of what it made. Record each thing with
// Add before making it and Done after undoing it; Close at the end.
//
// The ledger is a file in StateDir, one JSON line per record, appended
// (one write each, so a kill leaves at most a torn last line, which is
// ignored). The owner holds an exclusive flock on it for as long as it
// lives; the kernel drops the lock when the process dies, however it dies,
// and that is how Clean tells a dead owner from a live one, with the
// owner's pid and start time as a second check.
type Ledger struct {
	mu     sync.Mutex
	f      *os.File
	path   string
	items  []Item
	closed bool
}

// header is a ledger's first line.
type header struct {
	Lab    string        `json:"lab"`
	PID    int           `json:"pid"`
	Start  time.Duration `json:"start_ns"` // the owner's start time since boot
	BootID string        `json:"boot_id"`
}

// record is every later line.
type record struct {
	Add  *Item `json:"add,omitempty"`
	Done *Item `json:"done,omitempty"`
}

var proc = procfs.Reader{Timeout: time.Second}

// NewLedger first cleans up after dead labs (Clean, with logf), then
// opens a ledger for lab in StateDir.
func NewLedger(lab string, logf func(string, ...any)) (*Ledger, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if StateDir == DefaultStateDir {
		// What a ledger records is machine-wide (cgroups, mounts, sysctls):
		// under a test, it is made under the tests' lock.
		if err := testslock.Check("lab " + lab); err != nil {
			return nil, err
		}
	}
	if _, err := Clean(logf); err != nil {
		logf("lab: cleaning up after dead labs: %v", err)
	}
	if err := os.MkdirAll(StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("lab: state directory: %w", err)
	}
	st, err := proc.Stat(context.Background(), os.Getpid(), 0)
	if err != nil {
		return nil, fmt.Errorf("lab: own start time: %w", err)
	}
	// Made under a name Clean does not look at, locked, given its header
	// and only then renamed into view (the lock goes with the file): a
	// cleaner never sees a ledger that is not locked or has no header.
	path := filepath.Join(StateDir, Name(lab)+".jsonl")
	tmp := path + ".new"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lab: ledger: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("lab: lock ledger %s: %w", tmp, err)
	}
	l := &Ledger{f: f, path: path}
	err = l.append(header{Lab: lab, PID: os.Getpid(), Start: st.StartTime, BootID: bootID()})
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("lab: ledger: %w", err)
	}
	return l, nil
}

// Path is the ledger's file.
func (l *Ledger) Path() string { return l.path }

// Add records it; call it before making the thing.
func (l *Ledger) Add(it Item) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errors.New("lab: ledger closed")
	}
	if err := l.append(record{Add: &it}); err != nil {
		return err
	}
	l.items = append(l.items, it)
	return nil
}

// Done records that it is undone (or was never made).
func (l *Ledger) Done(it Item) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	i := slices.Index(l.items, it)
	if i < 0 {
		return nil
	}
	if err := l.append(record{Done: &it}); err != nil {
		return err
	}
	l.items = slices.Delete(l.items, i, i+1)
	return nil
}

// Pending is what is recorded and not done.
func (l *Ledger) Pending() []Item {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.items)
}

// Close removes the ledger if everything in it is done; otherwise it
// leaves it for Clean, once this process has ended. Safe to call more
// than once.
func (l *Ledger) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	var err error
	if len(l.items) == 0 {
		err = os.Remove(l.path)
	} else {
		err = fmt.Errorf("lab: %d things not undone, left for `wolf lab clean`: %v (%s)", len(l.items), l.items, l.path)
	}
	l.f.Close() // drops the lock
	return err
}

func (l *Ledger) append(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := l.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("lab: write ledger: %w", err)
	}
	return nil
}

// Cleaned is what Clean undid for one dead lab.
type Cleaned struct {
	Lab    string
	PID    int
	Undone []Item
	Ledger string
}

// Clean undoes what dead labs left: for each ledger in StateDir whose
// owner is dead (its lock is free and its pid gone or reused), every item
// still recorded, newest first, then the ledger itself. A ledger whose
// owner lives is not touched; an item that fails to undo stays in its
// ledger for the next Clean, and the error says why. logf hears of every
// item undone.
func Clean(logf func(string, ...any)) ([]Cleaned, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	ents, err := os.ReadDir(StateDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	var out []Cleaned
	var errs []error
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".jsonl.new") {
			removeUnborn(filepath.Join(StateDir, e.Name()))
			continue
		}
		if !strings.HasSuffix(e.Name(), ".jsonl") {
			continue
		}
		c, err := cleanLedger(filepath.Join(StateDir, e.Name()), logf)
		if c != nil {
			out = append(out, *c)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return out, errors.Join(errs...)
}

// cleanLedger cleans one ledger if its owner is dead; nil, nil if it lives.
func cleanLedger(path string, logf func(string, ...any)) (*Cleaned, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) { // its owner closed it meanwhile
			return nil, nil
		}
		return nil, fmt.Errorf("lab: %w", err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return nil, nil // its owner lives (or another cleaner is at it)
	}
	h, items, err := readLedger(f)
	if err != nil {
		return nil, fmt.Errorf("lab: ledger %s: %w", path, err)
	}
	sameBoot := h.BootID == bootID()
	if sameBoot && alive(h.PID, h.Start) {
		// The lock is free but the owner lives: it closed the file
		// and left things on purpose, or is not a ledger's owner at
		// all. Not ours to judge.
		return nil, nil
	}
	c := &Cleaned{Lab: h.Lab, PID: h.PID, Ledger: path}
	var errs []error
	for i := len(items) - 1; i >= 0; i-- {
		it := items[i]
		if !sameBoot && it.Kind != KindDir && it.Kind != KindTree && it.Kind != KindFile {
			// Mounts, cgroups, sysctls and processes do not outlive a
			// reboot; a pid or path from before one means nothing.
			continue
		}
		if err := undo(it, h.PID); err != nil {
			errs = append(errs, fmt.Errorf("lab %s (pid %d, dead): %s: %w", h.Lab, h.PID, it, err))
			continue
		}
		logf("lab: undid %s, left by lab %s (pid %d, dead)", it, h.Lab, h.PID)
		c.Undone = append(c.Undone, it)
		b, _ := json.Marshal(record{Done: &it})
		_, _ = f.Write(append(b, '\n'))
	}
	if len(errs) > 0 {
		return c, errors.Join(errs...)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return c, fmt.Errorf("lab: remove ledger: %w", err)
	}
	return c, nil
}

// removeUnborn removes a ledger whose owner died before it was renamed
// into view, when it had recorded nothing yet.
func removeUnborn(path string) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
		os.Remove(path)
	}
}

// readLedger returns the header and the items added and not done.
func readLedger(f *os.File) (header, []Item, error) {
	var h header
	var items []Item
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	first := true
	for sc.Scan() {
		if first {
			first = false
			if err := json.Unmarshal(sc.Bytes(), &h); err != nil || h.PID <= 0 {
				return h, nil, fmt.Errorf("bad header %q", sc.Text())
			}
			continue
		}
		var r record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			continue // a torn last line: its write never happened whole
		}
		switch {
		case r.Add != nil:
			items = append(items, *r.Add)
		case r.Done != nil:
			if i := slices.Index(items, *r.Done); i >= 0 {
				items = slices.Delete(items, i, i+1)
			}
		}
	}
	if first {
		return h, nil, errors.New("empty")
	}
	return h, items, sc.Err()
}

// alive says whether pid runs and is the process that started at start.
func alive(pid int, start time.Duration) bool {
	if pid <= 0 {
		return false
	}
	st, err := proc.Stat(context.Background(), pid, 0)
	return err == nil && st.State != 'Z' && st.StartTime == start
}

// undo undoes one item left by owner.
func undo(it Item, owner int) error {
	if it.Kind != KindSysctl && it.Kind != KindProcess {
		if err := ownedName(it.Path, owner); err != nil {
			return err
		}
	}
	switch it.Kind {
	case KindMount:
		return unmount(it)
	case KindDir:
		return ignoreMissing(os.Remove(it.Path))
	case KindFile:
		return ignoreMissing(os.Remove(it.Path))
	case KindTree:
		if m, err := mountUnder(it.Path); err != nil || m != "" {
			if err == nil {
				err = fmt.Errorf("%s is mounted there; not removing", m)
			}
			return err
		}
		return os.RemoveAll(it.Path)
	case KindCgroup:
		return removeCgroup(it.Path)
	case KindLoop:
		return UndoLoop(it.Source, it.Path)
	case KindSysctl:
		cur, err := sysctl.Read(it.Path)
		if err != nil {
			return err
		}
		if cur != it.Value {
			return nil // changed since by someone else: theirs now
		}
		return sysctl.Write(it.Path, it.Orig)
	case KindProcess:
		st, err := proc.Stat(context.Background(), it.PID, 0)
		if err != nil || st.StartTime != it.Start || st.State == 'Z' {
			return nil // gone, or another process now
		}
		return ignoreESRCH(unix.Kill(it.PID, unix.SIGKILL))
	}
	return fmt.Errorf("unknown kind %q", it.Kind)
}

// ownedName checks that path is named like a lab's thing of owner:
// "wolf-...-PID-..." or "wolf-...-PID".
func ownedName(path string, owner int) error {
	base := filepath.Base(path)
	if !strings.HasPrefix(base, "wolf-") || !strings.Contains(base+"-", "-"+strconv.Itoa(owner)+"-") || !filepath.IsAbs(path) {
		return fmt.Errorf("%s is not named as lab pid %d's (wolf-...-%d-...); not touching it", path, owner, owner)
	}
	return nil
}

func unmount(it Item) error {
	// A point can hold a stack of mounts: the lab's may lie under
	// another. Detach the top one at a time, each checked, a few at most.
	for range 8 {
		mounts, err := proc.Mounts(context.Background(), 0)
		if err != nil {
			return err
		}
		var top *procfs.Mount
		for i := range mounts {
			if mounts[i].Point == it.Path {
				top = &mounts[i] // mountinfo lists a stack bottom first
			}
		}
		if top == nil {
			return nil
		}
		if top.FSType != it.FSType || top.Source != it.Source {
			return fmt.Errorf("%s is mounted with %s %s, not the lab's %s %s; not unmounting it", it.Path, top.FSType, top.Source, it.FSType, it.Source)
		}
		// MNT_DETACH: a dead FUSE mount answers ENOTCONN; a detach
		// never waits for its users.
		if err := unix.Unmount(it.Path, unix.MNT_DETACH); err != nil {
			return err
		}
	}
	return fmt.Errorf("%s: still mounted after 8 unmounts", it.Path)
}

// mountUnder returns a mount point at or under dir, or "".
func mountUnder(dir string) (string, error) {
	mounts, err := proc.Mounts(context.Background(), 0)
	if err != nil {
		return "", err
	}
	for _, m := range mounts {
		if m.Point == dir || strings.HasPrefix(m.Point, dir+"/") {
			return m.Point, nil
		}
	}
	return "", nil
}

// cgroupExitTimeout bounds the wait for a dead lab's processes to leave
// its cgroup. They are killed, but a process whose threads sit in reclaim
// at the cgroup's limit on a loaded host takes seconds to exit (16 s seen
// here for memcg-stress's worker at a load average of 30).
const cgroupExitTimeout = 60 * time.Second

// removeCgroup kills what is left in a dead lab's cgroup and removes it.
func removeCgroup(dir string) error {
	err := WaitFor(context.Background(), cgroupExitTimeout, "the processes in cgroup "+dir+" to exit", func() (bool, error) {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if errors.Is(err, fs.ErrNotExist) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		pids := strings.Fields(string(b))
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil {
				_ = unix.Kill(pid, unix.SIGKILL)
			}
		}
		return len(pids) == 0, nil
	})
	if err != nil {
		return err
	}
	// Busy a moment after the last process left, while its exit ends.
	return WaitFor(context.Background(), 10*time.Second, "cgroup "+dir+" to go", func() (bool, error) {
		err := os.Remove(dir)
		return err == nil || errors.Is(err, fs.ErrNotExist), nil
	})
}

// UndoLoop unbinds loop device dev ("/dev/loop3") if backing is still
// its backing file, then removes the device if nothing is bound to it.
// A device bound to another file is someone else's now and is left.
func UndoLoop(dev, backing string) error {
	name := filepath.Base(dev)
	n, err := strconv.Atoi(strings.TrimPrefix(name, "loop"))
	if err != nil || !strings.HasPrefix(name, "loop") {
		return fmt.Errorf("%s is not a loop device", dev)
	}
	cur := loopBacking(name)
	if cur != "" && cur != backing && cur != backing+" (deleted)" {
		return nil // bound to another file: not the lab's any more
	}
	if cur != "" {
		f, err := os.OpenFile(dev, os.O_RDONLY, 0)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err == nil {
			// On a device still in use this sets autoclear: it unbinds
			// when its last user lets go.
			err = unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0)
			f.Close()
			if err != nil && !errors.Is(err, unix.ENXIO) {
				return fmt.Errorf("unbind %s: %w", dev, err)
			}
		}
	}
	return WaitFor(context.Background(), 10*time.Second, dev+" to unbind", func() (bool, error) {
		if loopBacking(name) != "" {
			return false, nil
		}
		ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
		if err != nil {
			return false, err
		}
		defer ctl.Close()
		err = unix.IoctlSetInt(int(ctl.Fd()), unix.LOOP_CTL_REMOVE, n)
		switch {
		case err == nil, errors.Is(err, unix.ENODEV), errors.Is(err, unix.ENXIO):
			return true, nil
		case errors.Is(err, unix.EBUSY):
			return false, nil // still closing
		}
		return false, fmt.Errorf("remove %s: %w", dev, err)
	})
}

// loopBacking is the backing file of loop device name ("loop3"), "" when
// it is unbound or gone.
func loopBacking(name string) string {
	b, err := os.ReadFile(filepath.Join("/sys/block", name, "loop/backing_file"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func ignoreMissing(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

func ignoreESRCH(err error) error {
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

func bootID() string {
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(b))
}
