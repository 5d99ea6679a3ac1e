package main

// The judge: does doctor's report name the scenario's root, as a resource
// (its kind and its identity), with the numbers on the hops and the
// consumer? It reads the report as any user of the JSON contract would and
// knows nothing of how doctor got there; it judges causes, not the names
// of the workloads that made them.

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/wolf-investigator/wolf/internal/finding"
)

// Root kinds: the resources a diagnosis can end at.
const (
	KindCPUQuota   = "cpu-quota"   // a cgroup's CPU quota (Cgroup)
	KindHostCPU    = "host-cpu"    // the host's CPUs, saturated by consumers (Consumers)
	KindMemcgLimit = "memcg-limit" // a cgroup's memory limit (Cgroup)
	KindIOThrottle = "io-throttle" // a cgroup's or the device's blk-throttle limit (Device, Cgroup when set)
	KindDevice     = "device"      // a block device that is slow by itself (Device)
	KindFUSEDaemon = "fuse-daemon" // a FUSE daemon that does not answer (PIDs)
	KindLockHolder = "lock-holder" // a task holding a kernel lock (PIDs)
	KindSoftirq    = "softirq"     // softirq work on the CPUs
)

// kindMatch tells a diagnosis of a kind by its id or its title: the id is
// "diagnose.KIND" by the JSON contract, but a new kind of diagnosis may
// name the same resource under another id, and its title must say it.
var kindMatch = map[string]struct{ id, title *regexp.Regexp }{
	KindCPUQuota: {
		regexp.MustCompile(`(?i)cpu-quota|cfs|cpu-throttl|cpu\.max`),
		regexp.MustCompile(`(?i)cpu quota|cpu\.max|cfs_quota|throttled by its cpu`),
	},
	KindHostCPU: {
		regexp.MustCompile(`(?i)host-cpu|cpu-saturat|saturated-cpu`),
		regexp.MustCompile(`(?i)saturated cpus|cpus? (are |is )?saturated|host's cpus`),
	},
	KindMemcgLimit: {
		regexp.MustCompile(`(?i)memcg|memory-limit|mem-limit|thrash`),
		regexp.MustCompile(`(?i)memory (cgroup|limit)|memory\.max|limit_in_bytes|page.cache thrash`),
	},
	KindIOThrottle: {
		regexp.MustCompile(`(?i)io-throttle|io-limit|blk-?throttle|io\.max|blkio|dirty`),
		regexp.MustCompile(`(?i)i/o (limit|throttle|cap)|io\.max|blkio|bps_device|iops_device|dirty.*throttl|throttl.*dirty`),
	},
	KindDevice: {
		regexp.MustCompile(`(?i)slow-device|device|disk`),
		regexp.MustCompile(`(?i)slow (device|disk)|device .*(slow|busy|saturated)`),
	},
	KindFUSEDaemon: {
		regexp.MustCompile(`(?i)fuse`),
		regexp.MustCompile(`(?i)fuse`),
	},
	KindLockHolder: {
		regexp.MustCompile(`(?i)holder|lock`),
		regexp.MustCompile(`(?i)hold|lock`),
	},
	KindSoftirq: {
		regexp.MustCompile(`(?i)softirq`),
		regexp.MustCompile(`(?i)softirq|net_rx|net_tx|ksoftirqd`),
	},
}

// Expect is what a scenario's run must show. Negative: doctor must find no
// diagnosis and nothing critical. Otherwise the first diagnosis must be of
// one of Kinds (several when the scenario's root can honestly be said more
// than one way) and name its identity.
type Expect struct {
	Negative bool     `json:"negative,omitempty"`
	Kinds    []string `json:"kinds,omitempty"`
	// Cgroup is the cgroup whose limit is the root, as wolf prints it
	// (its path within the hierarchy, "/wolf-scen-…").
	Cgroup string `json:"cgroup,omitempty"`
	// Devices are the kernel's names of the devices ("loop7", "vda")
	// the root may name: one of them.
	Devices []string `json:"devices,omitempty"`
	// PIDs are the root task's acceptable ids (pid or tid): a lock's
	// holder, a FUSE daemon.
	PIDs []int `json:"pids,omitempty"`
	// Consumers are the workload's processes (pids, thread-group ids)
	// and ConsumerComm the prefix of their names: a diagnosis must name
	// one of them as a subject somewhere (root, subjects, a hop's ends).
	Consumers    []int  `json:"consumers,omitempty"`
	ConsumerComm string `json:"consumer_comm,omitempty"`
	// Numbers are regular expressions over evidence keys: each must
	// match a numeric evidence value on some hop (the quota and the
	// throttled share, the memory limit, the consumer's share).
	Numbers []string `json:"numbers,omitempty"`
}

