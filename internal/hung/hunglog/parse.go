package hunglog

import (
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/wolf-investigator/wolf/internal/kstack"
)

// The kernel's own message formats (kernel/hung_task.c, sched_show_task,
// lockdep). Task names may contain spaces and colons, so the pid is taken
// after the last colon that precedes the fixed text.
var (
	hungRe     = regexp.MustCompile(`^INFO: task (.+):(\d+) blocked for more than (\d+) seconds`)
	blockerRe  = regexp.MustCompile(`^INFO: task (.+):(\d+)(?: <(reader|writer)>)? (?:is )?blocked on an? (mutex|semaphore|rw-semaphore) likely (?:owned|last held) by task (.+):(\d+)(?: <(reader|writer)>)?`)
	notFoundRe = regexp.MustCompile(`^INFO: task (.+):(\d+) is blocked on an? (mutex|semaphore|rw-semaphore), but the (?:owner|last holder) is not found`)
	// Before the "task:" format (kernels older than wolf's floor, still
	// found in old logs): "%-15.15s %c stack pid ppid 0xflags".
	oldTaskRe  = regexp.MustCompile(`^(.{1,15}?)\s+([A-Z])\s+\d+\s+(\d+)\s+(\d+)\s+0x[0-9a-f]+$`)
	holderRe   = regexp.MustCompile(`^(\d+) locks? held by (.+)/(\d+):$`)
	heldLockRe = regexp.MustCompile(`^#(\d+): +(?:([0-9a-f]{6,16}) +)?\((.+)\)\{[^}]*\}(?:-\{[^}]*\})?, at: (.+)$`)
)

// role says what a block of task lines being collected is for.
type role int

const (
	roleVictim    role = iota // a khungtaskd report
	roleSysrq                 // a D task in a sysrq dump
	roleOwnerDump             // the owner's dump after a blocker line
	roleOther                 // a task in another state, kept for offender search
	roleDiscard               // a trace that belongs to no task (a WARN, an oops)
)

// collector gathers the lines of one task block: header, then Call Trace.
type collector struct {
	role        role
	rep         *Report
	blocker     *Blocker // roleOwnerDump: where the stack goes
	sawTask     bool     // the "task:" line was seen
	inTrace     bool
	sawMarker   bool // "<TASK>" seen: a "</TASK>" must close the trace
	closed      bool
	strayLines  int // unrelated lines since the last useful one
	frameCapHit bool
}

// maxStray is how many unrelated lines a report tolerates before it is
// considered over: enough to survive other messages interleaved on a busy
// console, few enough not to glue the next WARN's trace onto it.
const maxStray = 8

// stream is the parser state of one printk caller. Lines carry a caller id
// only with CONFIG_PRINTK_CALLER; then khungtaskd's lines are separated
// from everything other CPUs print in between. Otherwise all lines share
// the "" stream and interleaving is handled by tolerance.
type stream struct {
	cur          *collector
	pendingOwner *Blocker // a blocker line was just printed; the owner's dump may follow
	pendingPID   int
	holder       *HeldLocks // the lockdep task whose "#N:" lines come next
}

type parser struct {
	a       *Analysis
	lines   int
	streams map[string]*stream
	byKey   map[string]*Report
	order   []*Report
	byPID   map[int]*Report // latest report per pid, for blocker lines
	held    map[int]int     // pid -> index in a.Held
	others  []*Report       // roleOther tasks with stacks
	stored  int             // bytes of frames and lock entries kept
}

func newParser() *parser {
	return &parser{
		a:       &Analysis{},
		streams: map[string]*stream{},
		byKey:   map[string]*Report{},
		byPID:   map[int]*Report{},
		held:    map[int]int{},
	}
}

func (p *parser) stream(caller string) *stream {
	if s, ok := p.streams[caller]; ok {
		return s
	}
	if len(p.streams) >= maxStreams {
		caller = "" // too many callers: fold the rest together
		if s, ok := p.streams[caller]; ok {
			return s
		}
	}
	s := &stream{}
	p.streams[caller] = s
	return s
}

