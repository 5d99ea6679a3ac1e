// The kernel log area: dmesg | tail.

package sysstat

import (
	"fmt"
	"sort"
	"strings"

	"github.com/wolf-investigator/wolf/internal/finding"
)

// Patterns that make a record matter whatever its level (a WARN() splat
// is logged at warning level), and the ones that make it critical.
var (
	kernelPatterns = []string{"WARNING:", "BUG:", "Oops", "blocked for more than", "invoked oom-killer",
		"Out of memory", "soft lockup", "hard LOCKUP", "detected stall", "Kernel panic", "general protection fault"}
	criticalPatterns = []string{"BUG:", "Oops", "soft lockup", "hard LOCKUP", "detected stall", "Kernel panic",
		"general protection fault", "blocked for more than", "Out of memory"}
)

// Interesting says whether a kernel log record belongs in the checklist:
// anything at err level or above, and the splats that matter at any
// level.
func Interesting(r KernelRecord) bool {
	if r.Level <= 3 {
		return true
	}
	for _, p := range kernelPatterns {
		if strings.Contains(r.Message, p) {
			return true
		}
	}
	return false
}

var levelNames = []string{"emerg", "alert", "crit", "err", "warning", "notice", "info", "debug"}

func (r KernelRecord) String() string {
	return fmt.Sprintf("[%s] %s", levelNames[r.Level&7], r.Message)
}

func (a *analysis) kernelLog() {
	k := a.w.Kernel
	if k.Unavailable != "" {
		a.check("kernel log", "not read: "+k.Unavailable, nil)
		return
	}
	n := len(k.Errors) + k.Dropped
	v := map[string]any{"records": k.Records, "errors": n, "lost": k.Lost}
	msgs := make([]string, 0, len(k.Errors))
	for _, r := range k.Errors {
		msgs = append(msgs, r.String())
	}
	v["messages"] = msgs
	if n == 0 {
		summary := fmt.Sprintf("no errors in %d new record(s)", k.Records)
		if k.Lost > 0 {
			summary += fmt.Sprintf("; %d lost to a full log buffer", k.Lost)
		}
		a.check("kernel log", summary, v)
		return
	}
	sev := finding.Warning
	pointers := map[string]string{}
	for _, r := range k.Errors {
		for _, p := range criticalPatterns {
			if strings.Contains(r.Message, p) {
				sev = finding.Critical
			}
		}
		switch {
		case strings.Contains(r.Message, "blocked for more than"):
			pointers["hung"] = "wolf hung --duration 10s: the hung tasks, what they wait on, and who holds it"
		case strings.Contains(r.Message, "oom-killer"), strings.Contains(r.Message, "Out of memory"):
			pointers["reclaim"] = "wolf reclaim --duration 10s: memory pressure per cgroup"
		case strings.Contains(r.Message, "soft lockup"), strings.Contains(r.Message, "detected stall"):
			pointers["softirq"] = "wolf softirq --duration 10s: long softirq runs that keep a CPU from scheduling"
		}
	}
	rem := []string{"dmesg -T --level=emerg,alert,crit,err,warn: the records with their context (call traces follow on the next lines)"}
	keys := make([]string, 0, len(pointers))
	for key := range pointers {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		rem = append(rem, pointers[key])
	}
	first := msgs[0]
	summary := fmt.Sprintf("%d error(s) in %d new record(s): %s", n, k.Records, first)
	if k.Lost > 0 {
		summary += fmt.Sprintf("; %d lost", k.Lost)
	}
	a.check("kernel log", summary, v, finding.Finding{
		ID:          "system.kernel-errors",
		Severity:    sev,
		Title:       fmt.Sprintf("The kernel logged %d error(s) during the window: %s", n, first),
		Summary:     "New kernel log records at error level or above, or kernel warnings and splats, appeared while wolf watched.",
		Mechanism:   "The kernel logs what it cannot handle quietly: I/O errors, hung tasks, lockups, OOM kills, WARN() splats. Each record names the subsystem that failed.",
		Evidence:    map[string]any{"errors": n, "records": k.Records, "messages": msgs, "lost": k.Lost},
		Remediation: rem,
	})
}
