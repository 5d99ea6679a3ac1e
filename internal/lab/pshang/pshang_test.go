package pshang

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/lab/labproc"
	"github.com/wolf-investigator/wolf/internal/testutil"
)

func inD(pid, tid int) bool { return labproc.ThreadState(pid, tid) == 'D' }

// The chain is in place when Start returns (reader-owner, writer and
// readers all in D), Release unwinds it (every one of them runs again),
// and Close leaves no process, no mount and no mount point.
func TestLabChainReleaseAndClose(t *testing.T) {
	testutil.RequireRoot(t)
	_, err := os.Stat("/dev/fuse")
	testutil.Require(t, err == nil, "needs /dev/fuse")
	testutil.Exclusive(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l := NewWithConfig(Config{Readers: 2, StallMax: 30 * time.Second})
	inst, err := l.Start(ctx, lab.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	in := inst.(*Instance)
	defer in.Close()
	pid := in.PID()
	if !inD(pid, in.TID("memreader")) || !inD(pid, in.TID("unmapper")) {
		t.Fatalf("memreader %c, unmapper %c", labproc.ThreadState(pid, in.TID("memreader")), labproc.ThreadState(pid, in.TID("unmapper")))
	}
	readers := in.Readers()
	if len(readers) != 2 {
		t.Fatalf("readers %v", readers)
	}
	for _, r := range readers {
		if !inD(r, r) {
			t.Errorf("reader %d in %c", r, labproc.TaskState(r))
		}
	}
	in.Release()
	err = lab.WaitFor(ctx, 20*time.Second, "the chain to unwind", func() (bool, error) {
		if inD(pid, in.TID("memreader")) || inD(pid, in.TID("unmapper")) {
			return false, nil
		}
		for _, r := range readers {
			if inD(r, r) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Error(err)
	}
	dir := in.dir
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	if labproc.TaskState(pid) != 0 {
		t.Errorf("child %d still there (%c)", pid, labproc.TaskState(pid))
	}
	for _, r := range readers {
		if labproc.TaskState(r) != 0 {
			t.Errorf("reader %d still there", r)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("mount point %s left: %v", dir, err)
	}
}

// Close with the chain still stalled (no Release) unwinds it too: the
// connection is aborted first, so nothing stays in D.
func TestLabCloseWhileStalled(t *testing.T) {
	testutil.RequireRoot(t)
	_, err := os.Stat("/dev/fuse")
	testutil.Require(t, err == nil, "needs /dev/fuse")
	testutil.Exclusive(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	inst, err := New().Start(ctx, lab.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	in := inst.(*Instance)
	pid, readers := in.PID(), in.Readers()
	start := time.Now()
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("closed in %v", time.Since(start))
	if labproc.TaskState(pid) != 0 || labproc.TaskState(readers[0]) != 0 {
		t.Errorf("child %c, reader %c", labproc.TaskState(pid), labproc.TaskState(readers[0]))
	}
}

// The watchdog ends the stall by itself after StallMax.
func TestLabWatchdog(t *testing.T) {
	testutil.RequireRoot(t)
	_, err := os.Stat("/dev/fuse")
	testutil.Require(t, err == nil, "needs /dev/fuse")
	testutil.Exclusive(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Long enough for the chain's set-up (armed when the READ parks) on
	// a machine busy with other tests; well under the 60 s bound.
	inst, err := NewWithConfig(Config{StallMax: 8 * time.Second}).Start(ctx, lab.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	in := inst.(*Instance)
	defer in.Close()
	pid := in.PID()
	err = lab.WaitFor(ctx, 20*time.Second, "the watchdog to end the stall", func() (bool, error) {
		return !inD(pid, in.TID("memreader")) && !inD(pid, in.TID("unmapper")), nil
	})
	if err != nil {
		t.Error(err)
	}
}
