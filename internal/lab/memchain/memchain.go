// Package memchain is the lab for the ClickHouse story told whole: a
// process at its memory cgroup's limit reclaims while it holds its
// mmap_lock, writers queue behind it, and ps, reading /proc/PID/cmdline,
// waits for the lock (ClickHouse, "The case of the vanishing CPU: A Linux
// kernel debugging story", 2025).
//
// What runs: a memory cgroup (v1 memory.limit_in_bytes, or v2 memory.max)
// limited to 192 MiB by default, holding a child (wolf-memchain) that maps
// a 384 MiB sparse file and reads it page by page from 24 r_file threads
// (its pages stay hot), while 8 r_memory threads mmap 8 MiB of anonymous
// memory with MAP_POPULATE and munmap it, over and over: the populate
// faults every page in under the mmap_lock (read), each charge beyond the
// limit reclaims from the cgroup's hot file pages first, and each munmap
// queues as a writer. Outside the cgroup a reader reads the child's
// cmdline every 20 ms.
//
// Bounded: the child can use no more memory than the cgroup's limit; its
// file is sparse (no disk written) and unlinked once mapped. It and the
// reader die with the lab (Pdeathsig), exit when the lab closes their
// stdin, and after MaxLife whatever happens. Close kills them and removes
// the cgroup; a killed lab's empty cgroup is removed by the next Start.
package memchain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/lab/labproc"
	"github.com/wolf-investigator/wolf/internal/memcg"
)

// Name is the lab's name.
const Name = "memcg-mmap-lock"

const (
	childComm    = "wolf-memchain"
	childPart    = "memchain-child"
	cgroupPrefix = "wolf-lab-memchain-"
	stepTime     = 60 * time.Second
	tmpfsMagic   = 0x01021994
)

// Config sizes the lab; zero fields take the defaults.
type Config struct {
	LimitMB         int
	FileMB          int
	FileThreads     int
	PopulateThreads int
	PopulateMB      int
	CgroupVersion   int // 1 or 2; 0: whichever hierarchy has the memory controller
	ReaderEvery     time.Duration
	Dir             string // for the sparse file: a disk, not tmpfs
	MaxLife         time.Duration
}

// Defaults: the reproduction.
var Defaults = Config{LimitMB: 192, FileMB: 384, FileThreads: 24, PopulateThreads: 8, PopulateMB: 8,
	ReaderEvery: 20 * time.Millisecond, MaxLife: 10 * time.Minute}

type memLab struct{ cfg Config }

// New returns the lab with the defaults.
func New() lab.Lab { return memLab{Defaults} }

// NewWithConfig returns the lab sized by c (zero fields: the defaults).
func NewWithConfig(c Config) lab.Lab {
	d := Defaults
	for _, f := range []struct{ dst, src *int }{{&d.LimitMB, &c.LimitMB}, {&d.FileMB, &c.FileMB}, {&d.FileThreads, &c.FileThreads},
		{&d.PopulateThreads, &c.PopulateThreads}, {&d.PopulateMB, &c.PopulateMB}} {
		if *f.src > 0 {
			*f.dst = *f.src
		}
	}
	if c.ReaderEvery > 0 {
		d.ReaderEvery = c.ReaderEvery
	}
	if c.MaxLife > 0 {
		d.MaxLife = c.MaxLife
	}
	d.Dir, d.CgroupVersion = c.Dir, c.CgroupVersion
	return memLab{d}
}

func (memLab) Name() string { return Name }

func (memLab) Summary() string {
	return "a process at its memory cgroup's limit reclaims under its mmap_lock; writers queue, a ps-like reader waits (the ClickHouse story)"
}

// Instance is the running lab.
type Instance struct {
	cfg    Config
	cg     *labproc.Cgroup
	child  *labproc.Child
	reader *labproc.PSReader
	tids   map[string][]int
}

