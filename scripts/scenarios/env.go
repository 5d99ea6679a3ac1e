package main

// What a scenario's run puts on the machine, and how it is undone: cgroups
// (v1: one directory per controller; v2: one), processes (in those
// cgroups, in a process group of their own, killed with the runner by
// Pdeathsig), `wolf lab run` processes, loop devices and mounts. Everything
// that would outlive a runner killed with SIGKILL is written in a lab
// ledger first (internal/lab), which the next run and `wolf lab clean`
// undo; loop devices are set up to clear themselves when their last user
// goes (LO_FLAGS_AUTOCLEAR), and those a killed run left attached are
// detached by the next (sweepLoops).

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/lab/labproc"
)

// Run is one run of one scenario: its index (the variant), what it made,
// and how to undo it.
type Run struct {
	ctx     context.Context
	Index   int
	Wolf    string
	Scratch string // a directory on a real disk for the workloads' files
	V2      bool   // cgroup v2 for every controller (the qemu guest)
	led     *lab.Ledger
	logf    func(string, ...any)
	// Params says what this run's variant is ("stress-ng --cpu 4, quota 0.1 CPU").
	Params string

	mu      sync.Mutex
	undo    []func() // newest last, run in reverse
	cmds    []*exec.Cmd
	labs    []*labRun
	outputs []*capped
}

func (r *Run) later(f func()) {
	r.mu.Lock()
	r.undo = append(r.undo, f)
	r.mu.Unlock()
}

// Close undoes everything: processes first (labs politely: they clean up
// their own ledgers), then the rest, newest first.
func (r *Run) Close() {
	r.mu.Lock()
	labs, cmds, undo := r.labs, r.cmds, r.undo
	r.labs, r.cmds, r.undo = nil, nil, nil
	r.mu.Unlock()
	for _, l := range labs {
		l.stop()
	}
	for _, c := range cmds {
		if c.Process != nil {
			_ = unix.Kill(-c.Process.Pid, unix.SIGKILL)
		}
	}
	for _, c := range cmds {
		if c.Process != nil {
			waitTimeout(c, 10*time.Second)
		}
	}
	for i := len(undo) - 1; i >= 0; i-- {
		undo[i]()
	}
}

