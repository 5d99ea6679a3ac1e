package hunglog

// Other kernel-log events that explain hangs: a disk that times out, a GPU
// that fell off the bus, a CPU stuck in a loop, the OOM killer. A hung task
// is usually the last link of a chain whose first link the log printed
// minutes earlier; when such an event precedes a hang, the finding says so.

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/wolf-investigator/wolf/internal/kstack"
)

// EventKind names a class of kernel-log event.
type EventKind string

// The event kinds wolf recognises.
const (
	EventNVMe           EventKind = "nvme"            // NVMe command timeouts, aborts, controller resets
	EventIOError        EventKind = "io-error"        // block and filesystem I/O errors, failed disks
	EventSCSI           EventKind = "scsi"            // SCSI/ATA errors, timeouts and resets
	EventGPU            EventKind = "gpu"             // NVIDIA Xid errors
	EventSoftLockup     EventKind = "soft-lockup"     // a CPU stuck in the kernel without scheduling
	EventHardLockup     EventKind = "hard-lockup"     // a CPU stuck with interrupts off
	EventRCUStall       EventKind = "rcu-stall"       // an RCU grace period held up
	EventRCUTasksStall  EventKind = "rcu-tasks-stall" // an RCU-tasks grace period held up
	EventOOMKill        EventKind = "oom-kill"        // the OOM killer killed a task (memcg: a cgroup's limit)
	EventWorkqueueStall EventKind = "workqueue-stall" // a workqueue pool made no progress
)

// Event is a set of kernel-log lines of one kind about one device or CPU.
type Event struct {
	Kind   EventKind
	Device string // "nvme0", "sda", "PCI:0000:61:00", "CPU#3", "memcg"; "" when none
	Count  int
	// First and Last are the first and last such lines: the number of the
	// line in the file and its timestamp as written.
	First, Last int
	FirstStamp  string
	Sample      string // the first line's text, cut to a readable length
	Task        string // the task named (OOM victim, stuck task), "" when none
	XidCodes    []string
}

type eventPattern struct {
	kind   EventKind
	keys   []string // one of these is in every matching line: a cheap filter
	re     *regexp.Regexp
	device int // submatch index of the device, 0 for none
	task   int // submatch index of a task, 0 for none
}

var eventPatterns = []eventPattern{
	{EventNVMe, []string{"nvme nvme"}, regexp.MustCompile(`^nvme (nvme\d+): (?:I/O (?:tag )?\d+ (?:\(\w+\) )?(?:QID \d+ )?timeout|.*(?:reset(?:ting)? controller|controller is down|Abort status|Device not ready|failed to set APST|Removing after probe failure|timeout, (?:aborting|reset controller|completion polled)))`), 1, 0},
	{EventIOError, []string{"I/O error", "print_req_error", "critical "}, regexp.MustCompile(`(?:^|: )(?:blk_update_request|print_req_error|critical \w+ error|I/O error)[: ,].*?\bdev (\w+)`), 1, 0},
	{EventIOError, []string{"Buffer I/O"}, regexp.MustCompile(`^Buffer I/O error on (?:dev|device) (\w+)`), 1, 0},
	{EventIOError, []string{"EXT4-fs", "XFS", "BTRFS", "F2FS", "JBD2"}, regexp.MustCompile(`^(?:EXT4-fs|XFS|BTRFS|F2FS|JBD2)[ :(]+(\w[\w-]*)\)?.*(?:I/O error|\berror[ :(,]|shut down|Remounting filesystem read-only|Detected aborted journal)`), 1, 0},
	{EventIOError, []string{"Disk failure"}, regexp.MustCompile(`^md/raid\d*:(\w+): Disk failure on (\w+)`), 2, 0},
	{EventSCSI, []string{"sd "}, regexp.MustCompile(`^sd \S+: \[(\w+)\] .*(?:FAILED Result|Unit Not Ready|Sense Key|failed: Result|timing out command|Medium Error|Device offlined|rejecting I/O)`), 1, 0},
	{EventSCSI, []string{"ata"}, regexp.MustCompile(`^(ata\d+(?:\.\d+)?): (?:exception Emask|failed command|hard resetting link|COMRESET failed|link is slow)`), 1, 0},
	{EventSCSI, []string{"scsi "}, regexp.MustCompile(`^scsi (?:host\d+|\S+): .*(?:abort|timing out|offline|rejecting I/O)`), 0, 0},
	{EventGPU, []string{"Xid"}, regexp.MustCompile(`NVRM: Xid \((PCI:[0-9a-fA-F:.]+)\): (\d+)`), 1, 0},
	{EventSoftLockup, []string{"soft lockup"}, regexp.MustCompile(`soft lockup - (CPU#\d+) stuck for \d+s! \[(.+):\d+\]`), 1, 2},
	{EventHardLockup, []string{"LOCKUP"}, regexp.MustCompile(`(?:Watchdog detected hard LOCKUP|hard LOCKUP) on (?:cpu )?(\d+)`), 1, 0},
	{EventRCUTasksStall, []string{"rcu_tasks", "RCU Tasks"}, regexp.MustCompile(`^rcu_tasks\w*_wait_gp: .*grace period|RCU Tasks\w* .*stall`), 0, 0},
	{EventRCUStall, []string{"detected stall"}, regexp.MustCompile(`(?:INFO: )?rcu_\w+ (?:self-)?detected stalls?|rcu: INFO: rcu_\w+ (?:self-)?detected stall`), 0, 0},
	{EventOOMKill, []string{"out of memory", "Out of memory"}, regexp.MustCompile(`^(Memory cgroup out of memory|Out of memory(?: \(oom_kill_allocating_task\))?): Kill(?:ed)? process \d+ \((.+?)\)`), 0, 2},
	{EventWorkqueueStall, []string{"workqueue lockup"}, regexp.MustCompile(`^BUG: workqueue lockup - pool`), 0, 0},
}

