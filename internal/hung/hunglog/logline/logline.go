// Package logline turns a saved kernel log back into the kernel's own
// lines: it undoes what the log went through on its way to the reader.
//
// Kernel logs reach wolf pasted into mail, bug trackers and chat, saved by
// syslog daemons and journalctl, captured from serial consoles: each adds
// prefixes (timestamps, host names, facility.level, printk caller ids),
// quoting ("> "), indentation (markdown code blocks, non-breaking spaces),
// quoted-printable soft breaks, and wraps long lines at 72–80 columns or at
// a terminal's width. A reflowing mailer may even join several records into
// one paragraph. Reader removes all of that and returns one Line per kernel
// record, with the timestamp, caller and host it had and the number of the
// physical line it started on, so that evidence can point back into the
// file.
//
// Input is untrusted and may be endless: Reader stops at Limits (total
// bytes, a line without a newline, binary data at the start) and says why
// in Stats.Cut; every buffer it keeps is bounded.
package logline

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	"github.com/wolf-investigator/wolf/internal/human"
)

// Line is one kernel record.
type Line struct {
	// Text is the kernel's text with every transport prefix removed. The
	// kernel's own indentation after its timestamp is kept (" __schedule+…").
	Text string
	// Stamp is the timestamp as written ("183.865554", "Nov 22 02:28:46",
	// "+0.000049"), "" when the line had none.
	Stamp string
	// Caller is the printk caller id ("T44", "C2") when the log has them.
	Caller string
	// Host is the host name of a syslog or journal line, "" when none.
	Host string
	// Num is the 1-based number of the physical line the record starts on.
	Num int
}

// Limits bound what a Reader reads. The zero value means the defaults.
type Limits struct {
	// MaxBytes is the most input read; the rest is left unread.
	MaxBytes int64
	// MaxLineBytes is the most of one physical line kept; the rest of a
	// longer line is read and dropped (and counted in Stats.LongLines).
	MaxLineBytes int
	// MaxLineScan is the longest stretch without a newline read before the
	// input is declared not a text log and reading stops.
	MaxLineScan int64
}

// The defaults. A kernel record is at most about 1 KiB (printk's limit); a
// saved journal of a busy machine over days is a few hundred MiB.
const (
	DefaultMaxBytes     = 256 << 20
	DefaultMaxLineBytes = 64 << 10
	DefaultMaxLineScan  = 1 << 20
	// binaryProbe is how much of the start is checked for binary data.
	binaryProbe = 4 << 10
	// maxRecordBytes bounds a record built from wrapped pieces: no kernel
	// record is longer, so joining stops there.
	maxRecordBytes = 4 << 10
)

func (l Limits) withDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.MaxLineBytes <= 0 {
		l.MaxLineBytes = DefaultMaxLineBytes
	}
	if l.MaxLineScan <= 0 {
		l.MaxLineScan = DefaultMaxLineScan
	}
	if l.MaxLineScan < int64(l.MaxLineBytes) {
		l.MaxLineScan = int64(l.MaxLineBytes)
	}
	return l
}

// Stats says how much was read and what was undone.
type Stats struct {
	Lines     int   // physical lines read
	Bytes     int64 // bytes read
	Records   int   // lines returned
	LongLines int   // physical lines longer than MaxLineBytes (cut)
	Joined    int   // wrapped pieces joined back to their record
	Split     int   // records split out of a reflowed paragraph
	// QuotedPrintable is set when quoted-printable soft breaks were undone.
	QuotedPrintable bool
	// Cut says why reading stopped before the end of the input, "" when it
	// did not: the byte limit, a line without a newline, binary data.
	Cut string
	// Binary is set when the input was judged not to be text at its start.
	Binary bool
}

// Reader reads Lines from a saved kernel log.
type Reader struct {
	br    *bufio.Reader
	lim   Limits
	stats Stats
	err   error
	done  bool // no more physical lines
	// probe counts bytes and non-text bytes of the start of the input.
	probed, junk int
	qp           qpState
	j            joiner
}

// NewReader returns a Reader of r with the given limits.
func NewReader(r io.Reader, lim Limits) *Reader {
	lim = lim.withDefaults()
	return &Reader{br: bufio.NewReaderSize(r, lim.MaxLineBytes), lim: lim}
}

// Stats returns what was read so far.
func (r *Reader) Stats() Stats { return r.stats }

