package iolab

// The labs' processes: parts re-executed from the lab's binary
// (labproc.Register), each configured by a comma-separated argument. They
// print "ready ..." once set up, start on "go", and stop when their stdin
// closes.

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/lab/labproc"
)

const (
	readerPart = "iolab-reader"
	dirtyPart  = "iolab-dirtier"
	writerPart = "iolab-fsync-writer"
	victimPart = "iolab-fsync-victim"
	binderPart = "iolab-loop-binder"
)

func init() {
	labproc.Register(readerPart, runReader)
	labproc.Register(dirtyPart, runDirtier)
	labproc.Register(writerPart, runWriter)
	labproc.Register(victimPart, runVictim)
	labproc.Register(binderPart, runBinder)
}

// runBinder: "PATH": opens PATH read-write ("ready" once open), then for
// each line "bind PID FD" binds the loop device open as descriptor FD of
// process PID (taken with pidfd_getfd) to it and answers "result ERRNO",
// 0 when bound. The slow-device lab binds its device through it (see
// slowdev.go). unix.Open: os.OpenFile would add the file to Go's poller,
// one request more.
func runBinder(conf string, lines <-chan string) {
	fd, err := unix.Open(conf, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		labproc.Fail(fmt.Errorf("binder: %w", err))
	}
	fmt.Println("ready")
	for l := range lines {
		var pid, dfd int
		if _, err := fmt.Sscanf(l, "bind %d %d", &pid, &dfd); err != nil {
			labproc.Fail(fmt.Errorf("binder: %q: %w", l, err))
		}
		fmt.Printf("result %d\n", int(bindFrom(pid, dfd, fd, conf)))
	}
}

// bindFrom configures process pid's loop descriptor dfd with backing fd;
// 0 when it did.
func bindFrom(pid, dfd, fd int, name string) unix.Errno {
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return errnoOf(err)
	}
	defer unix.Close(pidfd)
	dev, err := unix.PidfdGetfd(pidfd, dfd, 0)
	if err != nil {
		return errnoOf(err)
	}
	defer unix.Close(dev)
	return errnoOf(unix.IoctlLoopConfigure(dev, loopConfig(fd, name, false)))
}

func errnoOf(err error) unix.Errno {
	var e unix.Errno
	if err == nil {
		return 0
	}
	if errors.As(err, &e) {
		return e
	}
	return unix.EIO
}

// ints parses "a,b,c" after n string fields.
func fields(conf string, n int) ([]string, []int64) {
	f := strings.Split(conf, ",")
	if len(f) < n {
		labproc.Fail(fmt.Errorf("bad configuration %q", conf))
	}
	var out []int64
	for _, s := range f[n:] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			labproc.Fail(fmt.Errorf("bad configuration %q: %w", conf, err))
		}
		out = append(out, v)
	}
	return f[:n], out
}

// waitGo waits for "go" (false when the lab closed stdin first).
func waitGo(lines <-chan string) bool {
	for l := range lines {
		if l == "go" {
			return true
		}
	}
	return false
}

