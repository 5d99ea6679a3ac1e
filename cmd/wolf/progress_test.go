//go:build linux

package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"
)

// The bar says wolf is attaching before the window starts (on a busy
// machine that takes seconds), then draws the window over that line; on
// a pipe it draws nothing.
func TestProgressBar(t *testing.T) {
	var buf bytes.Buffer
	b := &progressBar{w: &buf, total: 10 * time.Second, names: "hung locks"}
	b.attaching()
	if got := buf.String(); !strings.HasPrefix(got, "\r[") || !strings.Contains(got, "] attaching  hung locks") {
		t.Errorf("attaching: %q", got)
	}
	buf.Reset()
	b.update(0.5)
	if got := buf.String(); !strings.HasPrefix(got, "\r["+strings.Repeat("#", 15)+strings.Repeat(".", 15)+"]  50% of 10s  hung locks") {
		t.Errorf("update: %q", got)
	}
	buf.Reset()
	b.stop()
	if got := buf.String(); got != "\r\x1b[K" {
		t.Errorf("stop: %q", got)
	}

	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := newProgressBar(f, time.Second, nil)
	p.attaching()
	p.update(1)
	p.stop()
	if st, _ := f.Stat(); st.Size() != 0 {
		t.Errorf("%d bytes drawn on a file that is not a terminal", st.Size())
	}
}
