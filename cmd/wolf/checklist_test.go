package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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
	// ioPSI0 and memPSI0 are the machine's I/O and memory pressure
	// totals (some, µs), iowait0 its iowait time: other users' work that
	// waits on a disk or reclaims memory is as real as a loaded CPU.
	ioPSI0, memPSI0, iowait0 float64
	// throttles0 are the CPU-quota throttles of every cgroup with a
	// quota (nr_throttled, by path): another user's container held to its
	// quota is a true diagnosis, not a false one.
	throttles0 map[string]uint64
}

func startLoadMeter(t *testing.T) loadMeter {
	t.Helper()
	busy, steal, total := statBusy(t)
	return loadMeter{busy0: busy, steal0: steal, total0: total, psi0: cpuSomeUs(),
		ioPSI0: someUs("io"), memPSI0: someUs("memory"), iowait0: statIowait(t), throttles0: cgroupThrottles()}
}

// machineTruth is what the meter read, independently of wolf, over a run
// of doctor: which of the machine's resources other work kept under
// pressure. A finding about one of them is then the truth, not a false
// alarm of a healthy host.
type machineTruth struct {
	CPU, IO, Memory bool
	Throttled       map[string]bool // cgroups their CPU quota throttled
}

// truth reads the meter over a run of doctor lasting seconds.
func (m loadMeter) truth(t *testing.T, seconds float64) machineTruth {
	t.Helper()
	_, _, total := statBusy(t)
	ioPct := 100 * (someUs("io") - m.ioPSI0) / (seconds * 1e6)
	memPct := 100 * (someUs("memory") - m.memPSI0) / (seconds * 1e6)
	iowaitPct := 100 * (statIowait(t) - m.iowait0) / (total - m.total0)
	tr := machineTruth{CPU: m.cpuLoaded(t, seconds), Throttled: m.throttled(),
		IO: ioPct >= 10 || iowaitPct >= 10, Memory: memPct >= 10}
	t.Logf("independent pressure reading over the run: io some %.0f%%, iowait %.0f%%, memory some %.0f%%, cgroups throttled %v", ioPct, iowaitPct, memPct, tr.Throttled)
	return tr
}

// explains says whether what the machine was under explains a finding or
// diagnosis (by id; cgroup is a cpu-quota diagnosis's root, "" when not
// known, as in text output).
func (tr machineTruth) explains(id, cgroup string) bool {
	switch {
	case cpuLoadFindings[id]:
		return tr.CPU
	case ioFindings[id] || strings.HasPrefix(id, "io."):
		return tr.IO
	case memoryFindings[id] || strings.HasPrefix(id, "reclaim."):
		return tr.Memory
	case id == "diagnose.cpu-quota" || id == "sched.cpu-throttled":
		return tr.Throttled[cgroup] || (cgroup == "" && len(tr.Throttled) > 0)
	}
	return false
}

// ioFindings and memoryFindings are the checklist's findings and the
// diagnoses that disk waits and memory pressure of other work legitimately
// raise.
var (
	ioFindings = map[string]bool{"system.iowait": true, "system.psi-io": true, "system.io-blocked": true,
		"system.disk-latency": true, "system.disk-saturated": true, "diagnose.io-limit": true, "diagnose.device": true}
	memoryFindings = map[string]bool{"system.psi-memory": true, "system.direct-reclaim": true, "diagnose.memcg-limit": true}
)

// someUs is the total of a resource's "some" pressure, µs.
func someUs(resource string) float64 {
	b, err := os.ReadFile("/proc/pressure/" + resource)
	if err != nil {
		return 0
	}
	_, after, _ := strings.Cut(string(b), "total=")
	v, _ := strconv.ParseFloat(strings.Fields(after)[0], 64)
	return v
}

// statIowait is the machine-wide iowait time of /proc/stat.
func statIowait(t *testing.T) float64 {
	t.Helper()
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[5], 64)
	return v
}

// throttled returns the cgroups (paths as wolf names them) that their CPU
// quota throttled since the meter started.
func (m loadMeter) throttled() map[string]bool {
	out := map[string]bool{}
	for cg, n := range cgroupThrottles() {
		if n > m.throttles0[cg] {
			out[cg] = true
		}
	}
	return out
}

