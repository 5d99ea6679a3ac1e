package iolab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/lab/labproc"
)

// SlowName is the slow-device lab's name.
const SlowName = "slow-device"

const (
	slowFSType = "fuse.wolf-slowdev"
	slowSource = "wolf-slowdev"
)

// SlowConfig sizes the slow-device lab; zero fields take the defaults.
type SlowConfig struct {
	Delay    time.Duration // per read or write of the backing file
	Threads  int           // reader threads
	DeviceMB int64
	MaxLife  time.Duration
}

// SlowDefaults: 150 ms a request (a failing disk, a congested network
// volume), two readers: each waits about 300 ms a read.
var SlowDefaults = SlowConfig{Delay: 150 * time.Millisecond, Threads: 2, DeviceMB: 16, MaxLife: 10 * time.Minute}

type slowLab struct{ cfg SlowConfig }

// NewSlow returns the slow-device lab with the defaults.
func NewSlow() lab.Lab { return slowLab{SlowDefaults} }

func (slowLab) Name() string { return SlowName }

func (slowLab) Summary() string {
	return "a loop device over a FUSE file the lab serves 150 ms a request: the device is slow by itself; readers wait on it"
}

func (slowLab) WhyRoot() string {
	return "mounts a FUSE file system it serves itself, makes a loop device over it"
}

// Stalls: the readers and the loop device's worker sleep in D state,
// each time for a few tens of milliseconds.
func (slowLab) Stalls() bool { return true }

// SlowInstance is the running slow-device lab.
type SlowInstance struct {
	cfg     SlowConfig
	led     *lab.Ledger
	dir     string
	mnt     string
	fd      int
	fs      *slowfs
	mounted bool
	loop    *Loop
	reader  *labproc.Child
	tids    []int
}

func (in *SlowInstance) mountItem() lab.Item { return lab.Mount(in.mnt, slowFSType, slowSource) }

// Start implements lab.Lab.
func (l slowLab) Start(ctx context.Context, opt lab.Options) (_ lab.Instance, err error) {
	c := l.cfg
	if opt.Victims > 0 {
		c.Threads = opt.Victims
	}
	switch {
	case c.Delay < time.Millisecond || c.Delay > time.Second:
		return nil, fmt.Errorf("%s: a delay of %s: want 1 ms to 1 s", SlowName, c.Delay)
	case c.Threads < 1 || c.Threads > 16:
		return nil, fmt.Errorf("%s: %d readers: want 1 to 16", SlowName, c.Threads)
	}
	in := &SlowInstance{cfg: c, fd: -1}
	defer func() {
		if err != nil {
			err = errors.Join(err, in.Close())
		}
	}()
	if in.led, err = lab.NewLedger(SlowName, opt.Logf); err != nil {
		return nil, err
	}
	if in.dir, err = labDir(in.led, "slowdev"); err != nil {
		return nil, err
	}
	// Named as the lab's, as everything the ledger undoes must be.
	in.mnt = filepath.Join(in.dir, lab.Name("slowfs"))
	if err = os.Mkdir(in.mnt, 0o700); err != nil {
		return nil, fmt.Errorf("%s: %w", SlowName, err)
	}
	if in.fd, err = unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0); err != nil {
		return nil, fmt.Errorf("%s: open /dev/fuse: %w", SlowName, err)
	}
	name := lab.Name("slowdev") + ".img" // named as the lab's: the ledger's loop item carries it
	in.fs = newSlowfs(in.fd, name, uint64(c.DeviceMB)<<20, c.Delay)
	if err = in.led.Add(in.mountItem()); err != nil {
		return nil, err
	}
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other", in.fd)
	if err = unix.Mount(slowSource, in.mnt, slowFSType, unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		_ = in.led.Done(in.mountItem())
		return nil, fmt.Errorf("%s: mount %s: %w", SlowName, in.mnt, err)
	}
	in.mounted = true
	go in.fs.serve()
	select {
	case err = <-in.fs.initDone:
	case <-time.After(lab.Scaled(stepTime)):
		err = fmt.Errorf("FUSE INIT: %w", lab.ErrTimeout)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", SlowName, err)
	}
	if in.loop, err = in.bind(ctx, filepath.Join(in.mnt, name)); err != nil {
		return nil, fmt.Errorf("%s: %w", SlowName, err)
	}
	arg := fmt.Sprintf("%s,%d,%d,%d", in.loop.Dev, c.Threads, 4096, c.DeviceMB<<20)
	if in.reader, err = labproc.Start(labproc.Spec{Part: readerPart, Name: readerComm, Arg: arg, MaxLife: c.MaxLife}); err != nil {
		return nil, fmt.Errorf("%s: %w", SlowName, err)
	}
	line, err := in.reader.WaitLine(ctx, "ready", lab.Scaled(stepTime))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", SlowName, err)
	}
	in.tids = tidsOf(line, "reader")
	if err = in.reader.Send("go"); err != nil {
		return nil, err
	}
	// In place once the daemon has answered a few of the readers' reads.
	err = lab.WaitFor(ctx, lab.Scaled(stepTime), "the readers to read through the slow device", func() (bool, error) {
		in.fs.mu.Lock()
		n := in.fs.ops[opRead]
		in.fs.mu.Unlock()
		return n >= 5, nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", SlowName, err)
	}
	if opt.Logf != nil {
		opt.Logf("%s", in.Describe())
	}
	return in, nil
}

