// Package cpuquota is the lab for a lock holder in a cgroup whose CPU
// quota is used up: CFS bandwidth control throttles the cgroup while one
// of its threads holds its process's mmap_lock for writing, and a
// /proc/PID/cmdline reader (what ps does) waits for the lock. Kubernetes
// CPU limits make this one of the most common latency causes; the
// ClickHouse story's pods were "always reaching their quota and becoming
// throttled".
//
// What runs: a cgroup (cpu controller; v1 cpu.cfs_quota_us and
// cpu.cfs_period_us, or v2 cpu.max) with a quota of 5 ms per 100 ms by
// default, holding a child (wolf-cpuquota) whose spinner threads (8 by
// default) use the quota up, and whose holder thread mprotects a populated
// region (256 MiB of 4 KiB pages by default) back and forth: each call
// holds the mmap_lock for writing while it walks the page tables. Outside
// the cgroup a reader reads the child's cmdline every 20 ms.
//
// What it shows depends on the kernel, and that is the point of running
// it: before 6.18 a throttled cgroup's tasks all leave the CPU, a holder
// among them, lock held, until the next period; since 6.18 tasks are
// throttled only on their way back to user space, so a holder inside the
// kernel runs on and the quota no longer holds the lock (wolf measures per
// hold how long the holder was throttled, and says which it was).
//
// Bounded: the child and the reader die with the lab (Pdeathsig), exit
// when the lab closes their stdin, and after MaxLife whatever happens; no
// hold outlasts the holder's CPU need at the quota (milliseconds of CPU,
// at 5% of a CPU). Close kills them and removes the cgroup; a killed lab's
// empty cgroup is removed by the next Start.
package cpuquota

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/lab/labproc"
)

// Name is the lab's name.
const Name = "cpu-quota-lock"

const (
	childComm    = "wolf-cpuquota"
	childPart    = "cpuquota-child"
	cgroupPrefix = "wolf-lab-cpuquota-"
	stepTime     = 30 * time.Second
)

// Config sizes the lab; zero fields take the defaults.
type Config struct {
	QuotaUs, PeriodUs int64
	Spinners          int
	RegionMB          int
	CgroupVersion     int // 1 or 2; 0: whichever hierarchy has the cpu controller
	ReaderEvery       time.Duration
	MaxLife           time.Duration
}

// Defaults: the reproduction.
var Defaults = Config{QuotaUs: 5000, PeriodUs: 100000, Spinners: 8, RegionMB: 256, ReaderEvery: 20 * time.Millisecond, MaxLife: 10 * time.Minute}

type quotaLab struct{ cfg Config }

// New returns the lab with the defaults.
func New() lab.Lab { return quotaLab{Defaults} }

// NewWithConfig returns the lab sized by c.
func NewWithConfig(c Config) lab.Lab {
	d := Defaults
	if c.QuotaUs > 0 {
		d.QuotaUs = c.QuotaUs
	}
	if c.PeriodUs > 0 {
		d.PeriodUs = c.PeriodUs
	}
	if c.Spinners > 0 {
		d.Spinners = c.Spinners
	}
	if c.RegionMB > 0 {
		d.RegionMB = c.RegionMB
	}
	if c.ReaderEvery > 0 {
		d.ReaderEvery = c.ReaderEvery
	}
	if c.MaxLife > 0 {
		d.MaxLife = c.MaxLife
	}
	d.CgroupVersion = c.CgroupVersion
	return quotaLab{d}
}

func (quotaLab) Name() string { return Name }