// feed parses one raw line.
func (p *parser) feed(raw []byte) {
	if len(raw) > maxTextBytes {
		raw = raw[:maxTextBytes]
	}
	str := string(raw)
	if !utf8.ValidString(str) {
		str = strings.ToValidUTF8(str, "\uFFFD")
	}
	l := splitPrefix(str)
	t := strings.TrimSpace(l.text)
	if t == "" {
		return
	}
	st := p.stream(l.caller)

	switch {
	case strings.HasPrefix(t, "INFO: task "):
		p.infoLine(st, t, l.stamp)
		return
	case strings.HasPrefix(t, "task:"):
		p.taskLine(st, t, l.stamp)
		return
	case t == "Showing all locks held in the system:":
		p.close(st)
		st.holder = nil
		return
	}
	if m := holderRe.FindStringSubmatch(t); m != nil {
		p.close(st)
		st.holder = p.holder(sanitize(m[2]), atoi(m[3]))
		return
	}
	if st.holder != nil {
		if m := heldLockRe.FindStringSubmatch(t); m != nil {
			l := HeldLock{Addr: m[2], Name: sanitize(m[3]), At: sanitize(kstack.FuncName(m[4]))}
			if len(st.holder.Locks) < MaxLocksPerTask && p.spend(len(l.Addr)+len(l.Name)+len(l.At)) {
				st.holder.Locks = append(st.holder.Locks, l)
			}
			return
		}
	}
	if p.counters(t) {
		return
	}
	c := st.cur
	if c == nil || c.closed {
		if t == "Call Trace:" || t == "Call trace:" {
			// A trace with no task header: a WARN, an oops. Swallow its
			// frames so that they are not taken for anyone's.
			st.cur = &collector{role: roleDiscard, inTrace: true}
		}
		return
	}
	p.blockLine(st, c, t)
}

// counters notes lines that only feed Analysis counters.
func (p *parser) counters(t string) bool {
	switch {
	case strings.Contains(t, "Show Blocked State") || strings.HasSuffix(t, "Show State"):
		p.a.SysrqDumps++
	case strings.HasPrefix(t, "Future hung task reports are suppressed"):
		p.a.Suppressed = true
	case strings.Contains(t, "detected stall") || strings.Contains(t, "self-detected stall") ||
		strings.HasPrefix(t, "rcu_tasks_wait_gp:") || strings.Contains(t, "grace period number"):
		p.a.RCUStalls++
		if strings.Contains(t, "rcu_tasks") {
			p.a.RCUTasksStalls++
		}
	default:
		return false
	}
	return true
}

// infoLine handles the hung-task header and the blocker lines.
func (p *parser) infoLine(st *stream, t, stamp string) {
	if m := hungRe.FindStringSubmatch(t); m != nil {
		p.close(st)
		st.pendingOwner, st.holder = nil, nil
		rep := &Report{
			Comm: sanitize(m[1]), PID: atoi(m[2]), BlockedS: atoi(m[3]), State: "D",
			Source: "hung-task", FirstLine: p.lines, Stamp: stamp, LastStamp: stamp, Reports: 1,
		}
		st.cur = &collector{role: roleVictim, rep: rep}
		return
	}
	var b *Blocker
	var victimPID int
	if m := blockerRe.FindStringSubmatch(t); m != nil {
		victimPID = atoi(m[2])
		b = &Blocker{As: m[3], Lock: m[4], OwnerComm: sanitize(m[5]), OwnerPID: atoi(m[6]), OwnerAs: m[7]}
	} else if m := notFoundRe.FindStringSubmatch(t); m != nil {
		victimPID = atoi(m[2])
		b = &Blocker{Lock: m[3], NotFound: true}
	} else {
		return // another "INFO: task …" we do not know; not ours to guess
	}
	// The blocker line follows the victim's dump: that dump is over.
	p.close(st)
	if rep := p.byPID[victimPID]; rep != nil {
		rep.Blocker = b
	}
	st.pendingOwner, st.pendingPID = nil, 0
	if !b.NotFound {
		st.pendingOwner, st.pendingPID = b, b.OwnerPID
	}
}

