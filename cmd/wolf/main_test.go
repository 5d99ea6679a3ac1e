package main

import (
	"bytes"
	"encoding/json"
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

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/kconfig"
	"github.com/wolf-investigator/wolf/internal/testutil"
	"github.com/wolf-investigator/wolf/internal/testutil/wolfcli"
	"github.com/wolf-investigator/wolf/internal/watch"
)

// wolfBin is the wolf binary built once for the tests that run it as a
// separate process (signals, privilege, exit codes as a shell sees them).
var wolfBin string

func TestMain(m *testing.M) { wolfcli.Main(m, &wolfBin) }

func runWolf(t *testing.T, timeout time.Duration, args ...string) wolfcli.Result {
	t.Helper()
	return wolfcli.Run(t, wolfBin, timeout, args...)
}

func TestBadUsageExitsTwoWithOneLine(t *testing.T) {
	for _, args := range [][]string{
		{"nosuchcommand"},
		{"hung", "--format", "xml"},
		{"hung", "--duration", "-1s"},
		{"hung", "--duration", "ten"},
		{"hung", "--threshold", "0s"},
		{"hung", "--pid", "-4"},
		{"hung", "--pid", "2147483000"},
		{"hung", "--bogus"},
		{"locks", "--type", "bogus"},
		{"locks", "--top", "0"},
		{"locks", "--hold-threshold", "0s"},
		{"locks", "--profile-hz", "-1"},
		{"locks", "--lock", "0xzz"},
		{"locks", "--folded", "/nonexistent/dir/out.folded"},
		{"hung", "--pprof", "/nonexistent/dir/p.pb.gz"},
		{"doctor", "--pprof", "/"},
		{"locks", "--pid", "-1"},
		{"locks", "--duration", "0s"},
		{"sched", "--format", "xml"},
		{"sched", "--duration", "0s"},
		{"sched", "--pid", "-1"},
		{"sched", "--bounce-window", "0s"},
		{"sched", "--bounce-window", "1h"},
		{"sched", "--min-rate", "0"},
		{"sched", "extra-arg"},
		{"doctor", "--duration", "48h"},
		{"doctor", "--max-cpu", "-1"},
		{"doctor", "--max-cpu", "NaN"},
		{"doctor", "--max-cpu", "100000"},
		{"locks", "--max-cpu", "lots"},
		{"doctor", "extra-arg"},
		{"analyze"},
		{"hung", "--btf", "/nonexistent/vmlinux.btf"},
		{"doctor", "--btf", "/etc/hostname"},
		{"analyze", "/nonexistent/kernel.log"},
		{"analyze", "/"},
		{"analyze", "/dev/zero"},
		{"analyze", "--max-input", "0", "-"},
		{"analyze", "--max-input", "lots", "-"},
		{"lab", "run", "nosuchlab"},
		{"lab", "run"},
		{"lab"},
		{"check", "--format", "yaml"},
		{"bench"},
		{"bench", "lpm", "--entries", "zero"},
		{"bench", "lpm", "--ops", "teleport"},
		{"bench", "lpm", "--format", "csv"},
		{"bench", "lpm", "--probes", "-1"},
		{"reclaim", "--format", "xml"},
		{"reclaim", "--duration", "-1s"},
		{"reclaim", "--pid", "-4"},
		{"reclaim", "--pid", "2147483000"},
		{"reclaim", "--cgroup", "/no/such/wolf/cgroup"},
		{"reclaim", "extra-arg"},
		{"softirq", "--format", "xml"},
		{"softirq", "--duration", "-1s"},
		{"softirq", "--threshold", "0s"},
		{"softirq", "--sample-hz", "-1"},
		{"softirq", "--pid", "1"},
		{"softirq", "--func", "a:b:c"},
		{"softirq", "--func", "/nonexistent/app:main"},
		{"softirq", "--func", "/bin/sh:wolf_no_such_function"},
		{"softirq", "--func", "net_rx_action", "--pid", "1"},
		{"softirq", "extra-arg"},
		{"io", "--device", "nosuchdisk"},
		{"io", "--device", "4095:4095"},
		{"io", "--cgroup", "/no/such/wolf/cgroup"},
		{"io", "--waiters", "sometimes"},
		{"io", "--slow", "0s"},
		{"io", "--pid", "2147483000"},
		{"io", "extra-arg"},
		{"watch", "--listen", "0.0.0.0:9740"},
		{"watch", "--listen", ":9740"},
		{"watch", "--listen", "[::]:9740"},
		{"watch", "--listen", "127.0.0.1"},
		{"watch", "--listen", "127.0.0.1:99999"},
		{"watch", "--interval", "0s"},
		{"watch", "--interval", "2h"},
		{"watch", "--interval", "ten"},
		{"watch", "--hung-interval", "100ms"},
		{"watch", "--investigators", "hung,bogus"},
		{"watch", "--top", "0"},
		{"watch", "--output", "/nonexistent/dir/events.jsonl"},
		{"watch", "--min-severity", "loud"},
		{"watch", "--clear-after", "0"},
		{"watch", "extra-arg"},
		{"bpf", "--format", "xml"},
		{"bpf", "--duration", "0s"},
		{"bpf", "--duration", "ten"},
		{"bpf", "--top", "-1"},
		{"bpf", "--pid", "-4"},
		{"bpf", "--pid", "2147483000"},
		{"bpf", "--trap-ns", "-5"},
		{"bpf", "extra-arg"},
		// Output paths are checked before the run: with --duration 24h a
		// check after it would time this test out.
		{"doctor", "--duration", "24h", "--output", "/nonexistent/r.json"},
		{"doctor", "--duration", "24h", "--output", "/"},
		{"doctor", "--duration", "24h", "--output", "/proc/sys/kernel/core_pattern"},
		{"doctor", "--duration", "24h", "--output", "/proc/wolf-report.json"},
		{"hung", "--duration", "24h", "--output", "/etc/passwd/r.json"},
		{"doctor", "--duration", "24h", "--folded", "/dev/full"},
		{"locks", "--duration", "24h", "--folded", "/dev/stdout"},
		{"hung", "--duration", "24h", "--pprof", "/nonexistent/p.pb.gz"},
		{"check", "--output", "/nonexistent/check.txt"},
		{"analyze", "-", "--output", "/nonexistent/r.json"},
		{"watch", "--output", "/"},
		// Values that parse but are mistakes.
		{"doctor", "--duration", "24h", "--output", ""},
		{"doctor", "--duration", "24h", "--folded", ""},
		{"hung", "--duration", "24h", "--pprof", ""},
		{"watch", "--output", ""},
		{"hung", "--duration", "24h", "--pid", "0"},
		{"locks", "--duration", "24h", "--pid", "0"},
		{"sched", "--duration", "24h", "--pid", "0"},
		{"reclaim", "--duration", "24h", "--pid", "0"},
		{"bpf", "--duration", "24h", "--pid", "0"},
		{"doctor", "--duration", "24h", "--container", ""},
		{"sched", "--duration", "24h", "--pod", ""},
	} {
		r := runWolf(t, 10*time.Second, args...)
		if r.Code != exitUsage {
			t.Errorf("wolf %v: exit %d, want %d (stderr %q)", args, r.Code, exitUsage, r.Stderr)
		}
		if lines := strings.Count(strings.TrimSpace(r.Stderr), "\n") + 1; lines != 1 || !strings.HasPrefix(r.Stderr, "wolf: ") {
			t.Errorf("wolf %v: want one 'wolf: …' line on stderr, got %q", args, r.Stderr)
		}
	}
}

