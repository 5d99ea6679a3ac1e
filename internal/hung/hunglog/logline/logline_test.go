package logline

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

func readAll(t *testing.T, in string) ([]Line, Stats) {
	t.Helper()
	r := NewReader(strings.NewReader(in), Limits{})
	var out []Line
	for {
		l, ok := r.Next()
		if !ok {
			break
		}
		out = append(out, l)
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	return out, r.Stats()
}

func texts(ls []Line) []string {
	var out []string
	for _, l := range ls {
		out = append(out, l.Text)
	}
	return out
}

func wantTexts(t *testing.T, in string, want ...string) []Line {
	t.Helper()
	got, _ := readAll(t, in)
	g := texts(got)
	if strings.Join(g, "\n") != strings.Join(want, "\n") {
		t.Errorf("input:\n%s\ngot:\n  %s\nwant:\n  %s", in, strings.Join(g, "\n  "), strings.Join(want, "\n  "))
	}
	return got
}

// The fragments below are cut from the logs of testdata/corpus (see its
// SOURCES): each is a way a real log was damaged on its way to a reader.

func TestMailWrapInStampedLog(t *testing.T) {
	in := `[  240.273876] \"echo 0 > /proc/sys/kernel/hung_task_timeout_secs\"
disables this message.
[  240.288175] [<c0a9cf00>] (__schedule) from [<c0a9d2e0>] (schedule+0x44/0x9c)
[  240.295272] [<c0a9d2e0>] (schedule) from [<c0a9fc60>]
(schedule_timeout+0x164/0x1ac)
[  240.328454] [<c06cfe80>] (deferred_probe_initcall) from
[<c020ac8c>] (do_one_initcall+0x90/0x1dc)
`
	got := wantTexts(t, in,
		`\"echo 0 > /proc/sys/kernel/hung_task_timeout_secs\" disables this message.`,
		`[<c0a9cf00>] (__schedule) from [<c0a9d2e0>] (schedule+0x44/0x9c)`,
		`[<c0a9d2e0>] (schedule) from [<c0a9fc60>] (schedule_timeout+0x164/0x1ac)`,
		`[<c06cfe80>] (deferred_probe_initcall) from [<c020ac8c>] (do_one_initcall+0x90/0x1dc)`)
	if got[2].Num != 4 || got[2].Stamp != "240.295272" {
		t.Errorf("line %+v", got[2])
	}
}

func TestSyslogWrappedAtWords(t *testing.T) {
	wantTexts(t, `Dez 21 10:22:08 abreu kernel: INFO: task systemd-journal:386 blocked for 
more than 120 seconds.
Dez 21 10:22:08 abreu kernel:       Tainted: G     U 
6.13.0-rc3-00193-ge9b8ffafd20a #45
Dez 21 10:22:08 abreu kernel: task:systemd-journal state:D stack:0 
pid:386   tgid:386   ppid:1      flags:0x00000002
Dez 21 10:22:08 abreu kernel:  ? 
arch_exit_to_user_mode_prepare.isra.0+0x16/0x90
Dez 21 10:19:17 abreu mtp-probe[2771]: checking bus 2, device 5: 
"/sys/devices/pci0000:00/0000:00:14.0/usb2/2-1"
Dez 21 10:22:08 abreu kernel: sd 0:0:0:0: [sda] Unit Not Ready
`,
		"INFO: task systemd-journal:386 blocked for more than 120 seconds.",
		"      Tainted: G     U 6.13.0-rc3-00193-ge9b8ffafd20a #45",
		"task:systemd-journal state:D stack:0 pid:386   tgid:386   ppid:1      flags:0x00000002",
		" ? arch_exit_to_user_mode_prepare.isra.0+0x16/0x90",
		"sd 0:0:0:0: [sda] Unit Not Ready")
}

func TestQuotedPrintable(t *testing.T) {
	in := `Oct 17 19:14:04 line-xfs-crc-logdev kernel: INFO: task umount:17146 blocked=
 for
more than 120 seconds.
Oct 17 19:14:04 line-xfs-crc-logdev kernel:  xfs_fs_put_super+0x37/0x80 [xf=
s]
Oct 17 19:14:04 line-xfs-crc-logdev kernel:=20
exit_to_user_mode_prepare+0x15c/0x160
Oct 17 19:14:04 line-xfs-crc-logdev kernel: RSP: 002b:00007fffaf33f768 EFLA=
GS:
00000246 ORIG_RAX: 00000000000000a6
`
	_, st := readAll(t, in)
	if !st.QuotedPrintable {
		t.Error("quoted-printable not detected")
	}
	got := wantTexts(t, in,
		"INFO: task umount:17146 blocked for more than 120 seconds.",
		" xfs_fs_put_super+0x37/0x80 [xfs]",
		" exit_to_user_mode_prepare+0x15c/0x160",
		"RSP: 002b:00007fffaf33f768 EFLAGS: 00000246 ORIG_RAX: 00000000000000a6")
	if got[0].Host != "line-xfs-crc-logdev" || got[0].Num != 1 || got[1].Num != 4 {
		t.Errorf("lines %+v", got[:2])
	}
}

func TestQuotedPrintableNBSP(t *testing.T) {
	// An encoded non-breaking space in dmesg's stamp padding.
	wantTexts(t, "> [=C2=A0=C2=A0 17.125198] usb usb1-port2: couldn't allocate usb_device\n> [=C2=A0 248.317462] INFO: task kworker/u32:0:7 blocked for more than 120 =\nseconds.\n>=20\n",
		"usb usb1-port2: couldn't allocate usb_device",
		"INFO: task kworker/u32:0:7 blocked for more than 120 seconds.")
}

func TestMailQuotingAndIndentation(t *testing.T) {
	wantTexts(t, `>      INFO: task swapper/0:1 is blocked on a mutex likely owned by task
>      swapper/0:1.
> 
>      2 locks held by swapper/0/1:
>       #0: ffff000080ff80f8 (&dev->mutex){....}-{4:4}, at:
>           __driver_attach+0x19c/0x2c0
>> [<c0913190>] (__schedule) from [<c0913834>] (schedule+0x78/0xf4)
`,
		"     INFO: task swapper/0:1 is blocked on a mutex likely owned by task swapper/0:1.",
		"     2 locks held by swapper/0/1:",
		"      #0: ffff000080ff80f8 (&dev->mutex){....}-{4:4}, at: __driver_attach+0x19c/0x2c0",
		"[<c0913190>] (__schedule) from [<c0913834>] (schedule+0x78/0xf4)")
}

func TestTerminalWrapAndScrollMarker(t *testing.T) {
	wantTexts(t, `sysrq: SysRq : Show Blocked State                                                [255/1885]
[<c09564f8>] (io_schedule_timeout) from [<c03720bc>] (balance_dirty_pages.constprop.6+0xac8
/0xc5c)
[<c03720bc>] (balance_dirty_pages.constprop.6) from [<c0372508>] (balance_dirty_pages_ratel
imited+0x2b8/0x43c)
[<c0372508>] (balance_dirty_pages_ratelimited) from [<c0397724>] (fault_dirty_shared_page+0
x9c/0xb4)
python          D    0  9167   9165 0x00000000
Sun Feb 18 18:17:58 2018] [<c0955e68>] (__schedule) from [<c0956070>] (schedule+0x98/0xbc)
[<c0956070>] (schedule) from [<c09598e4>] (schedule_timeout+0x328/0x3ac)
`,
		"sysrq: SysRq : Show Blocked State",
		"[<c09564f8>] (io_schedule_timeout) from [<c03720bc>] (balance_dirty_pages.constprop.6+0xac8/0xc5c)",
		"[<c03720bc>] (balance_dirty_pages.constprop.6) from [<c0372508>] (balance_dirty_pages_ratelimited+0x2b8/0x43c)",
		"[<c0372508>] (balance_dirty_pages_ratelimited) from [<c0397724>] (fault_dirty_shared_page+0x9c/0xb4)",
		"python          D    0  9167   9165 0x00000000",
		"[<c0955e68>] (__schedule) from [<c0956070>] (schedule+0x98/0xbc)",
		"[<c0956070>] (schedule) from [<c09598e4>] (schedule_timeout+0x328/0x3ac)")
}

func TestReflowedParagraph(t *testing.T) {
	in := `[  244.625393] INFO: task kworker/48:1:755 blocked for more than 30
seconds. [  244.632294]       Tainted: G S
6.8.0-rc1-20240129.intel.13479453+ #1 [  244.640157] "echo 0 >
/proc/sys/kernel/hung_task_timeout_secs" disables this message. [
244.648105] task:kworker/48:1    state:D stack:14592 pid:755   tgid:755
  ppid:2      flags:0x00004000 [  244.657552] Workqueue: md_misc
md_start_sync [md_mod] [  244.662688] Call Trace: [  244.665176]  <TASK>
[  244.667316]  __schedule+0x2f0/0x9c0
`
	got := wantTexts(t, in,
		"INFO: task kworker/48:1:755 blocked for more than 30 seconds.",
		"      Tainted: G S 6.8.0-rc1-20240129.intel.13479453+ #1",
		`"echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.`,
		"task:kworker/48:1    state:D stack:14592 pid:755   tgid:755 ppid:2      flags:0x00004000",
		"Workqueue: md_misc md_start_sync [md_mod]",
		"Call Trace:",
		" <TASK>",
		" __schedule+0x2f0/0x9c0")
	if got[3].Stamp != "244.648105" || got[3].Num != 5 || got[6].Num != 7 {
		t.Errorf("lines %+v %+v", got[3], got[6])
	}
}

func TestUnstampedLogJoinsOnlyKnownMessages(t *testing.T) {
	// A comm containing a newline splits the header; nothing else joins.
	wantTexts(t, "INFO: task \xef\xbf\xbd\xef\xbf\xbd\n\xef\xbf\xbd \xef\xbf\xbd:18088 blocked for more than 143 seconds.\n      Tainted: G             L      syzkaller #0\nCall Trace:\n __schedule+0x10e9/0x6820\n",
		"INFO: task \uFFFD\uFFFD \uFFFD \uFFFD:18088 blocked for more than 143 seconds.",
		"      Tainted: G             L      syzkaller #0",
		"Call Trace:",
		" __schedule+0x10e9/0x6820")
}

func TestFormatsStayApart(t *testing.T) {
	wantTexts(t, `2021-03-16 11:30:24.753 kernel:  __schedule+0x275/0x660
2022-08-15T16:27:12.190032Z ERR kernel: [    8.384979] i915
Sep 13 14:34:10 ccgx user.info kernel: [43500.179276] vedirect-dbus   D    0  1339   1336 0x00000000
    May 17 18:48:11 kernel: [ 6141.921740] INFO: task kworker/u8:0:5 blocked for more than 120 seconds.
[  +0.000049] task:python3.11      state:D stack:    0 pid:15277 ppid: 15257 flags:0x00000002
<6>[  125.315040][  T140] task:zsh             state:D
`,
		" __schedule+0x275/0x660",
		"i915",
		"vedirect-dbus   D    0  1339   1336 0x00000000",
		"INFO: task kworker/u8:0:5 blocked for more than 120 seconds.",
		"task:python3.11      state:D stack:    0 pid:15277 ppid: 15257 flags:0x00000002",
		"task:zsh             state:D")
}

func TestNBSPIndentation(t *testing.T) {
	wantTexts(t, "\u00a0\u00a0\u00a0\u00a0[  240.] Call Trace:\n\u00a0[<8066c218>] __schedule+0x2b8/0x7fc\n",
		"Call Trace:", " [<8066c218>] __schedule+0x2b8/0x7fc")
}

// endless is /dev/zero or a never-ending line: Read never returns EOF.
type endless byte

func (e endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(e)
	}
	return len(p), nil
}

