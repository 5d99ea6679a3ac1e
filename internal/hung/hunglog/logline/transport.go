package logline

import (
	"strings"
	"unicode/utf8"
)

// qpState undoes quoted-printable encoding that a mail archive left in
// place: "=" at the end of a line is a soft break (the line continues on the
// next one, nothing in between) and "=XX" is a byte. It switches on at the
// first soft break, because before that "=3D" may be a kernel's own text.
type qpState struct {
	active bool
	buf    strings.Builder
	num    int // physical line the held text started on
}

// qpMinLine is how long a line ending in "=" must be to count as a soft
// break before quoted-printable was seen: mailers break at 76 columns, and
// a short kernel line may well end in "=".
const qpMinLine = 60

func (q *qpState) feed(raw string, num int, st *Stats) (string, int, bool) {
	if soft := strings.HasSuffix(raw, "=") && !strings.HasSuffix(raw, "=="); soft && (q.active || len(raw) >= qpMinLine) {
		if !q.active {
			q.active = true
			st.QuotedPrintable = true
		}
		if q.buf.Len() == 0 {
			q.num = num
		}
		if q.buf.Len() < 2*maxRecordBytes {
			q.buf.WriteString(raw[:len(raw)-1])
		}
		return "", 0, false
	}
	start := num
	if q.buf.Len() > 0 {
		if q.buf.Len() < 2*maxRecordBytes {
			q.buf.WriteString(raw)
		}
		raw, start = q.buf.String(), q.num
		q.buf.Reset()
	}
	if q.active {
		raw = qpDecode(raw)
	} else if strings.Contains(raw, "=C2=A0") {
		// An encoded non-breaking space is never the kernel's own text.
		raw = strings.ReplaceAll(raw, "=C2=A0", "\u00a0")
	}
	return raw, start, true
}

func (q *qpState) flush() (string, int, bool) {
	if q.buf.Len() == 0 {
		return "", 0, false
	}
	s := qpDecode(q.buf.String())
	q.buf.Reset()
	return s, q.num, true
}

// qpDecode replaces "=XX" (two upper-case hex digits) by the byte.
func qpDecode(s string) string {
	if !strings.Contains(s, "=") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '=' && i+2 < len(s) && isUpperHex(s[i+1]) && isUpperHex(s[i+2]) {
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isUpperHex(c byte) bool { return isDigit(c) || (c >= 'A' && c <= 'F') }

func unhex(c byte) byte {
	if isDigit(c) {
		return c - '0'
	}
	return c - 'A' + 10
}

// untransport removes what pasting added around one physical line: mail
// quote markers, a terminal multiplexer's scroll marker, non-breaking and
// other unusual spaces, tabs and invalid UTF-8. It does not remove
// indentation: the kernel's own leading spaces carry meaning.
func untransport(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	s = unquote(s)
	if strings.ContainsAny(s, "\t\u00a0\u2007\u202f\u3000\u200b\ufeff") {
		s = strings.Map(func(r rune) rune {
			switch r {
			case '\t', '\u00a0', '\u2007', '\u202f', '\u3000':
				return ' '
			case '\u200b', '\ufeff':
				return -1
			}
			return r
		}, s)
	}
	return trimScrollMarker(s)
}

// unquote removes mail quoting: "> ", ">> ", "> > " at the start of a line
// (after a little indentation). No kernel record starts with ">".
func unquote(s string) string {
	i := 0
	for i < len(s) && i < 4 && s[i] == ' ' {
		i++
	}
	if i >= len(s) || s[i] != '>' {
		return s
	}
	for i < len(s) && (s[i] == '>' || (s[i] == ' ' && i+1 < len(s) && s[i+1] == '>')) {
		i++
	}
	if i < len(s) && s[i] == ' ' {
		i++ // the one space after the last marker belongs to the quoting
	}
	return s[i:]
}

// trimScrollMarker drops a trailing "[255/1885]", the position indicator
// screen and tmux print at the right edge, pasted along with the text.
func trimScrollMarker(s string) string {
	t := strings.TrimRight(s, " ")
	if !strings.HasSuffix(t, "]") {
		return s
	}
	open := strings.LastIndexByte(t, '[')
	if open < 1 {
		return s
	}
	body := t[open+1 : len(t)-1]
	num, den, ok := strings.Cut(body, "/")
	if !ok || !allDigits(num) || !allDigits(den) {
		return s
	}
	return strings.TrimRight(t[:open], " ")
}