// readReport decodes the JSON report a wolf command wrote to path.

func TestHelpOnEveryCommand(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"doctor", "--help"}, {"hung", "--help"}, {"locks", "--help"}, {"analyze", "--help"}, {"check", "--help"}, {"lab", "--help"}, {"lab", "list", "--help"}, {"lab", "run", "--help"}, {"bench", "--help"}, {"bench", "lpm", "--help"}, {"reclaim", "--help"}, {"sched", "--help"}, {"softirq", "--help"}, {"watch", "--help"}, {"bpf", "--help"}} {
		r := runWolf(t, 10*time.Second, args...)
		if r.Code != 0 || !strings.Contains(r.Stdout, "Usage:") {
			t.Errorf("wolf %v: exit %d, stdout %q", args, r.Code, r.Stdout)
		}
		// Users have never heard of the project's internal "seeds": help
		// cites the public write-ups by title.
		if strings.Contains(strings.ToLower(r.Stdout), "seed") {
			t.Errorf("wolf %v: help mentions seeds:\n%s", args, r.Stdout)
		}
	}
}

// Not root: one clear line and exit 3, before anything is attempted.
func TestNotRootExitsThree(t *testing.T) {
	testutil.RequireRoot(t) // to drop to nobody we must start as root
	setpriv, err := exec.LookPath("setpriv")
	testutil.Require(t, err == nil, "needs setpriv (util-linux) to drop privileges")
	dir := t.TempDir()
	bin := filepath.Join(dir, "wolf")
	data, err := os.ReadFile(wolfBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"hung", "--duration", "1s"}, {"locks", "--duration", "1s"}, {"doctor", "--duration", "1s"}, {"lab", "run", "fuse-rwsem"}, {"bench", "lpm", "--entries", "100"}, {"reclaim", "--duration", "1s"}, {"sched", "--duration", "1s"}, {"softirq", "--duration", "1s"}, {"watch", "--interval", "1s"}, {"bpf", "--duration", "1s"}, {"lab", "run", "hot-uprobe"}} {
		cmd := exec.Command(setpriv, append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", bin}, args...)...)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		err := cmd.Run()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != exitPrivilege {
			t.Errorf("wolf %v as nobody: %v, want exit %d (stderr %q)", args, err, exitPrivilege, errb.String())
			continue
		}
		if s := errb.String(); strings.Count(s, "\n") != 1 || !strings.Contains(s, "needs root") {
			t.Errorf("wolf %v as nobody: stderr %q", args, s)
		}
	}
	// analyze needs no privilege.
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", bin, "analyze", "-")
	cmd.Stdin = strings.NewReader("nothing to see\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("analyze as nobody: %v: %s", err, out)
	}
}

