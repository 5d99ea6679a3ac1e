// Command scenarios judges wolf doctor's diagnoses on real workloads: for
// each scenario it sets up a workload nobody wrote for wolf (stress-ng,
// fio) or one of wolf's labs, in real cgroups, waits for its steady state,
// runs `wolf doctor --duration 8s --format json` and judges the report:
// does its first diagnosis name the scenario's root (a resource: a
// cgroup's CPU quota or memory limit, a device's throttle, a FUSE daemon,
// the host's CPUs with their consumer), with numbers on its hops and the
// consumer named? Negative controls must have no diagnosis and nothing
// critical. README.md beside this file lists the scenarios and how the
// judge reads a report.
//
// Usage (as root; a wolf binary is built from the tree unless -wolf):
//
//	go run ./scripts/scenarios                       # each scenario once
//	go run ./scripts/scenarios -runs 3 -out docs/scenarios   # the docs table
//	go run ./scripts/scenarios -only cpu-quota,host-cpu -runs 2
//	go run ./scripts/scenarios -ci                   # CI: required ones must pass
//
// Exit status: 0 when every run passed (with -ci: every run of a required
// scenario), 1 when one failed, 2 on bad usage, 3 without root or a tool.
//
// The machine is shared: the whole pass holds /tmp/wolf-bench.lock, and
// each run /tmp/wolf-tests.lock (the lock of the tests that assert on a
// quiet machine). No stall outlives 60 s (labs run for 55 s at most, the
// tools for 50 s, every run has a deadline and a watchdog), and what a
// run killed with SIGKILL left is undone by the next run (lab ledgers,
// which `wolf lab clean` reads too, and an undo journal in
// /run/wolf/scenarios).
package main

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/lab/labproc"
)

const (
	benchLock = "/tmp/wolf-bench.lock"
	testsLock = "/tmp/wolf-tests.lock"
	// runDeadline bounds one run: set-up, steady state, doctor, undo.
	runDeadline = 100 * time.Second
)

// required lists the scenarios that must pass, per cgroup version:
// "v1 NAME" or "v2 NAME" a line. The helpers that fix a diagnosis add its
// scenario here once it passes every run.
//
//go:embed required.txt
var requiredTxt string

// Result is one run of one scenario.
type Result struct {
	Scenario string  `json:"scenario"`
	Run      int     `json:"run"`
	Params   string  `json:"params"`
	Expect   Expect  `json:"expect"`
	Verdict  Verdict `json:"verdict"`
	// Error is a set-up or doctor failure: the run judged nothing.
	Error    string  `json:"error,omitempty"`
	DoctorRC int     `json:"doctor_rc"`
	Seconds  float64 `json:"seconds"` // from the tests lock taken to the run undone
	Required bool    `json:"required"`
	// Others are the processes outside the run that used 10% of a CPU
	// or more during doctor's window (the machine is shared).
	Others []string `json:"others,omitempty"`
}

// Pass is the run's outcome.
func (r Result) Pass() bool { return r.Error == "" && r.Verdict.Pass }

func main() { os.Exit(run()) }

