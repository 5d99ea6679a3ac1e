package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
)

// report parses a doctor report from JSON, as the runner does.
func report(t *testing.T, js string) *finding.Report {
	t.Helper()
	var r finding.Report
	if err := json.Unmarshal([]byte(js), &r); err != nil {
		t.Fatalf("fixture: %v", err)
	}
	return &r
}

const quotaDx = `{"diagnoses":[{"id":"diagnose.cpu-quota","severity":"warning",
 "title":"cgroup /wolf-scen-quota-1-ab is held back by its CPU quota: 10 ms per 100 ms",
 "root":{"role":"root","cgroup":"/wolf-scen-quota-1-ab"},
 "chain":[
  {"from":{"role":"victim","pid":101,"comm":"stress-ng-cpu"},"relation":"constrained_by","to":{"role":"root","cgroup":"/wolf-scen-quota-1-ab"},
   "evidence":{"quota_us":10000,"period_us":100000,"throttled_pct":100},"text":"…"}],
 "subjects":[{"role":"victim","pid":101,"comm":"stress-ng-cpu"}],"explains":[],"confidence":"high"}],
 "findings":[{"id":"sched.runq-latency","investigator":"sched","severity":"warning","title":"Run-queue latency p99 reaches 106 ms","summary":""}]}`

func quotaExpect() Expect {
	return Expect{Kinds: []string{KindCPUQuota}, Cgroup: "/wolf-scen-quota-1-ab", Consumers: []int{100, 101}, ConsumerComm: "stress-ng",
		Numbers: []string{`quota`, `throttl`}}
}

func TestJudgeCPUQuotaRight(t *testing.T) {
	v := Judge(report(t, quotaDx), quotaExpect())
	if !v.Pass || v.FirstID != "diagnose.cpu-quota" || !v.FirstIsDx || len(v.Wrong) != 0 {
		t.Fatalf("want a pass, got %+v", v)
	}
}

func TestJudgeWrongCgroup(t *testing.T) {
	e := quotaExpect()
	e.Cgroup = "/wolf-scen-quota-2-cd"
	v := Judge(report(t, quotaDx), e)
	if v.Pass || !hasWhy(v, "root is not cpu-quota") || len(v.Wrong) != 1 {
		t.Fatalf("a quota diagnosis of another cgroup passed: %+v", v)
	}
}

// A cgroup named with a longer name that starts with the wanted one is
// another cgroup.
func TestJudgeCgroupPrefixIsNotTheCgroup(t *testing.T) {
	js := strings.ReplaceAll(quotaDx, "/wolf-scen-quota-1-ab", "/wolf-scen-quota-1-abc")
	if v := Judge(report(t, js), quotaExpect()); v.Pass {
		t.Fatalf("cgroup /wolf-scen-quota-1-abc taken for /wolf-scen-quota-1-ab: %+v", v)
	}
}

func TestJudgeWrongKind(t *testing.T) {
	e := quotaExpect()
	e.Kinds = []string{KindMemcgLimit}
	e.Numbers = nil
	if v := Judge(report(t, quotaDx), e); v.Pass {
		t.Fatalf("a CPU quota diagnosis passed for a memory limit: %+v", v)
	}
}

func TestJudgeMissingNumbers(t *testing.T) {
	js := strings.Replace(quotaDx, `"throttled_pct":100`, `"note":"x"`, 1)
	v := Judge(report(t, js), quotaExpect())
	if v.Pass || !hasWhy(v, "throttl") {
		t.Fatalf("no throttled share and still a pass: %+v", v)
	}
}

func TestJudgeHopWithoutNumbers(t *testing.T) {
	js := strings.Replace(quotaDx, `"evidence":{"quota_us":10000,"period_us":100000,"throttled_pct":100},`, ``, 1)
	v := Judge(report(t, js), Expect{Kinds: []string{KindCPUQuota}, Cgroup: "/wolf-scen-quota-1-ab"})
	if v.Pass || !hasWhy(v, "has no numbers") {
		t.Fatalf("a hop without numbers passed: %+v", v)
	}
}

func TestJudgeConsumerNotNamed(t *testing.T) {
	e := quotaExpect()
	e.Consumers, e.ConsumerComm = []int{7}, "fio"
	v := Judge(report(t, quotaDx), e)
	if v.Pass || !hasWhy(v, "no consumer") {
		t.Fatalf("consumer fio not named and still a pass: %+v", v)
	}
}

// No diagnosis: the first finding is the first item, and it is wrong.
func TestJudgeNoDiagnosis(t *testing.T) {
	js := `{"diagnoses":[],"findings":[{"id":"sched.runq-latency","investigator":"sched","severity":"warning","title":"Run-queue latency p99 reaches 106 ms","summary":""}]}`
	v := Judge(report(t, js), quotaExpect())
	if v.Pass || v.FirstID != "sched.runq-latency" || v.FirstIsDx || len(v.Wrong) != 1 || v.Wrong[0] != "Run-queue latency p99 reaches 106 ms" {
		t.Fatalf("want a failure naming the first finding, got %+v", v)
	}
}

