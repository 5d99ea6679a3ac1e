package mmaplock

// The child: the lab re-executes its own binary (lab.ChildCommand) and
// this code runs instead of the program. It is the process
// whose mmap_lock is held long and fought over.

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/wolf-investigator/wolf/internal/lab"
	"golang.org/x/sys/unix"
)

const (
	// childPart names the child among the labs' parts (lab.Child); its
	// argument is the region's size in MiB.
	childPart = "mmap-lock-child"
	// childComm names the child's threads in ps and in wolf's reports.
	childComm = "wolf-mmaplock"
	// goLine on stdin starts the threads' work (once).
	goLine = "go"
	// stopLine ends the threads' work; the process stays until stdin
	// closes. The child answers stoppedLine on stdout once every thread's
	// last call has returned; the threads stay, idle.
	stopLine    = "stop"
	stoppedLine = "stopped"
	// maxLife bounds the child even if the lab forgets it: it exits by
	// itself after this long.
	maxLife = 10 * time.Minute
)

func init() { lab.Child(childPart, runChild) }

// role is one thread's job.
type role struct {
	name string
	cpu  int
	nice int
	body func(stop *atomic.Bool)
}

func runChild(arg string) error {
	mb, err := strconv.Atoi(arg)
	if err != nil || mb <= 0 || mb > 4096 {
		return fmt.Errorf("region of %q MiB: want 1..4096", arg)
	}
	_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0)
	// Re-executed as /proc/self/exe, every thread is named "exe". The
	// process is named by its main thread (what ps and wolf show), which
	// this goroutine need not be running on: /proc/self/comm is the main
	// thread's. The role threads name themselves below.
	if err := os.WriteFile("/proc/self/comm", []byte(childComm), 0); err != nil {
		return fmt.Errorf("naming the process: %w", err)
	}
	// The big region: 4 KiB pages (no THP), all populated, so that every
	// mprotect and madvise over it walks mb*256 page table entries.
	region, err := unix.Mmap(-1, 0, mb<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return fmt.Errorf("mmap %d MiB: %w", mb, err)
	}
	_ = unix.Madvise(region, unix.MADV_NOHUGEPAGE)
	for i := 0; i < len(region); i += 4096 {
		region[i] = 1
	}
	small, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return fmt.Errorf("mmap: %w", err)
	}
	small[0] = 1

	cpus := runtime.NumCPU()
	other := 1 % cpus
	roles := []role{
		// Two busy threads at normal priority on CPU 0 ...
		{"spin", 0, 0, spin},
		{"spin", 0, 0, spin},
		// ... starve the holder, niced to 19 on the same CPU: it holds the
		// lock while it waits for the CPU, ClickHouse's livelock in miniature.
		{"holder", 0, 19, func(stop *atomic.Bool) { hold(stop, region) }},
		// A writer and readers on the other CPU queue behind it.
		{"writer", other, 0, mapUnmap},
		{"reader", other, 0, func(stop *atomic.Bool) { mincore(stop, small) }},
		{"reader", other, 0, func(stop *atomic.Bool) { mincore(stop, small) }},
		{"reader", other, 0, func(stop *atomic.Bool) { mincore(stop, small) }},
	}
	var stop atomic.Bool
	gate := make(chan struct{})
	open := sync.OnceFunc(func() { close(gate) })
	tids := make(chan string, len(roles))
	var working sync.WaitGroup
	idle := make(chan struct{}) // never closed: a stopped thread stays, so its exit takes no lock
	for _, r := range roles {
		working.Add(1)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread dies with the child
			tid := unix.Gettid()
			var set unix.CPUSet
			set.Set(r.cpu)
			_ = unix.SchedSetaffinity(0, &set)
			if r.nice != 0 {
				_ = unix.Setpriority(unix.PRIO_PROCESS, tid, r.nice)
			}
			setComm(childComm)
			tids <- fmt.Sprintf("%s=%d", r.name, tid)
			<-gate
			r.body(&stop)
			working.Done()
			<-idle
		}()
	}
	var got []string
	for range roles {
		got = append(got, <-tids)
	}
	fmt.Printf("ready %d %s\n", os.Getpid(), strings.Join(got, " "))

	// Work starts on "go"; the child runs until stdin closes (the lab
	// is gone) or maxLife.
	done := make(chan struct{})
	go func() {
		in := bufio.NewReader(os.Stdin)
		for {
			l, err := in.ReadString('\n')
			if err != nil {
				close(done)
				return
			}
			switch strings.TrimSpace(l) {
			case goLine:
				open()
			case stopLine:
				stop.Store(true)
				open() // threads not yet started see stop at once
				go func() {
					working.Wait()
					fmt.Println(stoppedLine)
				}()
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(maxLife):
	}
	stop.Store(true)
	return nil
}

func setComm(name string) {
	b := append([]byte(name), 0)
	_ = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&b[0])), 0, 0, 0)
}

func spin(stop *atomic.Bool) {
	x := uint64(1)
	for !stop.Load() {
		for range 1 << 16 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	sink.Store(x)
}

// sink keeps the spinners' arithmetic from being optimised away.
var sink atomic.Uint64

// hold takes the mmap_lock for reading (madvise COLD walks and deactivates
// every page) and for writing (mprotect walks every entry), in turn, over
// and over: half its holds are read holds, during which the writer waits
// and the readers that come after it queue behind it.
func hold(stop *atomic.Bool, region []byte) {
	for !stop.Load() {
		_ = unix.Madvise(region, unix.MADV_COLD)
		_ = unix.Mprotect(region, unix.PROT_READ)
		_ = unix.Madvise(region, unix.MADV_COLD)
		_ = unix.Mprotect(region, unix.PROT_READ|unix.PROT_WRITE)
	}
}

func mapUnmap(stop *atomic.Bool) {
	for !stop.Load() {
		b, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err == nil {
			_ = unix.Munmap(b)
		}
	}
}

func mincore(stop *atomic.Bool, b []byte) {
	vec := make([]byte, 1)
	for !stop.Load() {
		_, _, _ = unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0])))
	}
}
