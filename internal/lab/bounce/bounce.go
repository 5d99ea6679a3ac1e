// Package bounce is the lab for the pathology of "The Network Is Slow": a busy task that the
// scheduler keeps moving between two CPUs, and the same work pinned as a
// healthy baseline.
//
//   - sched-bounce: a task ("bounce-task") is woken alternately by two wakers,
//     one pinned to CPU A ("bounce-wake-A"), one to CPU B ("bounce-wake-B"),
//     and does a little work each time. Before it sleeps it lets a nice-19
//     hog run on its own CPU and stops the hog on the other one (SIGCONT,
//     SIGSTOP), like a board whose other cores are busy. At each wake-up the
//     waker's CPU then holds only the waker, about to sleep (a sync wake-up
//     through a pipe), and the task's previous CPU is busy: wake-up placement
//     (wake_affine, select_idle_sibling) puts the task on the waker's CPU, so
//     it moves A->B->A at every wake-up. That is the wake-up half of
//     the ping-pong, decided by the kernel's own heuristics.
//   - sched-affinity: a thread ("bounce-affinity") changes its own affinity
//     between A and B AffinityHz times a second with sched_setaffinity(0, …):
//     every change migrates it, through the migration stopper.
//   - sched-pinned: sched-bounce with the task pinned to CPU A (the write-up's
//     fix, taskset): the same wake-ups, work and hogs, no migrations.
//
// sched-bounce's tasks are /bin/sh processes using only builtins (read, echo,
// kill, arithmetic): no language runtime adds wake-ups of its own, and the
// task's process is its own (its pid is what wolf sched --pid takes). They
// are started through symlinks named after their role, so that comm says
// what they are; the symlinks' directory is removed once they run. A Go
// goroutine paces the wakers (a token every WakePeriod). Children die with
// the lab (Pdeathsig SIGKILL) and on Close; the lab also ends by itself
// after MaxDuration. sched-affinity's thread is a goroutine locked to an OS
// thread of the lab's own process. Nothing else changes on the host.
package bounce

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/lab"
)

const (
	// WakePeriod is how long each waker sleeps before waking the task: the
	// task is woken (and, in sched-bounce, moved) about twice per period.
	WakePeriod = 2500 * time.Microsecond
	// AffinityHz is how many times a second sched-affinity's thread moves
	// itself.
	AffinityHz = 200
	// MaxDuration bounds a lab that is never closed.
	MaxDuration = 24 * time.Hour
)

type variant int

const (
	variantBounce variant = iota
	variantAffinity
	variantPinned
)

type bounceLab struct{ v variant }

// NewBounce returns sched-bounce, NewAffinity sched-affinity and NewPinned
// the healthy baseline sched-pinned.
func NewBounce() lab.Lab   { return bounceLab{variantBounce} }
func NewAffinity() lab.Lab { return bounceLab{variantAffinity} }
func NewPinned() lab.Lab   { return bounceLab{variantPinned} }

func (l bounceLab) Name() string {
	switch l.v {
	case variantAffinity:
		return "sched-affinity"
	case variantPinned:
		return "sched-pinned"
	}
	return "sched-bounce"
}

func (l bounceLab) Summary() string {
	switch l.v {
	case variantAffinity:
		return fmt.Sprintf("a thread that moves itself between two CPUs %d times a second with sched_setaffinity", AffinityHz)
	case variantPinned:
		return "healthy baseline: sched-bounce's wake-ups and work with the task pinned to one CPU (no migrations)"
	}
	return "a busy thread woken alternately from two busy CPUs, which wake-up placement moves back and forth (the ping-pong of \"The Network Is Slow\")"
}

// Instance is a running lab. Start returns it as a lab.Instance; type-assert
// to *Instance for PID, TID and CPUs.
type Instance struct {
	name string
	v    variant
	logf func(string, ...any)
	cpuA int
	cpuB int
	pid  int // the process of the task that bounces
	task int // its thread

	spawner  *spawner    // the thread every child is forked from
	keeper   *exec.Cmd   // the shell that started the hogs
	procs    []*exec.Cmd // the task and the wakers
	children []int       // every pid: hogs A and B, task, wakers A and B
	files    []*os.File

	stop      atomic.Bool
	wg        sync.WaitGroup
	timer     *time.Timer
	closeOnce sync.Once
	closeErr  error
}