const hostDx = `{"diagnoses":[{"id":"diagnose.host-cpu","severity":"warning",
 "title":"Saturated CPUs: stress-ng (pid 200) uses 98% of both CPUs",
 "root":{"role":"root","detail":"the host's CPUs"},
 "chain":[{"from":{"role":"victim","pid":300,"comm":"sshd"},"relation":"constrained_by","to":{"role":"consumer","pid":200,"comm":"stress-ng-cpu"},
   "evidence":{"cpu_share_pct":98,"runq_wait_ms":900},"text":"…"}],
 "subjects":[],"explains":[],"confidence":"high"}],"findings":[]}`

func TestJudgeHostCPU(t *testing.T) {
	e := Expect{Kinds: []string{KindHostCPU}, Consumers: []int{200, 201}, ConsumerComm: "stress-ng", Numbers: []string{`pct|share`}}
	if v := Judge(report(t, hostDx), e); !v.Pass {
		t.Fatalf("want a pass: %+v", v)
	}
	// The same diagnosis naming another consumer.
	e.Consumers, e.ConsumerComm = []int{999}, "fio"
	if v := Judge(report(t, hostDx), e); v.Pass {
		t.Fatalf("host CPUs saturated by someone else passed: %+v", v)
	}
	// A host-CPU diagnosis is not a quota's.
	if v := Judge(report(t, hostDx), Expect{Kinds: []string{KindCPUQuota}, Cgroup: "/x"}); v.Pass {
		t.Fatalf("host CPUs taken for a CPU quota: %+v", v)
	}
}

const ioDx = `{"diagnoses":[{"id":"diagnose.io-throttle","severity":"warning",
 "title":"fio in cgroup /wolf-scen-ioloop-5-aa is capped at 1 MiB/s on loop3 by blkio.throttle.read_bps_device",
 "root":{"role":"root","cgroup":"/wolf-scen-ioloop-5-aa"},
 "chain":[{"from":{"role":"victim","pid":400,"comm":"fio"},"relation":"waits_on","to":{"role":"root","cgroup":"/wolf-scen-ioloop-5-aa"},
   "evidence":{"device":"loop3","limit_bps":1048576,"wait_ms_p99":250},"text":"…"}],
 "subjects":[],"explains":[],"confidence":"high"}],"findings":[]}`

func TestJudgeIOThrottleDevice(t *testing.T) {
	e := Expect{Kinds: []string{KindIOThrottle}, Devices: []string{"loop3"}, Cgroup: "/wolf-scen-ioloop-5-aa", ConsumerComm: "fio", Numbers: []string{`bps|iops|limit`}}
	if v := Judge(report(t, ioDx), e); !v.Pass {
		t.Fatalf("want a pass: %+v", v)
	}
	// loop3 is not loop30, nor loop.
	for _, dev := range []string{"loop30", "loop", "vda"} {
		e.Devices = []string{dev}
		if v := Judge(report(t, ioDx), e); v.Pass {
			t.Fatalf("device %s taken for loop3: %+v", dev, v)
		}
	}
	// A CPU quota is not an I/O throttle, though both "throttle".
	if v := Judge(report(t, quotaDx), Expect{Kinds: []string{KindIOThrottle}, Devices: []string{"loop3"}}); v.Pass {
		t.Fatalf("a CPU quota passed as an I/O throttle: %+v", v)
	}
}

func TestJudgeFUSEDaemon(t *testing.T) {
	js := `{"diagnoses":[{"id":"diagnose.fuse-daemon","severity":"critical","title":"FUSE daemon wolf (pid 500) does not answer",
	 "root":{"role":"root","pid":500,"tid":502,"comm":"wolf"},
	 "chain":[{"from":{"role":"victim","pid":600},"relation":"waits_on","to":{"role":"holder","pid":610},"evidence":{"waited_ms":3000},"text":"…"},
	          {"from":{"role":"holder","pid":610},"relation":"held_by","to":{"role":"root","pid":500},"text":"…"}],
	 "subjects":[],"explains":[],"confidence":"high"}],"findings":[]}`
	if v := Judge(report(t, js), Expect{Kinds: []string{KindFUSEDaemon}, PIDs: []int{500}}); !v.Pass {
		t.Fatalf("want a pass (a held_by hop needs no numbers): %+v", v)
	}
	if v := Judge(report(t, js), Expect{Kinds: []string{KindFUSEDaemon}, PIDs: []int{501}}); v.Pass {
		t.Fatalf("another daemon passed: %+v", v)
	}
}

