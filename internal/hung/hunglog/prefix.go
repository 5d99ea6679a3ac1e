package hunglog

import "strings"

// line is one kernel log line with its transport prefix taken off.
type line struct {
	text   string // the kernel's own text, kernel indentation kept
	stamp  string // the timestamp as the file wrote it, "" when none
	caller string // printk caller id ("T44", "C2"), "" when not printed
}

// splitPrefix removes whatever the tool that saved the log put in front of
// the kernel's text. It looks at each line on its own because saved logs
// are often several captures pasted together (a dmesg -T, then a
// journalctl excerpt), and a per-file guess would misread the second half.
//
// Recognised, possibly stacked:
//
//	6,1234,5678901,-;text                     /dev/kmsg (caller=T12 field too)
//	<6>text                                   syslog priority
//	kern  :info  : text                       dmesg -x
//	Nov 22 02:28:46 host kernel: text         journalctl -k, syslog files
//	2026-11-22T02:28:46+0000 host kernel: text  journalctl -o short-iso / dmesg --time-format iso
//	[  183.865554] text, [Sun Nov 22 02:28:46 2026] text, [Nov22 02:28] text, [  +0.000012] text
//	[  183.865554][   T44] text              CONFIG_PRINTK_CALLER
func splitPrefix(raw string) line {
	s := strings.TrimRight(raw, "\r\n")
	var l line
	if rest, stamp, caller, ok := cutKmsg(s); ok {
		s, l.stamp, l.caller = rest, stamp, caller
	}
	if len(s) > 2 && s[0] == '<' {
		if end := strings.IndexByte(s, '>'); end > 1 && end <= 4 && allDigits(s[1:end]) {
			s = s[end+1:]
		}
	}
	s = cutDmesgFacility(s)
	if rest, stamp, ok := cutJournal(s); ok {
		if rest == "" {
			return line{} // a user-space message in a full journal: not ours
		}
		s, l.stamp = rest, stamp
	}
	if rest, stamp, ok := cutBracketStamp(s); ok {
		// dmesg separates its stamp from the text with one space; the
		// kernel's own indentation (" __schedule+0x…") follows it and is
		// kept.
		s = strings.TrimPrefix(rest, " ")
		if l.stamp == "" {
			l.stamp = stamp
		}
		// journalctl -o short-monotonic: "[  183.86] host kernel: text".
		if r, ok := cutHostKernel(s); ok {
			s = r
		}
	}
	if rest, caller, ok := cutCaller(s); ok {
		s, l.caller = strings.TrimPrefix(rest, " "), caller
	}
	l.text = s
	return l
}

// cutKmsg handles /dev/kmsg records: "level,seq,usec,flags[,more];text".
func cutKmsg(s string) (rest, stamp, caller string, ok bool) {
	semi := strings.IndexByte(s, ';')
	if semi < 5 || semi > 96 {
		return "", "", "", false
	}
	fields := strings.Split(s[:semi], ",")
	if len(fields) < 4 || !allDigits(fields[0]) || !allDigits(fields[1]) || !allDigits(fields[2]) {
		return "", "", "", false
	}
	for _, f := range fields[4:] {
		if c, found := strings.CutPrefix(f, "caller="); found {
			caller = c
		}
	}
	return s[semi+1:], fields[2], caller, true
}

// cutDmesgFacility handles dmesg -x: "kern  :info  : text".
func cutDmesgFacility(s string) string {
	fac, rest, ok := strings.Cut(s, ":")
	if !ok || len(fac) > 10 {
		return s
	}
	switch strings.TrimSpace(fac) {
	case "kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news":
	default:
		return s
	}
	lvl, rest, ok := strings.Cut(rest, ":")
	if !ok || len(lvl) > 8 {
		return s
	}
	switch strings.TrimSpace(lvl) {
	case "emerg", "alert", "crit", "err", "warn", "notice", "info", "debug":
		return strings.TrimPrefix(rest, " ")
	}
	return s
}

// cutJournal handles journalctl and syslog lines. ok with rest == "" means
// the line is a journal line from a source other than the kernel.
func cutJournal(s string) (rest, stamp string, ok bool) {
	n := syslogStampLen(s)
	if n == 0 {
		n = isoStampLen(s)
	}
	if n == 0 {
		return "", "", false
	}
	stamp, after := s[:n], s[n:]
	if !strings.HasPrefix(after, " ") {
		return "", "", false
	}
	after = after[1:]
	if r, ok := cutHostKernel(after); ok {
		return r, stamp, true
	}
	// dmesg --time-format iso has no host: the text follows the stamp. A
	// journal line from a user-space source ("host sshd[12]: …") is
	// dropped rather than fed to the report parser.
	if host, ident, found := strings.Cut(after, " "); found && host != "" && isJournalIdent(ident) {
		return "", stamp, true
	}
	return after, stamp, true
}

