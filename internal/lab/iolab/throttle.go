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

// ThrottleName is the io-throttle lab's name.
const ThrottleName = "io-throttle"

const (
	readerComm    = "wolf-ioreader"
	dirtierComm   = "wolf-dirtier"
	writerComm    = "wolf-iowriter"
	victimComm    = "wolf-fsync"
	throttlePrefx = "wolf-lab-iothrottle-"
	stepTime      = 30 * time.Second
)

// ThrottleConfig sizes the io-throttle lab; zero fields take the defaults.
type ThrottleConfig struct {
	Threads       int
	Block         int64 // bytes per read
	LimitBps      int64 // the cgroup's read limit on the device
	DeviceMB      int64
	CgroupVersion int // 1 or 2; 0: whichever has the I/O controller (v1 first)
	MaxLife       time.Duration
}

// ThrottleDefaults: the reproduction, four readers against 1 MiB/s.
var ThrottleDefaults = ThrottleConfig{Threads: 4, Block: 64 << 10, LimitBps: 1 << 20, DeviceMB: 64, MaxLife: 10 * time.Minute}

type throttleLab struct{ cfg ThrottleConfig }

// NewThrottle returns the io-throttle lab with the defaults.
func NewThrottle() lab.Lab { return throttleLab{ThrottleDefaults} }

// NewThrottleWithConfig returns the lab sized by c.
func NewThrottleWithConfig(c ThrottleConfig) lab.Lab {
	d := ThrottleDefaults
	if c.Threads > 0 {
		d.Threads = c.Threads
	}
	if c.Block > 0 {
		d.Block = c.Block
	}
	if c.LimitBps > 0 {
		d.LimitBps = c.LimitBps
	}
	if c.DeviceMB > 0 {
		d.DeviceMB = c.DeviceMB
	}
	if c.MaxLife > 0 {
		d.MaxLife = c.MaxLife
	}
	d.CgroupVersion = c.CgroupVersion
	return throttleLab{d}
}

func (throttleLab) Name() string { return ThrottleName }

func (throttleLab) Summary() string {
	return "readers in a cgroup capped at 1 MiB/s of reads on a loop device (blkio.throttle / io.max) wait in blk-throttle while the device idles"
}

func (throttleLab) WhyRoot() string {
	return "makes a loop device and a cgroup with an I/O limit on it"
}

// Stalls: the readers sleep in D state most of the time (each sleep a
// fraction of a second): wolf lab run runs the lab in bounded episodes.
func (throttleLab) Stalls() bool { return true }

// ThrottleInstance is the running io-throttle lab.
type ThrottleInstance struct {
	cfg    ThrottleConfig
	led    *lab.Ledger
	dir    string
	loop   *Loop
	cg     *labproc.Cgroup
	reader *labproc.Child
	tids   []int
}

// Start implements lab.Lab.
func (l throttleLab) Start(ctx context.Context, opt lab.Options) (_ lab.Instance, err error) {
	c := l.cfg
	if opt.Victims > 0 {
		c.Threads = opt.Victims
	}
	switch {
	case c.Threads < 1 || c.Threads > 64:
		return nil, fmt.Errorf("io-throttle: %d threads: want 1 to 64", c.Threads)
	case c.Block < 4096 || c.Block%4096 != 0 || c.Block > 4<<20:
		return nil, fmt.Errorf("io-throttle: block of %d bytes: want a multiple of 4 KiB up to 4 MiB", c.Block)
	case c.LimitBps < 64<<10:
		return nil, fmt.Errorf("io-throttle: limit %d B/s: want at least 64 KiB/s", c.LimitBps)
	case c.DeviceMB < 1 || c.DeviceMB > 1024 || c.DeviceMB<<20 < c.Block:
		return nil, fmt.Errorf("io-throttle: a %d MiB device: want 1 to 1024 MiB, more than a block", c.DeviceMB)
	}
	in := &ThrottleInstance{cfg: c}
	defer func() {
		if err != nil {
			err = errors.Join(err, in.Close())
		}
	}()
	if in.led, err = lab.NewLedger(ThrottleName, opt.Logf); err != nil {
		return nil, err
	}
	if in.dir, err = labDir(in.led, "iothrottle"); err != nil {
		return nil, err
	}
	if in.loop, err = NewLoop(in.led, filepath.Join(in.dir, lab.Name("iothrottle")+".img"), c.DeviceMB<<20, false); err != nil {
		return nil, fmt.Errorf("io-throttle: %w", err)
	}
	if in.cg, err = newCgroup(ctx, throttlePrefx, c.CgroupVersion); err != nil {
		return nil, fmt.Errorf("io-throttle: %w", err)
	}
	if err = limit(in.cg, in.loop.ID(), "rbps", c.LimitBps); err != nil {
		return nil, fmt.Errorf("io-throttle: %w", err)
	}
	arg := fmt.Sprintf("%s,%d,%d,%d", in.loop.Dev, c.Threads, c.Block, c.DeviceMB<<20)
	if in.reader, err = labproc.Start(labproc.Spec{Part: readerPart, Name: readerComm, Arg: arg, MaxLife: c.MaxLife}); err != nil {
		return nil, fmt.Errorf("io-throttle: %w", err)
	}
	line, err := in.reader.WaitLine(ctx, "ready", lab.Scaled(stepTime))
	if err != nil {
		return nil, fmt.Errorf("io-throttle: %w", err)
	}
	in.tids = tidsOf(line, "reader")
	if err = in.cg.Add(in.reader.PID()); err != nil {
		return nil, fmt.Errorf("io-throttle: %w", err)
	}
	if err = in.reader.Send("go"); err != nil {
		return nil, err
	}
	// In place once blk-throttle has held some of the readers' bios: the
	// cgroup's bytes (v1 io_service_bytes, v2 io.stat rbytes) grow at the
	// limit, not faster.
	if err = in.waitThrottled(ctx); err != nil {
		return nil, fmt.Errorf("io-throttle: %w", err)
	}
	if opt.Logf != nil {
		opt.Logf("%s", in.Describe())
	}
	return in, nil
}

