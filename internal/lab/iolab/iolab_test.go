package iolab

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/testutil"
)

// gone says whether the loop device and cgroup of a closed lab are gone.
func checkGone(t *testing.T, dev, cgDir, file string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join("/sys/block", filepath.Base(dev), "loop/backing_file")); err == nil {
		b, _ := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "loop/backing_file"))
		if strings.TrimSpace(string(b)) == file {
			t.Errorf("%s still bound to %s", dev, file)
		}
	}
	if cgDir != "" {
		if _, err := os.Stat(cgDir); err == nil {
			t.Errorf("cgroup %s still there", cgDir)
		}
	}
	if _, err := os.Stat(file); err == nil {
		t.Errorf("%s still there", file)
	}
}

func TestThrottleLab(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.Exclusive(t)
	in, err := NewThrottleWithConfig(ThrottleConfig{Threads: 2}).Start(context.Background(), lab.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ti := in.(*ThrottleInstance)
	dev, file, cg := ti.loop.Dev, ti.loop.File, ti.cg.Dir()
	b, err := os.ReadFile(filepath.Join(cg, limitFile(ti.cg, "rbps")))
	if err != nil || !strings.Contains(string(b), ti.loop.ID()+" ") && !strings.Contains(string(b), ti.loop.ID()+" rbps=1048576") {
		t.Errorf("limit file: %q %v", b, err)
	}
	if got := len(in.Tasks().Victims); got != 2 {
		t.Errorf("%d reader threads, want 2", got)
	}
	if !strings.Contains(in.Describe(), ti.loop.Dev) {
		t.Errorf("describe: %s", in.Describe())
	}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	checkGone(t, dev, cg, file)
	if err := in.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
}

func TestBadConfig(t *testing.T) {
	for _, c := range []ThrottleConfig{{Threads: 100}, {Block: 1000}, {LimitBps: 10}, {DeviceMB: 5000}} {
		if _, err := NewThrottleWithConfig(c).Start(context.Background(), lab.Options{}); err == nil {
			t.Errorf("%+v started", c)
		}
	}
}

func TestDirtyLab(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.Exclusive(t)
	in, err := NewDirty().Start(context.Background(), lab.Options{})
	if err != nil {
		t.Fatal(err)
	}
	di := in.(*DirtyInstance)
	dev, file := di.loop.Dev, di.loop.File
	bdi := filepath.Join("/sys/class/bdi", di.loop.ID())
	if b, _ := os.ReadFile(filepath.Join(bdi, "strict_limit")); strings.TrimSpace(string(b)) != "1" {
		t.Errorf("strict_limit %q", b)
	}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	checkGone(t, dev, "", file)
	if _, err := os.Stat(bdi); err == nil {
		t.Errorf("%s still there: the device was not removed", bdi)
	}
}

func TestJournalLab(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.Exclusive(t)
	in, err := NewJournal().Start(context.Background(), lab.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ji := in.(*JournalInstance)
	dev, file, cg, mnt := ji.loop.Dev, ji.loop.File, ji.cg.Dir(), ji.mnt
	ji.mu.Lock()
	worst := ji.maxFsync
	ji.mu.Unlock()
	if worst < 300*time.Millisecond {
		t.Errorf("the victim's slowest fsync took %s", worst)
	}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	checkGone(t, dev, cg, file)
	if b, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(b), mnt) {
		t.Errorf("%s still mounted", mnt)
	}
}

func TestSlowLab(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.Exclusive(t)
	in, err := NewSlow().Start(context.Background(), lab.Options{})
	if err != nil {
		t.Fatal(err)
	}
	si := in.(*SlowInstance)
	dev, mnt := si.loop.Dev, si.mnt
	si.fs.mu.Lock()
	before := si.fs.ops[opRead]
	si.fs.mu.Unlock()
	time.Sleep(time.Second)
	si.fs.mu.Lock()
	reads := si.fs.ops[opRead] - before
	si.fs.mu.Unlock()
	// Two readers, 150 ms a read, one at a time: about 7 a second.
	if reads < 3 || reads > 20 {
		t.Errorf("%d reads in about a second", reads)
	}
	// A request the lab's own process waits on is a kill -9 away from a
	// process in D for ever (SlowInstance.bind).
	si.fs.mu.Lock()
	own := maps.Clone(si.fs.own)
	si.fs.mu.Unlock()
	if len(own) > 0 {
		t.Errorf("the lab's own threads waited on its file system: requests by opcode %v", own)
	}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	checkGone(t, dev, "", filepath.Join(mnt, "x"))
	if b, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(b), mnt) {
		t.Errorf("%s still mounted", mnt)
	}
}