func waitTimeout(c *exec.Cmd, d time.Duration) {
	done := make(chan struct{})
	go func() { _ = c.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
}

// Cgroup is a scenario's cgroup: the same name in each controller's
// hierarchy on v1, one directory on v2.
type Cgroup struct {
	Path string            // "/wolf-scen-NAME-PID-RANDOM", as wolf prints it
	dirs map[string]string // controller -> directory
}

// Dir is the directory of controller's hierarchy.
func (c *Cgroup) Dir(controller string) string { return c.dirs[controller] }

// Set writes a control file of controller's hierarchy.
func (c *Cgroup) Set(controller, file, value string) error {
	if err := os.WriteFile(filepath.Join(c.dirs[controller], file), []byte(value), 0); err != nil {
		return fmt.Errorf("cgroup %s: set %s to %q: %w", c.Path, file, value, err)
	}
	return nil
}

// Read reads a control file.
func (c *Cgroup) Read(controller, file string) string {
	b, _ := os.ReadFile(filepath.Join(c.dirs[controller], file))
	return strings.TrimSpace(string(b))
}

// PIDs lists the processes in the cgroup (its first controller's view).
func (c *Cgroup) PIDs() []int {
	var out []int
	for _, d := range c.dirs {
		b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil && !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	slices.Sort(out)
	return out
}

// NewCgroup makes a cgroup with controllers (cpu, memory, io: v2's names;
// io is blkio on v1), recorded in the ledger before it is made.
func (r *Run) NewCgroup(what string, controllers ...string) (*Cgroup, error) {
	name := lab.Name("scen-" + what)
	c := &Cgroup{Path: "/" + name, dirs: map[string]string{}}
	for _, ctl := range controllers {
		v1 := ctl
		if ctl == "io" {
			v1 = "blkio"
		}
		var root string
		var err error
		if r.V2 {
			root, _, err = labproc.Hierarchy(r.ctx, ctl, 2)
		} else {
			root, _, err = labproc.Hierarchy(r.ctx, v1, 1)
		}
		if err != nil {
			return nil, err
		}
		dir := filepath.Join(root, name)
		if _, done := c.dirs[ctl]; done || slices.Contains(mapValues(c.dirs), dir) {
			c.dirs[ctl] = dir
			continue
		}
		it := lab.Cgroup(dir)
		if err := r.led.Add(it); err != nil {
			return nil, err
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			_ = r.led.Done(it)
			return nil, fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		r.later(func() {
			err := lab.WaitFor(context.Background(), 20*time.Second, "cgroup "+dir+" to empty", func() (bool, error) {
				b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
				for _, f := range strings.Fields(string(b)) {
					if n, err := strconv.Atoi(f); err == nil {
						_ = unix.Kill(n, unix.SIGKILL)
					}
				}
				err := os.Remove(dir)
				return err == nil || errors.Is(err, os.ErrNotExist), nil
			})
			if err != nil {
				r.logf("%v (left for the next run or `wolf lab clean`)", err)
				return
			}
			_ = r.led.Done(it)
		})
		c.dirs[ctl] = dir
	}
	return c, nil
}

func mapValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// capped keeps the first 64 KiB of a process's output.
type capped struct {
	mu sync.Mutex
	b  []byte
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := 64<<10 - len(c.b); room > 0 {
		c.b = append(c.b, p[:min(len(p), room)]...)
	}
	return len(p), nil
}

func (c *capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return string(c.b)
}

// Start runs argv inside cg (nil: where the runner is), in a process
// group of its own, killed with the runner. A shell puts itself in the
// cgroup before it execs the workload, so that nothing of the workload
// ever runs outside it.
func (r *Run) Start(cg *Cgroup, argv ...string) (*exec.Cmd, error) {
	script := `for f in "$@"; do [ "$f" = -- ] && break; echo $$ >"$f" || exit 111; done; while [ "$1" != -- ]; do shift; done; shift; exec "$@"`
	args := []string{"-c", script, "sh"}
	if cg != nil {
		for _, d := range uniq(mapValues(cg.dirs)) {
			args = append(args, filepath.Join(d, "cgroup.procs"))
		}
	}
	args = append(args, "--")
	args = append(args, argv...)
	c := exec.Command("/bin/sh", args...)
	out := &capped{}
	c.Stdout, c.Stderr = out, out
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	r.mu.Lock()
	r.cmds = append(r.cmds, c)
	r.outputs = append(r.outputs, out)
	r.mu.Unlock()
	return c, nil
}

func uniq(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}

// Output is what the run's processes printed, for a failed run's log.
func (r *Run) Output() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, o := range r.outputs {
		b.WriteString(o.String())
	}
	return b.String()
}

// labRun is a `wolf lab run` process.
type labRun struct {
	cmd      *exec.Cmd
	out      *capped
	Offender int
	Victims  []int
}

func (l *labRun) stop() {
	if l.cmd.Process == nil {
		return
	}
	_ = l.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = l.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = unix.Kill(-l.cmd.Process.Pid, unix.SIGKILL)
		<-done
	}
}

var offenderRE = regexp.MustCompile(`(?m)^offender pid (\d+), victims \[([0-9 ]*)\]`)

// Lab starts `wolf lab run NAME` for at most 55 s (a lab's stalls are its
// own to bound; this bounds the lab) and waits for its tasks to be in
// place.
func (r *Run) Lab(name string, victims int) (*labRun, error) {
	args := []string{"lab", "run", name, "--duration", strconv.Itoa(int(lab.Scaled(55*time.Second).Seconds())) + "s"}
	if victims > 0 {
		args = append(args, "--victims", strconv.Itoa(victims))
	}
	c := exec.Command(r.Wolf, args...)
	out := &capped{}
	pr, pw := io.Pipe()
	c.Stdout, c.Stderr = io.MultiWriter(out, pw), out
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("wolf lab run %s: %w", name, err)
	}
	l := &labRun{cmd: c, out: out}
	r.mu.Lock()
	r.labs = append(r.labs, l)
	r.outputs = append(r.outputs, out)
	r.mu.Unlock()
	found := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if m := offenderRE.FindStringSubmatch(sc.Text()); m != nil {
				found <- m
				break
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	select {
	case m := <-found:
		l.Offender, _ = strconv.Atoi(m[1])
		for _, f := range strings.Fields(m[2]) {
			n, _ := strconv.Atoi(f)
			l.Victims = append(l.Victims, n)
		}
		return l, nil
	case <-time.After(lab.Scaled(45 * time.Second)):
		return nil, fmt.Errorf("lab %s did not start in time: %s", name, lastLines(out.String(), 3))
	case <-r.ctx.Done():
		return nil, r.ctx.Err()
	}
}

// PID is the lab process (for the FUSE labs, the daemon).
func (l *labRun) PID() int { return l.cmd.Process.Pid }

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// CgroupOf is the path of pid's cgroup in controller's hierarchy (v1:
// the line naming the controller; v2: the "0::" line).
func CgroupOf(pid int, controller string) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			return parts[2]
		}
		if slices.Contains(strings.Split(parts[1], ","), controller) {
			return parts[2]
		}
	}
	return ""
}

