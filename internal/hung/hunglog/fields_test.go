package hunglog

import "testing"

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
