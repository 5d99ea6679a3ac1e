package procfs

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/testutil"
)

// statLine builds a 52-field stat line with the given comm and state.
func statLine(pid int, comm string, state byte, ppid int, flags uint64) string {
	f := make([]string, 50) // fields 3..52
	for i := range f {
		f[i] = "0"
	}
	f[0] = string(state)
	f[1] = strconv.Itoa(ppid)
	f[2] = "10" // pgrp
	f[3] = "11" // session
	f[6] = strconv.FormatUint(flags, 10)
	f[7] = "123"   // minflt
	f[9] = "4"     // majflt
	f[11] = "250"  // utime ticks
	f[12] = "50"   // stime ticks
	f[15] = "20"   // priority
	f[16] = "-5"   // nice
	f[17] = "3"    // threads
	f[19] = "1234" // starttime ticks
	f[36] = "1"    // processor
	f[39] = "7"    // delayacct_blkio_ticks
	return strconv.Itoa(pid) + " (" + comm + ") " + strings.Join(f, " ") + "\n"
}

func TestParseStat(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Stat
		wantErr string
	}{
		{
			name: "plain",
			in:   statLine(42, "bash", 'S', 1, 0x400000),
			want: Stat{PID: 42, Comm: "bash", State: 'S', PPID: 1, PGRP: 10, Session: 11, Flags: 0x400000,
				MinFlt: 123, MajFlt: 4, UTime: 2500 * time.Millisecond, STime: 500 * time.Millisecond,
				Priority: 20, Nice: -5, NumThreads: 3, StartTime: 12340 * time.Millisecond, CPU: 1,
				BlkioDelay: 70 * time.Millisecond},
		},
		{
			name: "comm with spaces and parentheses",
			in:   statLine(7, ") (evil) D 1 (", 'D', 2, PFKthread),
			want: Stat{PID: 7, Comm: ") (evil) D 1 (", State: 'D', PPID: 2, PGRP: 10, Session: 11, Flags: PFKthread,
				MinFlt: 123, MajFlt: 4, UTime: 2500 * time.Millisecond, STime: 500 * time.Millisecond,
				Priority: 20, Nice: -5, NumThreads: 3, StartTime: 12340 * time.Millisecond, CPU: 1,
				BlkioDelay: 70 * time.Millisecond},
		},
		{name: "no comm", in: "42 bash S 1\n", wantErr: "no (comm)"},
		{name: "too few fields", in: "42 (bash) S 1 2 3\n", wantErr: "want at least 20"},
		{name: "bad pid", in: "x (bash) " + strings.Repeat("0 ", 30), wantErr: "stat pid"},
		{name: "bad number", in: strings.Replace(statLine(42, "bash", 'S', 1, 0), " 123 ", " 12x ", 1), wantErr: "field 10"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseStat([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("ParseStat =\n %+v\nwant\n %+v", got, tt.want)
			}
		})
	}
	if st, _ := ParseStat([]byte(statLine(2, "kthreadd", 'S', 0, PFKthread))); !st.Kthread() {
		t.Error("PF_KTHREAD not recognised")
	}
}