// File makes a file of sizeMB under Scratch, written with data (not
// sparse: the reads must reach the device), ledgered.
func (r *Run) File(what string, sizeMB int) (string, error) {
	p := filepath.Join(r.Scratch, lab.Name("scen-"+what))
	it := lab.File(p)
	if err := r.led.Add(it); err != nil {
		return "", err
	}
	r.later(func() { _ = os.Remove(p); _ = r.led.Done(it) })
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		return "", err
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i*7 + i>>9)
	}
	for i := 0; i < sizeMB; i++ {
		buf[0] = byte(i)
		if _, err := f.Write(buf); err != nil {
			f.Close()
			return "", err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return "", err
	}
	// Out of the page cache: the workload's reads go to the device (and
	// its pages are charged to its own memory cgroup).
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	return p, f.Close()
}

// Loop attaches a loop device to backing (a file), cleared by the kernel
// when its last user goes (this process holds it open until the run
// ends): returns its name, "loop7", and "MAJ:MIN".
func (r *Run) Loop(backing string) (name, majmin string, err error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return "", "", err
	}
	defer ctl.Close()
	back, err := os.OpenFile(backing, os.O_RDWR, 0)
	if err != nil {
		return "", "", err
	}
	defer back.Close()
	for try := 0; try < 5; try++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", "", fmt.Errorf("LOOP_CTL_GET_FREE: %w", err)
		}
		dev, err := os.OpenFile(fmt.Sprintf("/dev/loop%d", n), os.O_RDWR, 0)
		if err != nil {
			return "", "", err
		}
		cfg := unix.LoopConfig{Fd: uint32(back.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR | unix.LO_FLAGS_DIRECT_IO
		copy(cfg.Info.File_name[:], filepath.Base(backing))
		if err := unix.IoctlLoopConfigure(int(dev.Fd()), &cfg); err != nil {
			dev.Close()
			if errors.Is(err, unix.EBUSY) {
				continue // taken between GET_FREE and here
			}
			return "", "", fmt.Errorf("LOOP_CONFIGURE loop%d: %w", n, err)
		}
		name = fmt.Sprintf("loop%d", n)
		mm, _ := os.ReadFile("/sys/block/" + name + "/dev")
		r.later(func() {
			// The last close clears it (autoclear); say so if a user is
			// left that keeps it.
			_ = unix.IoctlSetInt(int(dev.Fd()), unix.LOOP_CLR_FD, 0)
			dev.Close()
		})
		return name, strings.TrimSpace(string(mm)), nil
	}
	return "", "", errors.New("no free loop device")
}

