package labtest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/sysctl"
	"github.com/wolf-investigator/wolf/internal/testutil"
)

// TestLabKill9NextRunCleans kills every lab with SIGKILL once its
// pathology is in place, then runs it again: the second run succeeds, and
// nothing of the dead one is left (what its ledger recorded, anything
// named with its pid, its tasks, core_pattern).
func TestLabKill9NextRunCleans(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.Exclusive(t)
	_, err := os.Stat("/dev/fuse")
	testutil.Require(t, err == nil, "needs /dev/fuse for the FUSE labs")
	corePattern, err := sysctl.Read("kernel.core_pattern")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range labNames(t) {
		t.Run(name, func(t *testing.T) {
			pid, tasks, items := killLabMidRun(t, name)
			r := runWolf(t, 3*time.Minute, "lab", "run", name, "--duration", "1s")
			if r.Code != 0 {
				t.Fatalf("the next run: exit %d: %s", r.Code, r.Stderr)
			}
			for _, it := range items {
				if left := stillThere(it); left != "" {
					t.Errorf("after the next run: %s", left)
				}
			}
			for _, left := range namedFor(pid) {
				t.Errorf("after the next run: %s, named for the dead lab's pid %d, is still there", left, pid)
			}
			for _, tid := range tasks {
				// /proc/TID resolves thread ids too.
				err := lab.WaitFor(t.Context(), 10*time.Second, fmt.Sprintf("task %d of the dead lab to go", tid), func() (bool, error) {
					b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", tid))
					return err != nil || strings.Contains(string(b), ") Z "), nil
				})
				if err != nil {
					t.Error(err)
				}
			}
			if p, _ := sysctl.Read("kernel.core_pattern"); p != corePattern {
				t.Errorf("core_pattern %q, want %q", p, corePattern)
				_ = sysctl.Write("kernel.core_pattern", corePattern)
			}
		})
	}
}

// killLabMidRun starts `wolf lab run NAME`, waits for the lab to be in
// place (the line naming its offender), reads what the lab's ledger holds,
// kills wolf with SIGKILL and returns its pid, the lab's tasks and the
// ledger's items.
func killLabMidRun(t *testing.T, name string) (int, []int, []lab.Item) {
	t.Helper()
	cmd := exec.Command(wolfBin, "lab", "run", name, "--duration", "60s")
	cmd.Stderr = io.Discard
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	offender := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "offender pid ") {
				offender <- sc.Text()
			}
		}
		close(offender)
	}()
	var line string
	select {
	case l, ok := <-offender:
		if !ok {
			t.Fatalf("wolf lab run %s ended before its lab was in place", name)
		}
		line = l
	case <-time.After(3 * time.Minute):
		t.Fatalf("wolf lab run %s: lab not in place after 3 minutes", name)
	}
	var tasks []int
	for _, f := range regexp.MustCompile(`\d+`).FindAllString(line, -1) {
		if n, err := strconv.Atoi(f); err == nil && n != cmd.Process.Pid {
			tasks = append(tasks, n)
		}
	}
	items := ledgerItems(t, cmd.Process.Pid)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	t.Logf("killed wolf lab run %s (pid %d) with %s; its ledger held %v", name, cmd.Process.Pid, line, items)
	return cmd.Process.Pid, tasks, items
}

// ledgerItems reads what the ledgers of pid hold.
func ledgerItems(t *testing.T, pid int) []lab.Item {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(lab.DefaultStateDir, fmt.Sprintf("wolf-*-%d-*.jsonl", pid)))
	var items []lab.Item
	for _, p := range m {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			var r struct {
				Add  *lab.Item `json:"add"`
				Done *lab.Item `json:"done"`
			}
			if json.Unmarshal([]byte(l), &r) != nil {
				continue
			}
			if r.Add != nil {
				items = append(items, *r.Add)
			}
			if r.Done != nil {
				for i := range items {
					if items[i] == *r.Done {
						items = append(items[:i], items[i+1:]...)
						break
					}
				}
			}
		}
	}
	return items
}

