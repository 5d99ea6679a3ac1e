package labproc

import "testing"

func TestTopFrame(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"[<0>] balance_dirty_pages+0x2de/0xcc0\n[<0>] balance_dirty_pages_ratelimited+0x2f5/0x3c0\n", "balance_dirty_pages"},
		{"[<0>] rwsem_down_write_slowpath+0x2a1/0x560\n", "rwsem_down_write_slowpath"},
		{"", ""},
	} {
		if got := topFrame(c.in); got != c.want {
			t.Errorf("topFrame(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
