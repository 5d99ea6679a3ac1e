package locks

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
)

// WriteFolded writes the stacks sampled while their thread held its
// mmap_lock in the folded format flame graph tools read: one line per
// stack, frames outermost first separated by ';', then the sample count.
// The root frames are the process and the lock mode, so one file can hold
// several processes.
func WriteFolded(w io.Writer, s *Snapshot) error {
	comm := map[int]string{}
	for _, m := range s.MM {
		comm[m.TGID] = m.Comm
	}
	lines := map[string]uint64{}
	for _, p := range s.Profile {
		name := comm[p.TGID]
		if name == "" {
			name = "?"
		}
		mode := "mmap_lock read"
		if p.Write {
			mode = "mmap_lock write"
		}
		frames := []string{fmt.Sprintf("%s (pid %d)", sanitize(name), p.TGID), "[" + mode + "]"}
		for i := len(p.Stack) - 1; i >= 0; i-- {
			frames = append(frames, sanitize(foldFrame(p.Stack[i])))
		}
		lines[strings.Join(frames, ";")] += p.Count
	}
	keys := make([]string, 0, len(lines))
	for k := range lines {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if c := cmp.Compare(lines[b], lines[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	for _, k := range keys {
		if _, err := fmt.Fprintf(w, "%s %d\n", k, lines[k]); err != nil {
			return err
		}
	}
	return nil
}

// foldFrame drops the offset: flame graphs merge by function.
func foldFrame(f string) string {
	if i := strings.Index(f, "+0x"); i > 0 {
		rest := f[i:]
		if j := strings.Index(rest, " "); j > 0 {
			return f[:i] + rest[j:]
		}
		return f[:i]
	}
	return f
}

// sanitize keeps the folded format's separators out of names (a comm may
// hold anything).
func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case ';', '\n', '\r':
			return '_'
		}
		return r
	}, s)
}