// maxEvents bounds the distinct (kind, device) events kept.
const maxEvents = 64

// eventLog collects events while the log is read.
type eventLog struct {
	byKey map[string]*Event
	order []*Event
}

func (e *eventLog) observe(t, stamp string, num int) {
	for _, p := range eventPatterns {
		if !containsAny(t, p.keys) {
			continue
		}
		m := p.re.FindStringSubmatch(t)
		if m == nil {
			continue
		}
		dev := ""
		if p.device > 0 && p.device < len(m) {
			dev = sanitize(m[p.device])
		}
		if p.kind == EventOOMKill && strings.HasPrefix(t, "Memory cgroup") {
			dev = "memcg"
		}
		key := string(p.kind) + "/" + dev
		if e.byKey == nil {
			e.byKey = map[string]*Event{}
		}
		ev := e.byKey[key]
		if ev == nil {
			if len(e.order) >= maxEvents {
				return
			}
			sample := t
			if len(sample) > 160 {
				sample = sample[:160] + "…"
			}
			ev = &Event{Kind: p.kind, Device: dev, First: num, FirstStamp: stamp, Sample: sanitize(sample)}
			if p.task > 0 && p.task < len(m) {
				ev.Task = sanitize(m[p.task])
			}
			e.byKey[key] = ev
			e.order = append(e.order, ev)
		}
		ev.Count++
		ev.Last = num
		if p.kind == EventGPU && len(m) > 2 && len(ev.XidCodes) < 8 && !contains(ev.XidCodes, m[2]) {
			ev.XidCodes = append(ev.XidCodes, m[2])
		}
		return
	}
}

func containsAny(t string, keys []string) bool {
	for _, k := range keys {
		if strings.Contains(t, k) {
			return true
		}
	}
	return false
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func (e *eventLog) list() []Event {
	out := make([]Event, 0, len(e.order))
	for _, ev := range e.order {
		out = append(out, *ev)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].First < out[j].First })
	return out
}

// describe says what an event is in a few words, for summaries.
func (ev Event) describe() string {
	n := func(one, many string) string {
		if ev.Count == 1 {
			return "1 " + one
		}
		return fmt.Sprintf("%d %s", ev.Count, many)
	}
	on := ""
	if ev.Device != "" && ev.Device != "memcg" {
		on = " on " + ev.Device
	}
	switch ev.Kind {
	case EventNVMe:
		return n("NVMe timeout or controller reset", "NVMe timeouts and controller resets") + on
	case EventIOError:
		return n("I/O error", "I/O errors") + on
	case EventSCSI:
		return n("SCSI/ATA error", "SCSI/ATA errors") + on
	case EventGPU:
		return n("GPU Xid error", "GPU Xid errors") + " (Xid " + strings.Join(ev.XidCodes, ", ") + ")" + on
	case EventSoftLockup:
		s := n("soft lockup", "soft lockups") + on
		if ev.Task != "" {
			s += " (" + ev.Task + ")"
		}
		return s
	case EventHardLockup:
		return n("hard lockup", "hard lockups") + " on CPU " + ev.Device
	case EventRCUStall:
		return n("RCU stall warning", "RCU stall warnings")
	case EventRCUTasksStall:
		return n("RCU-tasks stall warning", "RCU-tasks stall warnings")
	case EventOOMKill:
		s := n("OOM kill", "OOM kills")
		if ev.Device == "memcg" {
			s = n("OOM kill in a memory cgroup", "OOM kills in memory cgroups")
		}
		if ev.Task != "" {
			s += " (first: " + ev.Task + ")"
		}
		return s
	case EventWorkqueueStall:
		return n("workqueue lockup", "workqueue lockups")
	}
	return n(string(ev.Kind)+" event", string(ev.Kind)+" events")
}

// where says where in the log an event first appears.
func (ev Event) where() string {
	if ev.FirstStamp != "" {
		return fmt.Sprintf("line %d, [%s]", ev.First, ev.FirstStamp)
	}
	return fmt.Sprintf("line %d", ev.First)
}

