package sysstat

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// KernelRecord is one record of the kernel log as /dev/kmsg gives it
// (Documentation/ABI/testing/dev-kmsg): "level+facility<<3,seq,µs,flags;text".
type KernelRecord struct {
	Level    int    `json:"level"`    // 0 emerg … 3 err, 4 warning … 7 debug
	Facility int    `json:"facility"` // 0 kernel; 1 user (records written to /dev/kmsg by programs)
	Seq      uint64 `json:"seq"`
	AtUs     uint64 `json:"at_us"` // since boot
	Message  string `json:"message"`
}

// ParseKmsgRecord parses one read() of /dev/kmsg. The continuation lines
// (" SUBSYSTEM=…", " DEVICE=…") are dropped; the \xNN escapes the kernel
// writes for unprintable bytes are kept as they are.
func ParseKmsgRecord(b []byte) (KernelRecord, bool) {
	head, text, ok := strings.Cut(string(b), ";")
	if !ok {
		return KernelRecord{}, false
	}
	text, _, _ = strings.Cut(text, "\n")
	f := strings.Split(head, ",")
	if len(f) < 3 {
		return KernelRecord{}, false
	}
	pf, err1 := strconv.Atoi(f[0])
	seq, err2 := strconv.ParseUint(f[1], 10, 64)
	at, err3 := strconv.ParseUint(f[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return KernelRecord{}, false
	}
	return KernelRecord{Level: pf & 7, Facility: pf >> 3, Seq: seq, AtUs: at, Message: text}, true
}

// KernelLog is what the kernel logged during the window.
type KernelLog struct {
	// Unavailable says why the log could not be read (no /dev/kmsg, no
	// CAP_SYSLOG under kernel.dmesg_restrict); empty when it was read.
	Unavailable string `json:"unavailable,omitempty"`
	Records     int    `json:"records"` // records read in the window
	// Lost counts the times the ring buffer overwrote records before
	// they were read (a flood); the window's log is then incomplete.
	Lost int `json:"lost,omitempty"`
	// Errors are the records that matter (Interesting), the first
	// maxKeptRecords of them; Dropped counts the rest.
	Errors  []KernelRecord `json:"errors,omitempty"`
	Dropped int            `json:"dropped,omitempty"`
}

const (
	maxKeptRecords = 50
	// maxKmsgReads bounds one drain so that a kernel flooding its log
	// cannot keep wolf reading for ever.
	maxKmsgReads = 100000
	kmsgTimeout  = 2 * time.Second
)

// kmsgTail reads the records the kernel logs after it was opened.
type kmsgTail struct {
	fd int
}

// openKmsg opens /dev/kmsg non-blocking and positions it after the last
// record, so that drain sees only what is logged from now on.
func openKmsg(path string) (*kmsgTail, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, describeKmsgErr(path, err)
	}
	if _, err := syscall.Seek(fd, 0, 2 /* SEEK_END */); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("seeking to the end of %s: %w", path, err)
	}
	return &kmsgTail{fd: fd}, nil
}

func describeKmsgErr(path string, err error) error {
	switch {
	case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
		return fmt.Errorf("%s: %w (reading the kernel log needs CAP_SYSLOG when kernel.dmesg_restrict=1)", path, err)
	case errors.Is(err, syscall.ENOENT):
		return fmt.Errorf("%s: %w (no /dev/kmsg in this container?)", path, err)
	}
	return fmt.Errorf("%s: %w", path, err)
}

// drain reads every record logged since open (or the last drain) and
// closes the file. The fd is non-blocking: read returns EAGAIN once the
// log is caught up, so this never waits for the kernel to log more. It
// still runs under a timeout, because the host is sick by assumption.
func (k *kmsgTail) drain() (KernelLog, error) {
	type res struct {
		log KernelLog
		err error
	}
	done := make(chan res, 1)
	go func() {
		defer syscall.Close(k.fd)
		log, err := k.read()
		done <- res{log, err}
	}()
	select {
	case r := <-done:
		return r.log, r.err
	case <-time.After(kmsgTimeout):
		return KernelLog{}, fmt.Errorf("reading /dev/kmsg: timed out after %v", kmsgTimeout)
	}
}

func (k *kmsgTail) read() (KernelLog, error) {
	var log KernelLog
	// A record is at most 1 KiB of text plus its dictionary; a buffer
	// too small for a record fails with EINVAL.
	buf := make([]byte, 16<<10)
	for i := 0; i < maxKmsgReads; i++ {
		n, err := syscall.Read(k.fd, buf)
		switch {
		case errors.Is(err, syscall.EAGAIN):
			return log, nil
		case errors.Is(err, syscall.EPIPE):
			log.Lost++ // overwritten before we read it; the next read resumes
			continue
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			return log, fmt.Errorf("reading /dev/kmsg: %w", err)
		case n == 0:
			return log, nil
		}
		r, ok := ParseKmsgRecord(buf[:n])
		if !ok {
			continue
		}
		log.Records++
		if Interesting(r) {
			if len(log.Errors) < maxKeptRecords {
				log.Errors = append(log.Errors, r)
			} else {
				log.Dropped++
			}
		}
	}
	return log, nil
}
