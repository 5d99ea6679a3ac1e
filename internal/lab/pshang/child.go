package pshang

// The child: a part of the lab re-executed from its binary, its argument
// the FUSE file's path (labproc.Register).
//
// Once the memreader holds the mmap_lock and sleeps, anything in this
// process that maps or unmaps memory queues behind it, the Go runtime
// included (heap growth, thread stacks); a runtime thread queued there may
// hold the heap's lock, and then every allocating goroutine waits. So
// after the gate opens nothing allocates: both threads use raw system
// calls on buffers made beforehand, the unmapper starts by itself once the
// memreader sleeps, and the collector is off.

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/lab/labproc"
)

func init() { labproc.Register(childPart, runChild) }

func runChild(path string, lines <-chan string) {
	if err := labproc.NameProcess(childComm); err != nil {
		labproc.Fail(err)
	}
	debug.SetGCPercent(-1)
	f, err := os.Open(path)
	if err != nil {
		labproc.Fail(fmt.Errorf("open %s: %w", path, err))
	}
	m, err := unix.Mmap(int(f.Fd()), 0, fileSize, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		labproc.Fail(fmt.Errorf("mmap %s: %w", path, err))
	}
	spare, err := unix.Mmap(-1, 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		labproc.Fail(fmt.Errorf("mmap: %w", err))
	}
	mem, err := unix.Open("/proc/self/mem", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		labproc.Fail(fmt.Errorf("open /proc/self/mem: %w", err))
	}
	buf := make([]byte, 4096)
	addr := int64(uintptr(unsafe.Pointer(&m[0])))
	spareAddr, spareLen := uintptr(unsafe.Pointer(&spare[0])), uintptr(len(spare))

	gate := make(chan struct{})
	memTID := make(chan int, 1)
	tids := make(chan string, 2)
	// memreader: reads its own mapping of the FUSE file through
	// /proc/self/mem. access_remote_vm holds the mmap_lock for reading
	// while get_user_pages faults the page in, and the fault sleeps, in D,
	// on the folio the (parked) READ is filling.
	go func() {
		runtime.LockOSThread()
		labproc.SetComm("memreader")
		tid := unix.Gettid()
		memTID <- tid
		tids <- "memreader=" + strconv.Itoa(tid)
		<-gate
		_, _ = unix.Pread(mem, buf, addr)
	}()
	// unmapper: once the memreader sleeps, munmap takes the mmap_lock for
	// writing and queues behind it; every later reader queues behind it.
	go func() {
		runtime.LockOSThread()
		labproc.SetComm("unmapper")
		stat := []byte("/proc/self/task/" + strconv.Itoa(<-memTID) + "/stat\x00")
		sbuf := make([]byte, 512)
		pause := unix.Timespec{Nsec: 2e6}
		tids <- "unmapper=" + strconv.Itoa(unix.Gettid())
		<-gate
		for range 15000 { // 30 s at most
			if threadInD(stat, sbuf) {
				break
			}
			_, _, _ = unix.Syscall(unix.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&pause)), 0, 0)
		}
		_, _, _ = unix.Syscall(unix.SYS_MUNMAP, spareAddr, spareLen, 0)
	}()
	fmt.Println("ready " + <-tids + " " + <-tids)
	for l := range lines {
		if l == "read" {
			close(gate)
			break
		}
	}
	for range lines {
	}
}

// threadInD reads a /proc stat file (NUL-terminated path) with raw system
// calls into buf and says whether the thread is in D.
func threadInD(path, buf []byte) bool {
	cwd := unix.AT_FDCWD
	fd, _, e := unix.Syscall6(unix.SYS_OPENAT, uintptr(cwd), uintptr(unsafe.Pointer(&path[0])), unix.O_RDONLY|unix.O_CLOEXEC, 0, 0, 0)
	if e != 0 {
		return false
	}
	n, _, _ := unix.Syscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
	_, _, _ = unix.Syscall(unix.SYS_CLOSE, fd, 0, 0)
	b := buf[:n]
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == ')' {
			return i+2 < len(b) && b[i+2] == 'D'
		}
	}
	return false
}
