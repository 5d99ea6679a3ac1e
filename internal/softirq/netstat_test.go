package softirq

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/wolf-investigator/wolf/internal/probekit"
)

const netstatFixture = `TcpExt: SyncookiesSent PruneCalled RcvPruned OfoPruned TCPRcvCollapsed TCPRcvQDrop
TcpExt: 0 13 0 0 463709 2
IpExt: InNoRoutes InOctets
IpExt: 0 123456
MPTcpExt: Broken
MPTcpExt: 1 2
`

func TestParseNetstat(t *testing.T) {
	m := ParseNetstat([]byte(netstatFixture))
	if m["TcpExt.PruneCalled"] != 13 || m["TcpExt.TCPRcvCollapsed"] != 463709 || m["IpExt.InOctets"] != 123456 {
		t.Errorf("parsed %v", m)
	}
	if _, ok := m["MPTcpExt.Broken"]; ok {
		t.Errorf("mismatched pair parsed: %v", m)
	}
}

func TestNetnsDeltas(t *testing.T) {
	before := map[uint64]*Netns{
		1: {Inode: 1, PID: 1, Comm: "init", Counter: map[string]int64{"TcpExt.PruneCalled": 5}},
		2: {Inode: 2, PID: 200, Comm: "app", Counter: map[string]int64{"TcpExt.PruneCalled": 0, "TcpExt.TCPRcvCollapsed": 10}},
		3: {Inode: 3, PID: 300, Comm: "gone", Counter: map[string]int64{}},
	}
	after := map[uint64]*Netns{
		1: {Inode: 1, PID: 1, Comm: "init", Counter: map[string]int64{"TcpExt.PruneCalled": 6}},
		2: {Inode: 2, PID: 200, Comm: "app", Counter: map[string]int64{"TcpExt.PruneCalled": 9, "TcpExt.TCPRcvCollapsed": 5000, "TcpExt.TCPRcvQDrop": 1}},
		4: {Inode: 4, PID: 400, Comm: "new", Counter: map[string]int64{"TcpExt.PruneCalled": 99}},
	}
	ds := NetnsDeltas(before, after)
	if len(ds) != 2 || ds[0].Inode != 2 || ds[0].Delta["TCPRcvCollapsed"] != 4990 || ds[0].Delta["TCPRcvQDrop"] != 1 || ds[1].Inode != 1 {
		t.Fatalf("deltas %+v", ds)
	}
	sum := SumDeltas(ds)
	if sum["PruneCalled"] != 10 || sum["TCPRcvCollapsed"] != 4990 {
		t.Errorf("sum %v", sum)
	}
}

func TestParseSoftnet(t *testing.T) {
	// 6.x: 15 columns, the 13th is the CPU number (CPU 1 offline here).
	modern := "00376c6b 00000000 00000040 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000\n" +
		"00002015 00000003 00000002 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000002 00000000 00000000\n"
	got, err := ParseSoftnet([]byte(modern))
	if err != nil || len(got) != 2 || got[0].Processed != 0x376c6b || got[0].TimeSqueeze != 0x40 || got[1].CPU != 2 || got[1].Dropped != 3 {
		t.Fatalf("parsed %+v, %v", got, err)
	}
	old := "00000010 00000000 00000001 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000\n"
	got, err = ParseSoftnet([]byte(old))
	if err != nil || len(got) != 1 || got[0].CPU != 0 || got[0].TimeSqueeze != 1 {
		t.Fatalf("parsed %+v, %v", got, err)
	}
	if _, err := ParseSoftnet([]byte("zz 00 00\n")); err == nil {
		t.Error("bad hex accepted")
	}
}

func TestSoftnetDeltasWrap(t *testing.T) {
	before := []Softnet{{CPU: 0, Processed: 0xfffffff0, TimeSqueeze: 3}, {CPU: 1, Processed: 5}}
	after := []Softnet{{CPU: 0, Processed: 0x10, TimeSqueeze: 5}, {CPU: 2, Processed: 9}}
	d := SoftnetDeltas(before, after)
	if len(d) != 1 || d[0].Processed != 0x20 || d[0].TimeSqueeze != 2 {
		t.Errorf("deltas %+v", d)
	}
}

// The scanner finds namespaces through a fake /proc.
func TestNetnsScanner(t *testing.T) {
	root := t.TempDir()
	mk := func(pid, tid int, ns string, netstat string) {
		dir := filepath.Join(root, strconv.Itoa(pid), "task", strconv.Itoa(tid))
		if err := os.MkdirAll(filepath.Join(dir, "ns"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, "net"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(ns, filepath.Join(dir, "ns", "net")); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "net", "netstat"), []byte(netstat), 0o644); err != nil {
			t.Fatal(err)
		}
		_ = os.WriteFile(filepath.Join(root, strconv.Itoa(pid), "comm"), []byte("p"+strconv.Itoa(pid)+"\n"), 0o644)
	}
	mk(1, 1, "net:[100]", netstatFixture)
	mk(7, 7, "net:[100]", netstatFixture)
	mk(7, 8, "net:[200]", "TcpExt: PruneCalled\nTcpExt: 4\n")
	s := netnsScanner{proc: root, timeout: defaultScanner().timeout, maxTask: 1000}
	got, err := s.scanSync(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[100].PID != 1 || got[200].PID != 7 || got[200].TID != 8 || got[200].Comm != "p7" || got[200].Counter["TcpExt.PruneCalled"] != 4 {
		t.Fatalf("namespaces %+v", got)
	}
	if err := os.WriteFile(filepath.Join(root, "7", "task", "8", "net", "netstat"), []byte("TcpExt: PruneCalled\nTcpExt: 10\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ds := NetnsDeltas(got, s.reread(t.Context(), got))
	if len(ds) != 1 || ds[0].Inode != 200 || ds[0].Delta["PruneCalled"] != 6 {
		t.Errorf("deltas %+v", ds)
	}
}

// NAPI windows from readings of flushed-plus-pending polls: each window
// is what was added since the previous reading; a reading that missed a
// flush (made between reading napi_stats and the CPUs' accumulators) is
// short, and what it missed is counted once, in the next window.
func TestNAPIWindow(t *testing.T) {
	var since probekit.Since[uint64, NAPIStat]
	step := func(polls, work uint64) NAPIStat {
		return since.Step(map[uint64]NAPIStat{1: {Device: "eth0", Polls: polls, Work: work, MaxWork: 7}}, napiWindow)[1]
	}
	for i, c := range []struct{ polls, work, wantPolls, wantWork uint64 }{
		{10, 100, 10, 100}, // the first window: everything since Start
		{25, 160, 15, 60},
		{20, 150, 0, 0},  // a flush missed: short, nothing negative
		{30, 200, 5, 40}, // counted once: 25 was reported already
		{30, 200, 0, 0},
	} {
		got := step(c.polls, c.work)
		if got.Polls != c.wantPolls || got.Work != c.wantWork || got.Device != "eth0" || got.MaxWork != 7 {
			t.Errorf("window %d: %+v, want %d polls %d packets", i, got, c.wantPolls, c.wantWork)
		}
	}
}
