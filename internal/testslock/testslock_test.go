package testslock

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const childEnv = "GO_TESTSLOCK_CHILD"

// The child's half of TestHeldByLineage: its parent holds the lock.
func TestMain(m *testing.M) {
	if p := os.Getenv(childEnv); p != "" {
		held, err := HeldByLineage(p)
		if err != nil || !held {
			os.Stderr.WriteString("child: lock not seen as held by an ancestor\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestHeldByLineage(t *testing.T) {
	if _, err := os.Stat("/proc/locks"); err != nil {
		t.Skip("no /proc/locks")
	}
	path := filepath.Join(t.TempDir(), "lock")
	if held, err := HeldByLineage(path); err != nil || held {
		t.Fatalf("a missing file: held %v, %v", held, err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if held, err := HeldByLineage(path); err != nil || held {
		t.Fatalf("nobody holds it: held %v, %v", held, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if held, err := HeldByLineage(path); err != nil || !held {
		t.Fatalf("this process holds it: held %v, %v", held, err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+path)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("a child: %v: %s", err, out)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	if held, err := HeldByLineage(path); err != nil || held {
		t.Fatalf("released: held %v, %v", held, err)
	}
}

func TestCheckOnlyWhenEnforced(t *testing.T) {
	old := Enforce
	defer func() { Enforce = old }()
	Enforce = false
	if err := Check("a lab"); err != nil {
		t.Errorf("not enforced: %v", err)
	}
}

func TestQueueCountsWaiters(t *testing.T) {
	flockBin, err := exec.LookPath("flock")
	if err != nil {
		t.Skip("no flock(1)")
	}
	path := filepath.Join(t.TempDir(), "lock")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(flockBin, path, "true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	waiting := 0
	for deadline := time.Now().Add(5 * time.Second); waiting == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var holders map[int]bool
		if holders, waiting, err = Queue(path); err != nil || !holders[os.Getpid()] {
			t.Fatalf("holders %v, %v; want this process", holders, err)
		}
	}
	if waiting != 1 {
		t.Errorf("%d waiting, want flock(1)", waiting)
	}
	_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
}