func run() int {
	fs := flag.NewFlagSet("scenarios", flag.ContinueOnError)
	wolf := fs.String("wolf", "", "wolf binary (default: built from this tree into a temporary directory)")
	runs := fs.Int("runs", 1, "runs per scenario (each run varies the parameters)")
	only := fs.String("only", "", "comma-separated scenario names (default: all)")
	out := fs.String("out", "", "write the accuracy table to OUT.md and OUT.json (e.g. docs/scenarios)")
	update := fs.Bool("update", false, "with -out: keep OUT.json's runs of the scenarios not run now, replace the others")
	keep := fs.String("keep", "", "directory for each run's doctor JSON and workload output (default: a new /tmp/wolf-scenarios-*)")
	scratch := fs.String("scratch", "/var/tmp", "directory on a real disk for the workloads' files")
	duration := fs.String("duration", "8s", "doctor's --duration")
	ci := fs.Bool("ci", false, "exit 1 only when a required scenario (required.txt) fails")
	list := fs.Bool("list", false, "list the scenarios and exit")
	reproduce := fs.String("reproduce", "", "the command the table says reproduces it (default: this one)")
	lockWait := fs.Duration("lock-wait", 30*time.Minute, "how long to wait for "+benchLock)
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	if *list {
		for _, s := range scenarios {
			fmt.Printf("%-20s %s\n", s.Name, s.What)
		}
		return 0
	}
	if *runs < 1 || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "scenarios: usage: scenarios [-runs N] [-only A,B] [-out PREFIX] [-ci] (see -h)")
		return 2
	}
	v2 := false
	if _, _, err := labproc.Hierarchy(context.Background(), "cpu", 1); err != nil {
		v2 = true
	}
	sel, err := selectScenarios(*only, v2)
	if err != nil {
		fmt.Fprintln(os.Stderr, "scenarios:", err)
		return 2
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "scenarios: needs root (cgroups, loop devices, mounts, BPF for wolf doctor)")
		return 3
	}
	for _, s := range sel {
		for _, t := range s.Tools {
			if _, err := exec.LookPath(t); err != nil {
				fmt.Fprintf(os.Stderr, "scenarios: %s is missing, scenario %s needs it (apt-get install %s, or .ci/run deps)\n", t, s.Name, debPackage(t))
				return 3
			}
		}
	}
	logf := func(f string, a ...any) { fmt.Fprintf(os.Stderr, "scenarios: "+f+"\n", a...) }

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	rev := ""
	if *wolf == "" {
		if out, err := exec.Command("git", "describe", "--always", "--dirty").Output(); err == nil {
			rev = strings.TrimSpace(string(out))
		}
		dir, err := os.MkdirTemp("", "wolf-scenarios-bin-")
		if err != nil {
			logf("%v", err)
			return 1
		}
		defer os.RemoveAll(dir)
		*wolf = filepath.Join(dir, "wolf")
		logf("building wolf into %s", *wolf)
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", *wolf, "./cmd/wolf").CombinedOutput(); err != nil {
			logf("go build ./cmd/wolf (run from the repository's root): %v\n%s", err, out)
			return 1
		}
	}
	if *keep == "" {
		*keep = filepath.Join(os.TempDir(), "wolf-scenarios-"+time.Now().Format("20060102-150405"))
	}
	if err := os.MkdirAll(*keep, 0o755); err != nil {
		logf("%v", err)
		return 1
	}

	unlock, err := flock(ctx, benchLock, *lockWait, logf)
	if err != nil {
		logf("%v", err)
		return 1
	}
	defer unlock()

	led, err := lab.NewLedger("scenarios", logf)
	if err != nil {
		logf("%v", err)
		return 1
	}
	defer func() {
		if err := led.Close(); err != nil {
			logf("%v", err)
		}
	}()
	sweepUndo(logf, false)
	sweepLoops(logf)
	defer sweepUndo(logf, true)

	req := required(requiredTxt, v2)
	kernel := unameRelease()
	logf("%d scenarios x %d runs on %s (cgroup v%d), doctor --duration %s; logs in %s", len(sel), *runs, kernel, map[bool]int{false: 1, true: 2}[v2], *duration, *keep)
	var results []Result
	t0 := time.Now()
	for i := 0; i < *runs && ctx.Err() == nil; i++ {
		for _, s := range sel {
			if ctx.Err() != nil {
				break
			}
			res := runOne(ctx, s, i, runConfig{wolf: *wolf, scratch: *scratch, v2: v2, led: led, logf: logf, keep: *keep, duration: *duration})
			res.Required = req[s.Name]
			results = append(results, res)
			printResult(res)
		}
	}
	elapsed := time.Since(t0)
	summary := summarize(results)
	fmt.Print(summary.text)
	logf("%d runs in %s (%.0f s per run)", len(results), elapsed.Round(time.Second), elapsed.Seconds()/float64(max(1, len(results))))
	if *out != "" {
		meta := Meta{Kernel: kernel, CgroupV: map[bool]int{false: 1, true: 2}[v2], Runs: *runs, Duration: *duration, Date: time.Now().UTC().Format("2006-01-02"),
			Wolf: strings.TrimSpace(wolfVersion(*wolf) + " " + rev), Seconds: elapsed.Seconds(), Command: commandLine()}
		if *reproduce != "" {
			meta.Command = *reproduce
		}
		all, table := results, sel
		if *update {
			var err error
			if all, meta, err = mergeTable(*out, meta, sel, results); err != nil {
				logf("%v", err)
				return 1
			}
			table = scenarios
		}
		if err := writeTable(*out, meta, table, all); err != nil {
			logf("%v", err)
			return 1
		}
		logf("wrote %s.md and %s.json", *out, *out)
	}
	if ctx.Err() != nil {
		logf("interrupted")
		return 1
	}
	failed, reqFailed := 0, 0
	for _, r := range results {
		if !r.Pass() {
			failed++
			if r.Required {
				reqFailed++
			}
		}
	}
	var newly []string
	for _, s := range sel {
		if !req[s.Name] && summary.right[s.Name] == summary.total[s.Name] && summary.total[s.Name] > 0 {
			newly = append(newly, s.Name)
		}
	}
	if len(newly) > 0 {
		logf("right in every run but not required yet: %s (add them to scripts/scenarios/required.txt)", strings.Join(newly, " "))
	}
	if *ci {
		logf("required scenarios: %d runs failed", reqFailed)
		if reqFailed > 0 {
			return 1
		}
		return 0
	}
	if failed > 0 {
		return 1
	}
	return 0
}

