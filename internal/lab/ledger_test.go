package lab

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/testutil"
)

// ledgerPart is a lab in a child of the test binary that records things
// in a ledger, makes them and waits to be killed; its argument is
// "STATEDIR:BASE:WHAT,WHAT".
const ledgerPart = "ledger-test"

func init() { Child(ledgerPart, ledgerHelper) }

func useStateDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	old := StateDir
	StateDir = dir
	t.Cleanup(func() { StateDir = old })
	return dir
}

// killedLab runs the helper with what, waits until it has made
// everything, kills it with SIGKILL and returns the helper's report: its
// pid and the paths it made.
func killedLab(t *testing.T, stateDir, base, what string) (int, []string) {
	t.Helper()
	cmd := ChildCommand(context.Background(), ledgerPart, ledgerPart, stateDir+":"+base+":"+what, "PATH="+os.Getenv("PATH"))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	line := make(chan string, 1)
	go func() { l, _ := bufio.NewReader(out).ReadString('\n'); line <- l }()
	var l string
	select {
	case l = <-line:
	case <-time.After(30 * time.Second):
		t.Fatal("helper did not get ready")
	}
	f := strings.Fields(l)
	if len(f) < 1 || f[0] != "READY" {
		t.Fatalf("helper said %q", l)
	}
	// Before the kill the owner lives: Clean leaves its ledger alone.
	if c, err := Clean(t.Logf); err != nil || len(c) != 0 {
		t.Errorf("Clean with the owner alive: %v, %v; want nothing done", c, err)
	}
	for _, p := range f[1:] {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("before the kill: %v", err)
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	return cmd.Process.Pid, f[1:]
}

func ledgerHelper(spec string) error {
	parts := strings.SplitN(spec, ":", 3)
	if len(parts) != 3 {
		return fmt.Errorf("argument %q, want STATEDIR:BASE:WHAT", spec)
	}
	StateDir = parts[0]
	base := parts[1]
	l, err := NewLedger("test", nil)
	if err != nil {
		return err
	}
	var made []string
	must := func(err error) {
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
	}
	for _, what := range strings.Split(parts[2], ",") {
		switch what {
		case "dir":
			p := filepath.Join(base, Name("dir"))
			must(l.Add(Dir(p)))
			must(os.Mkdir(p, 0o755))
			made = append(made, p)
		case "tree":
			p := filepath.Join(base, Name("tree"))
			must(l.Add(Tree(p)))
			must(os.MkdirAll(filepath.Join(p, "a", "b"), 0o755))
			must(os.WriteFile(filepath.Join(p, "a", "f"), []byte("x"), 0o644))
			made = append(made, p)
		case "file":
			p := filepath.Join(base, Name("file"))
			must(l.Add(File(p)))
			must(os.WriteFile(p, nil, 0o644))
			made = append(made, p)
		case "unnamed":
			// Not named as the lab's: Clean must refuse it.
			p := filepath.Join(base, "not-the-labs")
			must(l.Add(Dir(p)))
			must(os.Mkdir(p, 0o755))
			made = append(made, p)
		case "mount":
			p := filepath.Join(base, Name("mnt"))
			must(l.Add(Dir(p)))
			must(os.Mkdir(p, 0o755))
			must(l.Add(Mount(p, "tmpfs", "wolf-ledger-test")))
			must(unix.Mount("wolf-ledger-test", p, "tmpfs", 0, "size=64k"))
			made = append(made, p)
		case "cgroup":
			p := filepath.Join("/sys/fs/cgroup/memory", Name("cg"))
			must(l.Add(Cgroup(p)))
			must(os.Mkdir(p, 0o755))
			// A process left in it, which does not die with the lab.
			c := exec.Command("sleep", "600")
			c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
			must(c.Start())
			must(os.WriteFile(filepath.Join(p, "cgroup.procs"), []byte(strconv.Itoa(c.Process.Pid)), 0))
			made = append(made, p)
		case "process":
			c := exec.Command("sleep", "600")
			c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
			must(c.Start())
			it, err := Process(c.Process.Pid)
			must(err)
			must(l.Add(it))
			made = append(made, fmt.Sprintf("/proc/%d", c.Process.Pid))
		}
	}
	fmt.Println("READY " + strings.Join(made, " "))
	time.Sleep(10 * time.Minute)
	return errors.New("not killed in 10 minutes")
}

func TestCleanAfterKill9(t *testing.T) {
	state := useStateDir(t)
	base := t.TempDir()
	pid, made := killedLab(t, state, base, "dir,tree,file")
	c, err := Clean(t.Logf)
	if err != nil {
		t.Fatalf("Clean: %v", err)
	}
	if len(c) != 1 || c[0].PID != pid || len(c[0].Undone) != 3 {
		t.Errorf("Clean did %+v, want the 3 things of pid %d", c, pid)
	}
	for _, p := range made {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s after Clean: %v", p, err)
		}
	}
	if ents, _ := os.ReadDir(state); len(ents) != 0 {
		t.Errorf("ledgers left: %v", ents)
	}
	if c, err := Clean(t.Logf); err != nil || len(c) != 0 {
		t.Errorf("second Clean: %v, %v", c, err)
	}
}

