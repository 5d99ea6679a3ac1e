package hunglog

import (
	"fmt"
	"strings"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/kstack"
)

// The deadlock of "An Fentry and RCU bug" (Usama Saqib, Datadog, FOSDEM
// 2026): an agent detaching an fentry program waits for an
// RCU-tasks grace period (synchronize_rcu_tasks under bpf_trampoline_*),
// rcu_tasks_kthread waits in synchronize_srcu for tasks late in do_exit,
// and one of those — the container's init, in zap_pid_ns_processes —
// waits for the agent to die. Each half alone reads as "slow RCU"; only
// together do they say "deadlock", so they are reported as one finding.

// fentryDetach are frames that put a synchronize_rcu_tasks on the BPF
// trampoline path.
var fentryDetach = []string{"bpf_trampoline_unlink_prog", "bpf_trampoline_update", "unregister_ftrace_direct",
	"modify_ftrace_direct", "bpf_tracing_link_release", "bpf_trampoline_link_prog", "register_ftrace_direct"}

func rcuTasksDeadlock(a *Analysis, p *parser) (finding.Finding, []int, bool) {
	waiter, kthread := -1, -1
	for i := range a.Groups {
		g := &a.Groups[i]
		if g.Site.Kind != kstack.RCU {
			continue
		}
		switch {
		case strings.HasPrefix(g.Site.Object, "rcu-tasks") && waiter < 0:
			waiter = i
		case g.Site.Object == "srcu" && rcuTasksKthread(g) && kthread < 0:
			kthread = i
		}
	}
	if waiter < 0 || kthread < 0 {
		return finding.Finding{}, nil, false
	}
	gw, gk := &a.Groups[waiter], &a.Groups[kthread]
	fentry := false
	for _, v := range gw.Victims {
		for _, fn := range fentryDetach {
			if stackHas(v.Stack, fn) {
				fentry = true
			}
		}
	}
	zapper := findZapper(a, p)

	w, k := gw.Victims[0], gk.Victims[0]
	var t string
	if fentry {
		t = fmt.Sprintf("BPF fentry/fexit detach deadlocked on RCU-tasks: %s (pid %d) waits for a grace period that rcu_tasks_kthread cannot finish", w.Comm, w.PID)
	} else {
		t = fmt.Sprintf("RCU-tasks grace period stuck: %s (pid %d) waits in %s while rcu_tasks_kthread waits for exiting tasks", w.Comm, w.PID, gw.Site.LockFunc)
	}
	var sum strings.Builder
	fmt.Fprintf(&sum, "%s (pid %d) %s", w.Comm, w.PID, w.Site.Describe)
	if fentry {
		sum.WriteString(", on the path that detaches a BPF trampoline (fentry/fexit link release)")
	}
	fmt.Fprintf(&sum, "; %s (pid %d) %s, i.e. it waits for tasks late in do_exit().", k.Comm, k.PID, k.Site.Describe)
	if zapper != nil {
		fmt.Fprintf(&sum, " %s (pid %d) is such a task: it exits as a PID-namespace init and waits in zap_pid_ns_processes for its children to die, while holding the exit SRCU read lock.", zapper.Comm, zapper.PID)
	} else {
		sum.WriteString(" The log has no dump of the exiting task; look for one in zap_pid_ns_processes (a container's init) with `echo t > /proc/sysrq-trigger`.")
	}

	g := &Group{Key: "rcu-tasks-deadlock", Site: gw.Site}
	g.Victims = append(append(g.Victims, gw.Victims...), gk.Victims...)
	subs := subjects(g)
	if zapper != nil {
		subs = append([]finding.Subject{{
			Role: finding.RoleOffender, PID: tgidOr(zapper.TGID, zapper.PID), TID: zapper.PID, Comm: zapper.Comm,
			State: zapper.State, Stack: reliable(zapper.Stack),
			Detail: "exiting PID-namespace init in zap_pid_ns_processes, inside the tasks_rcu_exit_srcu read section",
		}}, subs...)
	}
	ev := evidence(g, a)
	ev["fentry_detach"] = fentry
	ev["rcu_tasks_stall_lines"] = a.RCUTasksStalls
	if zapper != nil {
		ev["offender_pid"] = zapper.PID
	}
	f := finding.Finding{
		ID:           IDRCU,
		Investigator: "hung",
		// A deadlock never clears on its own, unlike the slow waits other
		// RCU findings describe.
		Severity: finding.Critical,
		Title:    t,
		Summary:  sum.String(),
		Mechanism: "Detaching an fentry/fexit program rewrites the BPF trampoline and must wait for an RCU-tasks grace period before freeing the old one; that grace period first waits, via SRCU, for every task late in do_exit(). " +
			"A PID-namespace init that exits kills its children and waits for them inside that SRCU read section, so if one child is the detaching task, each waits for the other forever.",
		Subjects: subs,
		Evidence: ev,
		Remediation: []string{
			`Run a kernel with "rcu-tasks: Maintain lists to eliminate RCU-tasks/do_exit() deadlocks" (mainline 6.9) or ask the vendor for the backport.`,
			"Until then, avoid fentry/fexit in agents that can be killed by their PID namespace's teardown: use tracepoints or raw tracepoints, or stop the agent (closing its BPF links) before stopping its container.",
			"Confirm with `echo t > /proc/sysrq-trigger`: a task in zap_pid_ns_processes under do_exit (the container's init, e.g. s6-svscan) is the other half. `wolf hung` shows the chain live.",
			"The stuck tasks cannot be killed; only a reboot clears this deadlock.",
		},
		References: []string{refHungTasks, refFentryRCU},
	}
	return f, []int{waiter, kthread}, true
}

// findZapper looks, among every task dump in the log, for an exiting
// PID-namespace init: zap_pid_ns_processes under do_exit.
func findZapper(a *Analysis, p *parser) *Report {
	for _, o := range p.others {
		if stackHas(o.Stack, "zap_pid_ns_processes") {
			return o
		}
	}
	for i := range a.Reports {
		if stackHas(a.Reports[i].Stack, "zap_pid_ns_processes") {
			return &a.Reports[i]
		}
	}
	return nil
}
