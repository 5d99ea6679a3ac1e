package labproc

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The ps-like reader: a process of its own that reads /proc/PID/cmdline of
// the lab's process in a loop, as ps, top and monitoring agents do. The
// read takes that process's mmap_lock for reading (access_remote_vm), so
// it waits whenever the lock is held for writing or a writer queues.

// PSReaderComm is the reader's process name.
const PSReaderComm = "wolf-psreader"

// psReaderPart is its part: its argument is "PID,INTERVAL".
const psReaderPart = "labproc-psreader"

func init() { Register(psReaderPart, runPSReader) }

func runPSReader(conf string, lines <-chan string) {
	_ = NameProcess(PSReaderComm)
	pidS, ivS, _ := strings.Cut(conf, ",")
	pid, err1 := strconv.Atoi(pidS)
	iv, err2 := time.ParseDuration(ivS)
	if err1 != nil || err2 != nil || pid <= 0 || iv <= 0 {
		Fail(fmt.Errorf("psreader %q: want PID,INTERVAL", conf))
	}
	path := "/proc/" + strconv.Itoa(pid) + "/cmdline"
	fmt.Printf("ready %d\n", os.Getpid())
	buf := make([]byte, 4096)
	var maxD time.Duration
	n := 0
	last := time.Now()
	for {
		select {
		case _, ok := <-lines:
			if !ok {
				return
			}
		default:
		}
		t0 := time.Now()
		f, err := os.Open(path)
		if err != nil {
			Fail(fmt.Errorf("open %s: %w", path, err))
		}
		_, _ = f.Read(buf)
		_ = f.Close()
		d := time.Since(t0)
		maxD = max(maxD, d)
		n++
		if time.Since(last) >= time.Second {
			fmt.Printf("reads %d max_ms %.1f\n", n, float64(maxD)/1e6)
			last = time.Now()
		}
		time.Sleep(iv)
	}
}

// PSReader is a running reader, seen from the lab.
type PSReader struct {
	*Child
	mu    sync.Mutex
	maxMs float64
	reads int
}

// StartPSReader starts a reader of pid's cmdline every interval.
func StartPSReader(ctx context.Context, pid int, interval, life time.Duration) (*PSReader, error) {
	c, err := Start(Spec{Part: psReaderPart, Name: PSReaderComm, Arg: fmt.Sprintf("%d,%s", pid, interval), MaxLife: life})
	if err != nil {
		return nil, err
	}
	if _, err := c.WaitLine(ctx, "ready", 30*time.Second); err != nil {
		_ = c.Close(time.Second, 10*time.Second)
		return nil, err
	}
	r := &PSReader{Child: c}
	go func() {
		for l := range c.lines {
			var n int
			var m float64
			if _, err := fmt.Sscanf(l, "reads %d max_ms %f", &n, &m); err == nil {
				r.mu.Lock()
				r.reads, r.maxMs = n, m
				r.mu.Unlock()
			}
		}
	}()
	return r, nil
}

// Stats are the reads so far and the longest one, as the reader last said.
func (r *PSReader) Stats() (reads int, maxMs float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reads, r.maxMs
}