// Verdict is the judge's answer for one report.
type Verdict struct {
	Pass bool `json:"pass"`
	// First is the report's first item: the first diagnosis, else the
	// first finding (doctor sorts them worst first).
	FirstID    string `json:"first_id,omitempty"`
	FirstTitle string `json:"first_title,omitempty"`
	FirstIsDx  bool   `json:"first_is_diagnosis,omitempty"`
	// Why lists what failed, one line each.
	Why []string `json:"why,omitempty"`
	// Wrong are the titles that should not be there: the wrong first
	// item, or a negative control's diagnoses and critical items.
	Wrong []string `json:"wrong,omitempty"`
}

// Judge judges r against e.
func Judge(r *finding.Report, e Expect) Verdict {
	var v Verdict
	switch {
	case len(r.Diagnoses) > 0:
		v.FirstID, v.FirstTitle, v.FirstIsDx = r.Diagnoses[0].ID, r.Diagnoses[0].Title, true
	case len(r.Findings) > 0:
		v.FirstID, v.FirstTitle = r.Findings[0].ID, r.Findings[0].Title
	}
	if e.Negative {
		for _, d := range r.Diagnoses {
			v.Wrong = append(v.Wrong, d.Title)
		}
		if len(r.Diagnoses) > 0 {
			v.Why = append(v.Why, fmt.Sprintf("%d diagnoses on a negative control", len(r.Diagnoses)))
		}
		for _, f := range r.Findings {
			if f.Severity == finding.Critical {
				v.Wrong = append(v.Wrong, f.Title)
				v.Why = append(v.Why, "critical finding "+f.ID)
			}
		}
		for _, c := range r.Checklist {
			if c.Severity == finding.Critical {
				v.Wrong = append(v.Wrong, c.Summary)
				v.Why = append(v.Why, "critical checklist line ("+c.Area+")")
			}
		}
		v.Pass = len(v.Why) == 0
		return v
	}
	if len(r.Diagnoses) == 0 {
		v.Why = append(v.Why, "no diagnosis")
		if v.FirstTitle != "" {
			v.Wrong = append(v.Wrong, v.FirstTitle)
		}
		return v
	}
	v.Why = judgeDiagnosis(&r.Diagnoses[0], e)
	if len(v.Why) > 0 {
		v.Wrong = append(v.Wrong, v.FirstTitle)
	}
	v.Pass = len(v.Why) == 0
	return v
}

// judgeDiagnosis lists what d lacks of e.
func judgeDiagnosis(d *finding.Diagnosis, e Expect) []string {
	var why []string
	kind := ""
	for _, k := range e.Kinds {
		m, ok := kindMatch[k]
		if ok && (m.id.MatchString(d.ID) || m.title.MatchString(d.Title)) && identified(d, k, e) {
			kind = k
			break
		}
	}
	if kind == "" {
		why = append(why, fmt.Sprintf("root is not %s (%s)", strings.Join(e.Kinds, " or "), identity(e)))
	}
	if (len(e.Consumers) > 0 || e.ConsumerComm != "") && !namesConsumer(d, e) {
		why = append(why, fmt.Sprintf("no consumer named (pids %v, comm %q)", e.Consumers, e.ConsumerComm))
	}
	for _, n := range e.Numbers {
		if !hasNumber(d, regexp.MustCompile(n)) {
			why = append(why, "no number /"+n+"/ on a hop")
		}
	}
	// Every hop but "held by" (a lock's owner is a fact) carries numbers.
	for i, h := range d.Chain {
		if h.Relation != finding.HeldBy && len(h.Evidence) == 0 {
			why = append(why, fmt.Sprintf("hop %d (%s) has no numbers", i+1, h.Relation))
		}
	}
	if len(d.Chain) == 0 {
		why = append(why, "no hops")
	}
	return why
}

