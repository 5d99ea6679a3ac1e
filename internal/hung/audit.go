package hung

import (
	"context"
	"fmt"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/probekit"
	"github.com/wolf-investigator/wolf/internal/sysctl"
)

// Requirements implements investigator.Requirer: the attach table's, and
// what the programs use inside.
func (*Investigator) Requirements() []investigator.Requirement {
	return append([]investigator.Requirement{
		{Feature: "btf", Why: "CO-RE: read task_struct, mutex and rw-semaphore fields on any kernel layout"},
		{Feature: "bpf_get_task_stack", Why: "kernel stacks of blocked tasks and lock owners"},
		{Feature: "raw_tracepoint", Why: "attach to scheduler and lock tracepoints"},
		{Feature: "task_blocker", Why: "the lock a task already blocked waits on (task->blocker, 6.16+)", Optional: true},
		{Feature: "ringbuf", Why: "khungtaskd reports to user space", Optional: true},
		{Feature: "hung_task_detector", Why: "audit khungtaskd's settings", Optional: true},
	}, probekit.Requirements(attachTable)...)
}

// Audit implements investigator.Auditor: khungtaskd's settings, read the
// way Cloudflare's "Searching for the cause of hung tasks in the Linux kernel" discusses them.
func (*Investigator) Audit(ctx context.Context) []finding.Finding {
	return auditSysctls(sysctl.ReadInt)
}

func auditSysctls(read func(string) (int64, error)) []finding.Finding {
	timeout, err := read("kernel.hung_task_timeout_secs")
	if err != nil {
		return nil // no detector built in; `wolf check` says so
	}
	ref := []string{"https://blog.cloudflare.com/searching-for-the-cause-of-hung-tasks-in-the-linux-kernel/"}
	var out []finding.Finding
	if timeout == 0 {
		out = append(out, finding.Finding{
			ID: "audit.hung-task-disabled", Investigator: "audit", Severity: finding.Warning,
			Title:       "The kernel's hung-task detector is off (kernel.hung_task_timeout_secs = 0)",
			Summary:     "Tasks stuck in D state will never be reported in the kernel log.",
			Evidence:    map[string]any{"hung_task_timeout_s": timeout},
			Remediation: []string{"sysctl -w kernel.hung_task_timeout_secs=10 (Cloudflare runs with 10 s and alerts on the log line)"},
			References:  ref,
		})
	}
	if warnings, err := read("kernel.hung_task_warnings"); err == nil && warnings == 0 && timeout != 0 {
		out = append(out, finding.Finding{
			ID: "audit.hung-task-silenced", Investigator: "audit", Severity: finding.Warning,
			Title:    "The hung-task detector has used up its warnings and is silent (kernel.hung_task_warnings = 0)",
			Summary:  "Every report decrements kernel.hung_task_warnings; at 0 the kernel stops reporting, so new hangs go unnoticed.",
			Evidence: map[string]any{"hung_task_warnings": warnings, "hung_task_timeout_s": timeout},
			Remediation: []string{
				"sysctl -w kernel.hung_task_warnings=200, and reset it periodically (Cloudflare: 200, reset every 15 minutes), or -1 for unlimited.",
				"Read what was already reported: dmesg | wolf analyze -",
			},
			References: ref,
		})
	}
	if panicOn, err := read("kernel.hung_task_panic"); err == nil && panicOn != 0 {
		out = append(out, finding.Finding{
			ID: "audit.hung-task-panic", Investigator: "audit", Severity: finding.Info,
			Title:      fmt.Sprintf("A hung task will panic this host (kernel.hung_task_panic = %d)", panicOn),
			Summary:    "Any task blocked longer than kernel.hung_task_timeout_secs reboots the machine; make sure that is intended.",
			Evidence:   map[string]any{"hung_task_panic": panicOn, "hung_task_timeout_s": timeout},
			References: ref,
		})
	}
	if n, err := read("kernel.hung_task_detect_count"); err == nil && n > 0 {
		out = append(out, finding.Finding{
			ID: "audit.hung-task-history", Investigator: "audit", Severity: finding.Info,
			Title:       fmt.Sprintf("The kernel has reported %d hung task(s) since boot", n),
			Summary:     "kernel.hung_task_detect_count counts every hung-task report; the kernel log holds their stacks.",
			Evidence:    map[string]any{"hung_task_detect_count": n},
			Remediation: []string{"dmesg > kernel.log && wolf analyze kernel.log"},
		})
	}
	return out
}