// watchSignalLeavesNothing is signalLeavesNothing for wolf watch, which
// runs until stopped and writes JSON lines rather than a report.
func watchSignalLeavesNothing(t *testing.T, progs int, sig syscall.Signal) {
	t.Helper()
	w := wolfcli.StartWatch(t, wolfBin, "--interval", "60s")
	cmd, out := w.Cmd, w.Out
	// Signalled once every investigator has attached: how fast a running
	// watch stops, not how long a program still in the verifier takes.
	w.WaitAttached(t, time.Minute)
	ids := wolfcli.HeldPrograms(t, "wolf watch's programs to load", cmd.Process.Pid, progs, 15*time.Second)
	started := time.Now()
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if sig != syscall.SIGKILL {
		if err != nil {
			t.Errorf("watch %v: wolf exited with %v, want 0", sig, err)
		}
		if time.Since(started) > 3*time.Second {
			t.Errorf("watch %v: wolf took %v to stop", sig, time.Since(started))
		}
		for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			var e watch.Event
			if line != "" && json.Unmarshal([]byte(line), &e) != nil {
				t.Errorf("watch %v: not a JSON line: %q", sig, line)
			}
		}
	}
	wolfcli.WaitFor(t, "the kernel to drop wolf watch's programs after "+sig.String(), 5*time.Second, func() bool { return wolfcli.StillLoaded(ids) == 0 })
}

// Ctrl-C detaches everything and still prints a report; kill -9 leaves
// nothing attached either, because nothing is pinned.
func TestSignalsLeaveNothingAttached(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.Exclusive(t)
	for _, c := range []struct {
		command string
		progs   int // programs it loads, at least
	}{{"hung", 5}, {"locks", 5}, {"reclaim", 14}, {"sched", 5}, {"softirq", 6}} {
		for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGKILL} {
			signalLeavesNothing(t, c.command, c.progs, sig)
		}
	}
	// wolf watch runs every investigator at once (5+5+14+5+6 programs).
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGKILL} {
		watchSignalLeavesNothing(t, 35, sig)
	}
}

// signalLeavesNothing runs wolf COMMAND, sends it sig once its programs
// are loaded, and checks that it reports (unless killed) and that the
// kernel drops every program.
func signalLeavesNothing(t *testing.T, command string, progs int, sig syscall.Signal) {
	t.Helper()
	cmd := exec.Command(wolfBin, command, "--duration", "60s", "--format", "json")
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() }) // if the test fails midway
	ids := wolfcli.HeldPrograms(t, "wolf "+command+"'s programs to load", cmd.Process.Pid, progs, 10*time.Second)
	started := time.Now()
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if sig != syscall.SIGKILL {
		if err != nil {
			t.Errorf("%s %v: wolf exited with %v, want 0", command, sig, err)
		}
		if time.Since(started) > 3*time.Second {
			t.Errorf("%s %v: wolf took %v to stop", command, sig, time.Since(started))
		}
		var rep finding.Report
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Errorf("%s %v: no JSON report after the signal: %v: %q", command, sig, err, out.String())
		}
	}
	wolfcli.WaitFor(t, "the kernel to drop wolf "+command+"'s programs after "+sig.String(), 5*time.Second, func() bool { return wolfcli.StillLoaded(ids) == 0 })
}