type runConfig struct {
	wolf, scratch, keep, duration string
	v2                            bool
	led                           *lab.Ledger
	logf                          func(string, ...any)
}

// runOne sets the scenario up, runs doctor, judges, undoes.
func runOne(parent context.Context, s Scenario, i int, c runConfig) (res Result) {
	res = Result{Scenario: s.Name, Run: i + 1, DoctorRC: -1}
	unlock, err := flock(parent, testsLock, 10*time.Minute, c.logf)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	defer unlock()
	// The run's own time, without the wait for the lock.
	t0 := time.Now()
	defer func() { res.Seconds = time.Since(t0).Seconds() }()
	ctx, cancel := context.WithTimeout(parent, lab.Scaled(runDeadline))
	defer cancel()
	r := &Run{ctx: ctx, Index: i, Wolf: c.wolf, Scratch: c.scratch, V2: c.v2, led: c.led, logf: c.logf}
	// The watchdog: a run whose undo hangs past its deadline ends the
	// runner; its children die with it (Pdeathsig) and the next run
	// undoes the rest from the ledger.
	wd := time.AfterFunc(lab.Scaled(runDeadline)+60*time.Second, func() {
		c.logf("watchdog: %s run %d still going %s after its deadline; exiting", s.Name, i+1, time.Minute)
		os.Exit(4)
	})
	defer wd.Stop()
	defer func() {
		r.Close()
		base := filepath.Join(c.keep, fmt.Sprintf("%s-%d", s.Name, i+1))
		_ = os.WriteFile(base+".workload.txt", []byte(r.Output()), 0o644)
	}()
	exp, err := s.Setup(r)
	res.Params, res.Expect = r.Params, exp
	if err != nil {
		res.Error = "set-up: " + err.Error()
		return res
	}
	if ctx.Err() != nil {
		res.Error = "set-up: " + ctx.Err().Error()
		return res
	}
	dctx, dcancel := context.WithTimeout(ctx, lab.Scaled(60*time.Second))
	defer dcancel()
	cmd := exec.CommandContext(dctx, c.wolf, "doctor", "--duration", c.duration, "--format", "json")
	cmd.Env = append(os.Environ(), "WOLF_FACTS_OUT="+filepath.Join(c.keep, fmt.Sprintf("%s-%d.facts.json", s.Name, i+1)))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	before, tb := snapCPU(), time.Now()
	err = cmd.Run()
	res.Others = othersBusy(before, snapCPU(), time.Since(tb).Seconds(), os.Getpid())
	res.DoctorRC = cmd.ProcessState.ExitCode()
	base := filepath.Join(c.keep, fmt.Sprintf("%s-%d", s.Name, i+1))
	_ = os.WriteFile(base+".json", stdout.Bytes(), 0o644)
	_ = os.WriteFile(base+".stderr.txt", stderr.Bytes(), 0o644)
	var rep finding.Report
	if jerr := json.Unmarshal(stdout.Bytes(), &rep); jerr != nil {
		res.Error = fmt.Sprintf("doctor: %v (rc %d): %s", err, res.DoctorRC, lastLines(stderr.String(), 2))
		return res
	}
	res.Verdict = Judge(&rep, exp)
	return res
}

