package watch

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Output retry timing: the first retry after a failed write comes soon
// (a full disk is often cleaned up in seconds), later ones back off to
// OutputMaxRetry so a disk that stays full costs one write attempt a
// half minute.
const (
	OutputRetry    = time.Second
	OutputMaxRetry = 30 * time.Second
	// DefaultOutputPending bounds the lines kept in memory while the
	// output cannot be written: 16 MiB is hours of findings on a sick
	// host. Past it the oldest lines are dropped, and counted.
	DefaultOutputPending = 16 << 20
)

// Output is where the watch's JSON lines go: a file (--output) or a
// stream. Lines are queued and written by a goroutine of its own, so a
// slow or failing disk never holds up an investigator. A line that cannot
// be written is kept, with every line after it, and written when the file
// takes writes again (checked with backoff, and at every new line); the
// failure is said on stderr once per outage, counted in
// wolf_output_errors_total, and reported by Problems (/healthz). Lines
// are never reordered, and a line cut short by a full disk is completed,
// not repeated, when the same file takes writes again.
type Output struct {
	path string    // "" for a stream
	w    io.Writer // the stream, or the open file
	f    *os.File
	ino  uint64 // inode of f, to notice the file replaced or removed
	log  io.Writer
	max  int

	mu      sync.Mutex
	pending [][]byte
	size    int  // bytes in pending
	partial int  // bytes of pending[0] already written
	writing bool // pending[0] is being written (it must stay put)
	closed  bool // Close called
	wake    chan struct{}
	stop    chan struct{} // Close gave up waiting: stop retrying
	done    chan struct{}

	// What Problems and the metrics report.
	failing     error     // the current outage's error; nil when writing
	since       time.Time // start of the current outage
	errs        uint64    // failed write attempts, ever
	dropped     uint64    // lines dropped because pending was full
	written     uint64    // lines written
	delayed     int       // lines held back in the current outage
	droppedDesc *prometheus.Desc
	errsDesc    *prometheus.Desc
	pendDesc    *prometheus.Desc
	writtenDesc *prometheus.Desc
}

// OpenOutput opens path for appending (creating it) and starts the
// writer. log receives the one-line failure and recovery notes (stderr).
func OpenOutput(path string, log io.Writer) (*Output, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	o := newOutput(f, log)
	o.path, o.f, o.ino = path, f, inode(f)
	go o.run()
	return o, nil
}

// StreamOutput writes to w (standard output). A stream cannot be reopened;
// its failures are retried and reported the same way.
func StreamOutput(w io.Writer, log io.Writer) *Output {
	o := newOutput(w, log)
	go o.run()
	return o
}

func newOutput(w io.Writer, log io.Writer) *Output {
	if log == nil {
		log = io.Discard
	}
	return &Output{
		w: w, log: log, max: DefaultOutputPending,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		errsDesc:    prometheus.NewDesc("wolf_output_errors_total", "Failed writes of watch's JSON lines (--output or standard output); the lines are kept and retried.", nil, nil),
		pendDesc:    prometheus.NewDesc("wolf_output_pending_lines", "JSON lines waiting to be written because the output failed.", nil, nil),
		droppedDesc: prometheus.NewDesc("wolf_output_dropped_lines_total", "JSON lines dropped, oldest first, because the output failed for so long that the lines waiting outgrew their memory bound.", nil, nil),
		writtenDesc: prometheus.NewDesc("wolf_output_lines_total", "JSON lines written.", nil, nil),
	}
}

// Write queues one line (a complete JSON line, newline included). It never
// blocks on the disk and never fails: a failure is the writer's to report.
func (o *Output) Write(line []byte) (int, error) {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return 0, errors.New("output closed")
	}
	o.pending = append(o.pending, append([]byte(nil), line...))
	o.size += len(line)
	for o.size > o.max && len(o.pending) > 1 {
		// Drop the oldest whole line; a line partly on disk already is
		// completed rather than dropped (its head is in the file).
		i := 0
		if o.partial > 0 || o.writing {
			i = 1
		}
		o.size -= len(o.pending[i])
		o.pending = append(o.pending[:i], o.pending[i+1:]...)
		o.dropped++
		if o.delayed > 0 {
			o.delayed--
		}
	}
	o.mu.Unlock()
	o.poke()
	return len(line), nil
}

func (o *Output) poke() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// run writes what is pending whenever woken; while failing, it retries
// with backoff and also at every new line.
func (o *Output) run() {
	defer close(o.done)
	retry := OutputRetry
	var timer *time.Timer
	var tc <-chan time.Time
	stopped := false
	for {
		select {
		case <-o.wake:
		case <-tc:
		case <-o.stop:
			stopped = true
		}
		ok, closed := o.flush()
		if closed && (ok || stopped) {
			return
		}
		if ok {
			retry, tc = OutputRetry, nil
			continue
		}
		if timer == nil {
			timer = time.NewTimer(retry)
		} else {
			timer.Reset(retry)
		}
		tc = timer.C
		retry = min(2*retry, OutputMaxRetry)
	}
}