func identity(e Expect) string {
	var s []string
	if e.Cgroup != "" {
		s = append(s, "cgroup "+e.Cgroup)
	}
	if len(e.Devices) > 0 {
		s = append(s, "device "+strings.Join(e.Devices, " or "))
	}
	if len(e.PIDs) > 0 {
		s = append(s, fmt.Sprintf("task %v", e.PIDs))
	}
	if len(s) == 0 {
		return "any identity"
	}
	return strings.Join(s, ", ")
}

// identified says whether d names the root's identity where a reader
// looks for it: its root subject or its title (a device, also in the
// hops' evidence as the JSON contract's "device" key).
func identified(d *finding.Diagnosis, kind string, e Expect) bool {
	switch kind {
	case KindCPUQuota, KindMemcgLimit:
		return e.Cgroup == "" || sameCgroup(d.Root.Cgroup, e.Cgroup) || mentionsCgroup(d.Title+" "+d.Root.Detail, e.Cgroup)
	case KindIOThrottle, KindDevice:
		if len(e.Devices) > 0 && !slices.ContainsFunc(e.Devices, func(dev string) bool { return namesDevice(d, dev) }) {
			return false
		}
		return e.Cgroup == "" || kind == KindDevice || inDiagnosis(d, func(s finding.Subject) bool { return sameCgroup(s.Cgroup, e.Cgroup) }) ||
			mentionsCgroup(d.Title+" "+d.Summary, e.Cgroup)
	case KindFUSEDaemon, KindLockHolder:
		return len(e.PIDs) == 0 || slices.Contains(e.PIDs, d.Root.PID) || slices.Contains(e.PIDs, d.Root.TID)
	}
	return true
}

// sameCgroup compares cgroup paths as wolf may print them: within the
// hierarchy ("/x/y") or with a mount point before it.
func sameCgroup(got, want string) bool {
	if got == "" || want == "" {
		return false
	}
	got, want = path.Clean(got), path.Clean(want)
	return got == want || strings.HasSuffix(got, want)
}

func mentionsCgroup(text, want string) bool {
	want = path.Clean(want)
	for _, w := range strings.FieldsFunc(text, func(r rune) bool {
		return r == ' ' || r == ',' || r == ':' || r == '(' || r == ')' || r == '"' || r == '\''
	}) {
		if sameCgroup(strings.TrimRight(w, "."), want) {
			return true
		}
	}
	return false
}

var wordRE = regexp.MustCompile(`[A-Za-z0-9_-]+`)

func namesDevice(d *finding.Diagnosis, dev string) bool {
	has := func(s string) bool { return slices.Contains(wordRE.FindAllString(s, -1), dev) }
	if has(d.Title) || has(d.Root.Detail) || has(d.Root.Comm) || d.Root.Lock == dev {
		return true
	}
	for _, h := range d.Chain {
		for k, v := range h.Evidence {
			if s, ok := v.(string); ok && strings.Contains(k, "device") && s == dev {
				return true
			}
		}
	}
	return false
}

// inDiagnosis says whether a subject of d (root, subjects, a hop's ends)
// satisfies f.
func inDiagnosis(d *finding.Diagnosis, f func(finding.Subject) bool) bool {
	if f(d.Root) {
		return true
	}
	for _, s := range d.Subjects {
		if f(s) {
			return true
		}
	}
	for _, h := range d.Chain {
		if f(h.From) || f(h.To) {
			return true
		}
	}
	return false
}

func namesConsumer(d *finding.Diagnosis, e Expect) bool {
	return inDiagnosis(d, func(s finding.Subject) bool {
		if s.PID != 0 && slices.Contains(e.Consumers, s.PID) {
			return true
		}
		return e.ConsumerComm != "" && strings.HasPrefix(s.Comm, e.ConsumerComm)
	})
}

// hasNumber: some hop's evidence has a numeric value under a key re matches.
func hasNumber(d *finding.Diagnosis, re *regexp.Regexp) bool {
	for _, h := range d.Chain {
		for k, v := range h.Evidence {
			if re.MatchString(k) && numeric(v) {
				return true
			}
		}
	}
	return false
}

func numeric(v any) bool {
	switch x := v.(type) {
	case float64, float32, int, int64, uint64, int32, uint32:
		return true
	case string:
		_, err := strconv.ParseFloat(x, 64)
		return err == nil
	}
	return false
}
