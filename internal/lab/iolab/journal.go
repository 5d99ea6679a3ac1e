package iolab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/lab/labproc"
)

// JournalName is the journal-stall lab's name.
const JournalName = "journal-stall"

// mountOpts: data=ordered, and blocks allocated initialised when their
// data is written back (dioread_lock): the inode then joins the running
// transaction's ordered data, and its commit waits for that data. Since
// 5.6 ext4 defaults to dioread_nolock, whose unwritten extents spare the
// commit that wait.
const mountOpts = "data=ordered,dioread_lock"

const (
	journalPrefix = "wolf-lab-journal-"
	// stuckFsync: a victim's fsync this long means the throttle holds
	// longer than the lab's sizes say it can; the watchdog lifts it.
	stuckFsync = 20 * time.Second
)

// JournalConfig sizes the journal-stall lab; zero fields take the defaults.
type JournalConfig struct {
	LimitBps      int64 // the writer's write limit on the device
	Chunk         int64 // bytes the writer writes and fsyncs at a time
	DeviceMB      int64
	VictimEvery   time.Duration
	CgroupVersion int
	MaxLife       time.Duration
}

// JournalDefaults: 2 MiB at a time against 1 MiB/s: each commit waits
// about two seconds for the writer's data.
var JournalDefaults = JournalConfig{LimitBps: 1 << 20, Chunk: 2 << 20, DeviceMB: 256, VictimEvery: 100 * time.Millisecond, MaxLife: 10 * time.Minute}

type journalLab struct{ cfg JournalConfig }

// NewJournal returns the journal-stall lab with the defaults.
func NewJournal() lab.Lab { return journalLab{JournalDefaults} }

func (journalLab) Name() string { return JournalName }

func (journalLab) Summary() string {
	return "ext4 (data=ordered) on a loop device: an unrelated fsync waits for journal commits that wait for a throttled cgroup's data"
}

func (journalLab) WhyRoot() string {
	return "makes a loop device, an ext4 file system on it, and a cgroup with an I/O limit"
}

// Stalls: the victim's fsyncs sleep in D state for seconds.
func (journalLab) Stalls() bool { return true }

// JournalInstance is the running journal-stall lab.
type JournalInstance struct {
	cfg    JournalConfig
	led    *lab.Ledger
	dir    string
	mnt    string
	loop   *Loop
	cg     *labproc.Cgroup
	writer *labproc.Child
	victim *labproc.Child
	wtid   int
	vtid   int
	stop   chan struct{}
	wg     sync.WaitGroup

	mu        sync.Mutex
	lifted    bool
	maxFsync  time.Duration
	mounted   bool
	closeOnce sync.Once
	closeErr  error
}

func (in *JournalInstance) mountItem() lab.Item { return lab.Mount(in.mnt, "ext4", in.loop.Dev) }