// flush writes the pending lines in order. It reports whether everything
// pending was written, and whether Close was called.
func (o *Output) flush() (ok, closed bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.failing != nil {
		o.reopen()
	}
	for len(o.pending) > 0 {
		line := o.pending[0][o.partial:]
		o.writing = true
		o.mu.Unlock()
		n, err := o.w.Write(line)
		o.mu.Lock()
		o.writing = false
		if n > 0 {
			o.partial += n
		}
		if err == nil && n < len(line) {
			err = io.ErrShortWrite
		}
		if err != nil {
			o.fail(err)
			return false, o.closed
		}
		o.size -= len(o.pending[0])
		o.pending[0] = nil
		o.pending = o.pending[1:]
		o.partial = 0
		o.written++
	}
	if o.failing != nil {
		fmt.Fprintf(o.log, "wolf watch: %s: writable again after %v; wrote the %d lines held back (%d dropped in all)\n",
			o.name(), time.Since(o.since).Round(time.Second), o.delayed, o.dropped)
		o.failing, o.delayed = nil, 0
	}
	return true, o.closed
}

func (o *Output) fail(err error) {
	o.errs++
	if o.failing == nil {
		o.since = time.Now()
		o.delayed = len(o.pending)
		fmt.Fprintf(o.log, "wolf watch: %s: %v; keeping the JSON lines in memory (up to %d MiB) and retrying\n", o.name(), err, o.max>>20)
	} else {
		o.delayed = len(o.pending)
	}
	o.failing = err
}

// reopen opens the path again when the file there is no longer the one
// being written (removed or rotated while full): what is pending then goes
// to the new file, whole lines only.
func (o *Output) reopen() {
	if o.path == "" {
		return
	}
	st, err := os.Stat(o.path)
	if err == nil {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Ino == o.ino {
			return
		}
	}
	f, err := os.OpenFile(o.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	_ = o.f.Close()
	o.f, o.w, o.ino = f, f, inode(f)
	o.partial = 0 // the cut line's head went to the old file
}

func (o *Output) name() string {
	if o.path == "" {
		return "standard output"
	}
	return "--output " + o.path
}

func inode(f *os.File) uint64 {
	st, err := f.Stat()
	if err != nil {
		return 0
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return sys.Ino
	}
	return 0
}

// Problems says what is wrong with the output, for /healthz: nothing when
// every line is written.
func (o *Output) Problems() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.failing == nil {
		return nil
	}
	return []string{fmt.Sprintf("output: %s failing since %s: %v; %d lines waiting, %d dropped",
		o.name(), o.since.UTC().Format(time.RFC3339), o.failing, len(o.pending), o.dropped)}
}

// Close writes what it can of the pending lines, retrying a failing
// output for at most grace, and closes the file. It returns how many
// lines were left unwritten (said on the log as well).
func (o *Output) Close(grace time.Duration) int {
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
	o.poke()
	t := time.NewTimer(grace)
	select {
	case <-o.done:
		t.Stop()
	case <-t.C:
		close(o.stop)
		// A write stuck in the kernel (a hung network file system) is
		// not waited for past a second more.
		select {
		case <-o.done:
		case <-time.After(time.Second):
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	left := len(o.pending)
	if left > 0 {
		fmt.Fprintf(o.log, "wolf watch: %s: %d JSON lines could not be written before exit: %v\n", o.name(), left, o.failing)
	}
	if o.f != nil && !o.writing {
		_ = o.f.Close()
	}
	return left
}

// Describe implements prometheus.Collector.
func (o *Output) Describe(ch chan<- *prometheus.Desc) {
	ch <- o.errsDesc
	ch <- o.pendDesc
	ch <- o.droppedDesc
	ch <- o.writtenDesc
}

// Collect implements prometheus.Collector.
func (o *Output) Collect(ch chan<- prometheus.Metric) {
	o.mu.Lock()
	defer o.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(o.errsDesc, prometheus.CounterValue, float64(o.errs))
	ch <- prometheus.MustNewConstMetric(o.pendDesc, prometheus.GaugeValue, float64(len(o.pending)))
	ch <- prometheus.MustNewConstMetric(o.droppedDesc, prometheus.CounterValue, float64(o.dropped))
	ch <- prometheus.MustNewConstMetric(o.writtenDesc, prometheus.CounterValue, float64(o.written))
}
