package logline

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
		{"Nov 22 02:28:41 web-7 sshd[9300]: Accepted publickey", "", "Nov 22 02:28:41", ""},
		{"Oct 17 19:10:05 line-xfs unknown: run fstests", "", "Oct 17 19:10:05", ""},
		// Forms seen in public bug reports and mailing lists.
		{"Sep 13 14:34:10 ccgx user.err kernel: [43500.179242] INFO: task v:1339 blocked", "INFO: task v:1339 blocked", "Sep 13 14:34:10", ""},
		{"    May 17 18:48:11 kernel: [ 6141.921740] INFO: task k:5 blocked", "INFO: task k:5 blocked", "May 17 18:48:11", ""},
		{"Dez 21 10:22:08 abreu kernel: INFO: task fwupd:2041 blocked for more ", "INFO: task fwupd:2041 blocked for more ", "Dez 21 10:22:08", ""},
		{"2021-03-16 11:30:24.753 kernel: task:iw              state:D", "task:iw              state:D", "2021-03-16 11:30:24.753", ""},
		{"2022-08-15T16:27:12.190032Z ERR kernel: [    8.384979] i915", "i915", "2022-08-15T16:27:12.190032Z", ""},
		{"[Tue May 6 09:45:36 2025] lock_acquire+0x143/0x2d0", "lock_acquire+0x143/0x2d0", "Tue May 6 09:45:36 2025", ""},
		{"Sun Feb 18 18:17:58 2018] [<c0955e68>] (__schedule) from", "[<c0955e68>] (__schedule) from", "Sun Feb 18 18:17:58 2018", ""},
		{"[  240.] Call Trace:", "Call Trace:", "240.", ""},
		{"[  350.429972 ]  end_workqueue_fn+0x29/0x40 [btrfs]", " end_workqueue_fn+0x29/0x40 [btrfs]", "350.429972", ""},
		{"<3>[  125.297687][  T140] INFO: task zsh:470 blocked", "INFO: task zsh:470 blocked", "125.297687", "T140"},
		{" [34315.120624] [34315.180090]  ? wbt_cleanup_cb+0x20/0x20", " ? wbt_cleanup_cb+0x20/0x20", "34315.120624", ""},
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
		if l.drop {
			l.text = ""
		}
		if l.text != tc.text || l.stamp != tc.stamp || l.caller != tc.caller {
			t.Errorf("splitPrefix(%q) = {%q %q %q}, want {%q %q %q}", tc.in, l.text, l.stamp, l.caller, tc.text, tc.stamp, tc.caller)
		}
	}
}
