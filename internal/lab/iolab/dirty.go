package iolab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/lab/labproc"
)

// DirtyName is the dirty-throttle lab's name.
const DirtyName = "dirty-throttle"

const dirtyPrefix = "wolf-lab-dirty-"

// DirtyConfig sizes the dirty-throttle lab; zero fields take the defaults.
type DirtyConfig struct {
	LimitBps      int64 // the device's writeback limit
	DirtyMB       int64 // the device's own dirty limit (strict)
	DeviceMB      int64
	CgroupVersion int
	MaxLife       time.Duration
}

// DirtyDefaults: writeback at 1 MiB/s, 8 MiB of dirty pages at most.
var DirtyDefaults = DirtyConfig{LimitBps: 1 << 20, DirtyMB: 8, DeviceMB: 256, MaxLife: 10 * time.Minute}

type dirtyLab struct{ cfg DirtyConfig }

// NewDirty returns the dirty-throttle lab with the defaults.
func NewDirty() lab.Lab { return dirtyLab{DirtyDefaults} }

func (dirtyLab) Name() string { return DirtyName }

func (dirtyLab) Summary() string {
	return "a fast writer to a loop device whose writeback is capped at 1 MiB/s: balance_dirty_pages pauses it"
}

func (dirtyLab) WhyRoot() string {
	return "makes a loop device, caps its writeback and its dirty pages"
}

// Stalls: the writer sleeps in balance_dirty_pages most of the time (each
// pause at most 200 ms).
func (dirtyLab) Stalls() bool { return true }

// DirtyInstance is the running dirty-throttle lab.
type DirtyInstance struct {
	cfg     DirtyConfig
	led     *lab.Ledger
	dir     string
	loop    *Loop
	cg      *labproc.Cgroup // v2: the writer's cgroup (cgroup writeback)
	root    string          // v1: the blkio root, whose limit holds the flusher
	dirtier *labproc.Child
	tid     int
	memcg   bool // the writer's memory limit holds its dirty pages (no strict_limit)
}

// Start implements lab.Lab. On cgroup v1 writeback is not charged to the
// cgroup that dirtied the pages, so the limit is the root cgroup's, on the
// lab's own device (it goes with the device); on v2 the writer has a
// cgroup of its own whose io.max holds its writeback.
func (l dirtyLab) Start(ctx context.Context, opt lab.Options) (_ lab.Instance, err error) {
	c := l.cfg
	in := &DirtyInstance{cfg: c}
	defer func() {
		if err != nil {
			err = errors.Join(err, in.Close())
		}
	}()
	if in.led, err = lab.NewLedger(DirtyName, opt.Logf); err != nil {
		return nil, err
	}
	if in.dir, err = labDir(in.led, "dirty"); err != nil {
		return nil, err
	}
	if in.loop, err = NewLoop(in.led, filepath.Join(in.dir, lab.Name("dirty")+".img"), c.DeviceMB<<20, false); err != nil {
		return nil, fmt.Errorf("%s: %w", DirtyName, err)
	}
	// The device's dirty pages are held to DirtyMB whatever the host's
	// dirty limits (strict: from the first page, not past a global
	// threshold). Kernels before 6.2 cannot be told so; on cgroup v2 the
	// writer's memory cgroup then holds its dirty pages instead (a
	// cgroup's dirty limit is a share of its memory).
	bdi := filepath.Join("/sys/class/bdi", in.loop.ID())
	strictErr := os.WriteFile(filepath.Join(bdi, "strict_limit"), []byte("1"), 0)
	if strictErr == nil {
		if err = os.WriteFile(filepath.Join(bdi, "max_bytes"), []byte(strconv.FormatInt(c.DirtyMB<<20, 10)), 0); err != nil {
			return nil, fmt.Errorf("%s: %w", DirtyName, err)
		}
	}
	root, _, herr := labproc.Hierarchy(ctx, "blkio", 1)
	if herr == nil && c.CgroupVersion != 2 {
		if strictErr != nil {
			return nil, fmt.Errorf("%s: this kernel cannot hold one device to a dirty limit of its own (%s/strict_limit, Linux 6.2), and cgroup v1 writeback has no dirty limit per cgroup: %w", DirtyName, bdi, strictErr)
		}
		in.root = root
		if err = os.WriteFile(filepath.Join(root, "blkio.throttle.write_bps_device"), fmt.Appendf(nil, "%s %d", in.loop.ID(), c.LimitBps), 0); err != nil {
			return nil, fmt.Errorf("%s: %w", DirtyName, err)
		}
	} else {
		if in.cg, err = newCgroup(ctx, dirtyPrefix, 2); err != nil {
			return nil, fmt.Errorf("%s: %w", DirtyName, err)
		}
		if err = limit(in.cg, in.loop.ID(), "wbps", c.LimitBps); err != nil {
			return nil, fmt.Errorf("%s: %w", DirtyName, err)
		}
		if strictErr != nil {
			// A fifth of 64 MiB may be dirty (vm.dirty_ratio's share).
			if err = in.cg.Set("memory.max", strconv.FormatInt(64<<20, 10)); err != nil {
				return nil, fmt.Errorf("%s: no strict dirty limit on this kernel (%v), and no memory limit for the writer either: %w", DirtyName, strictErr, err)
			}
			in.memcg = true
		}
	}
	arg := fmt.Sprintf("%s,%d,%d", in.loop.Dev, 1<<20, (c.DeviceMB/2)<<20)
	if in.dirtier, err = labproc.Start(labproc.Spec{Part: dirtyPart, Name: dirtierComm, Arg: arg, MaxLife: c.MaxLife}); err != nil {
		return nil, fmt.Errorf("%s: %w", DirtyName, err)
	}
	line, err := in.dirtier.WaitLine(ctx, "ready", lab.Scaled(stepTime))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", DirtyName, err)
	}
	if ts := tidsOf(line, "dirtier"); len(ts) == 1 {
		in.tid = ts[0]
	}
	if in.cg != nil {
		if err = in.cg.Add(in.dirtier.PID()); err != nil {
			return nil, fmt.Errorf("%s: %w", DirtyName, err)
		}
	}
	if err = in.dirtier.Send("go"); err != nil {
		return nil, err
	}
	// In place once the writer sleeps in balance_dirty_pages. Kernels that
	// inline it into its caller show balance_dirty_pages_ratelimited (or
	// _flags) as the sleeping function instead.
	var wchan string
	err = lab.WaitFor(ctx, lab.Scaled(stepTime), "the writer to be paused by dirty throttling", func() (bool, error) {
		select {
		case <-in.dirtier.Done():
			return false, fmt.Errorf("%s exited", dirtierComm)
		default:
		}
		if w := labproc.Wchan(in.dirtier.PID(), in.tid); w != "" && w != "0" {
			wchan = w
		}
		return strings.HasPrefix(wchan, "balance_dirty_pages"), nil
	})
	if err != nil {
		st := labproc.ThreadState(in.dirtier.PID(), in.tid)
		err = fmt.Errorf("%w (writer tid %d: state %c, last slept in %q, stack %q)", err, in.tid, st, wchan, labproc.Stack(in.dirtier.PID(), in.tid, 4))
		return nil, fmt.Errorf("%s: %w", DirtyName, err)
	}
	if opt.Logf != nil {
		opt.Logf("%s", in.Describe())
	}
	return in, nil
}