// Start implements lab.Lab.
func (l memLab) Start(ctx context.Context, opt lab.Options) (_ lab.Instance, err error) {
	c := l.cfg
	if opt.Victims > 0 {
		c.PopulateThreads = opt.Victims
	}
	switch {
	case c.FileMB <= c.LimitMB:
		return nil, fmt.Errorf("memchain: a %d MiB file fits in the %d MiB limit: nothing would reclaim", c.FileMB, c.LimitMB)
	case c.PopulateThreads*c.PopulateMB*2 >= c.LimitMB:
		return nil, fmt.Errorf("memchain: %d × %d MiB populated is half the %d MiB limit or more: the cgroup would OOM rather than reclaim", c.PopulateThreads, c.PopulateMB, c.LimitMB)
	case c.FileThreads+c.PopulateThreads > 128 || c.FileThreads < 1 || c.PopulateThreads < 1:
		return nil, fmt.Errorf("memchain: %d + %d threads: want 1 to 128 in all", c.FileThreads, c.PopulateThreads)
	}
	dir, err := diskDir(c.Dir)
	if err != nil {
		return nil, err
	}
	in := &Instance{cfg: c, tids: map[string][]int{}}
	defer func() {
		if err != nil {
			err = errors.Join(err, in.Close())
		}
	}()
	if in.cg, err = labproc.NewCgroup(ctx, "memory", cgroupPrefix, c.CgroupVersion); err != nil {
		return nil, fmt.Errorf("memchain: %w", err)
	}
	limit := strconv.Itoa(c.LimitMB << 20)
	if in.cg.Version == 1 {
		// swappiness 0: anonymous pages stay, as on the story's swapless hosts.
		err = errors.Join(in.cg.Set("memory.limit_in_bytes", limit), in.cg.Set("memory.swappiness", "0"))
	} else {
		err = in.cg.Set("memory.max", limit)
		if serr := in.cg.Set("memory.swap.max", "0"); serr != nil && !errors.Is(serr, os.ErrNotExist) {
			err = errors.Join(err, serr)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("memchain: %w", err)
	}
	conf, _ := json.Marshal(childConfig{Dir: dir, FileMB: c.FileMB, FileThreads: c.FileThreads, PopulateThreads: c.PopulateThreads, PopulateMB: c.PopulateMB})
	if in.child, err = labproc.Start(labproc.Spec{Part: childPart, Name: childComm, Arg: string(conf), MaxLife: c.MaxLife}); err != nil {
		return nil, fmt.Errorf("memchain: %w", err)
	}
	if _, err := in.child.WaitLine(ctx, "ready", stepTime); err != nil {
		return nil, fmt.Errorf("memchain: %w", err)
	}
	if err := in.cg.Add(in.child.PID()); err != nil {
		return nil, fmt.Errorf("memchain: %w", err)
	}
	if err := in.child.Send("go"); err != nil {
		return nil, err
	}
	line, err := in.child.WaitLine(ctx, "running", stepTime)
	if err != nil {
		return nil, fmt.Errorf("memchain: %w", err)
	}
	for _, kv := range strings.Fields(line)[1:] {
		k, v, _ := strings.Cut(kv, "=")
		if n, err := strconv.Atoi(v); err == nil {
			in.tids[k] = append(in.tids[k], n)
		}
	}
	if in.reader, err = labproc.StartPSReader(ctx, in.child.PID(), c.ReaderEvery, c.MaxLife); err != nil {
		return nil, fmt.Errorf("memchain: %w", err)
	}
	// Wait until the cgroup hits its limit.
	h := memcg.Hierarchy{Version: in.cg.Version, Mount: in.cg.Root}
	before, err := h.ReadCounters(in.cg.Path)
	if err != nil {
		return nil, fmt.Errorf("memchain: %w", err)
	}
	err = lab.WaitFor(ctx, stepTime, "the cgroup to hit its limit", func() (bool, error) {
		s, err := h.ReadCounters(in.cg.Path)
		return err == nil && s.LimitHits > before.LimitHits, err
	})
	if err != nil {
		return nil, fmt.Errorf("memchain: %w", err)
	}
	if opt.Logf != nil {
		opt.Logf("%s", in.Describe())
	}
	return in, nil
}

// diskDir picks a directory on a disk for the sparse file: its holes read
// as clean page-cache pages that reclaim can always free.
func diskDir(want string) (string, error) {
	cands := []string{want}
	if want == "" {
		cands = []string{os.TempDir(), "/var/tmp"}
	}
	for _, d := range cands {
		var fs unix.Statfs_t
		if err := unix.Statfs(d, &fs); err == nil && fs.Type != tmpfsMagic {
			return d, nil
		}
	}
	return "", fmt.Errorf("memchain: no disk-backed directory among %v (tmpfs pages cannot be reclaimed without swap); set Config.Dir", cands)
}

// PID is the child at its cgroup's limit.
func (in *Instance) PID() int { return in.child.PID() }

// Reader is the cmdline reader's pid.
func (in *Instance) Reader() int { return in.reader.PID() }

// ReaderStats says how many reads the reader made and its longest.
func (in *Instance) ReaderStats() (int, float64) { return in.reader.Stats() }

// Cgroup is the lab's memory cgroup.
func (in *Instance) Cgroup() *labproc.Cgroup { return in.cg }

// Threads are the child's threads by role: r_file, r_memory.
func (in *Instance) Threads(role string) []int { return in.tids[role] }

// Tasks implements lab.Instance: the child reclaims under its lock (the
// offender); the reader is the victim.
func (in *Instance) Tasks() lab.Tasks {
	t := lab.Tasks{Offender: in.PID()}
	if in.reader != nil {
		t.Victims = []int{in.reader.PID()}
	}
	return t
}

// Describe implements lab.Instance.
func (in *Instance) Describe() string {
	return fmt.Sprintf("%s: memory cgroup %s (v%d at %s), limit %d MiB\n"+
		"child %s pid %d: %d r_file threads read a %d MiB mapped file; %d r_memory threads MAP_POPULATE and munmap %d MiB\n"+
		"reader %s pid %d reads /proc/%d/cmdline every %s",
		Name, in.cg.Path, in.cg.Version, in.cg.Root, in.cfg.LimitMB, childComm, in.PID(), in.cfg.FileThreads, in.cfg.FileMB,
		in.cfg.PopulateThreads, in.cfg.PopulateMB, labproc.PSReaderComm, in.Reader(), in.PID(), in.cfg.ReaderEvery)
}

// Close implements lab.Instance.
func (in *Instance) Close() error {
	var errs []error
	if in.reader != nil {
		errs = append(errs, in.reader.Close(time.Second, 10*time.Second))
	}
	if in.child != nil {
		// SIGKILL at once: a thread deep in reclaim answers it soonest.
		errs = append(errs, in.child.Close(0, 30*time.Second))
	}
	if in.cg != nil {
		errs = append(errs, in.cg.Remove())
	}
	return errors.Join(errs...)
}
