package memcgstress

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/lab/labtest"
	"github.com/wolf-investigator/wolf/internal/memcg"
	"github.com/wolf-investigator/wolf/internal/procfs"
	"github.com/wolf-investigator/wolf/internal/testutil"
)

// kill9Part runs a lab in a child of the test binary that TestKill9 kills.
const kill9Part = "memcgstress-kill9"

func init() { lab.Child(kill9Part, kill9Helper) }

func gate(t *testing.T) memcg.Hierarchy {
	t.Helper()
	testutil.RequireRoot(t)
	h, err := memcg.Find(context.Background(), procfs.Reader{})
	testutil.Require(t, err == nil, fmt.Sprintf("needs the memory cgroup controller: %v", err))
	// The lab puts the machine's disk and CPUs under load and its reclaim
	// is machine-wide in /proc/vmstat: no other package's test meanwhile.
	testutil.Exclusive(t)
	return h
}

// small keeps these tests quick: the mechanics are the same at any size.
var small = Config{LimitBytes: 96 << 20, FileBytes: 80 << 20, AnonBytes: 24 << 20, FileThreads: 8, AnonThreads: 8, Phase1: 200 * time.Millisecond}

func TestRegistry(t *testing.T) {
	l, err := lab.NewRegistry(New()).Get("memcg-stress")
	if err != nil {
		t.Fatal(err)
	}
	if l.Summary() == "" {
		t.Error("empty summary")
	}
}

func TestConfigRefused(t *testing.T) {
	for _, c := range []Config{
		{LimitBytes: 256 << 20, FileBytes: 100 << 20, AnonBytes: 100 << 20}, // fits: nothing would reclaim
		{LimitBytes: 256 << 20, FileBytes: 200 << 20, AnonBytes: 128 << 20}, // anon half the limit: OOM
		{FileThreads: 200, AnonThreads: 100},
		{FileSize: 1000},
	} {
		if in, err := NewWithConfig(c).Start(context.Background(), lab.Options{}); err == nil {
			in.Close()
			t.Errorf("config %+v accepted", c)
		}
	}
}

func threadComms(pid int) map[string]int {
	out := map[string]int{}
	tids, _ := procfs.Reader{}.Threads(context.Background(), pid)
	for _, tid := range tids {
		if c, err := (procfs.Reader{}).Comm(context.Background(), pid, tid); err == nil {
			out[c]++
		}
	}
	return out
}

func TestLab(t *testing.T) {
	h := gate(t)
	li, err := NewWithConfig(small).Start(context.Background(), lab.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	in := li.(*Instance)
	closed := false
	t.Cleanup(func() {
		if !closed {
			in.Close()
		}
	})
	t.Log(in.Describe())
	dir := h.Dir(in.Cgroup())
	procs, err := h.Procs(in.Cgroup())
	if err != nil || len(procs) != 1 || procs[0] != in.PID() || in.Tasks().Offender != in.PID() {
		t.Fatalf("cgroup %s holds %v (%v), want the worker %d", dir, procs, err, in.PID())
	}
	comms := threadComms(in.PID())
	if comms[fileComm] != small.FileThreads || comms[anonComm] != small.AnonThreads {
		t.Errorf("threads %v: want %d %s and %d %s", comms, small.FileThreads, fileComm, small.AnonThreads, anonComm)
	}
	st, err := h.Read(in.Cgroup())
	if err != nil {
		t.Fatal(err)
	}
	if st.LimitBytes != small.LimitBytes || st.LimitHits == 0 || st.UsageBytes < small.LimitBytes*8/10 {
		t.Errorf("cgroup state %+v: want the limit set, hit, and usage near it", st)
	}
	// The files are unlinked once mapped: the directory is empty.
	if ents, err := os.ReadDir(in.dir); err != nil || len(ents) != 0 {
		t.Errorf("files directory %s: %d entries, %v", in.dir, len(ents), err)
	}
	// It keeps reclaiming: the limit is hit again and again.
	time.Sleep(time.Second)
	st2, err := h.Read(in.Cgroup())
	if err != nil || st2.LimitHits <= st.LimitHits || st2.OOMKills != 0 {
		t.Errorf("a second later: limit hits %d -> %d, OOM kills %d (%v)", st.LimitHits, st2.LimitHits, st2.OOMKills, err)
	}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	if err := in.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	checkGone(t, in)
}

func checkGone(t *testing.T, in *Instance) {
	t.Helper()
	if err := syscall.Kill(in.PID(), 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("worker %d still exists: %v", in.PID(), err)
	}
	if _, err := os.Stat(in.h.Dir(in.Cgroup())); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cgroup %s left behind: %v", in.Cgroup(), err)
	}
	if _, err := os.Stat(in.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("directory %s left behind: %v", in.dir, err)
	}
}