// Err returns the read error that ended the input, if any (not io.EOF, and
// not a limit: limits are reported in Stats.Cut).
func (r *Reader) Err() error { return r.err }

// Next returns the next record; false at the end of the input, after a
// limit was hit or a read failed (see Err).
func (r *Reader) Next() (Line, bool) {
	for {
		if l, ok := r.j.pop(); ok {
			r.stats.Records++
			return l, true
		}
		if r.done {
			if r.j.flush() {
				continue
			}
			return Line{}, false
		}
		raw, num, ok := r.nextLogical()
		if !ok {
			r.done = true
			continue
		}
		r.j.feed(raw, num, &r.stats)
	}
}

// nextLogical returns the next physical line with quoted-printable soft
// breaks joined and decoded.
func (r *Reader) nextLogical() (string, int, bool) {
	for {
		raw, ok := r.physical()
		if !ok {
			if s, num, ok := r.qp.flush(); ok {
				return s, num, true
			}
			return "", 0, false
		}
		if s, num, ok := r.qp.feed(raw, r.stats.Lines, &r.stats); ok {
			return s, num, true
		}
	}
}

// physical reads one physical line within the limits.
func (r *Reader) physical() (string, bool) {
	if r.done || r.err != nil || r.stats.Cut != "" {
		return "", false
	}
	if r.stats.Bytes >= r.lim.MaxBytes {
		if _, err := r.br.Peek(1); err != nil {
			return "", false // the input ends right at the limit
		}
		r.cut(fmt.Sprintf("larger than %s; the first %s were read", human.Bytes(r.lim.MaxBytes), human.Bytes(r.lim.MaxBytes)))
		return "", false
	}
	b, err := r.br.ReadSlice('\n')
	n := int64(len(b))
	if r.probed < binaryProbe {
		// Judge the start before reading on: /dev/zero has no newline.
		r.probe(b)
		if r.stats.Binary {
			r.stats.Bytes += n
			return "", false
		}
	}
	var line []byte
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		// A long line: keep the start, read the rest without keeping it,
		// and give up on input that never ends a line.
		line = append([]byte(nil), b...)
		for errors.Is(err, bufio.ErrBufferFull) {
			if n > r.lim.MaxLineScan {
				r.stats.Bytes += n
				r.cut(fmt.Sprintf("line %d runs for more than %s without a newline", r.stats.Lines+1, human.Bytes(r.lim.MaxLineScan)))
				return "", false
			}
			if r.stats.Bytes+n >= r.lim.MaxBytes {
				break
			}
			b, err = r.br.ReadSlice('\n')
			n += int64(len(b))
		}
		r.stats.LongLines++
		if errors.Is(err, bufio.ErrBufferFull) {
			err = nil // stopped by MaxBytes; reported on the next call
		}
	default:
		line = b
	}
	r.stats.Bytes += n
	if err != nil && !errors.Is(err, io.EOF) {
		r.err = fmt.Errorf("read line %d: %w", r.stats.Lines+1, err)
		return "", false
	}
	if len(line) == 0 && errors.Is(err, io.EOF) {
		return "", false
	}
	if errors.Is(err, io.EOF) {
		r.done = true
	}
	r.stats.Lines++
	return string(trimEOL(line)), true
}

// probe judges the start of the input: a NUL byte or mostly control bytes
// there mean the file is not a text log (a core file, /dev/zero, a
// compressed archive), and reading it to the end would be wasted.
func (r *Reader) probe(b []byte) {
	for _, c := range b {
		if r.probed >= binaryProbe {
			break
		}
		r.probed++
		if c == 0 {
			r.binary()
			return
		}
		if c < 0x20 && c != '\n' && c != '\r' && c != '\t' && c != '\f' && c != 0x1b {
			r.junk++
		}
	}
	if r.probed >= 512 && r.junk*4 > r.probed {
		r.binary()
	}
}

func (r *Reader) binary() {
	r.stats.Binary = true
	r.cut(fmt.Sprintf("binary data at the start (NUL or control bytes in the first %s)", human.Plural(r.probed, "byte", "bytes")))
}

func (r *Reader) cut(why string) {
	if r.stats.Cut == "" {
		r.stats.Cut = why
	}
	r.done = true
}

func trimEOL(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
	}
	if n := len(b); n > 0 && b[n-1] == '\r' {
		b = b[:n-1]
	}
	return b
}