// Start picks two CPUs this process may use, starts the lab's tasks, and
// returns once the task has run.
func (l bounceLab) Start(ctx context.Context, opt lab.Options) (_ lab.Instance, err error) {
	logf := opt.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	a, b, err := twoCPUs()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", l.Name(), err)
	}
	in := &Instance{name: l.Name(), v: l.v, logf: logf, cpuA: a, cpuB: b}
	defer func() {
		if err != nil {
			err = errors.Join(err, in.Close())
		}
	}()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: start: %w", in.name, err)
	}
	if l.v == variantAffinity {
		tids := make(chan int, 1)
		in.pid = os.Getpid()
		in.wg.Add(1)
		go in.affinityTask(tids)
		in.task = <-tids
	} else if err := in.startRing(); err != nil {
		return nil, err
	}
	in.timer = time.AfterFunc(MaxDuration, func() { _ = in.Close() })
	if err := lab.WaitFor(ctx, 5*time.Second, "the lab's task to run", func() (bool, error) {
		n := schedField(in.pid, in.task, "nr_switches")
		if n < 0 {
			return false, fmt.Errorf("task %d is gone", in.task)
		}
		return n >= 10, nil
	}); err != nil {
		return nil, fmt.Errorf("%s: %w", in.name, err)
	}
	logf("%s: task %d on CPUs %d and %d", in.name, in.task, a, b)
	return in, nil
}

// twoCPUs returns the first two CPUs this process may run on.
func twoCPUs() (int, int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return 0, 0, fmt.Errorf("read CPU affinity: %w", err)
	}
	var cpus []int
	for c := 0; c < len(set)*64 && len(cpus) < 2; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	if len(cpus) < 2 {
		return 0, 0, fmt.Errorf("needs two CPUs to move a task between, this process may use %d", set.Count())
	}
	return cpus[0], cpus[1], nil
}

func setAffinity(pid int, cpus ...int) error {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	return unix.SchedSetaffinity(pid, &set)
}

// The hogs are started by a keeper shell that then stops itself: their
// stops and continues notify it (their parent), and a stopped process is
// not woken by that, where a running parent (wolf's own process, or a
// shell, which takes SIGCHLD even when told to ignore it) would be woken
// at every step. The keeper reports their pids on fd 3. Close kills the
// hogs and continues the keeper, which reaps them and exits. If the lab's
// process dies instead, the keeper dies with it (Pdeathsig), and the hogs
// with the keeper (Pdeathsig again, set by setpriv where util-linux has
// it). Without setpriv: a running hog notices within microseconds, since
// every loop of its checks that the lab's process still exists, and a
// stopped one gets SIGHUP from the kernel's rule for an orphaned process
// group with a stopped member, unless the task stops it after that
// instant: then it stays stopped until someone kills it.
// The task and the wakers are the lab's direct children (Pdeathsig). Every
// script uses only shell builtins (read, echo, kill, arithmetic), so the
// only wake-ups are the ones the lab means; descriptors are ExtraFiles, 3
// and up (dash takes single digits only).
const (
	keeperScript = `hog='while kill -0 $LAB 2>/dev/null; do :; done'
$PDEATH "$D/bounce-hog-A" -c "$hog" </dev/null & HA=$!
$PDEATH "$D/bounce-hog-B" -c "$hog" </dev/null & HB=$!
echo "$HA $HB" >&3
exec 3>&-
kill -STOP $$
wait`
	// task: woken on fd 3 by waker A, works; lets hog A run on its CPU and
	// stops hog B; pokes waker B (fd 6). Then the mirror image: woken on fd
	// 4 by waker B, pokes waker A (fd 5).
	taskScript = `work() { i=0; while [ $i -lt $WORK ]; do i=$((i+1)); done; }
while read x <&3; do
	work
	kill -CONT $HOG_A 2>/dev/null; kill -STOP $HOG_B 2>/dev/null
	echo >&6 || exit 0
	read x <&4 || exit 0
	work
	kill -CONT $HOG_B 2>/dev/null; kill -STOP $HOG_A 2>/dev/null
	echo >&5 || exit 0
done`
	// waker: takes a pacing token (fd 3), waits for the task's poke (fd 4),
	// wakes the task (fd 5). The token comes first so that the pacer's
	// thread is long gone from the CPU when the wake-up happens.
	wakerScript = `while read t <&3 && read x <&4; do echo >&5 || exit 0; done`
	// workLoops is the task's work per wake-up in shell loop iterations
	// (about 1-2 µs each): a few hundred microseconds.
	workLoops = 200
)