// waitThrottled waits until the readers sleep in D state.
func (in *ThrottleInstance) waitThrottled(ctx context.Context) error {
	return lab.WaitFor(ctx, lab.Scaled(stepTime), "the readers to wait for I/O", func() (bool, error) {
		select {
		case <-in.reader.Done():
			return false, fmt.Errorf("%s exited", readerComm)
		default:
		}
		for _, t := range in.tids {
			if labproc.ThreadState(in.reader.PID(), t) == 'D' {
				return true, nil
			}
		}
		return false, nil
	})
}

// labDir makes the lab's directory for its files, in the ledger.
func labDir(led *lab.Ledger, what string) (string, error) {
	dir := filepath.Join(os.TempDir(), lab.Name(what))
	if err := led.Add(lab.Tree(dir)); err != nil {
		return "", err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		_ = led.Done(lab.Tree(dir))
		return "", fmt.Errorf("lab directory: %w", err)
	}
	return dir, nil
}

func tidsOf(line, key string) []int {
	var out []int
	for _, kv := range strings.Fields(line)[1:] {
		k, v, _ := strings.Cut(kv, "=")
		if n, err := strconv.Atoi(v); err == nil && k == key {
			out = append(out, n)
		}
	}
	return out
}

// PID is the readers' process.
func (in *ThrottleInstance) PID() int { return in.reader.PID() }

// Threads are the reader threads.
func (in *ThrottleInstance) Threads() []int { return in.tids }

// Device is the loop device's name ("loop3").
func (in *ThrottleInstance) Device() string { return in.loop.Name }

// Cgroup is the throttled cgroup.
func (in *ThrottleInstance) Cgroup() *labproc.Cgroup { return in.cg }

// Tasks implements lab.Instance.
func (in *ThrottleInstance) Tasks() lab.Tasks {
	return lab.Tasks{Victims: append([]int(nil), in.tids...)}
}

// Describe implements lab.Instance.
func (in *ThrottleInstance) Describe() string {
	return fmt.Sprintf("%s: %s (%s, %d MiB over %s)\n"+
		"cgroup %s (v%d at %s) capped at %d B/s of reads on it (%s)\n"+
		"%s pid %d: %d threads %v read %d KiB at a time with O_DIRECT",
		ThrottleName, in.loop.Dev, in.loop.ID(), in.cfg.DeviceMB, in.loop.File,
		in.cg.Path, in.cg.Version, in.cg.Root, in.cfg.LimitBps, limitFile(in.cg, "rbps"),
		readerComm, in.reader.PID(), in.cfg.Threads, in.tids, in.cfg.Block>>10)
}

// Close implements lab.Instance: the readers go first (their reads are
// held in the throttle: lifting it lets them finish at once), then the
// cgroup, the device, the files.
func (in *ThrottleInstance) Close() error {
	var errs []error
	if in.cg != nil && in.loop != nil && in.loop.Dev != "" {
		_ = limit(in.cg, in.loop.ID(), "rbps", 0)
	}
	if in.reader != nil {
		errs = append(errs, in.reader.Close(time.Second, 10*time.Second))
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
