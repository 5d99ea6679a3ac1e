package hunglog

// Parsers for single lines of the kernel's formats, and the guards that
// keep untrusted text small and printable.

import (
	"strconv"
	"strings"
	"unicode/utf8"
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
// the taint and the release: the release is the word before "#N", and only
// if it looks like one (a taint letter such as "E" left alone by a wrapped
// line is not a kernel).
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
	if rel <= 0 || !looksLikeRelease(f[rel]) {
		taintEnd := len(f)
		if rel > 0 && rel < len(f) && strings.HasPrefix(f[min(rel+1, len(f)-1)], "#") {
			taintEnd = rel + 1
		}
		return sanitize(strings.Join(f[:taintEnd], " ")), ""
	}
	return sanitize(strings.Join(f[:rel], " ")), sanitize(f[rel])
}

// looksLikeRelease reports a kernel release: "6.6.92", "4.4.223-rc2-…",
// "5.14.0-31.rt14.31.el9.x86_64", "7.0.0.-rc2-sdm845".
func looksLikeRelease(w string) bool {
	if len(w) < 3 || w[0] < '0' || w[0] > '9' {
		return false
	}
	dot := strings.IndexByte(w, '.')
	return dot > 0 && dot < 4
}

// parseOldTaskLine reads the task line of kernels before 4.14 and of old
// dumps, "%-15.15s %c" then numbers whose set changed over the years:
//
//	init            D ffff88008ad8f5b0     0  2293      1 0x00000000   (3.x–4.13 x86: pc, free stack, pid, ppid)
//	auditd          D    0   377      1 0x00000020                      (4.14+: stack, pid, ppid, flags)
//	syz-executor0   D23984 10244   4352 0x80000004                      (the stack glued to the state)
//	kinteractiveup  D 00000000     0    64      2 0x00100000            (MIPS)
//	nfsd          D ffff81023dc3fb88     0  3269      1          3270  3268 (L-TLB)   (2.6.18)
//
// The name is at most 15 characters and may contain spaces.
func parseOldTaskLine(t string) (taskFields, bool) {
	var tl taskFields
	// The state letter follows the padded name after one or more spaces;
	// try each candidate, leftmost first, as names may contain spaces.
	for i := 1; i < len(t) && i <= 17; i++ {
		if t[i-1] != ' ' || t[i] < 'A' || t[i] > 'Z' {
			continue
		}
		if i+1 < len(t) && t[i+1] != ' ' && !isDigit(t[i+1]) {
			continue
		}
		comm := strings.TrimRight(t[:i], " ")
		if comm == "" || len(comm) > 16 {
			continue
		}
		nums := strings.Fields(t[i+1:])
		var dec []int
		for j, w := range nums {
			if j == 0 && len(w) >= 8 && isHex(w) && !allDigits(w) {
				continue // the saved program counter
			}
			if j == 0 && len(w) == 8 && allDigits(w) && len(nums) >= 5 {
				continue // a 32-bit pc of digits only (MIPS "00000000")
			}
			if !allDigits(w) {
				break
			}
			dec = append(dec, atoi(w))
		}
		if len(dec) < 3 {
			continue
		}
		tl.comm, tl.state = sanitize(comm), t[i:i+1]
		tl.pid, tl.ppid = dec[1], dec[2]
		if tl.pid <= 0 {
			continue
		}
		return tl, true
	}
	return taskFields{}, false
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i] | 0x20
		if !isDigit(s[i]) && (c < 'a' || c > 'f') {
			return false
		}
	}
	return s != ""
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
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