// PID is the readers' process.
func (in *SlowInstance) PID() int { return in.reader.PID() }

// Device is the loop device's name.
func (in *SlowInstance) Device() string { return in.loop.Name }

// Tasks implements lab.Instance.
func (in *SlowInstance) Tasks() lab.Tasks { return lab.Tasks{Victims: append([]int(nil), in.tids...)} }

// Describe implements lab.Instance.
func (in *SlowInstance) Describe() string {
	return fmt.Sprintf("%s: %s (%s, %d MiB) over %s, a FUSE file the lab serves at %s a read or write, one at a time\n"+
		"%s pid %d: %d threads %v read 4 KiB at a time with O_DIRECT",
		SlowName, in.loop.Dev, in.loop.ID(), in.cfg.DeviceMB, in.loop.File, in.cfg.Delay,
		readerComm, in.reader.PID(), in.cfg.Threads, in.tids)
}

// Close implements lab.Instance: the readers first, then the device,
// then the file system (its daemon answers until the device is gone).
func (in *SlowInstance) Close() error {
	var errs []error
	if in.reader != nil {
		errs = append(errs, in.reader.Close(time.Second, 30*time.Second))
		in.reader = nil
	}
	if in.loop != nil {
		errs = append(errs, in.loop.Close())
		in.loop = nil
	}
	if in.mounted {
		if err := unix.Unmount(in.mnt, 0); err != nil && unix.Unmount(in.mnt, unix.MNT_DETACH) != nil {
			errs = append(errs, fmt.Errorf("unmount %s: %w", in.mnt, err))
		} else {
			_ = in.led.Done(in.mountItem())
		}
		in.mounted = false
	}
	if in.fs != nil {
		in.fs.stop()
	}
	if in.fd >= 0 {
		_ = unix.Close(in.fd)
		in.fd = -1
	}
	if in.dir != "" {
		if err := os.RemoveAll(in.dir); err == nil {
			_ = in.led.Done(lab.Tree(in.dir))
		} else {
			errs = append(errs, err)
		}
		in.dir = ""
	}
	if in.led != nil {
		errs = append(errs, in.led.Close())
		in.led = nil
	}
	return errors.Join(errs...)
}

// bind binds a loop device to the file the lab serves without this process
// ever asking the file system for anything. This process's own goroutine
// answers the file system's requests; once it has read one, the kernel
// waits for the answer uninterruptibly, so a kill -9 landing then takes
// the server away from a thread that cannot die, and the process stays in
// D for ever, holding the mount, the device and the tests' lock. A child
// opens the file and configures the device (LOOP_CONFIGURE asks the file
// system for its statfs) on a descriptor it takes with pidfd_getfd; its
// requests fail when this process, and the connection with it, dies. The
// file system asks for no FLUSH when the file is closed.
func (in *SlowInstance) bind(ctx context.Context, file string) (*Loop, error) {
	b, err := labproc.Start(labproc.Spec{Part: binderPart, Name: "wolf-lab-binder", Arg: file, MaxLife: lab.Scaled(stepTime)})
	if err != nil {
		return nil, err
	}
	defer b.Close(time.Second, 5*time.Second)
	if _, err := b.WaitLine(ctx, "ready", lab.Scaled(stepTime)); err != nil {
		return nil, fmt.Errorf("open %s: %w", file, err)
	}
	return BindLoopBy(in.led, file, func(dev *os.File) error {
		if err := b.Send(fmt.Sprintf("bind %d %d", os.Getpid(), dev.Fd())); err != nil {
			return err
		}
		line, err := b.WaitLine(ctx, "result", lab.Scaled(stepTime))
		if err != nil {
			return err
		}
		var e int
		if _, err := fmt.Sscanf(line, "result %d", &e); err != nil {
			return fmt.Errorf("the binder said %q", line)
		}
		if e != 0 {
			return unix.Errno(e)
		}
		return nil
	})
}
