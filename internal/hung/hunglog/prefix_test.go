package hunglog

import "testing"

func TestSplitPrefix(t *testing.T) {
	tests := []struct {
		in, text, stamp, caller string
	}{
		{"[  183.865554] task:system-probe state:D", "task:system-probe state:D", "183.865554", ""},
		{"[  183.865567]  __schedule+0x2cb/0x760", " __schedule+0x2cb/0x760", "183.865567", ""},
		{"[ 4302.448228][   T44] INFO: task a:1 blocked", "INFO: task a:1 blocked", "4302.448228", "T44"},
		{"[ 4302.448228] [    C2] eth0: up", "eth0: up", "4302.448228", "C2"},
		{"[Sun Nov 22 02:28:46 2026] INFO: task test:8734", "INFO: task test:8734", "Sun Nov 22 02:28:46 2026", ""},
		{"[Nov22 02:28] text", "text", "Nov22 02:28", ""},
		{"[  +0.000012] text", "text", "+0.000012", ""},
		{"Nov 22 02:28:46 web-7 kernel: INFO: task a:1", "INFO: task a:1", "Nov 22 02:28:46", ""},
		{"Nov  2 02:28:46.123456 web-7 kernel:  schedule+0x1/0x2", " schedule+0x1/0x2", "Nov  2 02:28:46.123456", ""},
		{"2026-11-22T02:28:46+0000 web-7 kernel: Call Trace:", "Call Trace:", "2026-11-22T02:28:46+0000", ""},
		{"2026-11-22T02:28:46.123456+00:00 web-7 kernel: x", "x", "2026-11-22T02:28:46.123456+00:00", ""},
		{"2026-11-22T02:28:46,123456+00:00 INFO: task a:1", "INFO: task a:1", "2026-11-22T02:28:46,123456+00:00", ""},
		{"Nov 22 02:28:46 web-7 kernel: [  183.865554] text", "text", "Nov 22 02:28:46", ""},
		{"[  183.865554] web-7 kernel: text", "text", "183.865554", ""},
		{"Nov 22 02:28:41 web-7 sshd[9300]: Accepted publickey", "", "", ""},
		{"6,1234,5678901,-;INFO: task a:1 blocked", "INFO: task a:1 blocked", "5678901", ""},
		{"4,1235,5678902,-,caller=T90; __schedule+0x1/0x2", " __schedule+0x1/0x2", "5678902", "T90"},
		{"<3>[   12.5] text", "text", "12.5", ""},
		{"kern  :err   : [  183.8] INFO: task", "INFO: task", "183.8", ""},
		{"text\r", "text", "", ""},
		{"INFO: task a:1 blocked", "INFO: task a:1 blocked", "", ""},
		{"[drm] Initialized", "[drm] Initialized", "", ""},
		{"[<ffffffff8108a0b5>] ? wait+0x1/0x2", "[<ffffffff8108a0b5>] ? wait+0x1/0x2", "", ""},
		{"[do_exit (linux/kernel/exit.c:433 (discriminator 4))", "[do_exit (linux/kernel/exit.c:433 (discriminator 4))", "", ""},
		{"", "", "", ""},
		{"[", "[", "", ""},
		{"1,2,3,;", "", "3", ""},
	}
	for _, tc := range tests {
		l := splitPrefix(tc.in)
		if l.text != tc.text || l.stamp != tc.stamp || l.caller != tc.caller {
			t.Errorf("splitPrefix(%q) = {%q %q %q}, want {%q %q %q}", tc.in, l.text, l.stamp, l.caller, tc.text, tc.stamp, tc.caller)
		}
	}
}

func TestParseTaskLine(t *testing.T) {
	tests := []struct {
		in              string
		comm, state     string
		pid, tgid, ppid int
		taskFlags       string
		ok              bool
	}{
		{"task:kworker/u16:0   state:R  running task     stack:26368 pid:12    tgid:12    ppid:2      task_flags:0x4208060 flags:0x00004000",
			"kworker/u16:0", "R", 12, 12, 2, "0x4208060", true},
		{"task:my app:v2       state:D stack:    0 pid: 4242 ppid:     1 flags:0x00000000", "my app:v2", "D", 4242, 0, 1, "", true},
		{"task:system-probe state:D stack:0", "system-probe", "D", 0, 0, 0, "", true},
		{"task:rcu_tasks_kthre state:D stack:0", "rcu_tasks_kthre", "D", 0, 0, 0, "", true},
		{"task:x", "", "", 0, 0, 0, "", false},
		{"task:x state:", "x", "", 0, 0, 0, "", false},
	}
	for _, tc := range tests {
		tl, ok := parseTaskLine(tc.in)
		if ok != tc.ok || (ok && (tl.comm != tc.comm || tl.state != tc.state || tl.pid != tc.pid || tl.tgid != tc.tgid ||
			tl.ppid != tc.ppid || tl.taskFlags != tc.taskFlags)) {
			t.Errorf("parseTaskLine(%q) = %+v %v", tc.in, tl, ok)
		}
	}
}
