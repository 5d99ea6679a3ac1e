package fusestall

import (
	"context"
	"errors"
	"fmt"
	"os"
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
	"github.com/wolf-investigator/wolf/internal/testutil"
	"golang.org/x/sys/unix"
)

// kill9Part runs a lab in a child of the test binary that TestKill9 kills.
const kill9Part = "fusestall-kill9"

func init() { lab.Child(kill9Part, kill9Helper) }

func gate(t *testing.T) {
	t.Helper()
	testutil.RequireRoot(t)
	_, err := os.Stat("/dev/fuse")
	fuseAvailable := err == nil
	testutil.Require(t, fuseAvailable, "needs /dev/fuse")
	// Hung tasks from this lab must not show up in another package's
	// "healthy host" test running at the same time.
	testutil.Exclusive(t)
}

func start(t *testing.T, l lab.Lab, victims int) *Instance {
	t.Helper()
	li, err := l.Start(context.Background(), lab.Options{Victims: victims, Logf: t.Logf})
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

func TestLabs(t *testing.T) {
	r := lab.NewRegistry(NewRWSem(), NewMutex())
	for _, name := range []string{"fuse-rwsem", "fuse-mutex"} {
		l, err := r.Get(name)
		if err != nil {
			t.Fatal(err)
		}
		if l.Summary() == "" {
			t.Errorf("%s: empty summary", name)
		}
	}
}

// /proc/PID/stack omits __sched functions (rwsem_down_write_slowpath,
// __mutex_lock, schedule...), so the innermost frame a victim shows is the
// function that took the lock (see victimFrames). offenderFrame is where the
// offender sent its request from.
func TestRWSem(t *testing.T) { testVariant(t, NewRWSem(), "fuse_perform_write") }

func TestMutex(t *testing.T) { testVariant(t, NewMutex(), "fuse_lookup") }

func testVariant(t *testing.T, l lab.Lab, offenderFrame string) {
	gate(t)
	in := start(t, l, 2)
	t.Log(in.Describe())

	tasks := in.Tasks()
	if tasks.Offender <= 0 || tasks.Daemon != os.Getpid() || len(tasks.Victims) != 2 {
		t.Fatalf("Tasks() = %+v", tasks)
	}
	if !strings.Contains(mountinfoLine(in.MountPoint()), " - "+fsType+" "+mountSource+" ") {
		t.Errorf("mountinfo for %s: %q", in.MountPoint(), mountinfoLine(in.MountPoint()))
	}

	off := stack(tasks.Offender)
	t.Logf("offender pid %d state %c wchan %s stack:\n%s", tasks.Offender, taskState(tasks.Offender), wchan(tasks.Offender), off)
	if fns := stackFuncs(tasks.Offender); len(fns) == 0 || fns[0] != "request_wait_answer" || !slices.Contains(fns, offenderFrame) {
		t.Errorf("offender stack: want request_wait_answer innermost, %s below:\n%s", offenderFrame, off)
	}
	if st := taskState(tasks.Offender); st != 'S' {
		t.Errorf("offender state %c, want S (fuse waits interruptibly until a signal)", st)
	}
	checkVictims(t, tasks.Victims, in.victimFrames())

	pids, err := in.AddVictims(1)
	if err != nil {
		t.Fatalf("AddVictims: %v", err)
	}
	if len(pids) != 1 {
		t.Fatalf("AddVictims(1) = %v", pids)
	}
	checkVictims(t, pids, in.victimFrames())
	if got := in.Tasks().Victims; len(got) != 3 || got[2] != pids[0] {
		t.Errorf("Tasks().Victims after AddVictims = %v", got)
	}
	if d := in.Describe(); !strings.Contains(d, strconv.Itoa(tasks.Offender)) || !strings.Contains(d, in.MountPoint()) {
		t.Errorf("Describe() lacks offender or mount point:\n%s", d)
	}

	// Close from two goroutines at once, then once more.
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
	checkCleaned(t, in)
	if err := in.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := in.AddVictims(1); err == nil {
		t.Error("AddVictims after Close succeeded")
	}
}

func checkVictims(t *testing.T, pids []int, frames []string) {
	t.Helper()
	for _, pid := range pids {
		st, wc, stk := taskState(pid), wchan(pid), stack(pid)
		t.Logf("victim pid %d state %c wchan %s stack:\n%s", pid, st, wc, stk)
		if st != 'D' {
			t.Errorf("victim %d in state %c, want D", pid, st)
		}
		if fns := stackFuncs(pid); len(fns) == 0 || !slices.Contains(frames, fns[0]) {
			t.Errorf("victim %d: want one of %v innermost:\n%s", pid, frames, stk)
		}
	}
}

// checkCleaned: no mount, no child, no temp dir.
func checkCleaned(t *testing.T, in *Instance) {
	t.Helper()
	if l := mountinfoLine(in.MountPoint()); l != "" {
		t.Errorf("mount left after Close: %s", l)
	}
	tasks := in.Tasks()
	for _, pid := range append([]int{tasks.Offender}, tasks.Victims...) {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("pid %d still exists after Close (kill 0: %v, state %c)", pid, err, taskState(pid))
		}
	}
	if kids := ourChildren(); len(kids) > 0 {
		t.Errorf("children left after Close: %v", kids)
	}
	if _, err := os.Stat(in.MountPoint()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("mount point %s left after Close: %v", in.MountPoint(), err)
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

func mountinfoLine(dir string) string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(b), "\n") {
		if m, _ := procfs.ParseMountinfo(strings.NewReader(line)); len(m) == 1 && m[0].Point == dir {
			return line
		}
	}
	return ""
}

