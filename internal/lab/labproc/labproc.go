// Package labproc runs the processes of the diagnosis labs (memcg-mmap-lock,
// cpu-quota-lock, ps-hang-fuse): parts of the lab re-executed from its own
// binary (lab.ChildCommand, lab.Child), each registered from its
// package's init with Register.
//
// Children are bounded three ways: they die with the lab (PR_SET_PDEATHSIG
// SIGKILL), they exit when their stdin closes (the lab's Close, or the lab
// gone), and they exit by themselves after their MaxLife, however the lab
// ends. The ps-like reader every lab uses lives here too.
package labproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/lab"
)

// Child is a lab process, seen from the lab.
type Child struct {
	Name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	done   chan struct{}
	err    error
	stderr *Capped
	once   sync.Once
}

// Spec says how to start a child.
type Spec struct {
	Part    string // the part's name, as Register was given it
	Name    string // argv[0] and the process's name until it renames itself
	Arg     string // the part's configuration
	MaxLife time.Duration
	// ExtraFiles are passed to the child as fds 3, 4, …: a pipe the lab
	// signals through where the child cannot wait on its stdin's lines
	// (pshang's unmapper, which must not need the Go scheduler to wake).
	ExtraFiles []*os.File
}

// Start re-executes this binary as a child running part spec.Part and
// returns once it runs.
func Start(s Spec) (*Child, error) {
	// The part's argument carries its life, then its configuration.
	cmd := lab.ChildCommand(context.Background(), s.Part, s.Name, s.MaxLife.String()+"|"+s.Arg, "GOTRACEBACK=none", "GOMAXPROCS=4")
	c := &Child{Name: s.Name, cmd: cmd, lines: make(chan string, 64), done: make(chan struct{}), stderr: &Capped{Max: 4096}}
	cmd.Stderr = c.stderr
	cmd.ExtraFiles = s.ExtraFiles
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("%s: stdin: %w", s.Name, err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("%s: stdout: %w", s.Name, err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: start: %w", s.Name, err)
	}
	c.stdin = stdin
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case c.lines <- sc.Text():
			default: // nobody reads them any more
			}
		}
		close(c.lines)
	}()
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

// PID is the child's process id.
func (c *Child) PID() int { return c.cmd.Process.Pid }

// Done is closed once the child is reaped.
func (c *Child) Done() <-chan struct{} { return c.done }

// WaitLine waits for a line starting with prefix and returns it.
func (c *Child) WaitLine(ctx context.Context, prefix string, timeout time.Duration) (string, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	lines := c.lines
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				lines = nil // its stdout closed: wait for its exit
				continue
			}
			if strings.HasPrefix(l, "error ") {
				return "", fmt.Errorf("%s: %s", c.Name, strings.TrimPrefix(l, "error "))
			}
			if strings.HasPrefix(l, prefix) {
				return l, nil
			}
		case <-c.done:
			return "", fmt.Errorf("%s exited while the lab waited for %q: %v %s", c.Name, prefix, c.err, c.stderr.String())
		case <-ctx.Done():
			return "", fmt.Errorf("%s: waiting for %q: %w", c.Name, prefix, ctx.Err())
		case <-t.C:
			return "", fmt.Errorf("%s: waiting for %q: %w after %s", c.Name, prefix, lab.ErrTimeout, timeout)
		}
	}
}

// Send writes a line to the child's stdin.
func (c *Child) Send(line string) error {
	if _, err := io.WriteString(c.stdin, line+"\n"); err != nil {
		return fmt.Errorf("%s: %w", c.Name, err)
	}
	return nil
}

// Close ends the child: stdin closed, SIGKILL after grace, reaped within
// wait. It says so when the child could not be reaped.
func (c *Child) Close(grace, wait time.Duration) error {
	var err error
	c.once.Do(func() {
		_ = c.stdin.Close()
		select {
		case <-c.done:
			return
		case <-time.After(grace):
		}
		_ = c.cmd.Process.Kill()
		select {
		case <-c.done:
		case <-time.After(wait):
			err = fmt.Errorf("%s (pid %d) not reaped %s after SIGKILL (state %c)", c.Name, c.PID(), wait, TaskState(c.PID()))
		}
	})
	return err
}

// Capped keeps the first Max bytes written to it.
type Capped struct {
	mu  sync.Mutex
	Max int
	b   []byte
}

func (c *Capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.Max - len(c.b); room > 0 {
		c.b = append(c.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (c *Capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.TrimSpace(string(c.b))
}

// ---- the child side ----

// Register registers part name: a process started by Start(Spec{Part:
// name}) runs run instead of its program, with the spec's Arg and the
// lines the lab sends (closed when its stdin closes: the lab ended it).
// Before run it arranges its end: it dies with the lab (Pdeathsig), and
// exits after the spec's MaxLife whatever happens. Call it from an init
// function.
func Register(name string, run func(arg string, lines <-chan string)) {
	lab.Child(name, func(arg string) error {
		life, payload, _ := strings.Cut(arg, "|")
		run(payload, childStart(life))
		return nil
	})
}

func childStart(lifeArg string) <-chan string {
	_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0)
	if os.Getppid() == 1 {
		os.Exit(1) // the lab died before we could ask to die with it
	}
	life, err := time.ParseDuration(lifeArg)
	if err != nil || life <= 0 {
		life = time.Minute
	}
	time.AfterFunc(life, func() { os.Exit(0) })
	ch := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			ch <- strings.TrimSpace(sc.Text())
		}
		close(ch)
	}()
	return ch
}

// Fail reports a child's error to the lab and exits.
func Fail(err error) {
	fmt.Printf("error %v\n", err)
	os.Exit(1)
}

// SetComm names the calling thread (the process, from its main thread).
func SetComm(name string) {
	b := append([]byte(name), 0)
	_ = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&b[0])), 0, 0, 0)
}

// NameProcess names the process as ps shows it: its main thread's comm.
func NameProcess(name string) error {
	return os.WriteFile("/proc/self/comm", []byte(name), 0)
}

// TaskState is a task's state letter from /proc/PID/stat, 0 if gone.
func TaskState(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

// ThreadState is a thread's state letter, 0 if gone.
func ThreadState(pid, tid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid))
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

// Wchan is where a thread sleeps, from /proc (no mmap_lock taken). Some
// kernels (Debian's 5.10 among them) print nothing in wchan for a sleeping
// task; the innermost frame of its kernel stack says the same.
func Wchan(pid, tid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/wchan", pid, tid))
	if w := strings.TrimSpace(string(b)); w != "" && w != "0" {
		return w
	}
	// A running task's stack is the stale one of its last sleep.
	if st := ThreadState(pid, tid); st != 'D' && st != 'S' {
		return ""
	}
	b, _ = os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stack", pid, tid))
	return topFrame(string(b))
}

// Stack is a thread's kernel stack from /proc, its first n frames on one
// line ("[<0>] a+0x1/0x2 | [<0>] b+0x3/0x4"), for error messages.
func Stack(pid, tid, n int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stack", pid, tid))
	ls := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(ls[:min(len(ls), n)], " | ")
}

// topFrame is the function of a /proc/PID/stack's first line,
// "[<0>] balance_dirty_pages+0x2de/0xcc0" → "balance_dirty_pages".
func topFrame(stack string) string {
	line, _, _ := strings.Cut(stack, "\n")
	if i := strings.IndexByte(line, ']'); i >= 0 {
		line = line[i+1:]
	}
	fn, _, _ := strings.Cut(strings.TrimSpace(line), "+")
	return fn
}

// ErrGone is returned when a process the lab needs has exited.
var ErrGone = errors.New("process exited")
