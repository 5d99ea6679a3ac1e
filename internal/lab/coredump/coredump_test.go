package coredump

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/lab/labtest"
	"github.com/wolf-investigator/wolf/internal/procfs"
	"github.com/wolf-investigator/wolf/internal/sysctl"
	"github.com/wolf-investigator/wolf/internal/testutil"
	"golang.org/x/sys/unix"
)

// kill9Part runs a lab in a child of the test binary that TestKill9 kills;
// its argument is the temp base to use.
const kill9Part = "coredump-kill9"

func init() { lab.Child(kill9Part, kill9Helper) }

func gate(t *testing.T) {
	t.Helper()
	testutil.RequireRoot(t)
	// The lab changes kernel.core_pattern, a host-wide setting, and parks
	// threads: no other package's test may run meanwhile.
	testutil.Exclusive(t)
}

// privateBase points tempBase at a directory of the test's own, so that
// leftovers can be counted.
func privateBase(t *testing.T) string {
	t.Helper()
	// Not t.TempDir(): its long name would eat into core_pattern's 127 bytes.
	base, err := os.MkdirTemp("", "wolf-coredump-test-")
	if err != nil {
		t.Fatal(err)
	}
	tempBase = base
	t.Cleanup(func() { tempBase = ""; os.RemoveAll(base) })
	return base
}