// Start implements lab.Lab.
func (l journalLab) Start(ctx context.Context, opt lab.Options) (_ lab.Instance, err error) {
	c := l.cfg
	switch {
	case c.LimitBps < 64<<10:
		return nil, fmt.Errorf("%s: limit %d B/s: want at least 64 KiB/s", JournalName, c.LimitBps)
	case c.Chunk < 64<<10 || c.Chunk > 64<<20 || c.Chunk/c.LimitBps > 8:
		return nil, fmt.Errorf("%s: chunks of %d bytes at %d B/s: want 64 KiB to 64 MiB, at most 8 s of writing each", JournalName, c.Chunk, c.LimitBps)
	}
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		return nil, fmt.Errorf("%s: needs mkfs.ext4 (e2fsprogs): %w", JournalName, err)
	}
	in := &JournalInstance{cfg: c, stop: make(chan struct{})}
	defer func() {
		if err != nil {
			err = errors.Join(err, in.Close())
		}
	}()
	if in.led, err = lab.NewLedger(JournalName, opt.Logf); err != nil {
		return nil, err
	}
	if in.dir, err = labDir(in.led, "journal"); err != nil {
		return nil, err
	}
	if in.loop, err = NewLoop(in.led, filepath.Join(in.dir, lab.Name("journal")+".img"), c.DeviceMB<<20, false); err != nil {
		return nil, fmt.Errorf("%s: %w", JournalName, err)
	}
	// No lazy initialisation: a kernel thread zeroing inode tables in the
	// background would be I/O of its own on the device.
	if out, err := exec.CommandContext(ctx, mkfs, "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", in.loop.Dev).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%s: mkfs.ext4 %s: %v: %s", JournalName, in.loop.Dev, err, strings.TrimSpace(string(out)))
	}
	// Named as the lab's, as everything the ledger undoes must be.
	in.mnt = filepath.Join(in.dir, lab.Name("journalfs"))
	if err = os.Mkdir(in.mnt, 0o700); err != nil {
		return nil, fmt.Errorf("%s: %w", JournalName, err)
	}
	if err = in.led.Add(in.mountItem()); err != nil {
		return nil, err
	}
	if err = unix.Mount(in.loop.Dev, in.mnt, "ext4", 0, mountOpts); err != nil {
		_ = in.led.Done(in.mountItem())
		return nil, fmt.Errorf("%s: mount %s on %s: %w", JournalName, in.loop.Dev, in.mnt, err)
	}
	in.mounted = true
	for _, d := range []string{"writer", "victim"} {
		if err = os.Mkdir(filepath.Join(in.mnt, d), 0o777); err != nil {
			return nil, fmt.Errorf("%s: %w", JournalName, err)
		}
	}
	if in.cg, err = newCgroup(ctx, journalPrefix, c.CgroupVersion); err != nil {
		return nil, fmt.Errorf("%s: %w", JournalName, err)
	}
	if err = limit(in.cg, in.loop.ID(), "wbps", c.LimitBps); err != nil {
		return nil, fmt.Errorf("%s: %w", JournalName, err)
	}
	if in.writer, err = labproc.Start(labproc.Spec{Part: writerPart, Name: writerComm, Arg: fmt.Sprintf("%s,%d", filepath.Join(in.mnt, "writer"), c.Chunk), MaxLife: c.MaxLife}); err != nil {
		return nil, fmt.Errorf("%s: %w", JournalName, err)
	}
	if in.victim, err = labproc.Start(labproc.Spec{Part: victimPart, Name: victimComm, Arg: fmt.Sprintf("%s,%d", filepath.Join(in.mnt, "victim"), c.VictimEvery.Milliseconds()), MaxLife: c.MaxLife}); err != nil {
		return nil, fmt.Errorf("%s: %w", JournalName, err)
	}
	for _, p := range []struct {
		c   *labproc.Child
		key string
		tid *int
	}{{in.writer, "writer", &in.wtid}, {in.victim, "victim", &in.vtid}} {
		line, err := p.c.WaitLine(ctx, "ready", lab.Scaled(stepTime))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", JournalName, err)
		}
		if ts := tidsOf(line, p.key); len(ts) == 1 {
			*p.tid = ts[0]
		}
	}
	if err = in.cg.Add(in.writer.PID()); err != nil {
		return nil, fmt.Errorf("%s: %w", JournalName, err)
	}
	if err = in.writer.Send("go"); err != nil {
		return nil, err
	}
	if err = in.victim.Send("go"); err != nil {
		return nil, err
	}
	slow := make(chan struct{}, 1)
	in.wg.Add(1)
	go in.watch(slow)
	// In place once a victim's fsync has waited long for the journal.
	select {
	case <-slow:
	case <-in.victim.Done():
		return nil, fmt.Errorf("%s: %s exited", JournalName, victimComm)
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(lab.Scaled(stepTime)):
		return nil, fmt.Errorf("%s: no fsync of %s waited 300 ms in %s: %w", JournalName, victimComm, lab.Scaled(stepTime), lab.ErrTimeout)
	}
	if opt.Logf != nil {
		opt.Logf("%s", in.Describe())
	}
	return in, nil
}