func TestDoctorHealthyHostFinishesInTime(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.Exclusive(t)
	start := time.Now()
	meter := startLoadMeter(t)
	r := runWolf(t, 20*time.Second, "doctor", "--duration", "3s", "--format", "json")
	took := time.Since(start)
	tr := meter.truth(t, took.Seconds())
	if r.Code != 0 {
		t.Fatalf("doctor exit %d: %s", r.Code, r.Stderr)
	}
	var rep finding.Report
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
		t.Fatalf("doctor JSON: %v", err)
	}
	// Start-up (loading, verifying, attaching: CPU-bound, seconds on a
	// loaded 2-CPU machine) is counted apart from the window and the
	// report, which must not run late; a start-up that hangs is caught by
	// its own bound.
	startup := time.Duration(rep.Overhead.StartupS * float64(time.Second))
	if startup <= 0 || startup > 15*time.Second {
		t.Errorf("doctor's start-up %v (want reported, and under 15 s)", startup)
	}
	if took-startup > 5*time.Second {
		t.Errorf("doctor --duration 3s took %v, %v after its start-up of %v (want within duration + 2 s)", took, took-startup, startup)
	}
	for _, p := range unhealthy(&rep, tr) {
		t.Error(p)
	}
	checkHealthyChecklist(t, &rep, tr)
	if len(rep.Errors) > 0 {
		t.Errorf("errors: %v", rep.Errors)
	}
	meter = startLoadMeter(t)
	textStart := time.Now()
	text := runWolf(t, 20*time.Second, "doctor", "--duration", "1s")
	if !healthyText(t, text.Stdout, meter.truth(t, time.Since(textStart).Seconds())) {
		t.Errorf("no healthy verdict in text output:\n%s", text.Stdout)
	}
	if !strings.Contains(text.Stdout, "\nload ") || !strings.Contains(text.Stdout, "\nkernel log ") {
		t.Errorf("no checklist in text output:\n%s", text.Stdout)
	}
}

func TestAnalyzeCLI(t *testing.T) {
	r := runWolf(t, 10*time.Second, "analyze", "--format", "json", "../../internal/hung/hunglog/testdata/rtnl.log")
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	var rep finding.Report
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Findings) == 0 || !strings.Contains(rep.Findings[0].Title, "rtnl_mutex") {
		t.Errorf("findings %+v", rep.Findings)
	}
}

// --btf FILE: CO-RE from a BTF file, for kernels without their own (here,
// a copy of this kernel's, so the same programs must load and run).
func TestBTFFile(t *testing.T) {
	testutil.RequireRoot(t)
	b, err := os.ReadFile("/sys/kernel/btf/vmlinux")
	testutil.Require(t, err == nil, "needs /sys/kernel/btf/vmlinux to copy")
	f := filepath.Join(t.TempDir(), "vmlinux.btf")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	r := runWolf(t, 60*time.Second, "check", "--btf", f, "--format", "json")
	if r.Code != 0 || !strings.Contains(r.Stdout, f+" (--btf)") {
		t.Fatalf("check --btf: exit %d, stdout lacks %q: %s", r.Code, f+" (--btf)", r.Stderr)
	}
	r = runWolf(t, 90*time.Second, "softirq", "--btf", f, "--duration", "1s", "--format", "json")
	if r.Code != 0 || !strings.Contains(r.Stdout, `"findings"`) {
		t.Fatalf("softirq --btf: exit %d: %s", r.Code, r.Stderr)
	}
}

