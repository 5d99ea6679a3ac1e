package hunglog

// Parsers for single lines of the kernel's formats, and the guards that
// keep untrusted text small and printable.

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/wolf-investigator/wolf/internal/kstack"
)

// taskFields is a parsed "task:" line.
type taskFields struct {
	comm, state, taskFlags string
	pid, tgid, ppid        int
}

func (tl taskFields) fill(rep *Report) {
	if rep.Comm == "" {
		rep.Comm = tl.comm
	}
	if rep.PID == 0 {
		rep.PID = tl.pid
	}
	rep.State, rep.TGID, rep.PPID, rep.TaskFlags = tl.state, tl.tgid, tl.ppid, tl.taskFlags
}

// parseTaskLine reads "task:%-15.15s state:%c … stack:N pid:N tgid:N
// ppid:N task_flags:0x… flags:0x…". The name is padded to 15 characters
// and may itself contain spaces, so the padded form is tried first.
func parseTaskLine(t string) (taskFields, bool) {
	var tl taskFields
	rest := strings.TrimPrefix(t, "task:")
	var after string
	if len(rest) >= 15+7 && rest[15:22] == " state:" {
		tl.comm, after = strings.TrimRight(rest[:15], " "), rest[22:]
	} else {
		i := strings.Index(rest, "state:")
		if i < 0 {
			return tl, false
		}
		tl.comm, after = strings.TrimSpace(rest[:i]), rest[i+len("state:"):]
	}
	tl.comm = sanitize(tl.comm)
	if after == "" {
		return tl, false
	}
	r, _ := utf8.DecodeRuneInString(after)
	tl.state = string(r)
	fields := strings.Fields(after)
	for i, f := range fields {
		k, v, ok := strings.Cut(f, ":")
		if !ok {
			continue
		}
		if v == "" && i+1 < len(fields) {
			v = fields[i+1] // 5.x pads values: "pid:  964"
		}
		switch k {
		case "pid":
			tl.pid = atoi(v)
		case "tgid":
			tl.tgid = atoi(v)
		case "ppid":
			tl.ppid = atoi(v)
		case "task_flags":
			tl.taskFlags = sanitize(v)
		}
	}
	return tl, true
}

// parseTaint splits "Tainted: G   O   6.6.39-cloudflare-2024.7.3 #1" into
// the taint and the release: the release is the word before "#N".
func parseTaint(t string) (taint, release string) {
	f := strings.Fields(t)
	rel := -1
	for i, w := range f {
		if strings.HasPrefix(w, "#") && i > 0 {
			rel = i - 1
			break
		}
	}
	if rel < 0 {
		rel = len(f) - 1
	}
	if rel <= 0 {
		return sanitize(strings.Join(f, " ")), ""
	}
	return sanitize(strings.Join(f[:rel], " ")), sanitize(f[rel])
}

// isFrame reports whether a line inside a Call Trace is a stack frame.
func isFrame(t string) bool {
	s := strings.TrimSpace(strings.TrimPrefix(t, "?"))
	if isHexAddr(s) {
		return true // "? 0xffffffffc11f0000": a frame with no symbol
	}
	name := kstack.FuncName(t)
	if name == "" {
		return false
	}
	switch {
	case strings.Contains(t, "+0x"):
		return true
	case strings.Contains(t, " ("):
		// decode_stacktrace.sh: "func (path/file.c:123 …)".
		_, loc, _ := strings.Cut(t, " (")
		return strings.Contains(loc, ".c:") || strings.Contains(loc, ".h:") ||
			strings.Contains(loc, ".S:") || strings.Contains(loc, ".rs:")
	}
	// A bare symbol on its own (decoded output without line info).
	return !strings.ContainsAny(strings.TrimLeft(t, "?[ "), " \t")
}

func isHexAddr(s string) bool {
	if !strings.HasPrefix(s, "0x") || len(s) < 3 || len(s) > 18 {
		return false
	}
	for i := 2; i < len(s); i++ {
		c := s[i] | 0x20
		if !isDigit(s[i]) && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// isRegisterLine reports register dump lines ("RIP: 0033:0x1ce792e",
// "RAX: ffffffffffffffda RBX: …", "Code: …", arm64 "pc : …") that sysrq
// prints at the end of a user task's trace.
func isRegisterLine(t string) bool {
	f, _, _ := strings.Cut(t, " ")
	if f == "pc" || f == "lr" || f == "sp" {
		return true
	}
	if !strings.HasSuffix(f, ":") || len(f) < 3 || len(f) > 5 {
		return false
	}
	for i := 0; i < len(f)-1; i++ {
		c := f[i]
		if !(c >= 'A' && c <= 'Z') && !isDigit(c) && c != 'x' {
			if f[:len(f)-1] != "Code" {
				return false
			}
		}
	}
	return true
}

// sanitize keeps untrusted names printable and short.
func sanitize(s string) string {
	if len(s) > maxNameBytes {
		s = s[:maxNameBytes]
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, s)
}

// atoi parses a small decimal; out-of-range or junk yields 0.
func atoi(s string) int {
	if len(s) > 10 {
		return 0
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0
	}
	return n
}
