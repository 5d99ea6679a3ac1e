package watch

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	wolftest "github.com/wolf-investigator/wolf/internal/testutil"
)

// flaky takes at most room bytes, then fails with ENOSPC (after a short
// write, as a file system that fills mid-write does) until room is given
// again.
type flaky struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	room int
}

func (f *flaky) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(p) <= f.room {
		f.room -= len(p)
		return f.buf.Write(p)
	}
	n := f.room
	f.buf.Write(p[:n])
	f.room = 0
	return n, syscall.ENOSPC
}

func (f *flaky) give(n int) {
	f.mu.Lock()
	f.room += n
	f.mu.Unlock()
}

func (f *flaky) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.buf.String()
}

func lines(n, from int) []string {
	var out []string
	for i := from; i < from+n; i++ {
		out = append(out, fmt.Sprintf(`{"event":"start","n":%d,"pad":"%s"}`+"\n", i, strings.Repeat("x", 40)))
	}
	return out
}

func waitUntil(t *testing.T, what string, d time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Lines that cannot be written are kept and written, in order and whole,
// once the writer takes them; the outage is said once, counted, and in
// Problems while it lasts.
func TestOutputKeepsLinesThroughAFailure(t *testing.T) {
	w := &flaky{room: 150}
	var log syncBuf
	o := StreamOutput(w, &log)
	all := lines(10, 0)
	for _, l := range all {
		if _, err := o.Write([]byte(l)); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "the failure to show", 5*time.Second, func() bool { return len(o.Problems()) > 0 })
	if p := o.Problems(); !strings.Contains(p[0], "no space left") || !strings.Contains(p[0], "standard output") {
		t.Errorf("Problems: %q", p)
	}
	if got := testutil.ToFloat64(collectorMetric(o, "wolf_output_errors_total")); got < 1 {
		t.Errorf("wolf_output_errors_total %v", got)
	}
	if got := testutil.ToFloat64(collectorMetric(o, "wolf_output_pending_lines")); got < 7 {
		t.Errorf("wolf_output_pending_lines %v, want the unwritten lines", got)
	}
	more := lines(5, 10)
	for _, l := range more {
		_, _ = o.Write([]byte(l))
	}
	w.give(1 << 20)
	_, _ = o.Write([]byte(lines(1, 15)[0])) // a new line retries at once
	all = append(append(all, more...), lines(1, 15)...)
	want := strings.Join(all, "")
	waitUntil(t, "the lines to be written", 5*time.Second, func() bool { return w.String() == want })
	if p := o.Problems(); len(p) != 0 {
		t.Errorf("Problems after recovery: %q", p)
	}
	if left := o.Close(time.Second); left != 0 {
		t.Errorf("%d lines left at close", left)
	}
	logs := log.String()
	if strings.Count(logs, "no space left") != 1 || !strings.Contains(logs, "writable again") {
		t.Errorf("log:\n%s", logs)
	}
}

// Past its memory bound the output drops the oldest lines, counts them,
// and still writes the rest in order.
func TestOutputBoundsMemory(t *testing.T) {
	w := &flaky{}
	o := StreamOutput(w, nil)
	o.mu.Lock()
	o.max = 1000
	o.mu.Unlock()
	all := lines(100, 0)
	for _, l := range all {
		_, _ = o.Write([]byte(l))
	}
	waitUntil(t, "the failure", 5*time.Second, func() bool { return len(o.Problems()) > 0 })
	o.mu.Lock()
	size, n := o.size, len(o.pending)
	o.mu.Unlock()
	if size > 1000+len(all[0]) {
		t.Errorf("%d bytes (%d lines) pending, bound 1000", size, n)
	}
	dropped := testutil.ToFloat64(collectorMetric(o, "wolf_output_dropped_lines_total"))
	if int(dropped)+n != 100 {
		t.Errorf("%v dropped + %d pending != 100 written", dropped, n)
	}
	w.give(1 << 20)
	_, _ = o.Write([]byte(lines(1, 100)[0]))
	all = append(all, lines(1, 100)...)
	waitUntil(t, "the newest lines to be written", 5*time.Second, func() bool { return strings.HasSuffix(w.String(), all[100]) })
	o.Close(time.Second)
	dropped = testutil.ToFloat64(collectorMetric(o, "wolf_output_dropped_lines_total"))
	if want := strings.Join(all[int(dropped):], ""); w.String() != want {
		t.Errorf("written after %v dropped:\n%s\nwant the newest lines in order:\n%s", dropped, w.String(), want)
	}
}

// collectorMetric picks one metric out of a collector by name.
func collectorMetric(c prometheus.Collector, name string) prometheus.Collector {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	return prometheus.CollectorFunc(func(ch chan<- prometheus.Metric) {
		mc := make(chan prometheus.Metric, 16)
		go func() { c.Collect(mc); close(mc) }()
		for m := range mc {
			if strings.Contains(m.Desc().String(), `"`+name+`"`) {
				ch <- m
			}
		}
	})
}

// The test: --output on a small tmpfs that fills (another file
// takes the space) and is emptied. Nothing is lost: the file ends with
// every line, in order, each one whole JSON.
func TestOutputOnAFullTmpfs(t *testing.T) {
	wolftest.RequireRoot(t)
	mnt := t.TempDir()
	if err := syscall.Mount("wolf-output-test", mnt, "tmpfs", 0, "size=64k"); err != nil {
		wolftest.Require(t, false, "cannot mount tmpfs: "+err.Error())
	}
	t.Cleanup(func() { _ = syscall.Unmount(mnt, syscall.MNT_DETACH) })
	path := filepath.Join(mnt, "watch.jsonl")
	var log syncBuf
	o, err := OpenOutput(path, &log)
	if err != nil {
		t.Fatal(err)
	}
	first := lines(20, 0)
	for _, l := range first {
		_, _ = o.Write([]byte(l))
	}
	waitUntil(t, "the first lines on disk", 5*time.Second, func() bool {
		b, _ := os.ReadFile(path)
		return len(b) == len(strings.Join(first, ""))
	})
	filler := filepath.Join(mnt, "filler")
	_ = exec.Command("dd", "if=/dev/zero", "of="+filler, "bs=1k").Run()

	// Enough lines to need more than a page: some land in the file's
	// last page, the rest fail, one of them cut short.
	during := lines(100, 20)
	for _, l := range during {
		_, _ = o.Write([]byte(l))
	}
	waitUntil(t, "the failure", 5*time.Second, func() bool { return len(o.Problems()) > 0 })
	if !strings.Contains(log.String(), "no space left on device") {
		t.Errorf("stderr line missing: %q", log.String())
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	want := strings.Join(append(first, during...), "")
	// The retry comes by itself (backoff), without a new line to prompt it.
	waitUntil(t, "the held lines on disk", 2*OutputMaxRetry, func() bool {
		b, _ := os.ReadFile(path)
		return string(b) == want
	})
	if left := o.Close(time.Second); left != 0 {
		t.Errorf("%d lines left", left)
	}
	f, _ := os.Open(path)
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		var v map[string]any
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("line %d not JSON: %q", n, sc.Text())
		}
		if int(v["n"].(float64)) != n {
			t.Fatalf("line %d is n=%v: out of order", n, v["n"])
		}
		n++
	}
	if n != 120 {
		t.Errorf("%d lines, want 120", n)
	}
}

// A file removed while the disk was full (log rotation, a cleanup) is
// created again and gets the held lines, whole.
func TestOutputReopensARemovedFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.jsonl")
	o, err := OpenOutput(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Make the open file fail: swap its writer for one that refuses.
	w := &flaky{}
	o.mu.Lock()
	o.w = w
	o.mu.Unlock()
	_, _ = o.Write([]byte(lines(1, 0)[0]))
	waitUntil(t, "the failure", 5*time.Second, func() bool { return len(o.Problems()) > 0 })
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	_, _ = o.Write([]byte(lines(1, 1)[0]))
	want := strings.Join(lines(2, 0), "")
	waitUntil(t, "the new file", 5*time.Second, func() bool {
		b, _ := os.ReadFile(path)
		return string(b) == want
	})
	o.Close(time.Second)
}
