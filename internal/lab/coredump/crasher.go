package coredump

// The crasher: the lab re-executes its own binary (lab.ChildCommand) and
// this code runs instead of the program. It is the multi-threaded process
// that crashes.

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/wolf-investigator/wolf/internal/lab"
	"golang.org/x/sys/unix"
)

const (
	// crasherPart names the crasher among the labs' parts (lab.Child); its
	// argument is how many goroutines it locks to threads.
	crasherPart = "coredump-crasher"
	// crasherComm names every thread of the crasher (comm is at most 15
	// bytes), so that ps, the hung-task log and wolf show what it is.
	crasherComm = "wolf-crasher"
	// maxThreads bounds the crasher's threads.
	maxThreads = 64
)

// The crasher's protocol on its stdin/stdout: it writes readyLine and its
// pid once its threads are up, then crashes when it reads crashLine. Any
// other input, or EOF (the lab is gone), makes it exit quietly.
const (
	readyLine = "ready"
	crashLine = "crash"
)

func init() { lab.Child(crasherPart, runCrasher) }

// runCrasher crashes or exits; it returns only when its argument is bad.
func runCrasher(arg string) error {
	// No core file, whatever core_pattern says: RLIMIT_CORE 0 stops dumps
	// to files (vfs_coredump compares it with the binfmt's min_coredump),
	// while dumps to a pipe ignore it (only the value 1, which marks a
	// crashing core_pattern helper, aborts them). The lab sets it too.
	_ = unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{})

	n, err := strconv.Atoi(arg)
	if err != nil || n <= 0 || n > maxThreads {
		return fmt.Errorf("%q threads: want 1 to %d", arg, maxThreads)
	}
	// Threads of our own, parked: goroutines locked to their OS threads for
	// good, blocked on a channel (the thread sleeps in futex_wait). The
	// runtime has a few more threads of its own (sysmon, idle Ms).
	var ready sync.WaitGroup
	park := make(chan struct{})
	for range n {
		ready.Add(1)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread stays ours
			setThreadName(crasherComm)
			ready.Done()
			<-park
		}()
	}
	ready.Wait()
	nameThreads()
	fmt.Printf("%s %d\n", readyLine, os.Getpid())

	line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
	if strings.TrimSpace(line) != crashLine {
		return nil
	}
	// Threads the runtime started since inherit the name of the thread that
	// cloned them, which may have been unnamed then.
	nameThreads()
	// "crash": after printing every goroutine, the runtime raises SIGABRT
	// with its handler reset to the default, whose action is a core dump.
	// The thread that panics becomes the dumper.
	debug.SetTraceback("crash")
	panic("wolf lab coredump: deliberate crash of a lab reproducer")
}

// nameThreads sets the comm of every thread of this process. A thread may
// rename its siblings through /proc/self/task/TID/comm.
func nameThreads() {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return
	}
	for _, e := range ents {
		_ = os.WriteFile("/proc/self/task/"+e.Name()+"/comm", []byte(crasherComm), 0)
	}
}

// setThreadName names the calling thread (PR_SET_NAME).
func setThreadName(name string) {
	p, err := unix.BytePtrFromString(name)
	if err != nil {
		return
	}
	_ = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(p)), 0, 0, 0)
	runtime.KeepAlive(p)
}