func TestStartCancelled(t *testing.T) {
	h := gate(t)
	for _, step := range []string{"memcgstress: cgroup", "memcgstress: worker pid", "memcgstress: phase 1"} {
		t.Run(strings.Fields(step)[1], func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var cgroupDir string
			logf := func(format string, args ...any) {
				msg := fmt.Sprintf(format, args...)
				t.Log(msg)
				if strings.HasPrefix(msg, "memcgstress: cgroup ") {
					cgroupDir = strings.Fields(msg)[2]
				}
				if strings.HasPrefix(msg, step) {
					cancel()
				}
			}
			in, err := NewWithConfig(small).Start(ctx, lab.Options{Logf: logf})
			if err == nil {
				in.Close()
				t.Fatal("Start cancelled midway succeeded")
			}
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Start: %v, want context.Canceled", err)
			}
			if cgroupDir == "" || !strings.HasPrefix(cgroupDir, h.Mount) {
				t.Fatalf("no cgroup logged")
			}
			if _, err := os.Stat(cgroupDir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("cgroup %s left behind", cgroupDir)
			}
			if l := leftovers(); len(l) > 0 {
				t.Errorf("left behind: %v", l)
			}
		})
	}
}

// leftovers lists files directories of labs whose process is gone.
func leftovers() []string {
	var out []string
	for _, base := range []string{os.TempDir(), "/var/tmp"} {
		m, _ := filepath.Glob(filepath.Join(base, dirPrefix+"*"))
		out = append(out, m...)
	}
	return out
}

// kill9Helper runs the lab, says READY with its pids and paths, and waits
// to be killed.
func kill9Helper(string) error {
	li, err := NewWithConfig(small).Start(context.Background(), lab.Options{})
	if err != nil {
		return err
	}
	in := li.(*Instance)
	fmt.Println("READY", in.PID(), in.Cgroup(), in.dir)
	time.Sleep(time.Minute)
	in.Close()
	return errors.New("not killed in a minute")
}

// TestKill9 checks what the package comment says a kill -9 of the lab
// leaves: the worker dies, the files vanish, the empty cgroup and files
// directory stay until the next Start sweeps them away.
func TestKill9(t *testing.T) {
	h := gate(t)
	f, kill := labtest.Start(t, kill9Part, "", time.Minute)
	if len(f) != 3 {
		t.Fatalf("helper said READY %q, want the worker's pid, its cgroup and directory", f)
	}
	worker, _ := strconv.Atoi(f[0])
	cgPath, dir := f[1], f[2]
	kill()
	err := lab.WaitFor(context.Background(), 10*time.Second, "the worker to die", func() (bool, error) {
		return errors.Is(syscall.Kill(worker, 0), syscall.ESRCH), nil
	})
	if err != nil {
		t.Errorf("after kill -9 of the lab: %v", err)
		_ = syscall.Kill(worker, syscall.SIGKILL)
	}
	// The files went with the worker's mappings; the directory stays.
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Errorf("files directory %s after kill -9: %d entries, %v", dir, len(ents), err)
	}
	if _, err := os.Stat(h.Dir(cgPath)); err != nil {
		t.Fatalf("cgroup %s gone already (%v): the package comment is out of date", cgPath, err)
	}
	// The next lab sweeps it away.
	li, err := NewWithConfig(small).Start(context.Background(), lab.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	li.Close()
	if _, err := os.Stat(h.Dir(cgPath)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cgroup %s not swept by the next Start: %v", cgPath, err)
		os.Remove(h.Dir(cgPath))
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("directory %s not swept by the next Start: %v", dir, err)
		os.Remove(dir)
	}
}