// taskLine handles sched_show_task's "task:NAME state:X … pid:N …".
func (p *parser) taskLine(st *stream, t, stamp string) {
	tl, ok := parseTaskLine(t)
	if !ok {
		return
	}
	if c := st.cur; c != nil && !c.closed && c.role == roleVictim && !c.sawTask && !c.inTrace &&
		(tl.pid == 0 || tl.pid == c.rep.PID) {
		c.sawTask = true
		tl.fill(c.rep)
		return
	}
	p.close(st)
	st.holder = nil
	if b := st.pendingOwner; b != nil && (tl.pid == st.pendingPID || (tl.pid == 0 && tl.comm == b.OwnerComm)) {
		b.OwnerState = tl.state
		st.cur = &collector{role: roleOwnerDump, blocker: b, sawTask: true}
		st.pendingOwner = nil
		return
	}
	st.pendingOwner = nil
	rep := &Report{Source: "sysrq", FirstLine: p.lines, Stamp: stamp, LastStamp: stamp, Reports: 1}
	tl.fill(rep)
	r := roleSysrq
	if tl.state != "D" {
		r = roleOther
	}
	st.cur = &collector{role: r, rep: rep, sawTask: true}
}

// blockLine handles a line inside an open task block.
func (p *parser) blockLine(st *stream, c *collector, t string) {
	switch {
	case t == "Call Trace:" || t == "Call trace:":
		if c.inTrace {
			p.close(st) // a second trace: not this task's
			st.cur = &collector{role: roleDiscard, inTrace: true}
			return
		}
		c.inTrace, c.strayLines = true, 0
		return
	case t == "<TASK>":
		c.sawMarker = true
		return
	case t == "</TASK>":
		if c.inTrace {
			c.sawMarker = false
			p.close(st)
		}
		return
	case t == "<IRQ>" || t == "</IRQ>" || t == "<NMI>" || t == "</NMI>" || t == "<#DF>" || t == "</#DF>":
		return
	}
	if !c.inTrace && c.rep != nil {
		if p.headerLine(c, t) {
			c.strayLines = 0
			return
		}
	}
	if c.inTrace {
		if isRegisterLine(t) {
			return
		}
		if isFrame(t) {
			c.strayLines = 0
			p.addFrame(c, t)
			return
		}
	}
	c.strayLines++
	if c.strayLines > maxStray {
		p.close(st)
	}
}

// headerLine takes the lines between "INFO: task" and "Call Trace:".
func (p *parser) headerLine(c *collector, t string) bool {
	rep := c.rep
	switch {
	case strings.HasPrefix(t, "Tainted:") || strings.HasPrefix(t, "Not tainted"):
		rep.Tainted, rep.Kernel = parseTaint(t)
		if p.a.Kernel == "" {
			p.a.Kernel = rep.Kernel
		}
	case t == "Blocked by coredump.":
		rep.Coredump = true
	case strings.HasPrefix(t, `"echo 0 > /proc/sys/kernel/hung_task_timeout_secs"`):
	case strings.HasPrefix(t, "Workqueue: "):
		f := strings.Fields(strings.TrimPrefix(t, "Workqueue: "))
		if len(f) >= 1 {
			rep.Workqueue = sanitize(f[0])
		}
		if len(f) >= 2 {
			rep.WorkFunc = sanitize(kstack.FuncName(f[1]))
		}
	default:
		if c.role == roleVictim && !c.sawTask {
			if m := oldTaskRe.FindStringSubmatch(t); m != nil && strings.TrimSpace(m[1]) != "" {
				c.sawTask = true
				rep.State, rep.PPID = m[2], atoi(m[4])
				return true
			}
		}
		return false
	}
	return true
}