func TestParseStatus(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Status
		wantErr bool
	}{
		{
			name: "thread",
			in:   "Name:\tmy prog\nUmask:\t0022\nState:\tD (disk sleep)\nTgid:\t100\nNgid:\t0\nPid:\t101\nPPid:\t1\nThreads:\t4\nvoluntary_ctxt_switches:\t17\nnonvoluntary_ctxt_switches:\t3\n",
			want: Status{Name: "my prog", State: 'D', Tgid: 100, Pid: 101, PPid: 1, Threads: 4, VoluntaryCtxtSwitches: 17, NonvoluntaryCtxtSwitches: 3},
		},
		{name: "no pid", in: "Name:\tx\n", wantErr: true},
		{name: "bad number", in: "Name:\tx\nPid:\tabc\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseStatus([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if got.Fields["Umask"] != "0022" {
				t.Errorf("Fields[Umask] = %q", got.Fields["Umask"])
			}
			got.Fields = nil
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseStatus = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParseStack(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"empty", "", nil},
		{
			"hung task",
			"[<0>] rwsem_down_read_slowpath+0x27e/0x4d0\n[<0>] down_read+0x48/0xb0\n[<0>] fuse_dev_do_read+0x10/0x20 [fuse]\n[<0>] do_syscall_64+0x82/0x190\n",
			[]string{"rwsem_down_read_slowpath+0x27e", "down_read+0x48", "fuse_dev_do_read+0x10 [fuse]", "do_syscall_64+0x82"},
		},
		{"no prefix", "schedule+0x5/0x10\n", []string{"schedule+0x5"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ParseStack([]byte(tt.in)); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseStack = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestParseCgroup(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []Cgroup
		wantErr bool
	}{
		{"v2", "0::/system.slice/x.service\n", []Cgroup{{Hierarchy: 0, Path: "/system.slice/x.service"}}, false},
		{
			"hybrid",
			"5:memory:/lab\n3:cpu,cpuacct:/\n1:name=systemd:/init.scope\n0::/\n",
			[]Cgroup{
				{5, []string{"memory"}, "/lab"},
				{3, []string{"cpu", "cpuacct"}, "/"},
				{1, []string{"name=systemd"}, "/init.scope"},
				{0, nil, "/"},
			}, false,
		},
		{"path with colon", "0::/a:b\n", []Cgroup{{Path: "/a:b"}}, false},
		{"bad", "garbage\n", nil, true},
		{"bad hierarchy", "x::/\n", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseCgroup([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if !tt.wantErr && !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseCgroup = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestStateName(t *testing.T) {
	for state, want := range map[byte]string{'D': "uninterruptible sleep", 'R': "running", 'Z': "zombie", '?': `unknown state "?"`} {
		if got := StateName(state); got != want {
			t.Errorf("StateName(%q) = %q, want %q", state, got, want)
		}
	}
}

// fakeTree builds a /proc with:
//
//	100: "web server" with threads 100 (S) and 101 (S)
//	200: "stuck" with threads 200 (S) and 201 (D); its cmdline is a FIFO
//	     nobody writes, so reading it would hang
//	300: a process that exited (no task directory)
func fakeTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	write := func(rel, body string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, th := range []struct {
		pid, tid int
		comm     string
		state    byte
	}{{100, 100, "web server", 'S'}, {100, 101, "web (worker)", 'S'}, {200, 200, "stuck", 'S'}, {200, 201, "stuck", 'D'}} {
		dir := filepath.Join(strconv.Itoa(th.pid), "task", strconv.Itoa(th.tid))
		write(filepath.Join(dir, "stat"), statLine(th.tid, th.comm, th.state, 1, 0))
		write(filepath.Join(dir, "comm"), th.comm+"\n")
		write(filepath.Join(dir, "wchan"), "0")
		write(filepath.Join(dir, "status"), "Name:\t"+th.comm+"\nState:\t"+string(th.state)+"\nTgid:\t"+strconv.Itoa(th.pid)+"\nPid:\t"+strconv.Itoa(th.tid)+"\nPPid:\t1\nThreads:\t2\nvoluntary_ctxt_switches:\t5\nnonvoluntary_ctxt_switches:\t6\n")
		write(filepath.Join(dir, "stack"), "[<0>] do_epoll_wait+0x1/0x2\n[<0>] do_syscall_64+0x82/0x190\n")
	}
	write("100/stat", statLine(100, "web server", 'S', 1, 0))
	write("100/comm", "web server\n")
	write("100/cgroup", "4:memory:/lab\n0::/lab\n")
	write("100/cmdline", "/usr/bin/web\x00--port\x00 8080\x00")
	write("200/task/201/wchan", "rwsem_down_write_slowpath\n")
	if err := syscall.Mkfifo(filepath.Join(root, "200", "cmdline"), 0o644); err != nil {
		t.Fatal(err)
	}
	write("300/comm", "gone\n")
	write("self", "not a pid") // non-numeric entries are ignored
	return root
}

func TestFakeTree(t *testing.T) {
	ctx := context.Background()
	r := Reader{Root: fakeTree(t), Timeout: time.Second}

	tasks, err := r.Tasks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []TaskID{{100, 100}, {100, 101}, {200, 200}, {200, 201}}
	if !reflect.DeepEqual(tasks, want) {
		t.Errorf("Tasks = %v, want %v", tasks, want)
	}

	tests := []struct {
		name string
		got  func() (any, error)
		want any
	}{
		{"comm process", func() (any, error) { return r.Comm(ctx, 100, 0) }, "web server"},
		{"comm thread", func() (any, error) { return r.Comm(ctx, 100, 101) }, "web (worker)"},
		{"wchan none", func() (any, error) { return r.Wchan(ctx, 100, 100) }, ""},
		{"wchan", func() (any, error) { return r.Wchan(ctx, 200, 201) }, "rwsem_down_write_slowpath"},
		{"stack", func() (any, error) { return r.Stack(ctx, 100, 101) }, []string{"do_epoll_wait+0x1", "do_syscall_64+0x82"}},
		{"state", func() (any, error) { s, err := r.Stat(ctx, 200, 201); return s.State, err }, byte('D')},
		{"stat comm", func() (any, error) { s, err := r.Stat(ctx, 100, 101); return s.Comm, err }, "web (worker)"},
		{"status", func() (any, error) { s, err := r.Status(ctx, 100, 101); return [2]int{s.Tgid, s.Pid}, err }, [2]int{100, 101}},
		{"cgroup", func() (any, error) { c, err := r.Cgroup(ctx, 100, 0); return len(c), err }, 2},
		{"cmdline", func() (any, error) { return r.CmdlineIfNotStuck(ctx, 100) }, []string{"/usr/bin/web", "--port", " 8080"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.got()
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %#v, want %#v", got, tt.want)
			}
		})
	}

	if _, err := r.Comm(ctx, 999, 0); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Comm of a missing pid: err = %v, want ErrNotExist", err)
	}
}

// A D-state thread makes CmdlineIfNotStuck refuse without touching the
// cmdline file (here a FIFO that would block forever).
func TestCmdlineRefusesStuck(t *testing.T) {
	r := Reader{Root: fakeTree(t), Timeout: 2 * time.Second}
	before := Outstanding()
	start := time.Now()
	_, err := r.CmdlineIfNotStuck(context.Background(), 200)
	if !errors.Is(err, ErrMayBeStuck) {
		t.Fatalf("err = %v, want ErrMayBeStuck", err)
	}
	if !strings.Contains(err.Error(), "thread 201") {
		t.Errorf("error %q does not name the stuck thread", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("refusal took %v; it must not have waited on cmdline", took)
	}
	if n := Outstanding(); n != before {
		t.Errorf("Outstanding = %d after a refusal, want %d", n, before)
	}
}

// release unblocks every reader stuck opening the FIFO at path.
func release(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
}

func waitOutstanding(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for Outstanding() != want {
		if time.Now().After(deadline) {
			t.Fatalf("Outstanding = %d, want %d", Outstanding(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestTimeoutAbandons(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "5", "task", "5")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "stack")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	before := Outstanding()
	r := Reader{Root: root, Timeout: 100 * time.Millisecond}
	start := time.Now()
	_, err := r.Stack(context.Background(), 5, 5)
	took := time.Since(start)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	if took < 100*time.Millisecond || took > time.Second {
		t.Errorf("timed out after %v, want about 100ms", took)
	}
	if n := Outstanding(); n != before+1 {
		t.Errorf("Outstanding = %d, want %d (the abandoned read)", n, before+1)
	}
	release(t, fifo)
	waitOutstanding(t, before)

	// A caller's cancellation is reported as such, not as a timeout.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.Stack(ctx, 5, 5); !errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout) {
		t.Errorf("cancelled: err = %v, want context.Canceled", err)
	}
}

func TestOutstandingBounded(t *testing.T) {
	saved := outstanding
	outstanding = make(chan struct{}, 2)
	defer func() { outstanding = saved }()

	root := fakeTree(t)
	fifo := filepath.Join(root, "200", "cmdline")
	r := Reader{Root: root, Timeout: 50 * time.Millisecond}
	for i := 0; i < 2; i++ {
		if _, err := r.read(context.Background(), fifo); !errors.Is(err, ErrTimeout) {
			t.Fatalf("stuck read %d: err = %v, want ErrTimeout", i, err)
		}
	}
	// Both slots are held by abandoned reads: even a healthy read is refused
	// rather than adding a third blocked thread.
	if _, err := r.Comm(context.Background(), 100, 0); !errors.Is(err, ErrTooManyStuck) {
		t.Fatalf("third read: err = %v, want ErrTooManyStuck", err)
	}
	release(t, fifo)
	waitOutstanding(t, 0)
	if _, err := r.Comm(context.Background(), 100, 0); err != nil {
		t.Errorf("after release: %v", err)
	}
}

func TestTasksSkipsExited(t *testing.T) {
	r := Reader{Root: fakeTree(t)}
	tasks, err := r.Tasks(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		if task.PID == 300 {
			t.Errorf("exited process 300 listed: %v", task)
		}
	}
}

// The real /proc, on the test process itself.
func TestRealSelf(t *testing.T) {
	ctx := context.Background()
	var r Reader
	pid, tid := os.Getpid(), syscall.Gettid()

	tasks, err := r.Tasks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, task := range tasks {
		found = found || task == TaskID{PID: pid, TID: tid}
	}
	if !found {
		t.Errorf("Tasks (%d entries) lacks this thread %d/%d", len(tasks), pid, tid)
	}

	st, err := r.Stat(ctx, pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	if st.PID != pid || st.PPID != os.Getppid() || st.NumThreads < 1 || st.StartTime <= 0 || st.Kthread() {
		t.Errorf("Stat(self) = %+v", st)
	}
	comm, err := r.Comm(ctx, pid, tid)
	if err != nil {
		t.Fatal(err)
	}
	if comm == "" || !strings.HasPrefix(filepath.Base(os.Args[0]), comm) {
		t.Errorf("Comm(self) = %q, argv0 %q", comm, os.Args[0])
	}
	status, err := r.Status(ctx, pid, tid)
	if err != nil {
		t.Fatal(err)
	}
	if status.Tgid != pid || status.Pid != tid || status.PPid != os.Getppid() {
		t.Errorf("Status(self) = %+v", status)
	}
	cgroups, err := r.Cgroup(ctx, pid, 0)
	if err != nil || len(cgroups) == 0 {
		t.Errorf("Cgroup(self) = %v, %v", cgroups, err)
	}
	args, err := r.CmdlineIfNotStuck(ctx, pid)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(args, os.Args) {
		t.Errorf("CmdlineIfNotStuck(self) = %q, want %q", args, os.Args)
	}
	if _, err := r.Wchan(ctx, pid, tid); err != nil {
		t.Error(err)
	}

	testutil.RequireRoot(t)
	// A child asleep in nanosleep shows it in its kernel stack and wchan.
	child := exec.Command("sleep", "30")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	cpid := child.Process.Pid
	// Wait until it is asleep for good: wchan reads 0 while the task is
	// still on its run queue, on its way into schedule().
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := r.Stat(ctx, cpid, cpid)
		wchan, werr := r.Wchan(ctx, cpid, cpid)
		if err == nil && werr == nil && st.State == 'S' && st.Comm == "sleep" && strings.Contains(wchan, "nanosleep") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("child never slept in nanosleep: %+v %v; wchan %q %v", st, err, wchan, werr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	stack, err := r.Stack(ctx, cpid, cpid)
	if err != nil {
		t.Fatal(err)
	}
	if len(stack) == 0 || !strings.Contains(strings.Join(stack, " "), "nanosleep+0x") {
		t.Errorf("Stack(sleep) = %q, want a nanosleep frame", stack)
	}
	t.Logf("stack of sleep: %q", stack)
}