// analyze ends on input that never ends or is not a log, with one line and
// exit 2, and cuts a log beyond --max-input with a note in the report.
func TestAnalyzeEndsOnOddInput(t *testing.T) {
	dir := t.TempDir()
	long := filepath.Join(dir, "long-line")
	if err := os.WriteFile(long, bytes.Repeat([]byte("a"), 3<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		file, want string
	}{
		{"/dev/zero", "binary data"},
		{"/dev/urandom", "binary data"},
		{long, "without a newline"},
	} {
		r := runWolf(t, 20*time.Second, "analyze", tc.file)
		if r.Code != 2 || strings.Count(strings.TrimSpace(r.Stderr), "\n") != 0 || !strings.Contains(r.Stderr, tc.want) {
			t.Errorf("analyze %s: exit %d, stderr %q", tc.file, r.Code, r.Stderr)
		}
	}
	big := filepath.Join(dir, "big.log")
	log, err := os.ReadFile("../../internal/hung/hunglog/testdata/rtnl.log")
	if err != nil {
		t.Fatal(err)
	}
	filler := bytes.Repeat([]byte("[    1.000000] a kernel line that is not a report\n"), 64<<10)
	if err := os.WriteFile(big, append(log, filler...), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runWolf(t, 20*time.Second, "analyze", "--format", "json", "--max-input", "1M", big)
	if r.Code != 0 || !strings.Contains(r.Stderr, "was cut") {
		t.Fatalf("exit %d, stderr %q", r.Code, r.Stderr)
	}
	var rep finding.Report
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Notes) == 0 || !strings.Contains(rep.Notes[0], "first 1 MiB") || len(rep.Findings) == 0 {
		t.Errorf("notes %q, %d findings", rep.Notes, len(rep.Findings))
	}
}

// The header names the log's kernel and host, not the analysing machine's.
func TestAnalyzeHeaderIsTheLogs(t *testing.T) {
	r := runWolf(t, 10*time.Second, "analyze", "--format", "json", "../../internal/hung/hunglog/testdata/corpus/seen/bugzilla-xfs-syslog-qp-wrapped.log")
	var rep finding.Report
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
		t.Fatalf("exit %d: %v: %s", r.Code, err, r.Stderr)
	}
	if rep.Kernel != "6.6.0-rc5" || rep.Host != "line-xfs-crc-logdev" {
		t.Errorf("kernel %q, host %q", rep.Kernel, rep.Host)
	}
	r = runWolf(t, 10*time.Second, "analyze", "../../internal/hung/hunglog/testdata/corpus/seen/bugzilla-xfs-syslog-qp-wrapped.log")
	if first, _, _ := strings.Cut(r.Stdout, "\n"); !strings.Contains(first, "line-xfs-crc-logdev · kernel 6.6.0-rc5") {
		t.Errorf("header %q", first)
	}
}

func TestCheckSaysWhyNot(t *testing.T) {
	testutil.RequireRoot(t)
	r := runWolf(t, 120*time.Second, "check", "--format", "json")
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	var rep checkReport
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Investigators) == 0 || rep.Investigators[0].Name != "hung" || !rep.Investigators[0].Ready {
		t.Errorf("investigators %+v", rep.Investigators)
	}
	byName := map[string]string{}
	avail := map[string]bool{}
	for _, s := range rep.Features {
		byName[s.Name], avail[s.Name] = s.Detail, s.Available
	}
	for _, must := range []string{"btf", "task_iter", "ringbuf", "perf_event"} {
		if !avail[must] {
			t.Errorf("%s not available: %s", must, byName[must])
		}
	}
	// On a kernel built without kprobes (this project's CI kernel), check
	// must say so, and why.
	if cfg, err := kconfig.Load(); err == nil && !cfg.Enabled("CONFIG_KPROBES") {
		if avail["kprobes"] || !strings.Contains(byName["kprobes"], "CONFIG_KPROBES") {
			t.Errorf("kprobes: available=%v detail %q", avail["kprobes"], byName["kprobes"])
		}
	}
	// "ready" is a fact here: each investigator's own objects loaded and
	// attached (this kernel runs them all).
	for _, ci := range rep.Investigators {
		if ci.State != "ready" && ci.State != "degraded" || !ci.Ready || ci.Why != "" {
			t.Errorf("%s: state %q ready %v why %q", ci.Name, ci.State, ci.Ready, ci.Why)
		}
		if ci.Degraded != (len(ci.Lost) > 0) {
			t.Errorf("%s: degraded %v but lost %q", ci.Name, ci.Degraded, ci.Lost)
		}
	}
	text := runWolf(t, 120*time.Second, "check")
	if !strings.Contains(text.Stdout, "hung: ready") || !strings.Contains(text.Stdout, "reclaim: ready") || !strings.Contains(text.Stdout, "softirq: ready") {
		t.Errorf("text check:\n%s", text.Stdout)
	}
}