func TestRelease(t *testing.T) {
	gate(t)
	for _, l := range []lab.Lab{NewRWSem(), NewMutex()} {
		t.Run(l.Name(), func(t *testing.T) {
			in := start(t, l, 2)
			in.Release()
			in.mu.Lock()
			kids := append([]*child(nil), in.children...)
			in.mu.Unlock()
			if len(kids) != 3 {
				t.Fatalf("%d children, want 3", len(kids))
			}
			for _, c := range kids {
				select {
				case <-c.done:
					if c.err != nil {
						t.Errorf("%s pid %d: %v %s", c.role, c.pid, c.err, c.stderr.String())
					}
				case <-time.After(waitTimeout):
					t.Fatalf("%s pid %d still running %s after Release (state %c, wchan %s)",
						c.role, c.pid, waitTimeout, taskState(c.pid), wchan(c.pid))
				}
			}
			if _, err := in.AddVictims(1); err == nil {
				t.Error("AddVictims after Release succeeded")
			}
			if l.Name() == "fuse-rwsem" {
				b, err := os.ReadFile(filepath.Join(in.MountPoint(), dataName))
				if err != nil {
					t.Fatal(err)
				}
				if string(b) != "offender\nvictim\nvictim\n" {
					t.Errorf("data = %q, want the offender's line then the victims'", b)
				}
			}
			if err := in.Close(); err != nil {
				t.Fatal(err)
			}
			checkCleaned(t, in)
		})
	}
}

func TestStartCancelled(t *testing.T) {
	gate(t)
	base := privateBase(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, l := range []lab.Lab{NewRWSem(), NewMutex()} {
		in, err := l.Start(ctx, lab.Options{Logf: t.Logf})
		if err == nil {
			in.Close()
			t.Fatalf("%s: Start with a cancelled context succeeded", l.Name())
		}
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s: Start: %v, want context.Canceled", l.Name(), err)
		}
	}
	if l := leftovers(base); len(l) > 0 {
		t.Errorf("left behind: %q", l)
	}
	if kids := ourChildren(); len(kids) > 0 {
		t.Errorf("children left: %v", kids)
	}
}

// TestStartCancelledMidway cancels once the offender is in place, so that
// Start fails after mounting and spawning and must undo all of it.
func TestStartCancelledMidway(t *testing.T) {
	gate(t)
	base := privateBase(t)
	for _, l := range []lab.Lab{NewRWSem(), NewMutex()} {
		ctx, cancel := context.WithCancel(context.Background())
		logf := func(format string, args ...any) {
			t.Logf(format, args...)
			if strings.HasPrefix(format, "fusestall: offender") {
				cancel()
			}
		}
		in, err := l.Start(ctx, lab.Options{Logf: logf})
		cancel()
		if err == nil {
			in.Close()
			t.Fatalf("%s: Start cancelled midway succeeded", l.Name())
		}
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s: Start: %v, want context.Canceled", l.Name(), err)
		}
		t.Logf("%s: %v", l.Name(), err)
	}
	if l := leftovers(base); len(l) > 0 {
		t.Errorf("left behind: %q", l)
	}
	if kids := ourChildren(); len(kids) > 0 {
		t.Errorf("children left: %v", kids)
	}
}

// privateBase points mountBase at a directory of the test's own, so that
// labs others run at the same time do not disturb the before/after checks.
func privateBase(t *testing.T) string {
	t.Helper()
	base := t.TempDir()
	mountBase = base
	t.Cleanup(func() { mountBase = "" })
	return base
}