// runReader: "DEVICE,THREADS,BLOCK,SPAN": THREADS threads read BLOCK bytes
// at random aligned offsets of the first SPAN bytes of DEVICE with
// O_DIRECT, one read after another, until the lab ends.
func runReader(conf string, lines <-chan string) {
	s, v := fields(conf, 1)
	if len(v) != 3 || v[0] < 1 || v[1] < 4096 || v[2] < v[1] {
		labproc.Fail(fmt.Errorf("reader %q: want DEVICE,THREADS,BLOCK,SPAN", conf))
	}
	threads, block, span := int(v[0]), v[1], v[2]
	if err := labproc.NameProcess(readerComm); err != nil {
		labproc.Fail(err)
	}
	runtime.GOMAXPROCS(threads + 2)
	fd, err := unix.Open(s[0], unix.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		labproc.Fail(fmt.Errorf("open %s: %w", s[0], err))
	}
	gate := make(chan struct{})
	tids := make(chan int, threads)
	for range threads {
		go func() {
			runtime.LockOSThread()
			tids <- unix.Gettid()
			// O_DIRECT wants an aligned buffer: mmap's is.
			buf, err := unix.Mmap(-1, 0, int(block), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
			if err != nil {
				labproc.Fail(err)
			}
			<-gate
			blocks := span / block
			for {
				off := rand.Int64N(blocks) * block
				if _, err := unix.Pread(fd, buf, off); err != nil {
					labproc.Fail(fmt.Errorf("read %s: %w", s[0], err))
				}
			}
		}()
	}
	msg := "ready"
	for range threads {
		msg += " reader=" + strconv.Itoa(<-tids)
	}
	fmt.Println(msg)
	if !waitGo(lines) {
		os.Exit(0)
	}
	close(gate)
	for range lines {
	}
	os.Exit(0)
}

// runDirtier: "PATH,CHUNK,SPAN": writes CHUNK bytes at a time through the
// page cache, cycling over the first SPAN bytes of PATH, as fast as the
// kernel lets it.
func runDirtier(conf string, lines <-chan string) {
	s, v := fields(conf, 1)
	if len(v) != 2 || v[0] < 4096 || v[1] < v[0] {
		labproc.Fail(fmt.Errorf("dirtier %q: want PATH,CHUNK,SPAN", conf))
	}
	if err := labproc.NameProcess(dirtierComm); err != nil {
		labproc.Fail(err)
	}
	f, err := os.OpenFile(s[0], os.O_WRONLY, 0)
	if err != nil {
		labproc.Fail(err)
	}
	buf := make([]byte, v[0])
	for i := range buf {
		buf[i] = byte(i)
	}
	fmt.Println("ready dirtier=" + strconv.Itoa(unix.Gettid()))
	if !waitGo(lines) {
		os.Exit(0)
	}
	go func() {
		for range lines {
		}
		os.Exit(0)
	}()
	for off := int64(0); ; off = (off + v[0]) % v[1] {
		if _, err := f.WriteAt(buf, off); err != nil {
			labproc.Fail(err)
		}
	}
}

// runWriter: "DIR,CHUNK": writes CHUNK bytes to a new file of DIR and
// fsyncs it, again and again (four files at most: the oldest goes).
func runWriter(conf string, lines <-chan string) {
	s, v := fields(conf, 1)
	if len(v) != 1 || v[0] < 4096 {
		labproc.Fail(fmt.Errorf("writer %q: want DIR,CHUNK", conf))
	}
	if err := labproc.NameProcess(writerComm); err != nil {
		labproc.Fail(err)
	}
	buf := make([]byte, v[0])
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	fmt.Println("ready writer=" + strconv.Itoa(unix.Gettid()))
	if !waitGo(lines) {
		os.Exit(0)
	}
	go func() {
		for range lines {
		}
		os.Exit(0)
	}()
	for i := 0; ; i++ {
		_ = os.Remove(filepath.Join(s[0], fmt.Sprintf("big-%d", i-4)))
		f, err := os.Create(filepath.Join(s[0], fmt.Sprintf("big-%d", i)))
		if err != nil {
			labproc.Fail(err)
		}
		if _, err := f.Write(buf); err != nil {
			labproc.Fail(err)
		}
		if err := f.Sync(); err != nil {
			labproc.Fail(err)
		}
		f.Close()
	}
}

// runVictim: "DIR,EVERY_MS": appends 4 KiB to a file of DIR and fsyncs it
// every EVERY_MS, printing "fsync MS" after each.
func runVictim(conf string, lines <-chan string) {
	s, v := fields(conf, 1)
	if len(v) != 1 || v[0] < 1 {
		labproc.Fail(fmt.Errorf("victim %q: want DIR,EVERY_MS", conf))
	}
	if err := labproc.NameProcess(victimComm); err != nil {
		labproc.Fail(err)
	}
	f, err := os.OpenFile(filepath.Join(s[0], "small"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		labproc.Fail(err)
	}
	buf := make([]byte, 4096)
	fmt.Println("ready victim=" + strconv.Itoa(unix.Gettid()))
	if !waitGo(lines) {
		os.Exit(0)
	}
	go func() {
		for range lines {
		}
		os.Exit(0)
	}()
	for {
		t := time.Now()
		if _, err := f.Write(buf); err != nil {
			labproc.Fail(err)
		}
		if err := f.Sync(); err != nil {
			labproc.Fail(err)
		}
		fmt.Printf("fsync %d\n", time.Since(t).Milliseconds())
		time.Sleep(time.Duration(v[0]) * time.Millisecond)
	}
}