func TestJudgeNegative(t *testing.T) {
	quiet := `{"diagnoses":[],"findings":[{"id":"system.cpu-saturated","investigator":"system","severity":"warning","title":"All 2 CPUs saturated","summary":""}],
	 "checklist":[{"area":"cpu","severity":"warning","summary":"busy"}]}`
	if v := Judge(report(t, quiet), Expect{Negative: true}); !v.Pass || v.FirstID != "system.cpu-saturated" {
		t.Fatalf("warnings only: want a pass, got %+v", v)
	}
	critical := strings.Replace(quiet, `"severity":"warning","title"`, `"severity":"critical","title"`, 1)
	if v := Judge(report(t, critical), Expect{Negative: true}); v.Pass || len(v.Wrong) != 1 {
		t.Fatalf("a critical finding on a negative control passed: %+v", v)
	}
	critCheck := strings.Replace(quiet, `"severity":"warning","summary":"busy"`, `"severity":"critical","summary":"busy"`, 1)
	if v := Judge(report(t, critCheck), Expect{Negative: true}); v.Pass {
		t.Fatalf("a critical checklist line on a negative control passed: %+v", v)
	}
	if v := Judge(report(t, hostDx), Expect{Negative: true}); v.Pass || v.Wrong[0] != "Saturated CPUs: stress-ng (pid 200) uses 98% of both CPUs" {
		t.Fatalf("a diagnosis on a negative control passed: %+v", v)
	}
}

func TestRequired(t *testing.T) {
	txt := "# comment v1 x\nv1 cpu-quota\nv2 memcg-thrash\nv1 host-cpu  # fixed\n"
	v1, v2 := required(txt, false), required(txt, true)
	if !v1["cpu-quota"] || !v1["host-cpu"] || v1["memcg-thrash"] || v1["x"] || !v2["memcg-thrash"] || v2["cpu-quota"] {
		t.Fatalf("v1 %v, v2 %v", v1, v2)
	}
}

// Every name in required.txt is a scenario, and runs on its cgroup version.
func TestRequiredNamesExist(t *testing.T) {
	for _, v2 := range []bool{false, true} {
		for n := range required(requiredTxt, v2) {
			sel, err := selectScenarios(n, v2)
			if err != nil || len(sel) != 1 {
				t.Errorf("required.txt: %s (v2 %v): %v", n, v2, err)
			}
		}
	}
}

// Scenario names are unique, and each says what it is.
func TestScenarios(t *testing.T) {
	seen := map[string]bool{}
	neg := 0
	for _, s := range scenarios {
		if seen[s.Name] || s.Name == "" || s.What == "" || s.Setup == nil {
			t.Errorf("scenario %q: duplicate or incomplete", s.Name)
		}
		seen[s.Name] = true
		if strings.HasPrefix(s.Name, "neg-") {
			neg++
		}
	}
	if len(scenarios)-neg < 12 || neg < 3 {
		t.Errorf("%d scenarios and %d negative controls; the suite promises 12 and 3", len(scenarios)-neg, neg)
	}
}

func hasWhy(v Verdict, s string) bool {
	for _, w := range v.Why {
		if strings.Contains(w, s) {
			return true
		}
	}
	return false
}

