package features

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/kconfig"
	"github.com/wolf-investigator/wolf/internal/procfs"
	"github.com/wolf-investigator/wolf/internal/testutil"
	"github.com/wolf-investigator/wolf/internal/tracefs"
)

func TestNames(t *testing.T) {
	names := Names()
	if !sort.StringsAreSorted(names) {
		t.Errorf("Names not sorted: %v", names)
	}
	for _, want := range []string{"btf", "tracefs", "raw_tracepoint", "tp_btf", "perf_event", "uprobes", "kprobes",
		"fentry", "ringbuf", "task_iter", "task_file_iter", "bpf_get_task_stack", "bpf_stats", "psi", "cgroup_v1", "cgroup_v2",
		"hung_task_detector", "task_blocker"} {
		if !slices.Contains(names, want) {
			t.Errorf("Names lacks %q", want)
		}
	}
	for _, n := range names {
		if _, err := lookup(n); err != nil {
			t.Errorf("lookup(%q): %v", n, err)
		}
	}
}

func TestLookup(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"btf", true},
		{"tracepoint:sched/sched_switch", true},
		{"tracepoint:lock/contention_begin", true},
		{"sysctl:kernel.hung_task_timeout_secs", true},
		{"config:CONFIG_KPROBES", true},
		{"tracepoint:sched", false},
		{"tracepoint:/sched_switch", false},
		{"tracepoint:sched/", false},
		{"tracepoint:a/b/c", false},
		{"sysctl:", false},
		{"kprobe", false},
		{"", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := lookup(tt.name)
			if (err == nil) != tt.ok {
				t.Errorf("lookup(%q) err = %v, want ok=%v", tt.name, err, tt.ok)
			}
		})
	}
	st := Probe(context.Background(), "no_such_probe")
	if st.Available || !strings.Contains(st.Detail, "unknown probe") || !strings.Contains(st.Detail, "tracepoint:GROUP/NAME") {
		t.Errorf("unknown probe: %+v", st)
	}
}

// fakeProber runs scripted probes and counts the runs.
func fakeProber(timeout time.Duration, probes map[string]probeFunc) (*prober, *atomic.Int32) {
	var runs atomic.Int32
	return &prober{
		timeout: timeout,
		lookup: func(name string) (probeFunc, error) {
			fn, ok := probes[name]
			if !ok {
				return nil, fmt.Errorf("unknown probe %q", name)
			}
			return func(ctx context.Context) (string, error) { runs.Add(1); return fn(ctx) }, nil
		},
	}, &runs
}

func TestProberCachesAndBounds(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	probes := map[string]probeFunc{
		"yes":   func(context.Context) (string, error) { return "value", nil },
		"no":    func(context.Context) (string, error) { return "", errors.New("because") },
		"hang":  func(context.Context) (string, error) { <-block; return "late", nil },
		"panic": func(context.Context) (string, error) { panic("boom") },
		"slow": func(ctx context.Context) (string, error) {
			<-ctx.Done()
			return "", ctx.Err()
		},
	}
	tests := []struct {
		name      string
		want      Status
		runsAfter int32 // after probing twice
	}{
		{"yes", Status{Name: "yes", Available: true, Detail: "value"}, 1},
		{"no", Status{Name: "no", Detail: "because"}, 1},
		{"hang", Status{Name: "hang", Detail: "probe did not finish within 50ms (the kernel may be stuck in it)"}, 1},
		{"panic", Status{Name: "panic", Detail: "probe panicked: boom"}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, runs := fakeProber(50*time.Millisecond, probes)
			for i := 0; i < 2; i++ {
				if got := p.probe(context.Background(), tt.name); got != tt.want {
					t.Errorf("probe #%d = %+v, want %+v", i, got, tt.want)
				}
			}
			if n := runs.Load(); n != tt.runsAfter {
				t.Errorf("ran %d times, want %d", n, tt.runsAfter)
			}
		})
	}

	// A probe cut short by the caller is not cached.
	p, runs := fakeProber(time.Minute, probes)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if st := p.probe(ctx, "slow"); st.Available || !strings.Contains(st.Detail, "interrupted") {
		t.Errorf("cancelled probe = %+v", st)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	p.probe(ctx2, "slow")
	if n := runs.Load(); n != 2 {
		t.Errorf("interrupted probe ran %d times over two calls, want 2 (not cached)", n)
	}

	// probeAll keeps the order asked.
	p, _ = fakeProber(50*time.Millisecond, probes)
	got := p.probeAll(context.Background(), []string{"no", "yes", "missing"})
	if len(got) != 3 || got[0].Name != "no" || got[1].Name != "yes" || got[2].Name != "missing" || got[2].Available {
		t.Errorf("probeAll = %+v", got)
	}
}

