package logline

import (
	"regexp"
	"strings"
)

// joiner puts wrapped pieces back together and splits records that a
// reflowing mailer joined. It holds one record back until the next physical
// line shows whether that line continues it.
type joiner struct {
	pend *record
	out  []Line
}

// record is a Line being built from one or more physical pieces.
type record struct {
	line Line
	// has says the record's first piece carried a prefix (a stamp, a
	// syslog header): in such a log an unprefixed piece is a wrapped tail.
	has bool
	// drop says the record is a user-space journal line: its tails are
	// dropped with it.
	drop bool
	// lastLen is the length of the last piece as it stood in the file
	// (prefix included): only a long line can have been wrapped.
	lastLen int
	// marks are where each piece starts in line.Text, for the line
	// number of a record split out of the middle.
	marks []mark
}

type mark struct{ off, num int }

// wrapMin is the shortest physical line a mailer or terminal wraps: text
// after a shorter line is a line of its own, unless its first word was too
// long to fit the line (wrapWidth, a little under the 72–80 columns mailers
// and terminals use).
const (
	wrapMin   = 40
	wrapWidth = 66
)

// wrapped reports whether a physical line of length prev was wrapped before
// the piece tail.
func wrapped(prev int, tail string) bool {
	if prev >= wrapMin {
		return true
	}
	w, _, _ := strings.Cut(strings.TrimLeft(tail, " "), " ")
	return prev+1+len(w) >= wrapWidth
}

var brokenOffset = regexp.MustCompile(`\+(?:0x?[0-9a-f]*)?$|/$`)

func (j *joiner) pop() (Line, bool) {
	if len(j.out) == 0 {
		return Line{}, false
	}
	l := j.out[0]
	j.out = j.out[1:]
	if len(j.out) == 0 {
		j.out = nil
	}
	return l, true
}

// flush emits the held record at the end of the input.
func (j *joiner) flush() bool {
	if j.pend == nil {
		return false
	}
	j.emit()
	return len(j.out) > 0
}

func (j *joiner) emit() {
	p := j.pend
	j.pend = nil
	if p == nil || p.drop {
		return
	}
	j.out = append(j.out, p.line)
}

// feed takes one logical physical line (quoted-printable already undone).
func (j *joiner) feed(raw string, num int, st *Stats) {
	s := untransport(raw)
	// A stamp the reflow split across two lines: "… message. [" then
	// "244.648105] task:…". Move the "[" down to the line it opens.
	if p := j.pend; p != nil && p.has && strings.HasSuffix(p.line.Text, " [") && startsStampTail(s) {
		p.line.Text = strings.TrimSuffix(p.line.Text, "[")
		p.line.Text = strings.TrimRight(p.line.Text, " ")
		s = "[" + strings.TrimLeft(s, " ")
	}
	pf := splitPrefix(s)
	if p := j.pend; pf.has && p != nil && p.has && !pf.drop && pf.stamp == p.line.Stamp && pf.caller == p.line.Caller &&
		incomplete(p.line.Text) && len(p.line.Text) < maxRecordBytes {
		// One printk split by a newline inside it (a task name with a
		// "\n"): the rest has the same stamp and caller.
		j.join(p, strings.TrimRight(pf.text, " "), num, st)
		p.lastLen = len(s)
		return
	}
	if pf.has || j.pend == nil {
		j.start(pf, s, num, st)
		return
	}
	p := j.pend
	t := strings.TrimRight(pf.text, " ")
	if strings.TrimSpace(t) == "" {
		// A blank line ends a record.
		j.emit()
		return
	}
	switch {
	case p.drop:
		if len(s) > 0 && p.lastLen >= wrapMin {
			p.lastLen = len(s)
			return // a user-space line's wrapped tail
		}
	case p.has && wrapped(p.lastLen, t) && len(p.line.Text) < maxRecordBytes && (!startsRecord(t) || incomplete(p.line.Text)):
		// A stamped log's unstamped line is the tail of a wrapped one,
		// unless it starts a record of its own (an unstamped frame after
		// a line whose stamp survived by accident).
		j.join(p, t, num, st)
		p.lastLen = len(s)
		j.splitEmbedded(st)
		return
	case !p.has && incomplete(p.line.Text) && !startsRecord(t) && len(p.line.Text) < maxRecordBytes:
		// An unstamped log: join only a tail the kernel's message
		// formats say is missing.
		j.join(p, t, num, st)
		p.lastLen = len(s)
		return
	}
	j.start(pf, s, num, st)
}

// start emits the held record and holds a new one.
func (j *joiner) start(pf prefixed, s string, num int, st *Stats) {
	j.emit()
	text := strings.TrimRight(pf.text, " ")
	j.pend = &record{
		line:    Line{Text: text, Stamp: pf.stamp, Caller: pf.caller, Host: pf.host, Num: num},
		has:     pf.has,
		drop:    pf.drop,
		lastLen: len(s),
		marks:   []mark{{0, num}},
	}
	if pf.has {
		j.splitEmbedded(st)
	}
}

// join appends a wrapped tail to the held record. A mailer wraps at a
// space, which it may or may not keep; a terminal or quoted-printable
// breaks mid-word. The tail is glued without a space when the break falls
// inside a frame's parenthesis ("(balance_dirty_pages_ratel" + "imited+0x…)")
// or right after a "/" or before one ("+0xac8" + "/0xc5c)").
func (j *joiner) join(p *record, tail string, num int, st *Stats) {
	st.Joined++
	head := p.line.Text
	sep := " "
	switch {
	case head == "" || strings.HasSuffix(head, " ") || strings.HasPrefix(tail, " "):
		// The space survived the wrap (or there is nothing to separate).
		if strings.HasSuffix(head, " ") {
			sep = ""
		}
	case unclosedParen(head) && !strings.HasPrefix(tail, "("):
		sep = ""
	case brokenOffset.MatchString(head) || strings.HasPrefix(tail, "/0x"):
		// "+0xac8" + "/0xc5c)", "+0" + "x9c/0xb4)": an offset broken.
		sep = ""
	}
	p.marks = append(p.marks, mark{len(head) + len(sep), num})
	p.line.Text = head + sep + strings.TrimLeft(tail, " ")
}

