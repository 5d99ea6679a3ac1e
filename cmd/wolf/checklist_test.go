package main

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/sysstat"
)

// loadMeter measures, independently of wolf, how busy the machine was
// while a test ran doctor: the tests of other packages (and other people's
// builds) share the CPUs, and a busy CPU is a legitimate checklist
// warning, not a false one.
type loadMeter struct {
	busy0, steal0, total0, psi0 float64
}

func startLoadMeter(t *testing.T) loadMeter {
	t.Helper()
	busy, steal, total := statBusy(t)
	return loadMeter{busy, steal, total, cpuSomeUs()}
}

// cpuLoaded reports whether the machine was busy enough since the meter
// started that the checklist's CPU findings are the truth: over half the
// CPU time busy, tasks waiting for a CPU a quarter of the time, or the
// hypervisor taking a tenth of it (steal: the host's neighbours, which no
// guest controls; wolf warns from 15 % in its own, slightly different,
// window).
func (m loadMeter) cpuLoaded(t *testing.T, seconds float64) bool {
	t.Helper()
	busy, steal, total := statBusy(t)
	busyPct := 100 * (busy - m.busy0) / (total - m.total0)
	stealPct := 100 * (steal - m.steal0) / (total - m.total0)
	somePct := 100 * (cpuSomeUs() - m.psi0) / (seconds * 1e6)
	t.Logf("independent load reading over the run: %.0f%% busy (%.0f%% steal), cpu pressure some %.0f%%", busyPct, stealPct, somePct)
	return busyPct >= 50 || somePct >= 25 || stealPct >= 10
}

// statBusy reads the machine-wide CPU times of /proc/stat: busy (all but
// idle and iowait, steal included), steal alone, and the total.
func statBusy(t *testing.T) (busy, steal, total float64) {
	t.Helper()
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	for i, f := range strings.Fields(line)[1:] {
		if i >= 8 {
			break
		}
		v, _ := strconv.ParseFloat(f, 64)
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
		if i == 7 {
			steal = v
		}
	}
	return busy, steal, total
}

func cpuSomeUs() float64 {
	b, err := os.ReadFile("/proc/pressure/cpu")
	if err != nil {
		return 0
	}
	_, after, _ := strings.Cut(string(b), "total=")
	v, _ := strconv.ParseFloat(strings.Fields(after)[0], 64)
	return v
}

// cpuLoadFindings are the findings and diagnoses a machine busy with
// other work legitimately raises: the checklist's, sched's run-queue
// latency and the diagnosis of saturated CPUs (on a 2-CPU machine that go
// test ./... keeps compiling, tasks do wait for a CPU).
var cpuLoadFindings = map[string]bool{"system.run-queue": true, "system.cpu-saturated": true,
	"system.psi-cpu": true, "system.cpu-steal": true, "sched.runq-latency": true, "diagnose.host-cpu": true}

// checkHealthyChecklist asserts doctor's checklist is there, one check per
// area in order, and that a healthy host raises no system warning but
// those a loaded CPU explains.
func checkHealthyChecklist(t *testing.T, rep *finding.Report, cpuLoaded bool) {
	t.Helper()
	if len(rep.Checklist) != len(sysstat.Areas) {
		t.Fatalf("checklist has %d areas, want %v: %+v", len(rep.Checklist), sysstat.Areas, rep.Checklist)
	}
	for i, c := range rep.Checklist {
		if c.Area != sysstat.Areas[i] || c.Summary == "" || strings.HasPrefix(c.Summary, "unavailable") {
			t.Errorf("checklist[%d] = %+v, want area %q with a summary", i, c, sysstat.Areas[i])
		}
	}
	for _, f := range rep.Findings {
		if f.Investigator != "system" || f.Severity < finding.Warning {
			continue
		}
		if cpuLoaded && cpuLoadFindings[f.ID] {
			t.Logf("the machine was busy: %s %s", f.ID, f.Title)
			continue
		}
		t.Errorf("healthy host gave a system %s: %s (%s)", f.Severity, f.Title, f.ID)
	}
}

var findingIDRe = regexp.MustCompile(`(?m)^(?:CRITICAL|WARNING|DIAGNOSIS)\s.*\n\s+\[([a-z.-]+)[\] ]`)

// healthyText says whether doctor's text output is healthy, or unhealthy
// only for what a loaded CPU explains.
func healthyText(t *testing.T, out string, cpuLoaded bool) bool {
	t.Helper()
	if strings.Contains(out, "Healthy") {
		return true
	}
	if !cpuLoaded {
		return false
	}
	ids := findingIDRe.FindAllStringSubmatch(out, -1)
	for _, m := range ids {
		if !cpuLoadFindings[m[1]] {
			return false
		}
	}
	return len(ids) > 0
}