// startRing starts sched-bounce's (or sched-pinned's) processes and the
// pacer.
func (in *Instance) startRing() error {
	shell, err := exec.LookPath("/bin/sh")
	if err != nil {
		return fmt.Errorf("%s: needs /bin/sh: %w", in.name, err)
	}
	// Role-named symlinks to the shell give the processes telling comms.
	// The directory is removed once every process has exec'd its symlink
	// (they keep their names), and on an error before that. Run as root,
	// the lab records it in a ledger first, so that if it is killed in
	// between, the next lab or `wolf lab clean` removes it; without root
	// (the lab needs none) there is no ledger, and a kill -9 in the first
	// fraction of a second leaves an empty directory of symlinks in TMPDIR.
	dir := filepath.Join(os.TempDir(), lab.Name("bounce"))
	var led *lab.Ledger
	if os.Geteuid() == 0 {
		var err error
		if led, err = lab.NewLedger(in.name, in.logf); err != nil {
			return fmt.Errorf("%s: %w", in.name, err)
		}
		if err := led.Add(lab.Tree(dir)); err != nil {
			led.Close()
			return fmt.Errorf("%s: %w", in.name, err)
		}
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		if led != nil {
			_ = led.Done(lab.Tree(dir))
			led.Close()
		}
		return fmt.Errorf("%s: temp dir: %w", in.name, err)
	}
	defer func() {
		if err := os.RemoveAll(dir); err == nil && led != nil {
			_ = led.Done(lab.Tree(dir))
		}
		if led != nil {
			if err := led.Close(); err != nil {
				in.logf("%s: %v", in.name, err)
			}
		}
	}()
	for _, role := range []string{"bounce-hog-A", "bounce-hog-B", "bounce-task", "bounce-wake-A", "bounce-wake-B"} {
		if err := os.Symlink(shell, filepath.Join(dir, role)); err != nil {
			return fmt.Errorf("%s: %w", in.name, err)
		}
	}
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err != nil {
			return nil, nil, fmt.Errorf("%s: pipe: %w", in.name, err)
		}
		in.files = append(in.files, r, w)
		return r, w, nil
	}
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}
	in.spawner = newSpawner()

	// The hogs, through the keeper.
	reportR, reportW, err := pipe()
	if err != nil {
		return err
	}
	keeper := exec.Command(shell, "-c", keeperScript)
	keeper.Dir = "/"
	keeper.Env = append(env, "D="+dir, fmt.Sprintf("LAB=%d", os.Getpid()))
	// With setpriv (util-linux), the hogs die with the keeper even while
	// stopped: a hog stopped by the task in the instant the lab dies would
	// otherwise stay stopped for good.
	// (Only util-linux's: busybox's setpriv has no --pdeathsig and exits,
	// which would leave the keeper without hogs.)
	if sp, err := exec.LookPath("setpriv"); err == nil && exec.Command(sp, "--pdeathsig", "KILL", "true").Run() == nil {
		keeper.Env = append(keeper.Env, "PDEATH="+sp+" --pdeathsig KILL")
	}
	keeper.ExtraFiles = []*os.File{reportW}
	// Its own process group: when it dies, the group (it and the hogs) is
	// orphaned, and the kernel sends an orphaned group with stopped members
	// SIGHUP and SIGCONT, which ends a hog even while it is stopped.
	keeper.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := in.spawner.start(keeper); err != nil {
		return fmt.Errorf("%s: start the hogs' keeper: %w", in.name, err)
	}
	in.keeper = keeper
	_ = reportW.Close() // so that the report reads EOF if the keeper dies
	hogs, err := readPids(reportR, 2)
	if err != nil {
		return fmt.Errorf("%s: the hogs' keeper: %w", in.name, err)
	}
	in.children = append(in.children, hogs...)
	for i, cpu := range []int{in.cpuA, in.cpuB} {
		if err := setAffinity(hogs[i], cpu); err != nil {
			return fmt.Errorf("%s: pin hog %d to CPU %d: %w", in.name, hogs[i], cpu, err)
		}
		if err := unix.Setpriority(unix.PRIO_PROCESS, hogs[i], 19); err != nil {
			return fmt.Errorf("%s: renice hog %d: %w", in.name, hogs[i], err)
		}
	}

	start := func(role, script string, files []*os.File, extraEnv []string, cpus ...int) (int, error) {
		cmd := exec.Command(filepath.Join(dir, role), "-c", script)
		cmd.Dir = "/"
		cmd.Env = append(append([]string{}, env...), extraEnv...)
		cmd.ExtraFiles = files
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := in.spawner.start(cmd); err != nil {
			return 0, fmt.Errorf("%s: start %s: %w", in.name, role, err)
		}
		in.procs = append(in.procs, cmd)
		pid := cmd.Process.Pid
		in.children = append(in.children, pid)
		if err := setAffinity(pid, cpus...); err != nil {
			return 0, fmt.Errorf("%s: pin %s to CPUs %v: %w", in.name, role, cpus, err)
		}
		return pid, nil
	}
	toTaskAr, toTaskAw, err := pipe() // waker A -> task
	if err != nil {
		return err
	}
	toTaskBr, toTaskBw, err := pipe()
	if err != nil {
		return err
	}
	pokeAr, pokeAw, err := pipe() // task -> waker A
	if err != nil {
		return err
	}
	pokeBr, pokeBw, err := pipe()
	if err != nil {
		return err
	}
	tokAr, tokAw, err := pipe() // pacer -> waker A
	if err != nil {
		return err
	}
	tokBr, tokBw, err := pipe()
	if err != nil {
		return err
	}
	taskCPUs := []int{in.cpuA, in.cpuB}
	if in.v == variantPinned {
		taskCPUs = []int{in.cpuA}
	}
	taskEnv := []string{fmt.Sprintf("HOG_A=%d", hogs[0]), fmt.Sprintf("HOG_B=%d", hogs[1]), fmt.Sprintf("WORK=%d", workLoops)}
	task, err := start("bounce-task", taskScript, []*os.File{toTaskAr, toTaskBr, pokeAw, pokeBw}, taskEnv, taskCPUs...)
	if err != nil {
		return err
	}
	in.pid, in.task = task, task
	if _, err := start("bounce-wake-A", wakerScript, []*os.File{tokAr, pokeAr, toTaskAw}, nil, in.cpuA); err != nil {
		return err
	}
	if _, err := start("bounce-wake-B", wakerScript, []*os.File{tokBr, pokeBr, toTaskBw}, nil, in.cpuB); err != nil {
		return err
	}
	roles := []string{"bounce-hog-A", "bounce-hog-B", "bounce-task", "bounce-wake-A", "bounce-wake-B"}
	if err := lab.WaitFor(context.Background(), 5*time.Second, "the lab's processes to start", func() (bool, error) {
		for i, pid := range in.children {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			if err != nil {
				return false, fmt.Errorf("%s (pid %d) is gone", roles[i], pid)
			}
			if strings.TrimSpace(string(b)) != roles[i] {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return fmt.Errorf("%s: %w", in.name, err)
	}
	// The first poke goes to waker A; then the ring runs by itself, one
	// step per pacing token.
	if _, err := pokeAw.Write([]byte("\n")); err != nil {
		return fmt.Errorf("%s: start the ring: %w", in.name, err)
	}
	for _, f := range []*os.File{tokAw, tokBw} {
		if err := unix.SetNonblock(int(f.Fd()), true); err != nil {
			return fmt.Errorf("%s: pacer pipe: %w", in.name, err)
		}
	}
	in.wg.Add(1)
	go in.pace(tokAw, tokBw)
	return nil
}

// spawner forks the lab's children from one OS thread that stays alive
// (locked to its goroutine) until the lab closes: Pdeathsig fires when the
// thread that forked a child exits, and Go ends threads whenever a
// goroutine locked to one returns without unlocking, something other code
// in the process (tests, wolf's own topology reader) may do.
type spawner struct {
	reqs chan func()
	done chan struct{}
}

func newSpawner() *spawner {
	s := &spawner{reqs: make(chan func()), done: make(chan struct{})}
	go func() {
		runtime.LockOSThread()
		for f := range s.reqs {
			f()
		}
		runtime.UnlockOSThread()
		close(s.done)
	}()
	return s
}

// start starts cmd from the spawner's thread.
func (s *spawner) start(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	s.reqs <- func() { errc <- cmd.Start() }
	return <-errc
}

// stop ends the spawner once the children are gone.
func (s *spawner) stop() {
	close(s.reqs)
	<-s.done
}

// readPids reads one line of n pids from r, within a few seconds.
func readPids(r *os.File, n int) ([]int, error) {
	line := make(chan string, 1)
	go func() {
		b := make([]byte, 128)
		k, _ := r.Read(b)
		line <- string(b[:k])
	}()
	var pids []int
	select {
	case l := <-line:
		for _, f := range strings.Fields(l) {
			if p, err := strconv.Atoi(f); err == nil && p > 0 {
				pids = append(pids, p)
			}
		}
	case <-time.After(lab.Scaled(5 * time.Second)):
	}
	if len(pids) != n {
		return nil, fmt.Errorf("reported %d pids, want %d", len(pids), n)
	}
	return pids, nil
}

// pace gives each waker a token every WakePeriod. A waker that is behind
// finds its tokens queued; the writes never block (a full pipe drops one).
func (in *Instance) pace(a, b *os.File) {
	defer in.wg.Done()
	tick := time.NewTicker(WakePeriod)
	defer tick.Stop()
	nl := []byte("\n")
	for !in.stop.Load() {
		<-tick.C
		_, _ = unix.Write(int(a.Fd()), nl)
		_, _ = unix.Write(int(b.Fd()), nl)
	}
}

// affinityTask moves itself between A and B AffinityHz times a second. Its
// goroutine never unlocks the thread, so the runtime ends the thread (and
// its name and affinity) with it.
func (in *Instance) affinityTask(tids chan<- int) {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		// Locked to the main thread, which the runtime never ends: its name
		// and affinity would stay changed. Go again, from another thread.
		go in.affinityTask(tids)
		runtime.UnlockOSThread()
		return
	}
	defer in.wg.Done()
	b := append([]byte("bounce-affinity"), 0)
	_ = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&b[0])), 0, 0, 0)
	tids <- unix.Gettid()
	tick := time.NewTicker(time.Second / AffinityHz)
	defer tick.Stop()
	for i := 0; !in.stop.Load(); i++ {
		cpu := in.cpuA
		if i%2 == 1 {
			cpu = in.cpuB
		}
		if err := setAffinity(0, cpu); err != nil {
			in.logf("%s: sched_setaffinity: %v", in.name, err)
			return
		}
		<-tick.C
	}
}