func TestEndlessInputEnds(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    io.Reader
		want string
	}{
		{"zero", endless(0), "binary data"},
		{"one long line", endless('a'), "without a newline"},
		{"many lines", io.MultiReader(strings.NewReader("text\n"), &repeat{line: "[ 1.0] a kernel line\n"}), "larger than"},
	} {
		r := NewReader(tc.r, Limits{MaxBytes: 8 << 20})
		n := 0
		for {
			if _, ok := r.Next(); !ok {
				break
			}
			n++
		}
		st := r.Stats()
		if !strings.Contains(st.Cut, tc.want) || st.Bytes > 8<<20+DefaultMaxLineScan+DefaultMaxLineBytes {
			t.Errorf("%s: cut %q after %d bytes, %d lines", tc.name, st.Cut, st.Bytes, n)
		}
	}
}

type repeat struct{ line string }

func (r *repeat) Read(p []byte) (int, error) {
	n := 0
	for n+len(r.line) <= len(p) {
		n += copy(p[n:], r.line)
	}
	if n == 0 {
		n = copy(p, r.line)
	}
	return n, nil
}

func TestInputExactlyAtLimitIsNotCut(t *testing.T) {
	in := bytes.Repeat([]byte("0123456789abcde\n"), 64) // 1 KiB
	r := NewReader(bytes.NewReader(in), Limits{MaxBytes: 1024})
	n := 0
	for {
		if _, ok := r.Next(); !ok {
			break
		}
		n++
	}
	if n != 64 || r.Stats().Cut != "" {
		t.Errorf("%d lines, cut %q", n, r.Stats().Cut)
	}
}

func TestBinaryLaterIsRead(t *testing.T) {
	in := strings.Repeat("[ 1.0] text\n", 600) + "\x00\x01\x02\n[ 2.0] after\n"
	got, st := readAll(t, in)
	if st.Binary || st.Cut != "" || got[len(got)-1].Text != "after" {
		t.Errorf("stats %+v, last %+v", st, got[len(got)-1])
	}
}