func TestCleanRefusesWhatIsNotNamedAsTheLabs(t *testing.T) {
	state := useStateDir(t)
	base := t.TempDir()
	_, made := killedLab(t, state, base, "dir,unnamed")
	c, err := Clean(t.Logf)
	if err == nil || !strings.Contains(err.Error(), "not touching it") {
		t.Errorf("Clean: %v, want a refusal of the unnamed directory", err)
	}
	if len(c) != 1 || len(c[0].Undone) != 1 {
		t.Errorf("Clean did %+v, want the named dir undone", c)
	}
	if _, err := os.Stat(made[1]); err != nil {
		t.Errorf("the unnamed directory: %v, want it left", err)
	}
	if _, err := os.Stat(made[0]); !os.IsNotExist(err) {
		t.Errorf("the named directory: %v, want it removed", err)
	}
	// The ledger stays, with only the refused item in it.
	ents, _ := os.ReadDir(state)
	if len(ents) != 1 {
		t.Fatalf("ledgers: %v", ents)
	}
	f, _ := os.Open(filepath.Join(state, ents[0].Name()))
	defer f.Close()
	_, items, err := readLedger(f)
	if err != nil || len(items) != 1 || items[0].Path != made[1] {
		t.Errorf("ledger holds %v (%v), want only %s", items, err, made[1])
	}
}

func TestCleanMountCgroupProcess(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.Exclusive(t) // makes a cgroup
	_, err := os.Stat("/sys/fs/cgroup/memory/cgroup.procs")
	testutil.Require(t, err == nil, "needs the cgroup v1 memory hierarchy at /sys/fs/cgroup/memory")
	state := useStateDir(t)
	base := t.TempDir()
	_, made := killedLab(t, state, base, "mount,cgroup,process")
	mnt, cg, sleeper := made[0], made[1], made[2]
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	if _, err := Clean(t.Logf); err != nil {
		t.Fatalf("Clean: %v", err)
	}
	if m, _ := mountUnder(mnt); m != "" {
		t.Errorf("%s still mounted", m)
	}
	for _, p := range []string{mnt, cg} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s after Clean: %v", p, err)
		}
	}
	if err := WaitFor(t.Context(), 10*time.Second, sleeper+" to go", func() (bool, error) {
		b, err := os.ReadFile(sleeper + "/stat")
		return err != nil || strings.Contains(string(b), ") Z "), nil
	}); err != nil {
		t.Error(err)
	}
}

func TestCleanLeavesOtherMounts(t *testing.T) {
	testutil.RequireRoot(t)
	state := useStateDir(t)
	base := t.TempDir()
	_, made := killedLab(t, state, base, "mount")
	mnt := made[0]
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH); unix.Unmount(mnt, unix.MNT_DETACH) })
	// Someone else's mount now sits there: not the lab's to remove.
	if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("someone-else", mnt, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatal(err)
	}
	_, err := Clean(t.Logf)
	if err == nil || !strings.Contains(err.Error(), "not unmounting it") {
		t.Errorf("Clean: %v, want it to refuse someone else's mount", err)
	}
	if m, _ := mountUnder(mnt); m != mnt {
		t.Errorf("someone else's mount at %s is gone", mnt)
	}
}

func TestLedgerClosedCleanly(t *testing.T) {
	state := useStateDir(t)
	l, err := NewLedger("test", t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), Name("dir"))
	it := Dir(p)
	if err := l.Add(it); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(p, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err == nil || !strings.Contains(err.Error(), "not undone") {
		t.Errorf("Close with an item pending: %v, want an error naming it", err)
	}
	// This process lives, but the ledger is closed and unlocked: Clean
	// leaves it, since the owner lives.
	if c, err := Clean(t.Logf); err != nil || len(c) != 0 {
		t.Errorf("Clean: %v %v", c, err)
	}
	os.Remove(p)
	ents, _ := os.ReadDir(state)
	for _, e := range ents {
		os.Remove(filepath.Join(state, e.Name()))
	}

	l, err = NewLedger("test", t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Add(it); err != nil {
		t.Fatal(err)
	}
	if err := l.Done(it); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if ents, _ := os.ReadDir(state); len(ents) != 0 {
		t.Errorf("state dir holds %v after a clean Close", ents)
	}
}

func TestTornLedger(t *testing.T) {
	state := useStateDir(t)
	// A pid that is gone: a child that has exited and been reaped.
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	pid := c.Process.Pid
	p := filepath.Join(t.TempDir(), fmt.Sprintf("wolf-dir-%d-x", pid))
	if err := os.Mkdir(p, 0o755); err != nil {
		t.Fatal(err)
	}
	h, _ := json.Marshal(header{Lab: "torn", PID: pid, Start: time.Second, BootID: bootID()})
	add, _ := json.Marshal(record{Add: &Item{Kind: KindDir, Path: p}})
	content := string(h) + "\n" + string(add) + "\n" + `{"add":{"kind":"tree","pa`
	if err := os.WriteFile(filepath.Join(state, "wolf-torn-1-x.jsonl"), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	cl, err := Clean(t.Logf)
	if err != nil || len(cl) != 1 || len(cl[0].Undone) != 1 {
		t.Errorf("Clean: %+v, %v", cl, err)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("%s: %v", p, err)
	}
}

func TestOwnedName(t *testing.T) {
	for _, c := range []struct {
		path string
		ok   bool
	}{
		{"/tmp/wolf-fusestall-123-abcd", true},
		{"/sys/fs/cgroup/memory/wolf-lab-memcg-123", true},
		{"/tmp/wolf-fusestall-1234-abcd", false},
		{"/tmp/wolf-fusestall-12-abcd", false},
		{"/tmp/fusestall-123-abcd", false},
		{"wolf-x-123", false},
		{"/", false},
	} {
		if err := ownedName(c.path, 123); (err == nil) != c.ok {
			t.Errorf("ownedName(%q, 123) = %v, want ok %v", c.path, err, c.ok)
		}
	}
}