// watch follows the victim's fsyncs: it says when one waited long (slow),
// and lifts the throttle if one has not ended after stuckFsync.
func (in *JournalInstance) watch(slow chan<- struct{}) {
	defer in.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-in.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		line, err := in.victim.WaitLine(ctx, "fsync ", stuckFsync)
		if err != nil {
			if errors.Is(err, lab.ErrTimeout) {
				in.lift()
				continue
			}
			return
		}
		n, _ := strconv.Atoi(strings.TrimPrefix(line, "fsync "))
		d := time.Duration(n) * time.Millisecond
		in.mu.Lock()
		in.maxFsync = max(in.maxFsync, d)
		in.mu.Unlock()
		if d >= 300*time.Millisecond {
			select {
			case slow <- struct{}{}:
			default:
			}
		}
	}
}

// lift removes the writer's limit: what it held is written at once.
func (in *JournalInstance) lift() {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.lifted || in.cg == nil || in.loop == nil || in.loop.Dev == "" {
		return
	}
	in.lifted = true
	_ = limit(in.cg, in.loop.ID(), "wbps", 0)
}

// Lifted says whether the watchdog lifted the throttle.
func (in *JournalInstance) Lifted() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.lifted && !in.closing()
}

func (in *JournalInstance) closing() bool {
	select {
	case <-in.stop:
		return true
	default:
		return false
	}
}

// Device is the loop device's name.
func (in *JournalInstance) Device() string { return in.loop.Name }

// Cgroup is the throttled writer's cgroup.
func (in *JournalInstance) Cgroup() string { return in.cg.Path }

// Writer and Victim are the two processes.
func (in *JournalInstance) Writer() int { return in.writer.PID() }
func (in *JournalInstance) Victim() int { return in.victim.PID() }

// Tasks implements lab.Instance.
func (in *JournalInstance) Tasks() lab.Tasks {
	return lab.Tasks{Offender: in.wtid, Victims: []int{in.vtid}}
}

// Describe implements lab.Instance.
func (in *JournalInstance) Describe() string {
	return fmt.Sprintf("%s: ext4 ("+mountOpts+") on %s (%s, %d MiB over %s) at %s\n"+
		"%s pid %d in cgroup %s (v%d), capped at %d B/s of writes (%s), writes and fsyncs %d KiB files\n"+
		"%s pid %d, in no such cgroup, appends 4 KiB and fsyncs every %s: its fsyncs wait for the commits of the writer's data",
		JournalName, in.loop.Dev, in.loop.ID(), in.cfg.DeviceMB, in.loop.File, in.mnt,
		writerComm, in.writer.PID(), in.cg.Path, in.cg.Version, in.cfg.LimitBps, limitFile(in.cg, "wbps"), in.cfg.Chunk>>10,
		victimComm, in.victim.PID(), in.cfg.VictimEvery)
}

// Close implements lab.Instance: the throttle is lifted first, so that
// the writer's data and every commit behind it finish at once.
func (in *JournalInstance) Close() error {
	in.closeOnce.Do(func() { in.closeErr = in.close() })
	return in.closeErr
}

func (in *JournalInstance) close() error {
	var errs []error
	close(in.stop)
	in.lift()
	for _, c := range []*labproc.Child{in.victim, in.writer} {
		if c != nil {
			errs = append(errs, c.Close(time.Second, 30*time.Second))
		}
	}
	in.wg.Wait()
	if in.cg != nil {
		errs = append(errs, in.cg.Remove())
	}
	if in.mounted {
		// A lazy unmount if a straggler still holds it: the device then
		// unbinds (autoclear) once the last user lets go.
		if err := unix.Unmount(in.mnt, 0); err != nil && unix.Unmount(in.mnt, unix.MNT_DETACH) != nil {
			errs = append(errs, fmt.Errorf("unmount %s: %w", in.mnt, err))
		} else {
			_ = in.led.Done(in.mountItem())
		}
		in.mounted = false
	}
	if in.loop != nil {
		errs = append(errs, in.loop.Close())
	}
	if in.dir != "" {
		if err := os.RemoveAll(in.dir); err == nil {
			_ = in.led.Done(lab.Tree(in.dir))
		} else {
			errs = append(errs, err)
		}
	}
	if in.led != nil {
		errs = append(errs, in.led.Close())
	}
	return errors.Join(errs...)
}
