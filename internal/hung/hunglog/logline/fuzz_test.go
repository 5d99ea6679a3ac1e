package logline

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzReader feeds arbitrary bytes to a Reader, seeded with the corpus of
// real logs. Whatever comes in, it must not panic, must return records in
// the order of their lines, each of bounded size, and must account for
// every byte it read.
func FuzzReader(f *testing.F) {
	for _, dir := range []string{"seen", "unseen", "unseen2"} {
		files, _ := filepath.Glob(filepath.Join("..", "testdata", "corpus", dir, "*.log"))
		for _, name := range files {
			b, err := os.ReadFile(name)
			if err != nil {
				f.Fatal(err)
			}
			if len(b) > 8<<10 {
				b = b[:8<<10]
			}
			f.Add(b)
		}
	}
	f.Add([]byte("> [=C2=A0 1.0] INFO: task a:1 blocked for more than 1 =\nseconds. [ 2.0] task:a state:D\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReader(bytes.NewReader(data), Limits{MaxLineBytes: 512, MaxLineScan: 4096})
		last := 0
		n := 0
		for {
			l, ok := r.Next()
			if !ok {
				break
			}
			n++
			if l.Num < last || l.Num < 1 {
				t.Fatalf("record %d starts on line %d after line %d", n, l.Num, last)
			}
			last = l.Num
			if len(l.Text) > maxRecordBytes+2*512+64 {
				t.Fatalf("record of %d bytes", len(l.Text))
			}
		}
		st := r.Stats()
		if st.Bytes > int64(len(data)) || (st.Cut == "" && r.Err() == nil && st.Bytes != int64(len(data))) {
			t.Fatalf("read %d of %d bytes, cut %q", st.Bytes, len(data), st.Cut)
		}
		if st.Records != n || last > st.Lines {
			t.Fatalf("%d records counted, %d returned; last line %d of %d", st.Records, n, last, st.Lines)
		}
	})
}
