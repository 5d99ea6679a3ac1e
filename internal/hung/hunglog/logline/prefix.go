package logline

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// prefixed is one physical line with its transport prefix taken off.
type prefixed struct {
	text   string // the kernel's own text, kernel indentation kept
	stamp  string // the timestamp as the file wrote it, "" when none
	caller string // printk caller id ("T44", "C2"), "" when not printed
	host   string // syslog/journal host, "" when none
	// has says a prefix was found: in a log whose records carry prefixes, a
	// line without one is the wrapped tail of the line before.
	has bool
	// drop marks a journal line from a user-space program: not the kernel's.
	drop bool
}

// splitPrefix removes whatever the tool that saved the log put in front of
// the kernel's text. It looks at each line on its own because saved logs
// are often several captures pasted together (a dmesg -T, then a
// journalctl excerpt), and a per-file guess would misread the second half.
//
// Recognised, possibly stacked, after any indentation:
//
//	6,1234,5678901,-;text                     /dev/kmsg (caller=T12 field too)
//	<6>text                                   syslog priority
//	kern  :info  : text                       dmesg -x
//	Nov 22 02:28:46 host kernel: text         journalctl -k, syslog files
//	Sep 13 14:34:10 host user.err kernel: …   syslog with facility.level
//	May 17 18:48:11 kernel: text              syslog without a host name
//	Dez 21 10:22:08 host kernel: text         month names of any locale
//	2026-11-22T02:28:46+0000 host kernel: text  journalctl -o short-iso, dmesg --time-format iso
//	2022-08-15T16:27:12.190032Z ERR kernel: …  ISO stamp and level, no host
//	[  183.865554] text, [Sun Nov 22 02:28:46 2026] text, [Nov22 02:28] text, [  +0.000012] text
//	[  183.865554][   T44] text              CONFIG_PRINTK_CALLER
//	Sun Feb 18 18:17:58 2018] text            a dmesg -T stamp that lost its "["
func splitPrefix(raw string) prefixed {
	s := strings.TrimRight(raw, "\r\n")
	t := strings.TrimLeft(s, " ")
	var l prefixed
	if rest, stamp, caller, ok := cutKmsg(t); ok {
		t, l.stamp, l.caller, l.has = rest, stamp, caller, true
	}
	if len(t) > 2 && t[0] == '<' {
		if end := strings.IndexByte(t, '>'); end > 1 && end <= 4 && allDigits(t[1:end]) {
			t, l.has = t[end+1:], true
		}
	}
	if r, ok := cutDmesgFacility(t); ok {
		t, l.has = r, true
	}
	if rest, stamp, host, drop, ok := cutJournal(t); ok {
		if drop {
			return prefixed{drop: true, has: true, stamp: stamp, host: host}
		}
		t, l.stamp, l.host, l.has = rest, stamp, host, true
		if t == "" {
			return l
		}
	}
	if rest, stamp, ok := cutBracketStamp(t); ok {
		// dmesg separates its stamp from the text with one space; the
		// kernel's own indentation (" __schedule+0x…") follows it and is
		// kept.
		t = strings.TrimPrefix(rest, " ")
		if l.stamp == "" {
			l.stamp = stamp
		}
		l.has = true
		// journalctl -o short-monotonic: "[  183.86] host kernel: text".
		if r, host, ok := cutHostKernel(t); ok {
			t, l.host = r, host
		}
		// Two consoles interleaved may leave a second stamp behind.
		if r, _, ok := cutBracketStamp(strings.TrimLeft(t, " ")); ok {
			t = strings.TrimPrefix(r, " ")
		}
	} else if rest, stamp, ok := cutBrokenCtime(t); ok {
		t, l.has = strings.TrimPrefix(rest, " "), true
		if l.stamp == "" {
			l.stamp = stamp
		}
	}
	if rest, caller, ok := cutCaller(t); ok {
		t, l.caller, l.has = strings.TrimPrefix(rest, " "), caller, true
	}
	if !l.has {
		t = s // no prefix: keep the line as it was, indentation included
	}
	l.text = t
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
func cutDmesgFacility(s string) (string, bool) {
	fac, rest, ok := strings.Cut(s, ":")
	if !ok || len(fac) > 10 || !isFacility(strings.TrimSpace(fac)) {
		return s, false
	}
	lvl, rest, ok := strings.Cut(rest, ":")
	if !ok || len(lvl) > 8 || !isLevel(strings.TrimSpace(lvl)) {
		return s, false
	}
	return strings.TrimPrefix(rest, " "), true
}

func isFacility(s string) bool {
	switch s {
	case "kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron", "authpriv", "ftp",
		"local0", "local1", "local2", "local3", "local4", "local5", "local6", "local7":
		return true
	}
	return false
}

func isLevel(s string) bool {
	switch strings.ToLower(s) {
	case "emerg", "alert", "crit", "err", "error", "warn", "warning", "notice", "info", "debug":
		return true
	}
	return false
}

// cutJournal handles syslog and journal lines: a stamp, then up to two
// words (a host, a facility.level or a level) and "kernel:". ok with drop
// means a line of a user-space program.
func cutJournal(s string) (rest, stamp, host string, drop, ok bool) {
	n, monthly := syslogStampLen(s), true
	if n == 0 {
		n, monthly = isoStampLen(s), false
	}
	if n == 0 || n >= len(s) || s[n] != ' ' {
		return "", "", "", false, false
	}
	stamp, after := s[:n], strings.TrimLeft(s[n:], " ")
	words := after
	for i := 0; i < 3; i++ {
		w, tail, _ := strings.Cut(words, " ")
		if k, isKernel := strings.CutPrefix(w, "kernel:"); isKernel {
			// "kernel:" may be glued to the text ("kernel:[  12.3] …").
			text := k
			if text == "" {
				text = tail
			} else if tail != "" {
				text += " " + tail
			}
			return text, stamp, hostOf(after, i), false, true
		}
		if i == 2 || tail == "" {
			break
		}
		if i == 1 && !isSyslogTag(w) {
			break
		}
		words = strings.TrimLeft(tail, " ")
	}
	// Not the kernel's. A syslog file always names the program, so the line
	// is a user-space program's; an ISO stamp without one is dmesg
	// --time-format iso, whose text follows the stamp directly.
	if monthly {
		return "", stamp, "", true, true
	}
	if h, ident, found := strings.Cut(after, " "); found && h != "" && isJournalIdent(ident) {
		return "", stamp, h, true, true
	}
	return after, stamp, "", false, true
}

// hostOf returns the host word of a journal line whose "kernel:" was word
// i: none when "kernel:" came first, and never a facility or level word.
func hostOf(after string, i int) string {
	if i == 0 {
		return ""
	}
	w, _, _ := strings.Cut(after, " ")
	if isSyslogTag(w) || strings.ContainsAny(w, "[]:") {
		return ""
	}
	return w
}

// isSyslogTag reports "user.err", "kern.warning", "ERR", "INFO": the
// facility.level or level some syslog daemons write before the program.
func isSyslogTag(w string) bool {
	if fac, lvl, ok := strings.Cut(w, "."); ok {
		return isFacility(fac) && isLevel(lvl)
	}
	return isLevel(w) && strings.ToUpper(w) == w
}

// cutHostKernel strips "HOST kernel: " (journalctl -o short-monotonic).
func cutHostKernel(s string) (string, string, bool) {
	host, after, ok := strings.Cut(s, " ")
	if !ok || host == "" || strings.ContainsAny(host, "[]:") {
		return "", "", false
	}
	rest, ok := strings.CutPrefix(after, "kernel: ")
	if !ok {
		if after == "kernel:" {
			return "", host, true
		}
		return "", "", false
	}
	return rest, host, true
}

// isJournalIdent reports whether s starts like "sshd[123]: ".
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

// syslogStampLen matches "Nov 22 02:28:46" with optional ".123456". The
// month is any three or four letters, because journalctl and syslog write
// it in the machine's locale ("Dez", "Mär", "окт").
func syslogStampLen(s string) int {
	i, letters := 0, 0
	for i < len(s) && letters < 5 {
		r, size := utf8.DecodeRuneInString(s[i:])
		if !unicode.IsLetter(r) {
			break
		}
		i += size
		letters++
	}
	if letters < 3 || letters > 4 {
		return 0
	}
	if i < len(s) && s[i] == '.' {
		i++ // "janv." and friends
	}
	if i >= len(s) || s[i] != ' ' {
		return 0
	}
	i++
	if i < len(s) && s[i] == ' ' {
		i++ // "Nov  2"
	}
	d := i
	for i < len(s) && isDigit(s[i]) && i-d < 2 {
		i++
	}
	if i == d || i+9 > len(s) || s[i] != ' ' || !isClock(s[i+1:i+9]) {
		return 0
	}
	n := i + 9
	if n < len(s) && s[n] == '.' {
		n++
		for n < len(s) && isDigit(s[n]) {
			n++
		}
	}
	return n
}

// isoStampLen matches "2026-11-22T02:28:46" (or with a space for the "T")
// with optional fraction (".123" or ",123") and zone ("Z", "+0000",
// "+00:00").
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
// time: dmesg's seconds ("[  240.]" when cut short), -T's ctime, --reltime,
// -d deltas. Content that is not time-like ("[drm]", "[<ffffffff81…>]",
// "[do_exit (…") is left alone.
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

// cutBrokenCtime handles a dmesg -T stamp whose "[" was lost in pasting:
// "Sun Feb 18 18:17:58 2018] text".
func cutBrokenCtime(s string) (rest, stamp string, ok bool) {
	end := strings.IndexByte(s, ']')
	if end < 20 || end > 26 {
		return "", "", false
	}
	f := strings.Fields(s[:end])
	if len(f) != 5 || len(f[0]) != 3 || len(f[1]) != 3 || !isClock(f[3]) || len(f[4]) != 4 || !allDigits(f[4]) || !allDigits(f[2]) {
		return "", "", false
	}
	return s[end+1:], s[:end], true
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