func (quotaLab) Summary() string {
	return "a cgroup throttled by its CPU quota while one of its threads holds its mmap_lock for writing; a ps-like reader waits"
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
func (l quotaLab) Start(ctx context.Context, opt lab.Options) (_ lab.Instance, err error) {
	c := l.cfg
	if opt.Victims > 0 {
		c.Spinners = opt.Victims
	}
	switch {
	case c.QuotaUs < 1000 || c.PeriodUs < 1000 || c.QuotaUs > c.PeriodUs:
		return nil, fmt.Errorf("cpuquota: quota %d µs per %d µs: want 1 ms ≤ quota ≤ period", c.QuotaUs, c.PeriodUs)
	case c.Spinners < 1 || c.Spinners > 64:
		return nil, fmt.Errorf("cpuquota: %d spinners: want 1 to 64", c.Spinners)
	case c.RegionMB < 1 || c.RegionMB > 2048:
		return nil, fmt.Errorf("cpuquota: region of %d MiB: want 1 to 2048", c.RegionMB)
	}
	in := &Instance{cfg: c, tids: map[string][]int{}}
	defer func() {
		if err != nil {
			err = errors.Join(err, in.Close())
		}
	}()
	if in.cg, err = labproc.NewCgroup(ctx, "cpu", cgroupPrefix, c.CgroupVersion); err != nil {
		return nil, fmt.Errorf("cpuquota: %w", err)
	}
	if in.cg.Version == 1 {
		err = errors.Join(in.cg.Set("cpu.cfs_period_us", strconv.FormatInt(c.PeriodUs, 10)), in.cg.Set("cpu.cfs_quota_us", strconv.FormatInt(c.QuotaUs, 10)))
	} else {
		err = in.cg.Set("cpu.max", fmt.Sprintf("%d %d", c.QuotaUs, c.PeriodUs))
	}
	if err != nil {
		return nil, fmt.Errorf("cpuquota: %w", err)
	}
	in.child, err = labproc.Start(labproc.Spec{Part: childPart, Name: childComm, Arg: fmt.Sprintf("%d,%d", c.Spinners, c.RegionMB), MaxLife: c.MaxLife})
	if err != nil {
		return nil, fmt.Errorf("cpuquota: %w", err)
	}
	line, err := in.child.WaitLine(ctx, "ready", stepTime)
	if err != nil {
		return nil, fmt.Errorf("cpuquota: %w", err)
	}
	for _, kv := range strings.Fields(line)[1:] {
		k, v, _ := strings.Cut(kv, "=")
		if n, err := strconv.Atoi(v); err == nil {
			in.tids[k] = append(in.tids[k], n)
		}
	}
	if len(in.tids["holder"]) != 1 {
		return nil, fmt.Errorf("cpuquota: child said %q", line)
	}
	// Into the cgroup (every thread: cgroup.procs moves the whole
	// process), then to work.
	if err := in.cg.Add(in.child.PID()); err != nil {
		return nil, fmt.Errorf("cpuquota: %w", err)
	}
	if err := in.child.Send("go"); err != nil {
		return nil, err
	}
	if in.reader, err = labproc.StartPSReader(ctx, in.child.PID(), c.ReaderEvery, c.MaxLife); err != nil {
		return nil, fmt.Errorf("cpuquota: %w", err)
	}
	// Wait until the cgroup is being throttled.
	err = lab.WaitFor(ctx, stepTime, "the cgroup to be throttled", func() (bool, error) {
		b, err := os.ReadFile(in.cg.Dir() + "/cpu.stat")
		if err != nil {
			return false, err
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "nr_throttled "); ok && v != "0" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("cpuquota: %w", err)
	}
	if opt.Logf != nil {
		opt.Logf("%s", in.Describe())
	}
	return in, nil
}

// PID is the child whose mmap_lock is held.
func (in *Instance) PID() int { return in.child.PID() }

// Holder is the thread that holds the lock.
func (in *Instance) Holder() int { return in.tids["holder"][0] }

// Reader is the cmdline reader's pid.
func (in *Instance) Reader() int { return in.reader.PID() }

// ReaderStats says how many reads the reader made and its longest.
func (in *Instance) ReaderStats() (int, float64) { return in.reader.Stats() }

// Cgroup is the lab's cgroup.
func (in *Instance) Cgroup() *labproc.Cgroup { return in.cg }

// Tasks implements lab.Instance.
func (in *Instance) Tasks() lab.Tasks {
	t := lab.Tasks{Offender: in.Holder()}
	if in.reader != nil {
		t.Victims = []int{in.reader.PID()}
	}
	return t
}

// Describe implements lab.Instance.
func (in *Instance) Describe() string {
	return fmt.Sprintf("%s: cgroup %s (v%d at %s), CPU quota %d µs per %d µs\n"+
		"child %s pid %d: %d spinners %v use the quota up; holder tid %d mprotects %d MiB back and forth, holding the mmap_lock for writing\n"+
		"reader %s pid %d reads /proc/%d/cmdline every %s",
		Name, in.cg.Path, in.cg.Version, in.cg.Root, in.cfg.QuotaUs, in.cfg.PeriodUs, childComm, in.PID(), in.cfg.Spinners, in.tids["spin"],
		in.Holder(), in.cfg.RegionMB, labproc.PSReaderComm, in.Reader(), in.PID(), in.cfg.ReaderEvery)
}

// Close implements lab.Instance.
func (in *Instance) Close() error {
	var errs []error
	if in.reader != nil {
		errs = append(errs, in.reader.Close(time.Second, 10*time.Second))
	}
	if in.child != nil {
		errs = append(errs, in.child.Close(time.Second, 10*time.Second))
	}
	if in.cg != nil {
		errs = append(errs, in.cg.Remove())
	}
	return errors.Join(errs...)
}
