package cpuquota

// The child: a part of the lab re-executed from its binary, its argument
// "SPINNERS,MB" (labproc.Register).

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/lab/labproc"
)

func init() { labproc.Register(childPart, runChild) }

func runChild(conf string, lines <-chan string) {
	if err := labproc.NameProcess(childComm); err != nil {
		labproc.Fail(err)
	}
	a, b, _ := strings.Cut(conf, ",")
	spinners, err1 := strconv.Atoi(a)
	mb, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil {
		labproc.Fail(fmt.Errorf("cpuquota child %q: want SPINNERS,MB", conf))
	}
	// Every spinner must run at once, as threads would in C: one P each.
	runtime.GOMAXPROCS(spinners + 2)
	// 4 KiB pages, all populated: every mprotect walks mb*256 entries.
	region, err := unix.Mmap(-1, 0, mb<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		labproc.Fail(fmt.Errorf("mmap %d MiB: %w", mb, err))
	}
	_ = unix.Madvise(region, unix.MADV_NOHUGEPAGE)
	for i := 0; i < len(region); i += 4096 {
		region[i] = 1
	}
	gate := make(chan struct{})
	tids := make(chan string, spinners+1)
	var sink atomic.Uint64
	start := func(name string, body func()) {
		go func() {
			runtime.LockOSThread()
			labproc.SetComm(name)
			tids <- fmt.Sprintf("%s=%d", name, unix.Gettid())
			<-gate
			body()
		}()
	}
	for range spinners {
		start("spin", func() {
			x := uint64(1)
			for {
				for range 1 << 16 {
					x = x*6364136223846793005 + 1442695040888963407
				}
				sink.Store(x)
			}
		})
	}
	start("holder", func() {
		for {
			_ = unix.Mprotect(region, unix.PROT_READ)
			_ = unix.Mprotect(region, unix.PROT_READ|unix.PROT_WRITE)
		}
	})
	msg := "ready"
	for range spinners + 1 {
		msg += " " + <-tids
	}
	fmt.Println(msg)
	for l := range lines {
		if l == "go" {
			close(gate)
		}
	}
}