func corePattern(t *testing.T) string {
	t.Helper()
	p, err := sysctl.Read(corePatternSysctl)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRegistry(t *testing.T) {
	l, err := lab.NewRegistry(New()).Get("coredump")
	if err != nil {
		t.Fatal(err)
	}
	if l.Summary() == "" {
		t.Error("empty summary")
	}
}

func TestParseStat(t *testing.T) {
	// A comm with spaces and a parenthesis; flags 0x400448, starttime 123.
	line := "4242 (a) b (c) I 1 2 3 0 -1 4195400 0 0 0 0 0 0 0 0 20 0 8 0 123 0 0"
	st, err := procfs.ParseStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if st.State != 'I' || st.Flags != 0x400448 || st.StartTime != 123*time.Second/procfs.UserHZ {
		t.Errorf("parseStat = %+v", st)
	}
	if st.Flags&pfPostCoredump == 0 {
		t.Error("PF_POSTCOREDUMP not seen in 0x400448")
	}
	for _, bad := range []string{"", "1 (x) S 1", "1 (x) SS 1 2 3 0 -1 1 0 0 0 0 0 0 0 0 20 0 8 0 1"} {
		if _, err := procfs.ParseStat([]byte(bad)); err == nil {
			t.Errorf("parseStat(%q) succeeded", bad)
		}
	}
}

// TestHandlerScript runs the handler as the kernel would, without a crash:
// core on stdin, pids as arguments.
func TestHandlerScript(t *testing.T) {
	flock, err := lookAbs("flock")
	testutil.Require(t, err == nil, "needs flock(1)")
	cat, err := lookAbs("cat")
	testutil.Require(t, err == nil, "needs cat(1)")
	dir := t.TempDir()
	lockPath, report := filepath.Join(dir, "lock"), filepath.Join(dir, "report")
	script := filepath.Join(dir, "handler")
	if err := os.WriteFile(script, []byte(handlerScript(lockPath, report, flock, cat, time.Minute)), 0o700); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}

	run := func(args ...string) (*exec.Cmd, *os.File, chan error) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(shell, append([]string{script}, args...)...)
		cmd.Stdin = r
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		r.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		return cmd, w, done
	}

	// Someone else's crash: refused at once, no report, no wait.
	_, w, done := run("5", "6", "7")
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("handler for a foreign pid: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("handler for a foreign pid did not exit")
	}
	w.Close()
	if _, err := os.Stat(report); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("report written for a foreign pid: %v", err)
	}

	// Ours: reports, then reads nothing while the lock is held.
	cmd, w, done := run("5", "5", "7")
	err = lab.WaitFor(context.Background(), 5*time.Second, "the report", func() (bool, error) {
		b, _ := os.ReadFile(report)
		return strings.HasSuffix(string(b), "\n"), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(report)
	if want := fmt.Sprintf("5 7 %d\n", cmd.Process.Pid); string(b) != want {
		t.Errorf("report %q, want %q", b, want)
	}
	wrote := make(chan error, 1)
	go func() {
		_, err := w.Write(make([]byte, 1<<20)) // more than a pipe holds
		w.Close()
		wrote <- err
	}()
	select {
	case err := <-wrote:
		t.Fatalf("1 MiB went through while the lock was held (%v)", err)
	case err := <-done:
		t.Fatalf("handler exited while the lock was held: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	lock.Close() // release
	for _, ch := range []chan error{wrote, done} {
		select {
		case err := <-ch:
			if err != nil {
				t.Errorf("after release: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("handler did not drain its stdin and exit after release")
		}
	}
}

func start(t *testing.T, victims int) *Instance {
	t.Helper()
	li, err := New().Start(context.Background(), lab.Options{Victims: victims, Logf: t.Logf})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	in := li.(*Instance)
	t.Cleanup(func() {
		if err := in.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return in
}

// coreFiles lists core files the original pattern could have produced for
// pid in the crasher's working directory, "/".
func coreFiles(pid int) []string {
	var out []string
	for _, p := range []string{"/core", "/core." + strconv.Itoa(pid)} {
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

func TestCoredump(t *testing.T) {
	gate(t)
	base := privateBase(t)
	orig := corePattern(t)
	preexisting := coreFiles(0)

	in := start(t, 3)
	t.Log(in.Describe())
	pid := in.Process()
	tasks := in.Tasks()
	if pid <= 0 || tasks.Offender <= 0 || tasks.Daemon <= 0 || len(tasks.Victims) < 2 {
		t.Fatalf("Process() = %d, Tasks() = %+v", pid, tasks)
	}
	// Already restored: the kernel read the pattern when the dump began.
	if p := corePattern(t); p != orig {
		t.Errorf("core_pattern %q during the stall, want the original %q back", p, orig)
	}
	if l := leftovers(base); len(l) > 0 {
		t.Errorf("temp files during the stall: %q", l)
	}

	// Three locked goroutines plus the runtime's threads: all but the
	// dumper park.
	all := tids(pid)
	if len(tasks.Victims) < 3 || len(tasks.Victims) != len(all)-1 {
		t.Errorf("victims %v of threads %v: want every thread but the dumper, at least 3", tasks.Victims, all)
	}
	if slices.Contains(tasks.Victims, tasks.Offender) || !slices.Contains(all, tasks.Offender) {
		t.Errorf("offender %d: want a thread of pid %d (%v) that is no victim (%v)", tasks.Offender, pid, all, tasks.Victims)
	}
	check := func(when string) {
		for _, tid := range tasks.Victims {
			st, ok := readTaskStat(pid, tid)
			fns := stackFuncs(pid, tid)
			t.Logf("%s: victim %d %s: state %c flags %#x wchan %s stack %s", when, tid, comm(pid, tid), st.State, st.Flags, wchan(pid, tid), strings.Join(fns, " < "))
			if !ok || !slices.Contains(all, tid) {
				t.Errorf("%s: victim %d is not a thread of pid %d", when, tid, pid)
				continue
			}
			if st.State != 'I' && st.State != 'D' {
				t.Errorf("%s: victim %d in state %c, want I (TASK_IDLE, 6.12+) or D", when, tid, st.State)
			}
			if st.Flags&pfPostCoredump == 0 {
				t.Errorf("%s: victim %d flags %#x lack PF_POSTCOREDUMP", when, tid, st.Flags)
			}
			if len(fns) > 0 && !slices.Contains(fns, "do_exit") && !slices.Contains(fns, "coredump_task_exit") {
				t.Errorf("%s: victim %d not in do_exit/coredump_task_exit: %v", when, tid, fns)
			}
			if c := comm(pid, tid); c != crasherComm {
				t.Errorf("%s: victim %d comm %q, want %q", when, tid, c, crasherComm)
			}
		}
		st, _ := readTaskStat(pid, tasks.Offender)
		fns := stackFuncs(pid, tasks.Offender)
		t.Logf("%s: offender %d %s: state %c flags %#x wchan %s stack %s", when, tasks.Offender, comm(pid, tasks.Offender), st.State, st.Flags, wchan(pid, tasks.Offender), strings.Join(fns, " < "))
		if st.Flags&pfDumpCore == 0 || st.Flags&pfPostCoredump != 0 {
			t.Errorf("%s: offender flags %#x: want PF_DUMPCORE, not PF_POSTCOREDUMP", when, st.Flags)
		}
		if st.State != 'S' {
			t.Errorf("%s: offender state %c, want S (waiting for room in the pipe)", when, st.State)
		}
		if len(fns) > 0 && (!slices.ContainsFunc(fns, func(f string) bool { return strings.HasSuffix(f, "pipe_write") }) ||
			!slices.Contains(fns, "vfs_coredump")) {
			t.Errorf("%s: offender stack %v: want a pipe write under vfs_coredump", when, fns)
		}
		if !alive(tasks.Daemon, in.handlerSt) {
			t.Errorf("%s: handler pid %d gone", when, tasks.Daemon)
		}
	}
	check("at start")
	// The stall holds for as long as the lab runs, not for a fixed time.
	time.Sleep(1500 * time.Millisecond)
	check("1.5 s later")

	// Close from two goroutines at once, then once more.
	began := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = in.Close() }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	t.Logf("Close took %v; crasher: %v", time.Since(began), in.crasher.err)
	if err := in.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	// The dump went through to the end: the process died of SIGABRT with a
	// core (to the pipe; no file).
	var ee *exec.ExitError
	if errors.As(in.crasher.err, &ee) {
		ws := ee.Sys().(syscall.WaitStatus)
		if !ws.Signaled() || ws.Signal() != syscall.SIGABRT || !ws.CoreDump() {
			t.Errorf("crasher ended with %v, want SIGABRT (core dumped)", in.crasher.err)
		}
	} else {
		t.Errorf("crasher ended with %v, want SIGABRT (core dumped)", in.crasher.err)
	}
	checkCleaned(t, in, base, orig, preexisting)
	if !strings.Contains(in.Describe(), "closed") {
		t.Errorf("Describe after Close:\n%s", in.Describe())
	}
}

func checkCleaned(t *testing.T, in *Instance, base, orig string, preexisting []string) {
	t.Helper()
	if p := corePattern(t); p != orig {
		t.Errorf("core_pattern %q after Close, want %q", p, orig)
	}
	if pid := in.Process(); pid > 0 {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("crasher pid %d still exists after Close (kill 0: %v)", pid, err)
		}
		if c := coreFiles(pid); len(c) > len(preexisting) {
			t.Errorf("core files written: %v", c)
		}
	}
	if h := in.Tasks().Daemon; h > 0 && alive(h, in.handlerSt) {
		t.Errorf("handler pid %d still runs after Close", h)
	}
	if kids := ourChildren(); len(kids) > 0 {
		t.Errorf("children left after Close: %v", kids)
	}
	if l := leftovers(base); len(l) > 0 {
		t.Errorf("left behind in %s: %q", base, l)
	}
}

// ourChildren lists this process's children from /proc/self/task/*/children
// (CONFIG_PROC_CHILDREN; empty when absent).
func ourChildren() []string {
	files, _ := filepath.Glob("/proc/self/task/*/children")
	var out []string
	for _, f := range files {
		b, _ := os.ReadFile(f)
		out = append(out, strings.Fields(string(b))...)
	}
	return out
}

func leftovers(base string) []string {
	var out []string
	ents, _ := os.ReadDir(base)
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func TestRelease(t *testing.T) {
	gate(t)
	in := start(t, 0)
	c := in.crasher
	in.Release()
	select {
	case <-c.done:
	case <-time.After(waitTimeout):
		t.Fatalf("crasher pid %d still there %s after Release", c.pid, waitTimeout)
	}
	t.Logf("crasher: %v", c.err)
}

func TestStartCancelled(t *testing.T) {
	gate(t)
	base := privateBase(t)
	orig := corePattern(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	in, err := New().Start(ctx, lab.Options{Logf: t.Logf})
	if err == nil {
		in.Close()
		t.Fatal("Start with a cancelled context succeeded")
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Start: %v, want context.Canceled", err)
	}
	if p := corePattern(t); p != orig {
		t.Errorf("core_pattern %q, want %q", p, orig)
	}
	if l := leftovers(base); len(l) > 0 {
		t.Errorf("left behind: %q", l)
	}
	if kids := ourChildren(); len(kids) > 0 {
		t.Errorf("children left: %v", kids)
	}
}

// TestStartCancelledMidway cancels at each step of Start, so that Start
// fails with the crasher up, with core_pattern set, and with the dump
// under way, and must undo all of it.
func TestStartCancelledMidway(t *testing.T) {
	gate(t)
	orig := corePattern(t)
	for _, step := range []string{"coredump: crasher pid", "coredump: " + corePatternSysctl + " =", "coredump: handler pid"} {
		t.Run(strings.Fields(step)[1], func(t *testing.T) {
			base := privateBase(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			logf := func(format string, args ...any) {
				t.Logf(format, args...)
				if strings.HasPrefix(fmt.Sprintf(format, args...), step) {
					cancel()
				}
			}
			in, err := New().Start(ctx, lab.Options{Logf: logf})
			if err == nil {
				in.Close()
				t.Fatal("Start cancelled midway succeeded")
			}
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Start: %v, want context.Canceled", err)
			}
			t.Log(err)
			if p := corePattern(t); p != orig {
				t.Errorf("core_pattern %q, want %q", p, orig)
			}
			if l := leftovers(base); len(l) > 0 {
				t.Errorf("left behind: %q", l)
			}
			if kids := ourChildren(); len(kids) > 0 {
				t.Errorf("children left: %v", kids)
			}
			if h := handlers(); len(h) > 0 {
				t.Errorf("handlers left: %v", h)
			}
		})
	}
}

// handlers lists processes running a wolf-coredump handler: children of
// kthreadd whose stdin or descriptors point into a wolf-coredump dir. Their
// fd links are read, not their memory.
func handlers() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		fds, _ := filepath.Glob("/proc/" + e.Name() + "/fd/*")
		for _, fd := range fds {
			if l, _ := os.Readlink(fd); strings.Contains(l, "/wolf-coredump-") {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// kill9Helper runs the lab, says READY with the pids, and waits to be
// killed.
func kill9Helper(spec string) error {
	base, mode, _ := strings.Cut(spec, ":")
	tempBase = base
	if mode == "crash" {
		// Die in the window: core_pattern set, no handler yet.
		afterPatternSet = func(pattern string) {
			fmt.Println("READY", pattern)
			time.Sleep(time.Minute)
			os.Exit(1)
		}
	}
	li, err := New().Start(context.Background(), lab.Options{})
	if err != nil {
		return err
	}
	in := li.(*Instance)
	t := in.Tasks()
	fmt.Println("READY", in.Process(), t.Daemon, in.handlerSt)
	time.Sleep(time.Minute)
	in.Close()
	return errors.New("not killed in a minute")
}

// TestKill9 checks what the package comment says a kill -9 of the lab
// leaves once Start has returned: nothing.
func TestKill9(t *testing.T) {
	gate(t)
	base := privateBase(t)
	orig := corePattern(t)
	f, kill := labtest.Start(t, kill9Part, base, 3*waitTimeout)
	var crasher, handler int
	var handlerSt time.Duration
	if _, err := fmt.Sscanf(strings.Join(f, " "), "%d %d %d", &crasher, &handler, &handlerSt); err != nil {
		t.Fatalf("helper said READY %q, want the crasher's and the handler's pids and the handler's start", f)
	}
	crasherSt, _ := processStart(crasher)

	kill()

	for _, p := range []struct {
		what  string
		pid   int
		start time.Duration
	}{{"crasher", crasher, crasherSt}, {"handler", handler, handlerSt}} {
		err := lab.WaitFor(context.Background(), waitTimeout, fmt.Sprintf("%s pid %d to go", p.what, p.pid), func() (bool, error) {
			return !alive(p.pid, p.start), nil
		})
		if err != nil {
			t.Errorf("after kill -9 of the lab: %v", err)
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
	}
	if p := corePattern(t); p != orig {
		t.Errorf("core_pattern %q after kill -9, want %q", p, orig)
		_ = sysctl.Write(corePatternSysctl, orig)
	}
	if l := leftovers(base); len(l) > 0 {
		t.Errorf("left behind after kill -9: %q", l)
	}
}

// TestKill9DuringCrash kills the lab in the window where core_pattern
// points at its handler and no dump has begun: the next Start puts the
// pattern back (its ledger recorded it) and removes the dead lab's
// directory, and runs.
func TestKill9DuringCrash(t *testing.T) {
	gate(t)
	base := privateBase(t)
	orig := corePattern(t)
	t.Cleanup(func() {
		if p := corePattern(t); p != orig {
			_ = sysctl.Write(corePatternSysctl, orig)
		}
	})
	f, kill := labtest.Start(t, kill9Part, base+":crash", 3*waitTimeout)
	pattern := strings.Join(f, " ")
	kill()
	if p := corePattern(t); p != pattern {
		t.Fatalf("core_pattern %q after the kill, want the dead lab's %q: the test no longer tests the window", p, pattern)
	}
	if l := leftovers(base); len(l) != 1 {
		t.Fatalf("after the kill: %q, want the dead lab's directory", l)
	}

	li, err := New().Start(context.Background(), lab.Options{Logf: t.Logf})
	if err != nil {
		t.Fatalf("the next Start: %v", err)
	}
	in := li.(*Instance)
	if in.origPattern != orig {
		t.Errorf("the next Start found core_pattern %q, want the one before the dead lab, %q", in.origPattern, orig)
	}
	if err := in.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if p := corePattern(t); p != orig {
		t.Errorf("core_pattern %q at the end, want %q", p, orig)
	}
	if l := leftovers(base); len(l) > 0 {
		t.Errorf("left behind: %q", l)
	}
}
