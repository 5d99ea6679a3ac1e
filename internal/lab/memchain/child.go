package memchain

// The child: a part of the lab re-executed from its binary, its argument
// its configuration as JSON (labproc.Register).

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/lab/labproc"
)

// childConfig is what the lab tells the child.
type childConfig struct {
	Dir             string
	FileMB          int
	FileThreads     int
	PopulateThreads int
	PopulateMB      int
}

func init() { labproc.Register(childPart, runChild) }

func runChild(conf string, lines <-chan string) {
	if err := labproc.NameProcess(childComm); err != nil {
		labproc.Fail(err)
	}
	var c childConfig
	if err := json.Unmarshal([]byte(conf), &c); err != nil {
		labproc.Fail(fmt.Errorf("config: %w", err))
	}
	// Page faults hold a P: every thread must be able to fault at once.
	runtime.GOMAXPROCS(c.FileThreads + c.PopulateThreads + 2)
	fmt.Printf("ready %d\n", os.Getpid())
	// The lab moves us into the cgroup, then says go: from then on every
	// page we bring in is charged to the cgroup.
	for l := range lines {
		if l == "go" {
			break
		}
	}
	// A sparse file: reading its holes fills the page cache with clean
	// zero pages and no disk I/O, so reclaim can always free them and
	// rereading them is cheap; on tmpfs they would be swap-backed and,
	// without swap, unreclaimable.
	path := filepath.Join(c.Dir, "data-"+strconv.Itoa(os.Getpid()))
	f, err := os.Create(path)
	if err != nil {
		labproc.Fail(err)
	}
	size := c.FileMB << 20
	if err := f.Truncate(int64(size)); err != nil {
		labproc.Fail(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		labproc.Fail(fmt.Errorf("mmap: %w", err))
	}
	_ = os.Remove(path) // gone with the mapping, however we end
	_ = f.Close()

	var sink atomic.Uint64
	tids := make(chan string, c.FileThreads+c.PopulateThreads)
	start := func(name string, body func(i int)) func(int) {
		return func(i int) {
			go func() {
				runtime.LockOSThread()
				labproc.SetComm(name)
				tids <- fmt.Sprintf("%s=%d", name, unix.Gettid())
				body(i)
			}()
		}
	}
	// r_file: read the file page by page, each thread from its own
	// offset, round and round: the pages stay hot (referenced), so reclaim
	// scans many to free few.
	reader := start("r_file", func(i int) {
		pages := size / 4096
		p := i * pages / max(c.FileThreads, 1)
		var x uint64
		for {
			x += uint64(m[p*4096])
			p = (p + 1) % pages
			if p%1024 == 0 {
				sink.Store(x)
			}
		}
	})
	// r_memory: map anonymous memory with MAP_POPULATE and unmap it. The
	// populate faults every page in under the mmap_lock (read), and each
	// page charged beyond the limit makes the thread reclaim first; the
	// munmap then takes the lock for writing, and queues.
	pop := start("r_memory", func(int) {
		n := c.PopulateMB << 20
		for {
			b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
			if err == nil {
				_ = unix.Munmap(b)
			}
		}
	})
	for i := range c.FileThreads {
		reader(i)
	}
	for i := range c.PopulateThreads {
		pop(i)
	}
	msg := "running"
	for range c.FileThreads + c.PopulateThreads {
		msg += " " + <-tids
	}
	fmt.Println(msg)
	for range lines {
	}
}
