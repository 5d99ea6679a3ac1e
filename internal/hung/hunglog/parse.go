package hunglog

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/wolf-investigator/wolf/internal/hung/hunglog/logline"
	"github.com/wolf-investigator/wolf/internal/kstack"
)

// The kernel's own message formats (kernel/hung_task.c, sched_show_task,
// lockdep). Task names may contain spaces and colons, so the pid is taken
// after the last colon that precedes the fixed text.
var (
	hungRe = regexp.MustCompile(`^INFO: task (.+):(\d+) blocked for more than (\d+)(?: seconds)?`)
	// The blocker lines of 6.15+; "INFO: " may be lost when a log is cut.
	blockerRe  = regexp.MustCompile(`^(?:INFO: )?task (.+):(\d+)(?: <(reader|writer)>)? (?:is )?blocked on an? (mutex|semaphore|rw-semaphore),? (?:likely )?(?:owned|last held) by task (.+):(\d+)(?: <(reader|writer)>)?`)
	notFoundRe = regexp.MustCompile(`^(?:INFO: )?task (.+):(\d+)(?: <(?:reader|writer)>)? (?:is )?blocked on an? (mutex|semaphore|rw-semaphore), but the (?:owner|last holder) is not found`)
	holderRe   = regexp.MustCompile(`^(\d+) locks? held by (.+)/(\d+):$`)
	heldLockRe = regexp.MustCompile(`^#(\d+): +(?:([0-9a-f]{6,16}) +)?\((.+)\)\{[^}]*\}(?:-\{[^}]*\})?, at: (.+)$`)
	// The header of the old task dump (sysrq-w, show_state before 4.14
	// and some vendor kernels' hung-task reports).
	oldDumpRe = regexp.MustCompile(`^task +PC +stack +pid +father$`)
	sameAsRe  = regexp.MustCompile(`^<Same stack as pid (\d+)>$`)
	linuxVer  = regexp.MustCompile(`^Linux version (\S+)`)
)

// role says what a block of task lines being collected is for.
type role int

const (
	roleVictim    role = iota // a khungtaskd report
	roleSysrq                 // a D task in a blocked-task dump
	roleOwnerDump             // the owner's dump after a blocker line
	roleOther                 // a task in another state, kept for offender search
	roleDiscard               // a trace that belongs to no task (a WARN, an oops)
)

// collector gathers the lines of one task block: header, then trace.
type collector struct {
	role        role
	rep         *Report
	blocker     *Blocker // roleOwnerDump: where the stack goes
	sawTask     bool     // the task line was seen
	inTrace     bool
	sawMarker   bool // "<TASK>" seen: a "</TASK>" must close the trace
	closed      bool
	strayLines  int // unrelated lines since the last useful one
	frameCapHit bool
	arm         bool   // ARM "(f) from (g+0x…)" frames: the first line gives two
	sameAs      int    // "<Same stack as pid N>": the stack is N's
	lastFrame   string // the previous frame, for ARM's repeated "from"
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
	dump         bool       // inside a task dump: old-format task lines start tasks
}

type parser struct {
	a       *Analysis
	lines   int // line number of the record being parsed
	streams map[string]*stream
	byKey   map[string]*Report
	order   []*Report
	byPID   map[int]*Report // latest report per pid, for blocker lines
	held    map[int]int     // pid -> index in a.Held
	others  []*Report       // roleOther tasks with stacks
	stored  int             // bytes of frames and lock entries kept
	stacks  map[int][]string
	sameAs  map[*Report]int // reports whose stack is another pid's
	events  eventLog
	kernels map[string]int // kernel releases seen outside reports, for the header
}