// Describe implements lab.Instance.
func (in *Instance) Describe() string {
	switch in.v {
	case variantAffinity:
		return fmt.Sprintf("thread bounce-affinity (pid %d, tid %d) moves itself between CPU %d and CPU %d %d times a second (sched_setaffinity)",
			in.pid, in.task, in.cpuA, in.cpuB, AffinityHz)
	case variantPinned:
		return fmt.Sprintf("thread bounce-task (pid %d, tid %d), pinned to CPU %d, woken alternately by bounce-wake-A on CPU %d and bounce-wake-B on CPU %d; nice-19 hogs keep both CPUs busy; expect no migrations",
			in.pid, in.task, in.cpuA, in.cpuA, in.cpuB)
	}
	return fmt.Sprintf("thread bounce-task (pid %d, tid %d), allowed on CPUs %d and %d, woken alternately by bounce-wake-A on CPU %d and bounce-wake-B on CPU %d every %v; nice-19 hogs keep both CPUs busy; wake-up placement moves it at every wake-up",
		in.pid, in.task, in.cpuA, in.cpuB, in.cpuA, in.cpuB, WakePeriod)
}

// Tasks implements lab.Instance: the offender is the thread that bounces.
func (in *Instance) Tasks() lab.Tasks { return lab.Tasks{Offender: in.task} }