// cgroupThrottles reads nr_throttled of every cgroup's cpu.stat, in the
// cpu controller's v1 hierarchy and in v2's.
func cgroupThrottles() map[string]uint64 {
	out := map[string]uint64{}
	for _, root := range []string{"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		if r, err := filepath.EvalSymlinks(root); err == nil {
			root = r // cpu -> cpu,cpuacct on some systems
		}
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			if path != root && root == "/sys/fs/cgroup" && strings.Count(path, "/") == 4 && !isV2(path) {
				return filepath.SkipDir // a v1 controller's hierarchy
			}
			b, err := os.ReadFile(filepath.Join(path, "cpu.stat"))
			if err != nil {
				return nil
			}
			for _, line := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "nr_throttled "); ok {
					n, _ := strconv.ParseUint(v, 10, 64)
					cg := strings.TrimPrefix(path, root)
					if cg == "" {
						cg = "/"
					}
					out[cg] = max(out[cg], n)
				}
			}
			return nil
		})
	}
	return out
}

// isV2 says whether a directory right under /sys/fs/cgroup is a v2 cgroup
// (a pure v2 mount) rather than a v1 controller's mount.
func isV2(path string) bool {
	_, err := os.Stat(filepath.Join(path, "cgroup.controllers"))
	return err == nil
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
// area in order (its warnings are unhealthy's to judge).
func checkHealthyChecklist(t *testing.T, rep *finding.Report, tr machineTruth) {
	t.Helper()
	if len(rep.Checklist) != len(sysstat.Areas) {
		t.Fatalf("checklist has %d areas, want %v: %+v", len(rep.Checklist), sysstat.Areas, rep.Checklist)
	}
	for i, c := range rep.Checklist {
		if c.Area != sysstat.Areas[i] || c.Summary == "" || strings.HasPrefix(c.Summary, "unavailable") {
			t.Errorf("checklist[%d] = %+v, want area %q with a summary", i, c, sysstat.Areas[i])
		}
	}
}

// unhealthy is what doctor's report on a healthy host should not say: any
// finding of the investigators that watch for a sick kernel (hung tasks,
// critical lock contention, softirq, BPF cost), and any warning of the
// checklist or reclaim, critical of the scheduler or diagnosis, unless what
// the machine was independently seen to be under (tr) explains it. A
// loaded CPU explains waiting for a CPU, never that an ordinary task is
// critically bounced between CPUs.
func unhealthy(rep *finding.Report, tr machineTruth) []string {
	var out []string
	for _, f := range rep.Findings {
		bad := false
		switch f.Investigator {
		case "hung":
			bad = true
		case "locks":
			bad = f.Severity == finding.Critical
		case "softirq", "bpf":
			bad = f.Severity >= finding.Warning
		case "reclaim":
			bad = f.Severity >= finding.Warning && !tr.Memory
		case "system":
			bad = f.Severity >= finding.Warning && !tr.explains(f.ID, "")
		case "sched":
			bad = f.Severity == finding.Critical && !tr.explains(f.ID, "")
		}
		if bad {
			out = append(out, fmt.Sprintf("healthy host gave a %s %s: %s (%s)", f.Investigator, f.Severity, f.Title, f.ID))
		}
	}
	for _, d := range rep.Diagnoses {
		if !tr.explains(d.ID, d.Root.Cgroup) {
			out = append(out, fmt.Sprintf("healthy host diagnosed: %s (%s)", d.Title, d.ID))
		}
	}
	return out
}

var findingIDRe = regexp.MustCompile(`(?m)^(?:CRITICAL|WARNING|DIAGNOSIS)\s.*\n\s+\[([a-z.-]+)[\] ]`)

// healthyText says whether doctor's text output is healthy, or unhealthy
// only for what the machine was independently seen to be under.
func healthyText(t *testing.T, out string, tr machineTruth) bool {
	t.Helper()
	if strings.Contains(out, "Healthy") {
		return true
	}
	ids := findingIDRe.FindAllStringSubmatch(out, -1)
	for _, m := range ids {
		if !tr.explains(m[1], "") {
			return false
		}
	}
	return len(ids) > 0
}