// cutHostKernel strips "HOST kernel: " (journal and syslog).
func cutHostKernel(s string) (string, bool) {
	host, after, ok := strings.Cut(s, " ")
	if !ok || host == "" || strings.ContainsAny(host, "[]:") {
		return "", false
	}
	rest, ok := strings.CutPrefix(after, "kernel: ")
	if !ok {
		if after == "kernel:" {
			return "", true
		}
		return "", false
	}
	return rest, true
}

// isJournalIdent reports whether s starts like "sshd[123]: " or "systemd: ".
func isJournalIdent(s string) bool {
	word, _, ok := strings.Cut(s, ": ")
	if !ok || word == "" || len(word) > 64 || strings.ContainsAny(word, " ") {
		return false
	}
	if i := strings.IndexByte(word, '['); i > 0 {
		return strings.HasSuffix(word, "]") && allDigits(word[i+1:len(word)-1])
	}
	return false
}

// syslogStampLen matches "Nov 22 02:28:46" with optional ".123456".
func syslogStampLen(s string) int {
	if len(s) < 15 || !isMonth(s[:3]) || s[3] != ' ' {
		return 0
	}
	day := s[4:6]
	if !(isDigit(day[1]) && (isDigit(day[0]) || day[0] == ' ')) || s[6] != ' ' || !isClock(s[7:15]) {
		return 0
	}
	n := 15
	if n < len(s) && s[n] == '.' {
		n++
		for n < len(s) && isDigit(s[n]) {
			n++
		}
	}
	return n
}

// isoStampLen matches "2026-11-22T02:28:46" with optional fraction
// (".123" or ",123") and zone ("Z", "+0000", "+00:00").
func isoStampLen(s string) int {
	if len(s) < 19 || !allDigits(s[:4]) || s[4] != '-' || !allDigits(s[5:7]) || s[7] != '-' ||
		!allDigits(s[8:10]) || (s[10] != 'T' && s[10] != ' ') || !isClock(s[11:19]) {
		return 0
	}
	n := 19
	if n < len(s) && (s[n] == '.' || s[n] == ',') {
		n++
		for n < len(s) && isDigit(s[n]) {
			n++
		}
	}
	if n < len(s) && s[n] == 'Z' {
		return n + 1
	}
	if n < len(s) && (s[n] == '+' || s[n] == '-') {
		m := n + 1
		for m < len(s) && m-n <= 5 && (isDigit(s[m]) || s[m] == ':') {
			m++
		}
		if m-n >= 3 {
			n = m
		}
	}
	return n
}

// cutBracketStamp handles a leading "[stamp]" whose content looks like a
// time: dmesg's seconds, -T's ctime, --reltime, -d deltas. Content that is
// not time-like ("[drm]", "[<ffffffff81…>]", "[do_exit (…") is left alone.
func cutBracketStamp(s string) (rest, stamp string, ok bool) {
	if !strings.HasPrefix(s, "[") {
		return "", "", false
	}
	end := strings.IndexByte(s, ']')
	if end < 2 || end > 40 {
		return "", "", false
	}
	body := s[1:end]
	digit, sep := false, false
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case isDigit(c):
			digit = true
		case c == '.' || c == ':':
			sep = true
		case c == ' ' || c == '+' || c == ',' || c == '-' || (c|0x20 >= 'a' && c|0x20 <= 'z'):
		default:
			return "", "", false
		}
	}
	if !digit || !sep {
		return "", "", false
	}
	return s[end+1:], strings.TrimSpace(body), true
}

// cutCaller handles CONFIG_PRINTK_CALLER's "[   T44]" / "[    C2]".
func cutCaller(s string) (rest, caller string, ok bool) {
	t := strings.TrimLeft(s, " ")
	if !strings.HasPrefix(t, "[") {
		return "", "", false
	}
	end := strings.IndexByte(t, ']')
	if end < 3 || end > 16 {
		return "", "", false
	}
	body := strings.TrimSpace(t[1:end])
	if len(body) < 2 || (body[0] != 'T' && body[0] != 'C') || !allDigits(body[1:]) {
		return "", "", false
	}
	return t[end+1:], body, true
}

func isMonth(s string) bool {
	switch s {
	case "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec":
		return true
	}
	return false
}

func isClock(s string) bool {
	return len(s) == 8 && isDigit(s[0]) && isDigit(s[1]) && s[2] == ':' && isDigit(s[3]) &&
		isDigit(s[4]) && s[5] == ':' && isDigit(s[6]) && isDigit(s[7])
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