// leftovers lists what is left under base: entries and mounts.
func leftovers(base string) []string {
	var out []string
	ents, _ := os.ReadDir(base)
	for _, e := range ents {
		out = append(out, e.Name())
	}
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, " "+base+"/") {
			out = append(out, line)
		}
	}
	return out
}

// TestKill9 checks what the package comment says a kill -9 of the lab
// leaves: children gone, connection aborted (no access hangs), a dead mount.
func TestKill9(t *testing.T) {
	gate(t)
	for _, name := range []string{"fuse-rwsem", "fuse-mutex"} {
		t.Run(name, func(t *testing.T) {
			base := privateBase(t)
			l, err := lab.NewRegistry(NewRWSem(), NewMutex()).Get(name)
			if err != nil {
				t.Fatal(err)
			}
			// The helper makes its mount point in base too.
			t.Setenv("TMPDIR", base)
			f, kill := labtest.Start(t, kill9Part, name, 2*waitTimeout)
			if len(f) < 2 {
				t.Fatalf("helper said READY %q, want the mount point and pids", f)
			}
			dir := f[0]
			defer func() { // what a person would do
				unix.Unmount(dir, unix.MNT_DETACH)
				os.Remove(dir)
			}()
			var pids []int
			for _, s := range f[1:] {
				pid, _ := strconv.Atoi(s)
				pids = append(pids, pid)
			}

			kill()

			for _, pid := range pids {
				err := lab.WaitFor(context.Background(), waitTimeout, fmt.Sprintf("pid %d to die", pid), func() (bool, error) {
					st := taskState(pid)
					return st == 0 || st == 'Z', nil
				})
				if err != nil {
					t.Errorf("after kill -9 of the lab: %v (state %c, wchan %s)", err, taskState(pid), wchan(pid))
				}
			}
			mi := mountinfoLine(dir)
			t.Logf("after kill -9: mountinfo: %q", mi)
			if mi == "" {
				t.Fatalf("no dead mount at %s after kill -9: the test no longer tests its cleanup", dir)
			}
			// The dead mount must answer at once, not hang: OPENDIR
			// goes to the (aborted) connection.
			done := make(chan error, 1)
			go func() { _, err := os.ReadDir(dir); done <- err }()
			select {
			case err := <-done:
				if !errors.Is(err, unix.ENOTCONN) {
					t.Errorf("ReadDir of the dead mount: %v, want ENOTCONN", err)
				}
			case <-time.After(waitTimeout):
				t.Fatal("ReadDir of the dead mount hangs")
			}
			// The next lab to start removes what the dead one left
			// (its ledger names the mount and the directory).
			in := start(t, l, 1)
			if mi := mountinfoLine(dir); mi != "" {
				t.Errorf("after the next Start: the dead lab's mount is still there: %q", mi)
			}
			if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("after the next Start: %s: %v, want it gone", dir, err)
			}
			if err := in.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			if left := leftovers(base); len(left) != 0 {
				t.Errorf("after Close: %v", left)
			}
		})
	}
}

// kill9Helper runs a lab until killed. spec is NAME[:VICTIMS]; running it by
// hand (WOLF_LAB_CHILD=fusestall-kill9 WOLF_LAB_CHILD_ARG=fuse-mutex:1
// ./fusestall.test) keeps a lab up for ten minutes, long enough for the
// hung-task detector.
func kill9Helper(spec string) error {
	name, nv, _ := strings.Cut(spec, ":")
	victims, _ := strconv.Atoi(nv)
	l := NewRWSem()
	if name == "fuse-mutex" {
		l = NewMutex()
	}
	li, err := l.Start(context.Background(), lab.Options{Victims: victims})
	if err != nil {
		return err
	}
	in := li.(*Instance)
	tasks := in.Tasks()
	fmt.Printf("READY %s %d %s\n", in.MountPoint(), tasks.Offender, strings.Trim(fmt.Sprint(tasks.Victims), "[]"))
	time.Sleep(10 * time.Minute) // TestKill9 kills it long before
	in.Close()
	return errors.New("not killed in 10 minutes")
}

func TestWaitFrames(t *testing.T) {
	got := waitFrames([]string{"rwsem_down_write_slowpath", "fuse_flush", "filp_close"})
	if len(got) != 2 || got[0] != "fuse_flush" {
		t.Errorf("5.10's rw-semaphore stack: %v", got)
	}
	if got := waitFrames([]string{"fuse_lock_inode", "fuse_lookup"}); got[0] != "fuse_lock_inode" {
		t.Errorf("%v", got)
	}
}
