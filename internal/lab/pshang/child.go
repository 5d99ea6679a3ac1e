package pshang

// The child: the lab re-executes its binary with childEnv set to the FUSE
// file's path, and this init runs instead of the program.

import (
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/lab/labproc"
)

func init() {
	if path := os.Getenv(childEnv); path != "" {
		runChild(path)
		os.Exit(0)
	}
}

func runChild(path string) {
	lines := labproc.ChildStart()
	if err := labproc.NameProcess(childComm); err != nil {
		labproc.Fail(err)
	}
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
	mem, err := os.Open("/proc/self/mem")
	if err != nil {
		labproc.Fail(fmt.Errorf("open /proc/self/mem: %w", err))
	}
	buf := make([]byte, 4096)
	addr := int64(uintptr(unsafe.Pointer(&m[0])))

	type role struct {
		name string
		go_  chan struct{}
		body func()
	}
	roles := []role{
		// Reads its own mapping of the FUSE file through /proc/self/mem:
		// access_remote_vm holds the mmap_lock for reading while
		// get_user_pages faults the page in, and the fault waits, in D,
		// for the folio that the (parked) READ is filling.
		{"memreader", make(chan struct{}), func() {
			_, err := mem.ReadAt(buf, addr)
			fmt.Printf("memreader done: %v\n", err)
		}},
		// munmap takes the mmap_lock for writing: it queues behind the
		// reader, and every later reader queues behind it.
		{"unmapper", make(chan struct{}), func() {
			err := unix.Munmap(spare)
			fmt.Printf("unmapper done: %v\n", err)
		}},
	}
	tids := make(chan string, len(roles))
	for _, r := range roles {
		go func() {
			runtime.LockOSThread()
			labproc.SetComm(r.name)
			tids <- fmt.Sprintf("%s=%d", r.name, unix.Gettid())
			<-r.go_
			r.body()
		}()
	}
	msg := "ready"
	for range roles {
		msg += " " + <-tids
	}
	fmt.Println(msg)
	for l := range lines {
		switch l {
		case "read":
			close(roles[0].go_)
		case "unmap":
			close(roles[1].go_)
		}
	}
}