func (p *parser) addFrame(c *collector, t string) {
	var stack *[]string
	switch c.role {
	case roleOwnerDump:
		stack = &c.blocker.OwnerStack
	case roleDiscard:
		return
	default:
		stack = &c.rep.Stack
	}
	if len(t) > maxFrameBytes {
		t = t[:maxFrameBytes]
	}
	if len(*stack) >= MaxFrames || !p.spend(len(t)) {
		c.frameCapHit = true
		return
	}
	*stack = append(*stack, t)
}

// spend charges n bytes of kept text against MaxStoredBytes, so that
// thousands of reports of maximal size still fit in bounded memory.
func (p *parser) spend(n int) bool {
	if p.stored+n > MaxStoredBytes {
		p.a.MemoryCapHit = true
		return false
	}
	p.stored += n
	return true
}

// close ends the stream's open block and files what it collected.
func (p *parser) close(st *stream) {
	c := st.cur
	if c == nil || c.closed {
		return
	}
	c.closed = true
	st.cur = nil
	truncated := c.frameCapHit || (c.inTrace && c.sawMarker)
	switch c.role {
	case roleVictim, roleSysrq:
		c.rep.Truncated = truncated
		p.file(c.rep)
	case roleOther:
		if len(c.rep.Stack) > 0 && len(p.others) < MaxOtherTasks {
			p.others = append(p.others, c.rep)
		}
	}
}

// file adds a finished report, merging it into an earlier one of the same
// task: khungtaskd repeats itself every check interval while the task
// stays stuck, and sysrq dumps repeat too.
func (p *parser) file(rep *Report) {
	key := strconv.Itoa(rep.PID) + "/" + rep.Comm
	old, ok := p.byKey[key]
	if !ok {
		if len(p.order) >= MaxReports {
			p.a.ReportsDropped++
			return
		}
		p.byKey[key] = rep
		p.order = append(p.order, rep)
		if rep.PID > 0 {
			p.byPID[rep.PID] = rep
		}
		return
	}
	old.Reports++
	old.LastStamp = rep.Stamp
	if rep.BlockedS > old.BlockedS {
		old.BlockedS = rep.BlockedS
	}
	if rep.Source == "hung-task" {
		old.Source = "hung-task"
	}
	if len(rep.Stack) > len(old.Stack) {
		old.Stack, old.Truncated = rep.Stack, rep.Truncated
	}
	old.Coredump = old.Coredump || rep.Coredump
	if old.Workqueue == "" {
		old.Workqueue, old.WorkFunc = rep.Workqueue, rep.WorkFunc
	}
	for _, f := range []struct {
		dst *string
		src string
	}{
		{&old.Kernel, rep.Kernel}, {&old.Tainted, rep.Tainted}, {&old.TaskFlags, rep.TaskFlags},
	} {
		if *f.dst == "" {
			*f.dst = f.src
		}
	}
	if old.TGID == 0 {
		old.TGID, old.PPID = rep.TGID, rep.PPID
	}
	if rep.PID > 0 {
		p.byPID[rep.PID] = old
	}
}

// holder starts (or restarts) the lockdep entry of a task.
func (p *parser) holder(comm string, pid int) *HeldLocks {
	if i, ok := p.held[pid]; ok && p.a.Held[i].Comm == comm {
		p.a.Held[i].Locks = p.a.Held[i].Locks[:0] // a newer dump replaces the older
		return &p.a.Held[i]
	}
	if len(p.a.Held) >= MaxHolders {
		return nil
	}
	p.a.Held = append(p.a.Held, HeldLocks{Comm: comm, PID: pid})
	p.held[pid] = len(p.a.Held) - 1
	return &p.a.Held[len(p.a.Held)-1]
}

// finish closes every open block at the end of the input.
func (p *parser) finish() {
	for _, st := range p.streams {
		p.close(st)
	}
	for _, r := range p.order {
		if r.Truncated {
			p.a.TruncatedStack++
		}
	}
}