func printResult(r Result) {
	st := "PASS"
	if !r.Pass() {
		st = "FAIL"
	}
	fmt.Printf("%s %-20s run %d  %s\n", st, r.Scenario, r.Run, r.Params)
	if r.Error != "" {
		fmt.Printf("     error: %s\n", r.Error)
		return
	}
	fmt.Printf("     first: %s: %s\n", r.Verdict.FirstID, r.Verdict.FirstTitle)
	if len(r.Others) > 0 {
		fmt.Printf("     others busy meanwhile: %s\n", strings.Join(r.Others, ", "))
	}
	for _, w := range r.Verdict.Why {
		fmt.Printf("     - %s\n", w)
	}
}

func selectScenarios(only string, v2 bool) ([]Scenario, error) {
	var sel []Scenario
	if only == "" {
		for _, s := range scenarios {
			if v2 && !s.V2 {
				continue
			}
			sel = append(sel, s)
		}
		return sel, nil
	}
	for _, n := range strings.Split(only, ",") {
		i := slices.IndexFunc(scenarios, func(s Scenario) bool { return s.Name == n })
		if i < 0 {
			return nil, fmt.Errorf("no scenario %q (-list shows them)", n)
		}
		if v2 && scenarios[i].V1Only {
			return nil, fmt.Errorf("scenario %s needs cgroup v1", n)
		}
		sel = append(sel, scenarios[i])
	}
	return sel, nil
}

// required parses required.txt for this cgroup version.
func required(txt string, v2 bool) map[string]bool {
	want := "v1"
	if v2 {
		want = "v2"
	}
	m := map[string]bool{}
	for _, l := range strings.Split(txt, "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && f[0] == want && !strings.HasPrefix(l, "#") {
			m[f[1]] = true
		}
	}
	return m
}

func debPackage(tool string) string {
	switch tool {
	case "mkfs.ext4":
		return "e2fsprogs"
	case "ps":
		return "procps"
	}
	return tool
}

// flock takes an exclusive lock on path, waiting up to wait. It waits in
// a blocking flock (the kernel hands a freed lock to a blocked waiter at
// once; a poller would lose every race to the tests that block on it).
func flock(ctx context.Context, path string, wait time.Duration, logf func(string, ...any)) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, err
	}
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
		return func() { f.Close() }, nil
	}
	logf("waiting for %s (another measurement or test holds it)", path)
	got := make(chan error, 1)
	go func() { got <- unix.Flock(int(f.Fd()), unix.LOCK_EX) }()
	select {
	case err := <-got:
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("flock %s: %w", path, err)
		}
		return func() { f.Close() }, nil
	case <-time.After(wait):
		err = fmt.Errorf("%s still held after %s", path, wait)
	case <-ctx.Done():
		err = ctx.Err()
	}
	// Given up: the blocked flock may still succeed; let it go then.
	go func() { <-got; f.Close() }()
	return nil, err
}

func unameRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "?"
	}
	return unix.ByteSliceToString(u.Release[:])
}

func wolfVersion(bin string) string {
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(strings.SplitN(string(out), "\n", 2)[0]), " ")
}

func commandLine() string {
	args := []string{"go run ./scripts/scenarios"}
	skip := false
	for _, a := range os.Args[1:] {
		if skip {
			skip = false
			continue
		}
		name := strings.TrimLeft(a, "-")
		if strings.HasPrefix(a, "-") && slices.Contains([]string{"wolf", "keep", "scratch", "lock-wait", "reproduce"}, strings.SplitN(name, "=", 2)[0]) {
			skip = !strings.Contains(a, "=")
			continue
		}
		args = append(args, a)
	}
	return strings.Join(args, " ")
}