// PID is the writer's process.
func (in *DirtyInstance) PID() int { return in.dirtier.PID() }

// Device is the loop device's name.
func (in *DirtyInstance) Device() string { return in.loop.Name }

// Cgroup is the cgroup whose limit holds the writeback: the writer's on
// v2, the root on v1.
func (in *DirtyInstance) Cgroup() string {
	if in.cg != nil {
		return in.cg.Path
	}
	return "/"
}

// Tasks implements lab.Instance.
func (in *DirtyInstance) Tasks() lab.Tasks { return lab.Tasks{Victims: []int{in.tid}} }

// Describe implements lab.Instance.
func (in *DirtyInstance) Describe() string {
	where := fmt.Sprintf("the root cgroup's blkio.throttle.write_bps_device (v1 writeback is the root's) at %s", in.root)
	if in.cg != nil {
		where = fmt.Sprintf("cgroup %s's io.max (v2 cgroup writeback)", in.cg.Path)
	}
	held := fmt.Sprintf("its dirty pages held to %d MiB (bdi strict_limit, max_bytes)", in.cfg.DirtyMB)
	if in.memcg {
		held = "the writer's dirty pages held by its memory cgroup's 64 MiB (no strict_limit before Linux 6.2)"
	}
	return fmt.Sprintf("%s: %s (%s, %d MiB over %s), %s\n"+
		"its writeback capped at %d B/s by %s\n"+
		"%s pid %d writes it through the page cache as fast as it can",
		DirtyName, in.loop.Dev, in.loop.ID(), in.cfg.DeviceMB, in.loop.File, held,
		in.cfg.LimitBps, where, dirtierComm, in.dirtier.PID())
}

// Close implements lab.Instance: the limit is lifted first, so that the
// dirty pages write back at once when the writer goes.
func (in *DirtyInstance) Close() error {
	var errs []error
	if in.loop != nil && in.loop.Dev != "" {
		if in.root != "" {
			_ = os.WriteFile(filepath.Join(in.root, "blkio.throttle.write_bps_device"), fmt.Appendf(nil, "%s 0", in.loop.ID()), 0)
		}
		if in.cg != nil {
			_ = limit(in.cg, in.loop.ID(), "wbps", 0)
		}
	}
	if in.dirtier != nil {
		errs = append(errs, in.dirtier.Close(time.Second, 30*time.Second))
	}
	if in.cg != nil {
		errs = append(errs, in.cg.Remove())
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
