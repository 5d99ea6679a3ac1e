package memcgstress

// The worker: the lab re-executes its own binary (lab.ChildCommand), and
// this package's init runs the workload instead of the program (lab.Child).
//
// The worker is the stress_memcg of "The case of the vanishing CPU" scaled down: phase 1, "r_file"
// threads write files, map them and read them page by page, forever; phase
// 2, "r_memory" threads map anonymous memory and touch it at random, unmap
// it and start again, so that every touch is a new charge against a cgroup
// already at its limit and every charge reclaims from file pages that the
// r_file threads keep referencing.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/wolf-investigator/wolf/internal/lab"
	"golang.org/x/sys/unix"
)

const (
	workerPart   = "memcg-worker" // lab.Child's name; its argument is the worker's JSON config
	workerComm   = "wolf-memcg-lab"
	fileComm     = "r_file"   // the write-up's names
	anonComm     = "r_memory" // for the two kinds of threads
	pageSize     = 4096
	readyLine    = "ready"
	goLine       = "go"
	filesLine    = "files"  // phase 1 done: every file written, mapped, unlinked
	phase2Line   = "phase2" // the r_memory threads run
	workerFailed = "error"
)

// workerConfig is what the lab tells the worker, as its argument.
type workerConfig struct {
	Dir         string        `json:"dir"`
	FileBytes   int64         `json:"file_bytes"`
	AnonBytes   int64         `json:"anon_bytes"`
	FileThreads int           `json:"file_threads"`
	AnonThreads int           `json:"anon_threads"`
	FileSize    int           `json:"file_size"`
	Phase1      time.Duration `json:"phase1"`
	MaxLife     time.Duration `json:"max_life"`
	Populate    bool          `json:"populate"`
}

func init() {
	lab.Child(workerPart, func(arg string) error {
		var c workerConfig
		if err := json.Unmarshal([]byte(arg), &c); err != nil {
			fmt.Printf("%s bad config: %v\n", workerFailed, err)
			os.Exit(2)
		}
		runWorker(c)
		return nil
	})
}

func runWorker(c workerConfig) {
	setThreadName(workerComm) // init runs on the main thread: this names the process
	// Every r_file and r_memory thread must be able to sit in the kernel
	// (faulting, reclaiming) at once, as the write-up's 2000 threads did: each
	// holds a P while it faults, so there must be one P per thread.
	runtime.GOMAXPROCS(c.FileThreads + c.AnonThreads + 2)
	stdin := bufio.NewReader(os.Stdin)
	fmt.Printf("%s %d\n", readyLine, os.Getpid())
	if l, _ := stdin.ReadString('\n'); strings.TrimSpace(l) != goLine {
		return // the lab is gone, or changed its mind
	}
	// Anything else on stdin, or EOF, ends the worker; so does MaxLife.
	go func() {
		_, _ = stdin.ReadString('\n')
		os.Exit(0)
	}()
	if c.MaxLife > 0 {
		time.AfterFunc(c.MaxLife, func() { os.Exit(0) })
	}

	per := max(c.FileBytes/int64(c.FileThreads), int64(c.FileSize))
	var written sync.WaitGroup
	errs := make(chan error, c.FileThreads)
	for i := range c.FileThreads {
		written.Add(1)
		go fileThread(c.Dir, i, per, c.FileSize, &written, errs)
	}
	written.Wait()
	select {
	case err := <-errs:
		fmt.Printf("%s %v\n", workerFailed, err)
		os.Exit(1)
	default:
	}
	fmt.Printf("%s %d\n", filesLine, c.FileBytes>>20)

	time.Sleep(c.Phase1)
	chunk := max(c.AnonBytes/int64(c.AnonThreads), pageSize)
	var started sync.WaitGroup
	for i := range c.AnonThreads {
		started.Add(1)
		go anonThread(int(chunk), uint64(i), c.Populate, &started)
	}
	started.Wait() // every r_memory thread named and running
	fmt.Printf("%s %d\n", phase2Line, c.AnonBytes>>20)
	select {} // until stdin says otherwise
}

// fileThread writes its share of files, syncs them (clean pages, as the
// write-up's files were once written: reclaim must not wait for writeback),
// maps each one and unlinks it (so that nothing is left on disk however the
// worker dies: the pages live as long as the mapping), then reads one byte
// of every page, round and round.
func fileThread(dir string, id int, bytes int64, fileSize int, written *sync.WaitGroup, errs chan<- error) {
	runtime.LockOSThread() // never unlocked: the thread is this loop's
	setThreadName(fileComm)
	var maps [][]byte
	err := func() error {
		buf := make([]byte, fileSize)
		for i := range buf {
			buf[i] = byte(i*7 + id)
		}
		var paths []string
		for n := int64(0); n*int64(fileSize) < bytes; n++ {
			p := filepath.Join(dir, fmt.Sprintf("f%03d-%06d", id, n))
			if err := os.WriteFile(p, buf, 0o600); err != nil {
				return err
			}
			paths = append(paths, p)
		}
		d, err := os.Open(dir)
		if err != nil {
			return err
		}
		err = unix.Syncfs(int(d.Fd()))
		d.Close()
		if err != nil {
			return fmt.Errorf("syncfs %s: %w", dir, err)
		}
		for _, p := range paths {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			m, err := unix.Mmap(int(f.Fd()), 0, fileSize, unix.PROT_READ, unix.MAP_SHARED)
			f.Close()
			if rerr := os.Remove(p); err == nil {
				err = rerr
			}
			if err != nil {
				return fmt.Errorf("file %s: %w", p, err)
			}
			maps = append(maps, m)
		}
		return nil
	}()
	if err != nil {
		errs <- err
	}
	written.Done()
	if err != nil {
		return
	}
	var sink byte
	for {
		for _, m := range maps {
			for off := 0; off < len(m); off += pageSize {
				sink += m[off]
			}
		}
		keep.Store(uint32(sink))
	}
}

// keep stops the compiler from dropping the r_file threads' reads.
var keep atomic.Uint32

// anonThread maps chunk bytes of anonymous memory, writes to its pages in
// random order (each first write is a page fault and a charge), unmaps it
// and starts over. With populate the kernel faults every page in at mmap,
// under the mmap_lock.
func anonThread(chunk int, seed uint64, populate bool, started *sync.WaitGroup) {
	runtime.LockOSThread()
	setThreadName(anonComm)
	started.Done()
	rng := rand.New(rand.NewPCG(seed, uint64(time.Now().UnixNano())))
	pages := chunk / pageSize
	for {
		flags := unix.MAP_PRIVATE | unix.MAP_ANONYMOUS
		if populate {
			flags |= unix.MAP_POPULATE
		}
		m, err := unix.Mmap(-1, 0, chunk, unix.PROT_READ|unix.PROT_WRITE, flags)
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		for range 2 * pages {
			m[rng.IntN(pages)*pageSize]++
		}
		_ = unix.Munmap(m)
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