// A lab cleans up on Ctrl-C: its mount, its children, its directory.
func TestLabRunCleansUpOnSIGINT(t *testing.T) {
	testutil.RequireRoot(t)
	_, err := os.Stat("/dev/fuse")
	testutil.Require(t, err == nil, "needs /dev/fuse")
	testutil.Exclusive(t)
	cmd := exec.Command(wolfBin, "lab", "run", "fuse-rwsem", "--duration", "60s")
	var out wolfcli.SyncBuffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	wolfcli.WaitFor(t, "the lab to be in place", 15*time.Second, func() bool { return strings.Contains(out.String(), "offender pid") })
	var mount string
	for _, f := range strings.Fields(out.String()) {
		if strings.HasPrefix(f, "/tmp/wolf-fusestall-") {
			mount = strings.TrimRight(f, ",)")
			break
		}
	}
	if mount == "" {
		t.Fatalf("no mount point in the lab's description: %s", out.String())
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("lab exited with %v after SIGINT, want 0", err)
	}
	if !strings.Contains(out.String(), "interrupted; cleaning up") {
		t.Errorf("output: %s", out.String())
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mi), mount) {
		t.Errorf("mount %s left behind", mount)
	}
	if _, err := os.Stat(mount); !os.IsNotExist(err) {
		t.Errorf("directory %s left behind: %v", mount, err)
	}
}

// sched-bounce's shells (task, wakers, hogs and their keeper) die with the
// lab even on kill -9: Pdeathsig, and hogs that check the lab is alive.
func TestSchedLabKill9LeavesNothing(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.Exclusive(t)
	cmd := exec.Command(wolfBin, "lab", "run", "sched-bounce", "--duration", "60s")
	var out wolfcli.SyncBuffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	wolfcli.WaitFor(t, "the lab to be in place", 15*time.Second, func() bool { return strings.Contains(out.String(), "offender pid") })
	// Task, wakers and hogs (the hogs go through setpriv's exec first).
	var procs []string
	for deadline := time.Now().Add(5 * time.Second); len(procs) < 5; time.Sleep(50 * time.Millisecond) {
		if procs = bounceProcesses(t); time.Now().After(deadline) {
			t.Fatalf("bounce-* processes while the lab runs: %v, want task, wakers and hogs; lab: %s", procs, out.String())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	wolfcli.WaitFor(t, "the lab's processes to end after kill -9", 5*time.Second, func() bool { return len(bounceProcesses(t)) == 0 })
}

// bounceProcesses lists live (not zombie) processes named bounce-*.
func bounceProcesses(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(st)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open || end+2 >= len(s) {
			continue
		}
		if comm := s[open+1 : end]; strings.HasPrefix(comm, "bounce-") && s[end+2] != 'Z' {
			out = append(out, e.Name()+":"+comm)
		}
	}
	return out
}

func TestLabList(t *testing.T) {
	r := runWolf(t, 10*time.Second, "lab", "list", "--format", "json")
	var labs []struct{ Name, Summary string }
	if err := json.Unmarshal([]byte(r.Stdout), &labs); err != nil || r.Code != 0 {
		t.Fatalf("exit %d, %v: %s", r.Code, err, r.Stdout)
	}
	names := map[string]bool{}
	for _, l := range labs {
		names[l.Name] = l.Summary != ""
	}
	if !names["fuse-rwsem"] || !names["fuse-mutex"] || !names["mmap-lock"] || !names["memcg-stress"] ||
		!names["sched-bounce"] || !names["sched-affinity"] || !names["sched-pinned"] || !names["tcp-collapse"] || !names["hot-uprobe"] {
		t.Errorf("labs %+v", labs)
	}
}

// --func on a kernel function without kprobes or fentry: exit 3, one line
// that says why.
func TestSoftirqKernelFuncSaysWhyNot(t *testing.T) {
	testutil.RequireRoot(t)
	cfg, err := kconfig.Load()
	testutil.Require(t, err == nil, "needs the kernel config to know whether kprobes exist")
	if cfg.Enabled("CONFIG_KPROBES") {
		t.Skip("this kernel has kprobes; the live kprobe path is tested in internal/softirq")
	}
	r := runWolf(t, 20*time.Second, "softirq", "--func", "net_rx_action", "--duration", "1s")
	if r.Code != exitPrivilege {
		t.Errorf("exit %d, want %d (stderr %q)", r.Code, exitPrivilege, r.Stderr)
	}
	if strings.Count(r.Stderr, "\n") != 1 || !strings.Contains(r.Stderr, "CONFIG_KPROBES") || !strings.HasPrefix(r.Stderr, "wolf: ") {
		t.Errorf("stderr %q", r.Stderr)
	}
}

// wolf bpf loads no program; what it holds is the kernel's run
// statistics. SIGINT/SIGTERM still report; every signal, kill -9 included,
// leaves kernel.bpf_stats_enabled as it was (wolf holds statistics on
// through a BPF_ENABLE_STATS file descriptor, never the sysctl).
func TestBPFSignalsRestoreStats(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.Exclusive(t)
	before, err := os.ReadFile("/proc/sys/kernel/bpf_stats_enabled")
	if err != nil {
		t.Fatal(err)
	}
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGKILL} {
		cmd := exec.Command(wolfBin, "bpf", "--duration", "60s", "--format", "json")
		var out bytes.Buffer
		cmd.Stdout = &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		pid := cmd.Process.Pid
		wolfcli.WaitFor(t, "wolf bpf to turn the statistics on", 10*time.Second, func() bool { return holdsStatsFD(pid) })
		started := time.Now()
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		err := cmd.Wait()
		if sig != syscall.SIGKILL {
			if err != nil || time.Since(started) > 3*time.Second {
				t.Errorf("bpf %v: exit %v after %v", sig, err, time.Since(started))
			}
			var rep finding.Report
			if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
				t.Errorf("bpf %v: no JSON report after the signal: %v: %q", sig, err, out.String())
			}
		}
		after, err := os.ReadFile("/proc/sys/kernel/bpf_stats_enabled")
		if err != nil || !bytes.Equal(after, before) {
			t.Errorf("bpf %v: kernel.bpf_stats_enabled %q, was %q (%v)", sig, after, before, err)
		}
	}
}