// embeddedStamp finds a dmesg stamp in the middle of a record: where a
// reflowing mailer joined several records into one line.
var embeddedStamp = regexp.MustCompile(` \[ *\d{1,8}\.\d{1,9}\](?:\[ *[TC]\d+\])?`)

// splitEmbedded cuts the held record at stamps inside it, emitting the
// parts before the last and keeping the last held (it may wrap further).
// The stamps are found in one pass: a pasted line can hold thousands.
func (j *joiner) splitEmbedded(st *Stats) {
	p := j.pend
	if p == nil || !p.has {
		return
	}
	locs := embeddedStamp.FindAllStringIndex(p.line.Text, maxSplits)
	if len(locs) == 0 || (len(locs) == 1 && locs[0][0] == 0) {
		return
	}
	text, host, lastLen, marks := p.line.Text, p.line.Host, p.lastLen, p.marks
	numAt := func(off int) int {
		num := marks[0].num
		for _, m := range marks {
			if m.off <= off {
				num = m.num
			}
		}
		return num
	}
	start := 0
	for _, loc := range locs {
		if loc[0] == 0 {
			continue
		}
		st.Split++
		p.line.Text = strings.TrimRight(text[start:loc[0]], " ")
		if start > 0 {
			pf := splitPrefix(p.line.Text)
			p.line.Text, p.line.Stamp, p.line.Caller = strings.TrimRight(pf.text, " "), pf.stamp, pf.caller
		}
		j.emit()
		p = &record{line: Line{Host: host, Num: numAt(loc[0])}, has: true, lastLen: lastLen}
		j.pend = p
		start = loc[0] + 1
	}
	pf := splitPrefix(text[start:])
	p.line.Text, p.line.Stamp, p.line.Caller = strings.TrimRight(pf.text, " "), pf.stamp, pf.caller
	p.marks = []mark{{0, p.line.Num}}
}

// maxSplits bounds the records one line is split into.
const maxSplits = 256

// startsStampTail reports a line that begins with the second half of a
// split dmesg stamp: "244.648105] …".
func startsStampTail(s string) bool {
	t := strings.TrimLeft(s, " ")
	end := strings.IndexByte(t, ']')
	if end < 3 || end > 18 {
		return false
	}
	whole, frac, ok := strings.Cut(t[:end], ".")
	return ok && allDigits(whole) && allDigits(frac)
}

// unclosedParen reports text whose last "(" is not closed: a frame such as
// "(schedule_timeout+0x164/0x1ac" or "(balance_dirty_pages_ratel" that a
// terminal broke.
func unclosedParen(s string) bool {
	open := strings.LastIndexByte(s, '(')
	return open >= 0 && strings.IndexByte(s[open:], ')') < 0 && !strings.Contains(s[open:], " ")
}

// The kernel messages whose wrapped tails an unstamped log is known to
// lose: wolf joins the next line to them, and to nothing else.
var (
	hungHead      = regexp.MustCompile(`INFO: task .*:\d+ blocked for more than \d+ seconds`)
	blockerHead   = regexp.MustCompile(`task .*:\d+ (?:<(?:reader|writer)> )?(?:is )?blocked on an? (?:mutex|semaphore|rw-semaphore)`)
	blockerDone   = regexp.MustCompile(`(?:owned|held) by task .*:\d+|owner is not found|holder is not found`)
	lockdepEntry  = regexp.MustCompile(`^\s*#\d+: `)
	lockdepDone   = regexp.MustCompile(`, at: \S`)
	armFrameStart = regexp.MustCompile(`^\s*(?:\[<[0-9a-f]+>\] )?\([A-Za-z_.$][\w.$]*(?: \[\w+\])?\) from`)
	taskLineHead  = regexp.MustCompile(`^\s*task:.* state:`)
)

// incomplete reports whether an unstamped line is a kernel message whose
// end is missing, so the next physical line is its wrapped tail.
func incomplete(s string) bool {
	t := strings.TrimSpace(s)
	switch {
	case strings.Contains(t, "INFO: task ") && !strings.Contains(t, "blocked on") && !hungHead.MatchString(t):
		// "INFO: task X:1 blocked for more than", or a name with a newline.
		return true
	case blockerHead.MatchString(t) && !blockerDone.MatchString(t):
		return true
	case lockdepEntry.MatchString(t) && !lockdepDone.MatchString(t):
		return true
	case armFrameStart.MatchString(t) && (strings.HasSuffix(t, " from") || strings.HasSuffix(t, ">]") || unclosedParen(t)):
		return true
	case taskLineHead.MatchString(t) && !strings.Contains(t, "pid:"):
		return true
	case strings.HasPrefix(t, "task:") && !strings.Contains(t, " state:"):
		return true
	}
	return false
}

// startsRecord reports text that begins a record of its own, which is
// never glued to the line before.
func startsRecord(t string) bool {
	t = strings.TrimLeft(t, " ")
	for _, p := range []string{"[<", "INFO:", "Call Trace", "Call trace", "task:", "<TASK>", "Workqueue:", "RIP:", "Code:", "Showing all locks"} {
		if strings.HasPrefix(t, p) {
			return true
		}
	}
	return lockdepEntry.MatchString(t)
}