// Mount makes an ext4 file system on dev and mounts it under Scratch,
// ledgered.
func (r *Run) Mount(dev string) (string, error) {
	if out, err := exec.CommandContext(r.ctx, "mkfs.ext4", "-q", "-F", "/dev/"+dev).CombinedOutput(); err != nil {
		return "", fmt.Errorf("mkfs.ext4 /dev/%s: %v: %s", dev, err, out)
	}
	dir := filepath.Join(r.Scratch, lab.Name("scen-mnt"))
	dit := lab.Dir(dir)
	if err := r.led.Add(dit); err != nil {
		return "", err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		_ = r.led.Done(dit)
		return "", err
	}
	r.later(func() { _ = os.Remove(dir); _ = r.led.Done(dit) })
	mit := lab.Mount(dir, "ext4", "/dev/"+dev)
	if err := r.led.Add(mit); err != nil {
		return "", err
	}
	if err := unix.Mount("/dev/"+dev, dir, "ext4", 0, ""); err != nil {
		_ = r.led.Done(mit)
		return "", fmt.Errorf("mount /dev/%s: %w", dev, err)
	}
	r.later(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			_ = unix.Unmount(dir, unix.MNT_DETACH)
		}
		_ = r.led.Done(mit)
	})
	return dir, nil
}

// SetFile writes value to a machine-wide file (a blk-throttle rule on the
// root cgroup, a bdi knob) and writes undo back at the end. Only for
// devices this run made. The undo is journaled first (undoDir): a run
// killed with SIGKILL leaves it to the next run (sweepUndo).
func (r *Run) SetFile(path, value, undo string) error {
	if err := journalUndo(path, undo); err != nil {
		return err
	}
	if err := os.WriteFile(path, []byte(value), 0); err != nil {
		return fmt.Errorf("write %q to %s: %w", value, path, err)
	}
	r.later(func() { _ = os.WriteFile(path, []byte(undo), 0) })
	return nil
}

// undoDir holds, per runner pid, the writes that undo what it set
// machine-wide, one "PATH\tVALUE" line each.
var undoDir = "/run/wolf/scenarios"

func journalUndo(path, undo string) error {
	if err := os.MkdirAll(undoDir, 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(undoDir, fmt.Sprintf("undo-%d", os.Getpid())), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "%s\t%s\n", path, undo)
	return errors.Join(err, f.Close())
}

// sweepUndo applies the undo journals of runners that are gone, and
// removes this runner's own at the end of a pass (its runs undid it).
func sweepUndo(logf func(string, ...any), own bool) {
	ms, _ := filepath.Glob(filepath.Join(undoDir, "undo-*"))
	for _, m := range ms {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(m), "undo-"))
		if err != nil {
			continue
		}
		if pid == os.Getpid() {
			if own {
				_ = os.Remove(m)
			}
			continue
		}
		if !gone(pid) {
			continue
		}
		b, _ := os.ReadFile(m)
		for _, line := range strings.Split(string(b), "\n") {
			if p, v, ok := strings.Cut(line, "\t"); ok {
				if err := os.WriteFile(p, []byte(v), 0); err == nil {
					logf("undid %s (left by a killed run, pid %d)", p, pid)
				}
			}
		}
		_ = os.Remove(m)
	}
}

// sweepLoops detaches the loop devices that runs killed with SIGKILL
// left attached (their backing files carry a dead runner's pid), and
// clears the throttle rules they had on the root cgroup.
func sweepLoops(logf func(string, ...any)) {
	ms, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	re := regexp.MustCompile(`/wolf-scen-[a-z-]+-(\d+)-[0-9a-f]+`)
	for _, m := range ms {
		b, _ := os.ReadFile(m)
		sm := re.FindStringSubmatch(string(b))
		if sm == nil {
			continue
		}
		pid, _ := strconv.Atoi(sm[1])
		if pid == os.Getpid() || !gone(pid) {
			continue
		}
		dev := filepath.Base(filepath.Dir(filepath.Dir(m)))
		if f, err := os.OpenFile("/dev/"+dev, os.O_RDWR, 0); err == nil {
			err = unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0)
			f.Close()
			logf("detached %s, left by a killed run (pid %d): %v", dev, pid, err)
		}
	}
}

// gone says whether a runner is dead: no such process, or a zombie (a
// runner killed with SIGKILL whose parent has not reaped it yet is dead
// all the same; its journal must not wait for the reaping).
func gone(pid int) bool {
	if unix.Kill(pid, 0) == unix.ESRCH {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
		return b[i+2] == 'Z'
	}
	return false
}

// tgid is the process a task (a thread id) belongs to, tid itself when
// /proc does not say.
func tgid(tid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return tid
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Tgid:"); ok {
			if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
				return n
			}
		}
	}
	return tid
}
