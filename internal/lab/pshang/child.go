package pshang

// The child: a part of the lab re-executed from its binary, its argument
// the FUSE file's path (labproc.Register).
//
// Once the memreader holds the mmap_lock and sleeps, anything in this
// process that maps or unmaps memory queues behind it, the Go runtime
// included: a new thread's stack, heap growth. The runtime does map memory
// then (the memreader's blocked system call makes it start threads), and
// the thread that queues may hold the heap's or the scheduler's lock: from
// then on no goroutine that was not already running gets to run. So the
// unmapper cannot be a goroutine woken once the memreader sleeps (that is
// how set-up used to fail, now and then, with the unmapper parked on a
// futex and runtime threads queued in vm_mmap_pgoff instead). It is
// already running before the memreader reads, blocked in a raw read of a
// pipe from the lab (fd 3) inside a nosplit function: no preemption point
// and no call into the scheduler lies between the lab's word and its
// munmap. The lab says the word once the memreader's READ is parked and
// the memreader sleeps. The collector is off.

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
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

	// fd 3: the read end of the lab's pipe; blocking, whatever the lab's
	// side of it did to the file's flags.
	if err := unix.SetNonblock(goFD, false); err != nil {
		labproc.Fail(fmt.Errorf("fd %d, the lab's pipe: %w", goFD, err))
	}

	gate := make(chan struct{})
	tids := make(chan string, 2)
	var armed int32
	// memreader: reads its own mapping of the FUSE file through
	// /proc/self/mem. access_remote_vm holds the mmap_lock for reading
	// while get_user_pages faults the page in, and the fault sleeps, in D,
	// on the folio the (parked) READ is filling.
	go func() {
		runtime.LockOSThread()
		labproc.SetComm("memreader")
		tids <- "memreader=" + strconv.Itoa(unix.Gettid())
		<-gate
		_, _ = unix.Pread(mem, buf, addr)
	}()
	// unmapper: armed before the memreader may read, it munmaps when the
	// lab says so, takes the mmap_lock for writing and queues behind the
	// memreader; every later reader queues behind it.
	go func() {
		runtime.LockOSThread()
		labproc.SetComm("unmapper")
		tids <- "unmapper=" + strconv.Itoa(unix.Gettid())
		unmapWhenTold(goFD, &armed, spareAddr, spareLen)
	}()
	ready := "ready " + <-tids + " " + <-tids
	for deadline := time.Now().Add(10 * time.Second); atomic.LoadInt32(&armed) == 0; {
		if time.Now().After(deadline) {
			labproc.Fail(fmt.Errorf("the unmapper did not start"))
		}
		time.Sleep(time.Millisecond)
	}
	fmt.Println(ready)
	for l := range lines {
		if l == "read" {
			close(gate)
			break
		}
	}
	for range lines {
	}
}

// goFD is the pipe the lab writes one byte to when the unmapper is to go.
const goFD = 3

// unmapWhenTold says it is armed, blocks in a raw read of fd until the lab
// writes to it (or closes it: then it returns), and munmaps [addr,
// addr+length). nosplit and raw system calls only: once armed, nothing up
// to the munmap is a preemption point or needs the Go scheduler, whose
// threads may by then be queued on the mmap_lock themselves.
//
//go:nosplit
func unmapWhenTold(fd uintptr, armed *int32, addr, length uintptr) {
	var b [1]byte
	atomic.StoreInt32(armed, 1)
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&b[0])), 1)
		if e == syscall.EINTR {
			continue
		}
		if e != 0 || n != 1 {
			return
		}
		break
	}
	_, _, _ = syscall.RawSyscall(syscall.SYS_MUNMAP, addr, length, 0)
}
