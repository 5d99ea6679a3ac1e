package kstack

import "testing"

func TestFunc(t *testing.T) {
	for in, want := range map[string]string{
		"tcp_collapse.isra.0+0x4b7/0x5a0":           "tcp_collapse",
		"request_wait_answer+0xd0/0x2a0 [fuse]":     "request_wait_answer",
		"do_exit+0x86f":                             "do_exit",
		"0xffffffffc11f0000":                        "0xffffffffc11f0000",
		" process_one_work.constprop.0+0x1c4/0x3d0": "process_one_work",
	} {
		if got := Func(in); got != want {
			t.Errorf("Func(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestFlameName(t *testing.T) {
	for in, want := range map[string]string{
		"down_write+0x1f [ext4]":                  "down_write [ext4]",
		"tcp_collapse.isra.0+0x4b7/0x5a0":         "tcp_collapse",
		"__mutex_lock.constprop.0+0x3a5/0x6c0":    "__mutex_lock",
		"mlx5_cmd_exec.cold+0x2/0x30 [mlx5_core]": "mlx5_cmd_exec [mlx5_core]",
		"stress (pid 7)":                          "stress (pid 7)",
		"[mmap_lock write]":                       "[mmap_lock write]",
		"0xffffffffc11f0000":                      "0xffffffffc11f0000",
		"schedule":                                "schedule",
	} {
		if got := FlameName(in); got != want {
			t.Errorf("FlameName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestFolded(t *testing.T) {
	if got := FoldedLine([]string{"a;b\nc", "f [ext4]", "g"}, 12); got != "a_b_c;f [ext4];g 12" {
		t.Errorf("FoldedLine = %q", got)
	}
	if got := FoldedStack(nil); got != "" {
		t.Errorf("FoldedStack(nil) = %q", got)
	}
}