// stillThere says what is left of it, or "".
func stillThere(it lab.Item) string {
	switch it.Kind {
	case lab.KindMount:
		if mountedAt(it.Path) {
			return it.String() + ": still mounted"
		}
	case lab.KindSysctl:
		if v, _ := sysctl.Read(it.Path); v == it.Value {
			return it.String() + ": still the lab's value"
		}
	case lab.KindProcess:
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", it.PID)); err == nil {
			return it.String() + ": pid still there"
		}
	default:
		if _, err := os.Lstat(it.Path); err == nil {
			return it.String() + ": still there"
		}
	}
	return ""
}

func mountedAt(p string) bool {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[4] == p {
			return true
		}
	}
	return false
}

// namedFor lists files, cgroups, mounts and ledgers named for pid.
func namedFor(pid int) []string {
	tag := fmt.Sprintf("-%d-", pid)
	var out []string
	var globs []string
	for _, d := range []string{os.TempDir(), "/var/tmp", lab.DefaultStateDir, "/sys/fs/cgroup/*", "/sys/fs/cgroup"} {
		globs = append(globs, filepath.Join(d, "wolf-*"))
	}
	for _, g := range globs {
		m, _ := filepath.Glob(g)
		for _, p := range m {
			if strings.Contains(filepath.Base(p)+"-", tag) {
				out = append(out, p)
			}
		}
	}
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.Contains(filepath.Base(f[4])+"-", tag) && strings.HasPrefix(filepath.Base(f[4]), "wolf-") {
			out = append(out, "mount "+f[4])
		}
	}
	return out
}

// TestLabClean: a lab killed with SIGKILL leaves its mount; `wolf lab
// clean` removes it and says so, and leaves a running lab alone.
func TestLabClean(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.Exclusive(t)
	_, err := os.Stat("/dev/fuse")
	testutil.Require(t, err == nil, "needs /dev/fuse")
	// A running lab, which clean must not touch. Started first: a lab
	// that starts cleans up after dead labs itself.
	live := exec.Command(wolfBin, "lab", "run", "fuse-rwsem", "--duration", "60s")
	live.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	liveOut, err := live.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		live.Process.Signal(syscall.SIGINT)
		live.Wait()
	}()
	sc := bufio.NewScanner(liveOut)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "offender pid ") {
	}
	go io.Copy(io.Discard, liveOut)
	liveItems := ledgerItems(t, live.Process.Pid)
	if len(liveItems) == 0 {
		t.Fatal("the running fuse-rwsem lab recorded nothing in its ledger")
	}
	pid, _, items := killLabMidRun(t, "fuse-mutex")
	if len(items) == 0 {
		t.Fatal("the fuse-mutex lab recorded nothing in its ledger")
	}

	r := runWolf(t, time.Minute, "lab", "clean")
	if r.Code != 0 {
		t.Fatalf("wolf lab clean: exit %d: %s", r.Code, r.Stderr)
	}
	if !strings.Contains(r.Stdout, fmt.Sprintf("lab fuse-mutex (pid %d, dead):", pid)) || !strings.Contains(r.Stdout, "undid mount ") {
		t.Errorf("wolf lab clean said %q", r.Stdout)
	}
	for _, it := range items {
		if left := stillThere(it); left != "" {
			t.Errorf("after wolf lab clean: %s", left)
		}
	}
	for _, it := range liveItems {
		if stillThere(it) == "" {
			t.Errorf("wolf lab clean undid %s of a running lab", it)
		}
	}
	if r := runWolf(t, time.Minute, "lab", "clean"); r.Code != 0 || r.Stdout != "nothing left by dead labs\n" {
		t.Errorf("second wolf lab clean: exit %d, %q %q", r.Code, r.Stdout, r.Stderr)
	}
}