func TestParsePSI(t *testing.T) {
	tests := []struct {
		name       string
		in         string
		some, full float64
		wantErr    bool
	}{
		{"memory", "some avg10=1.50 avg60=0.00 avg300=0.00 total=10\nfull avg10=0.25 avg60=0.00 avg300=0.00 total=3\n", 1.5, 0.25, false},
		{"cpu without full", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", 0, -1, false},
		{"garbage", "hello\n", 0, 0, true},
		{"bad number", "some avg10=x avg60=0\n", 0, 0, true},
		{"empty", "", 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			some, full, err := parsePSI([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if err == nil && (some != tt.some || full != tt.full) {
				t.Errorf("parsePSI = %v, %v; want %v, %v", some, full, tt.some, tt.full)
			}
		})
	}
}

func TestCgroupMountsOf(t *testing.T) {
	known := map[string]bool{"cpu": true, "cpuacct": true, "memory": true}
	in := `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime shared:5 - cgroup cgroup rw,nosuid,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate
`
	mounts, err := procfs.ParseMountinfo(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	got := cgroupMountsOf(mounts, known)
	want := []cgroupMount{
		{1, "/sys/fs/cgroup/cpu,cpuacct", []string{"cpu", "cpuacct"}},
		{1, "/sys/fs/cgroup/memory", []string{"memory"}},
		{1, "/sys/fs/cgroup/systemd", []string{"name=systemd"}},
		{2, "/sys/fs/cgroup/unified", nil},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("cgroupMountsOf =\n%+v\nwant\n%+v", got, want)
	}
}

func TestPlain(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("load program: %w (MEMLOCK may be too low, consider rlimit.RemoveMemlock)", unix.EPERM), "load program: operation not permitted (EPERM)"},
		{fmt.Errorf("attach: %w", unix.ENOENT), "attach: no such file or directory (ENOENT)"},
		{errors.New("plain words"), "plain words"},
	}
	for _, tt := range tests {
		got := plain(tt.err)
		if os.Geteuid() != 0 {
			got, _, _ = strings.Cut(got, "; wolf is not running as root")
		}
		if got != tt.want {
			t.Errorf("plain(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

func TestStatusString(t *testing.T) {
	tests := []struct {
		st   Status
		want string
	}{
		{Status{Name: "btf", Available: true, Detail: "x"}, "btf: yes — x"},
		{Status{Name: "kprobes", Detail: "not built"}, "kprobes: no — not built"},
		{Status{Name: "psi", Available: true}, "psi: yes"},
	}
	for _, tt := range tests {
		if got := tt.st.String(); got != tt.want {
			t.Errorf("String = %q, want %q", got, tt.want)
		}
	}
}

// bpfFDs counts this process's file descriptors that are BPF objects (maps,
// programs, links, BTF) or perf events.
func bpfFDs(t *testing.T) (int, []string) {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil {
			continue
		}
		if strings.HasPrefix(target, "anon_inode:bpf") || target == "anon_inode:btf" || target == "anon_inode:[perf_event]" {
			kinds = append(kinds, target)
		}
	}
	return len(kinds), kinds
}

func bpffsEntries(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir("/sys/fs/bpf")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// TestThisMachine probes everything on the real kernel and checks the
// answers against independent evidence, and that nothing is left behind.
func TestThisMachine(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := tracefs.Ensure(); err != nil { // before anything in cilium caches "no tracefs"
		t.Fatal(err)
	}
	fdsBefore, _ := bpfFDs(t)
	pinnedBefore := bpffsEntries(t)

	names := append(Names(),
		"tracepoint:sched/sched_switch", "tracepoint:lock/contention_begin", "tracepoint:no_such_group/no_such_event",
		"sysctl:kernel.hung_task_timeout_secs", "sysctl:kernel.no_such_sysctl", "config:CONFIG_KPROBES", "config:CONFIG_BPF_SYSCALL")
	p := &prober{lookup: lookup, timeout: DefaultTimeout} // fresh cache: really run them
	start := time.Now()
	got := p.probeAll(context.Background(), names)
	t.Logf("ProbeAll of %d probes took %v", len(names), time.Since(start))
	byName := map[string]Status{}
	for _, st := range got {
		t.Log(st)
		byName[st.Name] = st
		if !st.Available && st.Detail == "" {
			t.Errorf("%s unavailable without a reason", st.Name)
		}
	}

	// What wolf needs, and this kind of machine has (ARCHITECTURE.md#tracepoints-first).
	for _, n := range []string{"btf", "tracefs", "tracepoint:sched/sched_switch", "tracepoint:lock/contention_begin",
		"raw_tracepoint", "tp_btf", "perf_event", "uprobes", "ringbuf", "task_iter", "task_file_iter", "bpf_get_task_stack",
		"config:CONFIG_BPF_SYSCALL"} {
		if !byName[n].Available {
			t.Errorf("%s not available: %s", n, byName[n].Detail)
		}
	}
	for _, n := range []string{"tracepoint:no_such_group/no_such_event", "sysctl:kernel.no_such_sysctl"} {
		if byName[n].Available || !strings.Contains(byName[n].Detail, "does not exist") {
			t.Errorf("%s = %+v, want unavailable because it does not exist", n, byName[n])
		}
	}

	// kprobes: the attach attempt must agree with the build config.
	cfg, err := kconfig.Load()
	if err != nil {
		t.Fatal(err)
	}
	kp := byName["kprobes"]
	if kp.Available != cfg.Enabled("KPROBES") {
		t.Errorf("kprobes = %+v but %s", kp, cfg.Describe("KPROBES"))
	}
	if !kp.Available && !strings.Contains(kp.Detail, "CONFIG_KPROBES is not set") {
		t.Errorf("kprobes Detail %q does not name CONFIG_KPROBES", kp.Detail)
	}
	if byName["config:CONFIG_KPROBES"].Available != cfg.Enabled("KPROBES") {
		t.Errorf("config:CONFIG_KPROBES = %+v", byName["config:CONFIG_KPROBES"])
	}

	// fentry: works exactly when the function tracer's control files can be
	// opened (BPF trampolines are installed through ftrace).
	root, _ := tracefs.Find()
	f, ftraceErr := os.Open(filepath.Join(root, "available_filter_functions"))
	if ftraceErr == nil {
		f.Close()
	}
	fe := byName["fentry"]
	if fe.Available != (ftraceErr == nil) {
		t.Errorf("fentry = %+v, but opening available_filter_functions: %v", fe, ftraceErr)
	}
	if !fe.Available && (!strings.Contains(fe.Detail, "fentry") || !strings.Contains(fe.Detail, "function tracer")) {
		t.Errorf("fentry Detail %q does not say why", fe.Detail)
	}

	// hung task detector and its sysctl agree.
	if byName["hung_task_detector"].Available != cfg.Enabled("DETECT_HUNG_TASK") {
		t.Errorf("hung_task_detector = %+v, %s", byName["hung_task_detector"], cfg.Describe("DETECT_HUNG_TASK"))
	}
	if st := byName["sysctl:kernel.hung_task_timeout_secs"]; cfg.Enabled("DETECT_HUNG_TASK") && (!st.Available || st.Detail == "") {
		t.Errorf("sysctl:kernel.hung_task_timeout_secs = %+v", st)
	}
	if byName["task_blocker"].Available != cfg.Enabled("DETECT_HUNG_TASK_BLOCKER") {
		t.Errorf("task_blocker = %+v, %s", byName["task_blocker"], cfg.Describe("DETECT_HUNG_TASK_BLOCKER"))
	}

	// Nothing left behind: no BPF or perf fds, nothing pinned.
	if fdsAfter, kinds := bpfFDs(t); fdsAfter != fdsBefore {
		t.Errorf("BPF/perf fds: %d before ProbeAll, %d after: %v", fdsBefore, fdsAfter, kinds)
	}
	if pinnedAfter := bpffsEntries(t); !slices.Equal(pinnedAfter, pinnedBefore) {
		t.Errorf("/sys/fs/bpf changed: %v -> %v", pinnedBefore, pinnedAfter)
	}

	// The package-level cache answers the same the second time.
	first := Probe(context.Background(), "ringbuf")
	if again := Probe(context.Background(), "ringbuf"); again != first {
		t.Errorf("cached Probe(ringbuf) = %+v, first %+v", again, first)
	}
}