func newParser() *parser {
	return &parser{
		a:       &Analysis{},
		streams: map[string]*stream{},
		byKey:   map[string]*Report{},
		byPID:   map[int]*Report{},
		held:    map[int]int{},
		stacks:  map[int][]string{},
		sameAs:  map[*Report]int{},
		kernels: map[string]int{},
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

// feed parses one kernel record.
func (p *parser) feed(l logline.Line) {
	text := l.Text
	if len(text) > maxTextBytes {
		text = text[:maxTextBytes]
	}
	p.lines = l.Num
	t := strings.TrimSpace(text)
	if t == "" {
		return
	}
	if l.Host != "" && p.a.Host == "" {
		p.a.Host = sanitize(l.Host)
	}
	st := p.stream(l.Caller)
	p.events.observe(t, l.Stamp, l.Num)

	switch {
	case strings.HasPrefix(t, "INFO: task ") || strings.HasPrefix(t, "task ") && strings.Contains(t, " blocked on "):
		if p.infoLine(st, t, l.Stamp) {
			return
		}
	case strings.HasPrefix(t, "task:"):
		p.taskLine(st, t, l.Stamp)
		return
	case t == "Showing all locks held in the system:":
		p.close(st)
		st.holder, st.dump = nil, false
		return
	case oldDumpRe.MatchString(t):
		p.close(st)
		st.holder, st.dump = nil, true
		return
	}
	if m := holderRe.FindStringSubmatch(t); m != nil {
		p.close(st)
		st.dump = false
		st.holder = p.holder(sanitize(m[2]), atoi(m[3]), atoi(m[1]))
		return
	}
	if st.holder != nil {
		if m := heldLockRe.FindStringSubmatch(t); m != nil {
			hl := HeldLock{Addr: m[2], Name: sanitize(m[3]), At: sanitize(kstack.FuncName(m[4]))}
			if len(st.holder.Locks) < MaxLocksPerTask && p.spend(len(hl.Addr)+len(hl.Name)+len(hl.At)) {
				st.holder.Locks = append(st.holder.Locks, hl)
			}
			return
		}
	}
	if p.counters(t) {
		return
	}
	p.noteKernel(t)
	c := st.cur
	if (c == nil || c.closed) && st.dump {
		if p.oldTaskLine(st, t, l.Stamp) {
			return
		}
	}
	if c == nil || c.closed {
		if isTraceStart(t) {
			// A trace with no task header: a WARN, an oops. Swallow its
			// frames so that they are not taken for anyone's.
			st.cur = &collector{role: roleDiscard, inTrace: true}
		}
		return
	}
	p.blockLine(st, c, t, l.Stamp)
}

// noteKernel remembers kernel releases printed outside reports (the boot
// banner, a WARN's "CPU: 0 PID: 1 Comm: x Not tainted 6.6.92 #1"), for
// logs whose reports do not say.
func (p *parser) noteKernel(t string) {
	if len(p.kernels) > 16 {
		return
	}
	if m := linuxVer.FindStringSubmatch(t); m != nil {
		p.kernels[sanitize(m[1])] += 4 // the banner is the surest
		return
	}
	if i := strings.Index(t, "Not tainted "); i >= 0 && strings.Contains(t, "PID:") {
		if _, rel := parseTaint(t[i:]); rel != "" {
			p.kernels[rel]++
		}
	} else if i := strings.Index(t, " Tainted: "); i >= 0 && strings.Contains(t, "PID:") {
		if _, rel := parseTaint(t[i+1:]); rel != "" {
			p.kernels[rel]++
		}
	}
}

// counters notes lines that only feed Analysis counters.
func (p *parser) counters(t string) bool {
	switch {
	case strings.Contains(t, "Show Blocked State") || strings.HasSuffix(t, "Show State"):
		p.a.SysrqDumps++
		for _, st := range p.streams {
			p.close(st)
			st.dump = true
		}
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

// infoLine handles the hung-task header and the blocker lines; false when
// the line is neither.
func (p *parser) infoLine(st *stream, t, stamp string) bool {
	if m := hungRe.FindStringSubmatch(t); m != nil {
		p.close(st)
		st.pendingOwner, st.holder, st.dump = nil, nil, false
		rep := &Report{
			Comm: sanitize(m[1]), PID: atoi(m[2]), BlockedS: atoi(m[3]), State: "D",
			Source: "hung-task", FirstLine: p.lines, Stamp: stamp, LastStamp: stamp, Reports: 1,
		}
		st.cur = &collector{role: roleVictim, rep: rep}
		return true
	}
	var b *Blocker
	var victimPID int
	var victimComm string
	if m := blockerRe.FindStringSubmatch(t); m != nil {
		victimPID, victimComm = atoi(m[2]), sanitize(m[1])
		b = &Blocker{As: m[3], Lock: m[4], OwnerComm: sanitize(m[5]), OwnerPID: atoi(m[6]), OwnerAs: m[7]}
	} else if m := notFoundRe.FindStringSubmatch(t); m != nil {
		victimPID, victimComm = atoi(m[2]), sanitize(m[1])
		b = &Blocker{Lock: m[3], NotFound: true}
	} else {
		return false // another "INFO: task …" we do not know; not ours to guess
	}
	// The blocker line follows the victim's dump: that dump is over.
	p.close(st)
	rep := p.byPID[victimPID]
	if rep == nil && victimPID > 0 {
		// The report itself is not in the log (cut before it): the
		// blocker line alone says the task is blocked.
		rep = &Report{Comm: victimComm, PID: victimPID, State: "D", Source: "blocker line",
			FirstLine: p.lines, Stamp: stamp, LastStamp: stamp, Reports: 1}
		p.file(rep)
		rep = p.byPID[victimPID]
	}
	if rep != nil {
		rep.Blocker = b
	}
	st.pendingOwner, st.pendingPID = nil, 0
	if !b.NotFound {
		st.pendingOwner, st.pendingPID = b, b.OwnerPID
	}
	return true
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
		b.OwnerTGID = tl.tgid
		st.cur = &collector{role: roleOwnerDump, blocker: b, sawTask: true}
		st.pendingOwner = nil
		return
	}
	st.pendingOwner = nil
	p.startDumpTask(st, tl, stamp)
}

// oldTaskLine handles a task of an old-format dump ("comm  D  0  377  1
// 0x…"); false when the line is not one.
func (p *parser) oldTaskLine(st *stream, t, stamp string) bool {
	tl, ok := parseOldTaskLine(t)
	if !ok {
		return false
	}
	p.close(st)
	p.startDumpTask(st, tl, stamp)
	return true
}

func (p *parser) startDumpTask(st *stream, tl taskFields, stamp string) {
	rep := &Report{Source: "sysrq", FirstLine: p.lines, Stamp: stamp, LastStamp: stamp, Reports: 1}
	tl.fill(rep)
	r := roleSysrq
	if tl.state != "D" {
		r = roleOther
	}
	st.cur = &collector{role: r, rep: rep, sawTask: true}
}

// blockLine handles a line inside an open task block.
func (p *parser) blockLine(st *stream, c *collector, t, stamp string) {
	switch {
	case isTraceStart(t):
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
	if m := sameAsRe.FindStringSubmatch(t); m != nil && c.rep != nil {
		c.sameAs = atoi(m[1])
		p.close(st)
		return
	}
	if !c.inTrace && c.rep != nil {
		if p.headerLine(st, c, t, stamp) {
			c.strayLines = 0
			return
		}
	}
	if isNoise(t) {
		return
	}
	if frames := parseFrame(t, c); frames != nil && (c.inTrace || c.sawTask) {
		// Old kernels print frames without a "Call Trace:" line.
		c.inTrace, c.strayLines = true, 0
		for _, f := range frames {
			p.addFrame(c, f)
		}
		return
	}
	if st.dump && c.role != roleVictim {
		if tl, ok := parseOldTaskLine(t); ok {
			p.close(st)
			p.startDumpTask(st, tl, stamp)
			return
		}
	}
	c.strayLines++
	if c.strayLines > maxStray {
		p.close(st)
	}
}

// headerLine takes the lines between "INFO: task" and the trace.
func (p *parser) headerLine(st *stream, c *collector, t, stamp string) bool {
	rep := c.rep
	switch {
	case strings.HasPrefix(t, "Tainted:") || strings.HasPrefix(t, "Not tainted"):
		taint, rel := parseTaint(t)
		if rep.Tainted == "" {
			rep.Tainted = taint
		}
		if rel != "" && rep.Kernel == "" {
			rep.Kernel = rel
			if p.a.Kernel == "" {
				p.a.Kernel = rel
			}
		}
	case t == "Blocked by coredump.":
		rep.Coredump = true
	case strings.HasPrefix(t, `"echo 0 > /proc/sys/kernel/hung_task_timeout_secs"`),
		strings.HasPrefix(t, `\"echo 0 > /proc/sys/kernel/hung_task_timeout_secs\"`):
	case strings.HasPrefix(t, "Workqueue: "):
		f := strings.Fields(strings.TrimPrefix(t, "Workqueue: "))
		if len(f) >= 1 {
			rep.Workqueue = sanitize(f[0])
		}
		if len(f) >= 2 {
			rep.WorkFunc = sanitize(kstack.FuncName(f[1]))
		}
	case strings.HasPrefix(t, "Stack :"), isStackWords(t):
		// MIPS and old x86 print raw stack words before the trace.
	default:
		if c.role == roleVictim && !c.sawTask {
			if tl, ok := parseOldTaskLine(t); ok && (tl.pid == 0 || tl.pid == rep.PID) {
				c.sawTask = true
				rep.State, rep.PPID = tl.state, tl.ppid
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
		if c.sameAs > 0 {
			p.sameAs[c.rep] = c.sameAs
		}
		if c.rep.PID > 0 && len(c.rep.Stack) > 0 && len(p.stacks) < MaxReports {
			p.stacks[c.rep.PID] = c.rep.Stack
		}
		p.file(c.rep)
	case roleOther:
		if c.rep.PID > 0 && len(c.rep.Stack) > 0 && len(p.stacks) < MaxReports {
			p.stacks[c.rep.PID] = c.rep.Stack
		}
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
	if !ok && rep.PID > 0 {
		// A comm mangled by wrapping or a cut still names the same pid.
		if o := p.byPID[rep.PID]; o != nil {
			old, ok = o, true
		}
	}
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
	if rep.Blocker != nil && old.Blocker == nil {
		old.Blocker = rep.Blocker
	}
	if n, ok := p.sameAs[rep]; ok {
		delete(p.sameAs, rep)
		if len(old.Stack) == 0 {
			p.sameAs[old] = n
		}
	}
	if rep.PID > 0 {
		p.byPID[rep.PID] = old
	}
}

// holder starts (or restarts) the lockdep entry of a task.
func (p *parser) holder(comm string, pid, count int) *HeldLocks {
	if i, ok := p.held[pid]; ok && p.a.Held[i].Comm == comm {
		p.a.Held[i].Locks = p.a.Held[i].Locks[:0] // a newer dump replaces the older
		p.a.Held[i].Count = count
		return &p.a.Held[i]
	}
	if len(p.a.Held) >= MaxHolders {
		return nil
	}
	p.a.Held = append(p.a.Held, HeldLocks{Comm: comm, PID: pid, Count: count})
	p.held[pid] = len(p.a.Held) - 1
	return &p.a.Held[len(p.a.Held)-1]
}

// finish closes every open block at the end of the input and resolves
// "<Same stack as pid N>".
func (p *parser) finish() {
	for _, st := range p.streams {
		p.close(st)
	}
	for rep, pid := range p.sameAs {
		if len(rep.Stack) == 0 {
			rep.Stack = p.stacks[pid]
		}
	}
	for _, r := range p.order {
		if r.Truncated {
			p.a.TruncatedStack++
		}
	}
	if p.a.Kernel == "" {
		best := 0
		for k, n := range p.kernels {
			if n > best || (n == best && k < p.a.Kernel) {
				p.a.Kernel, best = k, n
			}
		}
	}
	p.a.Events = p.events.list()
}