// PID is the process the lab's threads belong to (the lab's own).
func (in *Instance) PID() int { return in.pid }

// TID is the thread that bounces.
func (in *Instance) TID() int { return in.task }

// CPUs are the two CPUs the lab uses.
func (in *Instance) CPUs() (int, int) { return in.cpuA, in.cpuB }

// Close ends the lab's processes and goroutines and closes the pipes. It
// is safe to call more than once.
func (in *Instance) Close() error {
	in.closeOnce.Do(func() {
		in.stop.Store(true)
		if in.timer != nil {
			in.timer.Stop()
		}
		// SIGKILL also ends a stopped hog. The keeper, continued, reaps
		// the hogs and exits.
		for _, pid := range in.children {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		if in.keeper != nil {
			_ = in.keeper.Process.Signal(syscall.SIGCONT)
		}
		for _, p := range in.procs {
			_ = p.Wait()
		}
		if in.keeper != nil {
			waited := make(chan struct{})
			go func() { _ = in.keeper.Wait(); close(waited) }()
			select {
			case <-waited:
			case <-time.After(2 * time.Second):
				_ = in.keeper.Process.Kill()
				<-waited
			}
		}
		if in.spawner != nil {
			in.spawner.stop()
		}
		done := make(chan struct{})
		go func() { in.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			in.closeErr = fmt.Errorf("%s: goroutines did not stop within 5 s", in.name)
		}
		for _, f := range in.files {
			_ = f.Close()
		}
	})
	return in.closeErr
}

// NrMigrations is the kernel's own count of a thread's migrations
// (se.nr_migrations in /proc/PID/task/TID/sched), -1 when unreadable. The
// lab's threads are this process's own, so reading is safe.
func NrMigrations(pid, tid int) int64 {
	return schedField(pid, tid, "se.nr_migrations")
}

func schedField(pid, tid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/sched", pid, tid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(k) == field {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}

// WhyRoot implements lab.Privileged: nothing the lab does needs root.
func (bounceLab) WhyRoot() string { return "" }
