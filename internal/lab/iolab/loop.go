package iolab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/lab"
)

// Loop is a loop device a lab bound to a file of its own. The lab keeps it
// open: it is bound with autoclear, so that when the lab dies, however it
// dies, the device unbinds once nothing else holds it (a mount of it is
// undone by the ledger first), and Close removes the device, which takes
// the settings made on its queue (throttle rules, the bdi's dirty limits)
// with it.
type Loop struct {
	Dev          string // "/dev/loop3"
	Name         string // "loop3"
	Major, Minor int
	File         string // the backing file
	f            *os.File
	led          *lab.Ledger
	ownFile      bool // NewLoop made the file: Close removes it
}

// NewLoop makes file (size bytes, sparse) and binds a free loop device to
// it, recording both in led first. directIO has the device read and
// write its file with O_DIRECT (no page cache in between).
func NewLoop(led *lab.Ledger, file string, size int64, directIO bool) (_ *Loop, err error) {
	l := &Loop{File: file, led: led, ownFile: true}
	if err := led.Add(lab.File(file)); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, l.Close())
		}
	}()
	bf, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("loop: backing file: %w", err)
	}
	defer bf.Close()
	if err := bf.Truncate(size); err != nil {
		return nil, fmt.Errorf("loop: size %s: %w", file, err)
	}
	return l, l.attach(configureWith(bf, l.File, directIO))
}

// BindLoop binds a free loop device to file, which exists and is the
// lab's (named with lab.Name): Close leaves the file.
func BindLoop(led *lab.Ledger, file string, directIO bool) (_ *Loop, err error) {
	l := &Loop{File: file, led: led}
	defer func() {
		if err != nil {
			err = errors.Join(err, l.Close())
		}
	}()
	bf, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("loop: backing file: %w", err)
	}
	defer bf.Close()
	return l, l.attach(configureWith(bf, l.File, directIO))
}

// BindLoopBy binds a free loop device to file (the lab's, as for
// BindLoop), configure doing the binding on the device's descriptor.
func BindLoopBy(led *lab.Ledger, file string, configure func(dev *os.File) error) (_ *Loop, err error) {
	l := &Loop{File: file, led: led}
	defer func() {
		if err != nil {
			err = errors.Join(err, l.Close())
		}
	}()
	return l, l.attach(configure)
}

// configureWith binds a device to bf with LOOP_CONFIGURE.
func configureWith(bf *os.File, name string, directIO bool) func(dev *os.File) error {
	return func(dev *os.File) error {
		return unix.IoctlLoopConfigure(int(dev.Fd()), loopConfig(int(bf.Fd()), name, directIO))
	}
}

// loopConfig is LOOP_CONFIGURE's argument: backing descriptor fd, cleared
// when its last user closes the device.
func loopConfig(fd int, name string, directIO bool) *unix.LoopConfig {
	cfg := unix.LoopConfig{Fd: uint32(fd)}
	cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
	if directIO {
		cfg.Info.Flags |= unix.LO_FLAGS_DIRECT_IO
	}
	copy(cfg.Info.File_name[:], name)
	return &cfg
}

// attach binds a free device with configure.
func (l *Loop) attach(configure func(dev *os.File) error) error {
	file, led := l.File, l.led
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("loop: %w (is the loop module loaded?)", err)
	}
	defer ctl.Close()
	// Another process may take the free device first: try again.
	for range 10 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return fmt.Errorf("loop: get a free device: %w", err)
		}
		dev := "/dev/loop" + strconv.Itoa(n)
		if err := led.Add(lab.Loop(dev, file)); err != nil {
			return err
		}
		l.Dev, l.Name = dev, filepath.Base(dev)
		if err := l.bind(configure); err != nil {
			if errors.Is(err, unix.EBUSY) {
				_ = led.Done(lab.Loop(dev, file))
				l.Dev, l.Name = "", ""
				continue
			}
			return err
		}
		b, err := os.ReadFile(filepath.Join("/sys/block", l.Name, "dev"))
		if err != nil {
			return fmt.Errorf("loop: %s: %w", l.Name, err)
		}
		a, c, _ := strings.Cut(strings.TrimSpace(string(b)), ":")
		l.Major, _ = strconv.Atoi(a)
		l.Minor, _ = strconv.Atoi(c)
		return nil
	}
	return errors.New("loop: every free device was taken by someone else first")
}

func (l *Loop) bind(configure func(dev *os.File) error) error {
	var f *os.File
	var err error
	// devtmpfs makes the node when the device is created; give it a moment.
	for range 50 {
		if f, err = os.OpenFile(l.Dev, os.O_RDWR, 0); err == nil || !errors.Is(err, os.ErrNotExist) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("loop: open %s: %w", l.Dev, err)
	}
	if err := configure(f); err != nil {
		f.Close()
		return fmt.Errorf("loop: bind %s to %s: %w", l.Dev, l.File, err)
	}
	l.f = f
	return nil
}

// ID is the device's "MAJ:MIN", as cgroup files want it.
func (l *Loop) ID() string { return fmt.Sprintf("%d:%d", l.Major, l.Minor) }

// Close unbinds and removes the device, then removes the file.
func (l *Loop) Close() error {
	var errs []error
	if l.f != nil {
		errs = append(errs, l.f.Close())
		l.f = nil
	}
	if l.Dev != "" {
		if err := lab.UndoLoop(l.Dev, l.File); err != nil {
			errs = append(errs, err)
		} else {
			_ = l.led.Done(lab.Loop(l.Dev, l.File))
		}
		l.Dev = ""
	}
	if l.File != "" && l.ownFile {
		if err := os.Remove(l.File); err == nil || errors.Is(err, os.ErrNotExist) {
			_ = l.led.Done(lab.File(l.File))
		} else {
			errs = append(errs, err)
		}
		l.File = ""
	}
	return errors.Join(errs...)
}