// precedingEvents returns the events that start before a group's first
// report, in the order the log has them: candidates for the cause.
func precedingEvents(g *Group, a *Analysis) []Event {
	first := 0
	for _, v := range g.Victims {
		if first == 0 || (v.FirstLine > 0 && v.FirstLine < first) {
			first = v.FirstLine
		}
	}
	var out []Event
	for _, ev := range a.Events {
		if first > 0 && ev.First < first {
			out = append(out, ev)
		}
	}
	return out
}

// eventSentence says what the log shows before the hang, as the likely
// cause when it is: storage errors before storage waits (or before a lock
// whose owner waits for storage), a GPU's errors before waits in its
// driver, lockups, stalls and OOM kills before anything.
func eventSentence(g *Group, before []Event) string {
	if len(before) == 0 {
		return ""
	}
	var parts []string
	cause := false
	for i, ev := range before {
		if i == 4 {
			parts = append(parts, fmt.Sprintf("%d more", len(before)-4))
			break
		}
		parts = append(parts, ev.describe()+" (first at "+ev.where()+")")
		if explains(ev, g) {
			cause = true
		}
	}
	if cause {
		return " Before the first hang the log shows " + strings.Join(parts, ", ") + ": the likely cause, or its first symptom."
	}
	return " Before the first hang the log also shows " + strings.Join(parts, ", ") + "."
}

// explains reports whether an event is a plausible cause of a group's
// wait: the mechanism, not the coincidence, is what links them.
func explains(ev Event, g *Group) bool {
	k := g.Site.Kind
	storageWait := k.IsStorage() || k == kstack.NFS || (g.Owner != nil && g.Owner.Site != nil && g.Owner.Site.Kind.IsStorage())
	for _, v := range g.Victims {
		if v.Workqueue != "" && subsystem(v.Workqueue, v.WorkFunc).storage {
			storageWait = true
		}
	}
	switch ev.Kind {
	case EventNVMe, EventIOError, EventSCSI:
		return storageWait
	case EventGPU:
		for _, v := range g.Victims {
			for _, f := range v.Stack {
				if strings.Contains(f, "[nvidia") {
					return true
				}
			}
		}
		return false
	case EventRCUStall, EventRCUTasksStall:
		return k == kstack.RCU
	case EventSoftLockup, EventHardLockup, EventWorkqueueStall:
		// A CPU that does not schedule stalls RCU, workqueues and every
		// lock its task holds.
		return true
	case EventOOMKill:
		return k.IsStorage() || k.IsLock() || k == kstack.Other
	}
	return false
}

// eventAdvice is what to do about the events that precede a hang.
func eventAdvice(before []Event) []string {
	var out []string
	seen := map[EventKind]bool{}
	for _, ev := range before {
		if seen[ev.Kind] {
			continue
		}
		seen[ev.Kind] = true
		switch ev.Kind {
		case EventNVMe:
			out = append(out, fmt.Sprintf("The NVMe controller %s timed out or was reset before the hang: check `nvme smart-log /dev/%s` and `nvme error-log /dev/%s`, its firmware and PCIe link (`lspci -vv`), and the kernel's nvme_core.io_timeout; tasks wait as long as its commands do.", devOr(ev.Device, "nvmeX"), devOr(ev.Device, "nvmeX"), devOr(ev.Device, "nvmeX")))
		case EventIOError, EventSCSI:
			out = append(out, fmt.Sprintf("The log shows I/O errors on %s before the hang: check the device (`smartctl -a /dev/%s`, cabling, the controller) and what sits on it (`lsblk`, `dmsetup table`, `cat /proc/mdstat`).", devOr(ev.Device, "a device"), devOr(ev.Device, "DEV")))
		case EventGPU:
			out = append(out, "The GPU reported Xid errors before the hang: look the codes up in NVIDIA's Xid table, check `nvidia-smi -q`, and expect tasks stuck in the driver to stay stuck until the GPU is reset or the host rebooted.")
		case EventSoftLockup, EventHardLockup:
			out = append(out, "A CPU was stuck in the kernel before the hang: its trace, printed with the lockup, is the first thing to read; the hung tasks may wait for a lock or a grace period that CPU holds up.")
		case EventRCUStall, EventRCUTasksStall:
			out = append(out, "RCU stall warnings precede the hang: they name the CPU or task holding the grace period up, which every synchronize_rcu() caller waits for.")
		case EventOOMKill:
			out = append(out, "The OOM killer ran before the hang: memory pressure (in a cgroup when it says \"Memory cgroup out of memory\") slows reclaim and I/O for everyone; check the limits (`memory.max`, `memory.events`) and what grew.")
		case EventWorkqueueStall:
			out = append(out, "A workqueue pool stalled before the hang: the work items queued behind it, flushes of them included, wait until its worker runs again.")
		}
	}
	return out
}

func devOr(dev, alt string) string {
	if dev == "" {
		return alt
	}
	return dev
}