func TestMarkdownTable(t *testing.T) {
	sel := []Scenario{{Name: "cpu-quota", What: "hogs"}, {Name: "neg-cpu-busy", What: "busy"}}
	rs := []Result{
		{Scenario: "cpu-quota", Run: 1, Verdict: Verdict{Pass: true, FirstID: "diagnose.cpu-quota", FirstTitle: "quota"}},
		{Scenario: "cpu-quota", Run: 2, Verdict: Verdict{FirstID: "sched.runq-latency", FirstTitle: "Run-queue | latency", Why: []string{"no diagnosis"}, Wrong: []string{"Run-queue | latency"}}},
		{Scenario: "neg-cpu-busy", Run: 1, Required: true, Verdict: Verdict{Pass: true}},
	}
	md := markdown(Meta{Runs: 2}, sel, rs)
	for _, want := range []string{
		"| cpu-quota | 1/2 |  | `diagnose.cpu-quota`: 1, `sched.runq-latency`: 1 | Run-queue \\| latency |",
		"| neg-cpu-busy | 1/1 | yes | `(nothing)`: 1 |  |",
		"- **cpu-quota** (right in 1 of 2): first `sched.runq-latency` (no diagnosis).",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("table lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "**neg-cpu-busy**") {
		t.Errorf("a scenario right in every run is listed as not right:\n%s", md)
	}
}

func TestMergeTable(t *testing.T) {
	prefix := t.TempDir() + "/t"
	old := []Result{{Scenario: "cpu-quota", Run: 1}, {Scenario: "softirq", Run: 1}, {Scenario: "softirq", Run: 2}}
	if err := writeTable(prefix, Meta{Command: "first"}, scenarios, old); err != nil {
		t.Fatal(err)
	}
	sel, _ := selectScenarios("softirq", false)
	all, m, err := mergeTable(prefix, Meta{Command: "again"}, sel, []Result{{Scenario: "softirq", Run: 1, Verdict: Verdict{Pass: true}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].Scenario != "cpu-quota" || !all[1].Pass() || m.Command != "first" || len(m.Updated) != 1 || !strings.Contains(m.Updated[0], "softirq with `again`") {
		t.Fatalf("merged %+v, meta %+v", all, m)
	}
}

func TestParseStat(t *testing.T) {
	line := "1234 (my (odd) comm) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 7 3 20 0 3 0 100 0 0\n"
	pid, p, ok := parseStat([]byte(line))
	if !ok || pid != 1234 || p.comm != "my (odd) comm" || p.ppid != 1 || p.ticks != 300 || p.children != 10 {
		t.Fatalf("got %d %+v %v", pid, p, ok)
	}
	if _, _, ok := parseStat([]byte("garbage")); ok {
		t.Fatal("garbage parsed")
	}
}

func TestOthersBusy(t *testing.T) {
	// 10 is the runner, 11 its doctor, 12 a workload under a shell 13; 24
	// is a build whose compiles exited in the window, 23 was born in it.
	a := map[int]procCPU{11: {ppid: 10}, 12: {ppid: 13}, 13: {ppid: 10}, 20: {ppid: 1, comm: "chromium"}, 21: {ppid: 1, comm: "idle"}, 22: {ppid: 1, comm: "cc"},
		24: {ppid: 1, comm: "go", ticks: 50, children: 1000}}
	b := map[int]procCPU{11: {ppid: 10, ticks: 800, children: 500}, 12: {ppid: 13, ticks: 800}, 13: {ppid: 10}, 20: {ppid: 1, comm: "chromium", ticks: 400},
		21: {ppid: 1, comm: "idle", ticks: 5}, 22: {ppid: 1, comm: "cc", ticks: 160}, 23: {ppid: 1, comm: "new", ticks: 120},
		24: {ppid: 1, comm: "go", ticks: 60, children: 1300}}
	got := othersBusy(a, b, 8, 10)
	if want := "chromium (pid 20) 50%; go (pid 24) 39% (mostly exited children); cc (pid 22) 20%; new (pid 23) 15%"; strings.Join(got, "; ") != want {
		t.Fatalf("got %q", got)
	}
}

// A journal left by a runner that is gone is written back and removed;
// this runner's own and a live runner's are left alone.
func TestSweepUndo(t *testing.T) {
	old := undoDir
	undoDir = t.TempDir()
	defer func() { undoDir = old }()
	knob := filepath.Join(t.TempDir(), "knob")
	if err := os.WriteFile(knob, []byte("7:3 4194304"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A dead runner: a child that has exited and been reaped.
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(undoDir, fmt.Sprintf("undo-%d", c.Process.Pid))
	if err := os.WriteFile(dead, []byte(knob+"\t7:3 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	live := filepath.Join(undoDir, fmt.Sprintf("undo-%d", os.Getppid()))
	if err := os.WriteFile(live, []byte(knob+"\tlive\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := journalUndo(knob, "own"); err != nil {
		t.Fatal(err)
	}
	// A runner killed a moment ago: a zombie its parent has not reaped.
	z := exec.Command("true")
	if err := z.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = z.Wait() }()
	for i := 0; i < 500 && !gone(z.Process.Pid); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	knob2 := filepath.Join(t.TempDir(), "knob2")
	zombie := filepath.Join(undoDir, fmt.Sprintf("undo-%d", z.Process.Pid))
	if err := os.WriteFile(zombie, []byte(knob2+"\tundone\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sweepUndo(t.Logf, false)
	if b, _ := os.ReadFile(knob2); string(b) != "undone" {
		t.Errorf("a zombie runner's journal was not applied (knob2 %q)", b)
	}
	if b, _ := os.ReadFile(knob); string(b) != "7:3 0" {
		t.Errorf("knob %q: the dead runner's undo was not written back", b)
	}
	if _, err := os.Stat(dead); err == nil {
		t.Error("the dead runner's journal is still there")
	}
	for _, f := range []string{live, filepath.Join(undoDir, fmt.Sprintf("undo-%d", os.Getpid()))} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("journal %s of a live runner removed: %v", f, err)
		}
	}
	sweepUndo(t.Logf, true)
	if _, err := os.Stat(filepath.Join(undoDir, fmt.Sprintf("undo-%d", os.Getpid()))); err == nil {
		t.Error("this runner's own journal stays after its pass")
	}
}
