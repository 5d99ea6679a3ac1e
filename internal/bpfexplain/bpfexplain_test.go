package bpfexplain

import (
	"errors"
	"strings"
	"testing"
)

// The messages are those Debian's kernels gave under the matrix.
func TestExplain(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"sched: the kernel's BPF verifier rejected the program (load program: invalid argument: invalid func unknown#158 (9 line(s) omitted))", "bpf_get_current_task_btf (Linux 5.11+)"},
		{"locks: load program: invalid argument: BPF_STX uses reserved fields (1 line(s) omitted)", "atomic fetch operations (Linux 5.12+)"},
		{"load program: permission denied: 184: (79) r1 = *(u64 *)(r2 +0): R2 unbounded memory access, make sure to bounds check any such access", "cannot prove a memory access bounded"},
		{"invalid func unknown#999", "helper number 999"},
	} {
		got := Error(errors.New(c.in))
		if !strings.Contains(got, c.want) {
			t.Errorf("Error(%q) = %q, want it to say %q", c.in, got, c.want)
		}
	}
	if got := Error(errors.New("something else")); got != "something else" {
		t.Errorf("unknown error changed: %q", got)
	}
}