// holdsStatsFD says whether process pid holds a BPF_ENABLE_STATS fd.
func holdsStatsFD(pid int) bool {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && l == "anon_inode:bpf-stats" {
			return true
		}
	}
	return false
}

// The hot-uprobe lab through the CLI: `wolf bpf` in another process names
// the lab's uprobes as hot; kill -9 of the lab leaves neither its programs
// nor its looping yes behind.
func TestBPFCLIOnHotUprobeLab(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.Exclusive(t)
	cmd := exec.Command(wolfBin, "lab", "run", "hot-uprobe", "--duration", "60s")
	var out wolfcli.SyncBuffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	wolfcli.WaitFor(t, "the lab to be in place", 20*time.Second, func() bool { return strings.Contains(out.String(), "victims [") })
	var yesPID int
	if _, err := fmt.Sscanf(out.String()[strings.Index(out.String(), "victims [")+len("victims ["):], "%d", &yesPID); err != nil {
		t.Fatalf("no victim pid in %q", out.String())
	}
	ids := wolfcli.HeldPrograms(t, "the lab's programs", cmd.Process.Pid, 2, 5*time.Second)
	// The lab nices its yes to 19: on a machine busy with other tests it
	// would call write() too seldom to be a hot path. Its CPU, for the
	// window: this test is about wolf bpf's reading of a hot uprobe.
	if err := unix.Setpriority(unix.PRIO_PROCESS, yesPID, -20); err != nil {
		t.Fatal(err)
	}
	r := runWolf(t, 30*time.Second, "bpf", "--duration", "2s", "--format", "json")
	if r.Code != 0 {
		t.Fatalf("wolf bpf exit %d: %s", r.Code, r.Stderr)
	}
	var rep finding.Report
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
		t.Fatal(err)
	}
	hot := map[string]bool{}
	for _, f := range rep.Findings {
		if f.ID == "bpf.hot-uprobe" && f.Severity >= finding.Warning && len(f.Subjects) > 0 && f.Subjects[0].PID == cmd.Process.Pid {
			hot[f.Evidence["name"].(string)] = true
		}
	}
	if !hot["hot_entry"] || !hot["hot_return"] {
		t.Errorf("lab's programs flagged hot: %v; report %s", hot, r.Stdout)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	wolfcli.WaitFor(t, "the kernel to drop the lab's programs after kill -9", 5*time.Second, func() bool { return wolfcli.StillLoaded(ids) == 0 })
	wolfcli.WaitFor(t, "the lab's yes to die with it", 5*time.Second, func() bool {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", yesPID))
		return err != nil || strings.Contains(string(st), ") Z")
	})
}
