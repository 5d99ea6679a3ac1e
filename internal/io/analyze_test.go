package io

import (
	"strings"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/fact"
	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/finding/findingtest"
	"github.com/wolf-investigator/wolf/internal/hist"
	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/procfs"
	"github.com/wolf-investigator/wolf/internal/sysstat"
)

// lat makes a histogram of n values of d each.
func lat(n int, d time.Duration) hist.Log2 {
	var h hist.Log2
	for range n {
		h.Add(uint64(d))
	}
	return h
}

// usage is a consumer with n timed requests of size bytes taking total
// (of which on the device dev).
func usage(cg string, pid int, comm string, reads, writes int, size uint64, total, dev time.Duration) *Usage {
	n := reads + writes
	u := &Usage{Cgroup: cg, PID: pid, Comm: comm, Total: lat(n, total), OnDevice: lat(n, dev)}
	u.Reads, u.Writes = uint64(reads), uint64(writes)
	u.ReadBytes, u.WriteBytes = uint64(reads)*size, uint64(writes)*size
	u.Timed = uint64(n)
	u.DeviceNs = uint64(n) * uint64(dev)
	u.QueuedNs = uint64(n) * uint64(total-dev)
	u.MaxTotalNs, u.MaxDeviceNs = uint64(total), uint64(dev)
	return u
}

// perThread splits each waiter's waits evenly over its threads (1 when
// it says none), as the programs report them thread by thread.
func perThread(s *Snapshot) *Snapshot {
	for _, w := range s.Waiters {
		if len(w.PerThread) > 0 {
			continue
		}
		n := max(w.Threads, 1)
		for i := range n {
			w.PerThread = append(w.PerThread, ThreadWait{TID: w.PID + i, Count: w.Count / n, Total: w.Total / time.Duration(n), Max: w.Max})
		}
	}
	return s
}

func device(name string, major, minor int, busyPct float64, users ...*Usage) *Device {
	d := &Device{Name: name, Major: major, Minor: minor, Users: users, Stat: &DiskStat{BusyPct: busyPct, NrRequests: 256}}
	for _, u := range users {
		d.Ops.add(&u.Ops)
		d.Total.Merge(&u.Total)
		d.OnDevice.Merge(&u.OnDevice)
	}
	return d
}

// throttleSnapshot is the example: fio in /x reads vda, capped at
// 1 MiB/s by blkio.throttle.read_bps_device; vda is 3% busy.
func throttleSnapshot() *Snapshot {
	held := usage("/x", 0, "", 40, 0, 64<<10, 2*time.Millisecond, time.Millisecond)
	held.Throttled, held.ThrottledBytes = 40, 40*64<<10
	other := usage("/", 812, "postgres", 200, 50, 8<<10, time.Millisecond, 800*time.Microsecond)
	return perThread(&Snapshot{
		Window: 10 * time.Second, WaitersArmed: true, Throttle: true, CgroupVersion: 1,
		Devices: []*Device{device("vda", 254, 0, 3, other, held)},
		Waiters: []*Waiter{{PID: 4242, TID: 4243, Comm: "fio", Threads: 4, Cgroup: "/x", Kind: KindIO, Device: "vda",
			ReqCgroup: "/x", Throttled: true, Count: 40, Total: 10 * time.Second, Max: 300 * time.Millisecond,
			Held: 9900 * time.Millisecond, Queued: 10 * time.Millisecond, OnDevice: 40 * time.Millisecond}},
		Limits: []Limit{{Cgroup: "/x", Device: "vda", File: "blkio.throttle.read_bps_device", Key: "rbps", Value: 1 << 20, Own: true}},
	})
}

func TestThrottledNamesTheLimitAndTheWaiters(t *testing.T) {
	s := throttleSnapshot()
	fs := Conclude(s)
	f := first(t, fs, "io.throttled")
	want := "fio (pid 4242, 4 threads) in cgroup /x waits 250 ms per read: /x is capped at 1 MiB/s of reads (blkio.throttle.read_bps_device) on vda; vda itself is 3.0% busy"
	if f.Title != want {
		t.Errorf("title\n got %q\nwant %q", f.Title, want)
	}
	if f.Severity != finding.Critical {
		t.Errorf("severity %v: fio lost the whole window to the throttle", f.Severity)
	}
	for k, v := range map[string]any{"device": "vda", "cgroup": "/x", "limit_bytes_per_s": uint64(1 << 20), "throttled_requests": uint64(40),
		"limit_file": "blkio.throttle.read_bps_device", "waits": 40, "wait_ms_avg": 250.0, "held_ms_avg": 247.5, "device_busy_pct": 3.0} {
		if f.Evidence[k] != v {
			t.Errorf("evidence %s = %v (%T), want %v (%T)", k, f.Evidence[k], f.Evidence[k], v, v)
		}
	}
	if w := findingtest.Subjects(f, finding.RoleWaiter); len(w) != 1 || w[0].PID != 4242 || w[0].Comm != "fio" {
		t.Errorf("waiters %+v", w)
	}
	if !strings.Contains(strings.Join(f.Remediation, "\n"), "/sys/fs/cgroup/blkio/x/blkio.throttle.read_bps_device") {
		t.Errorf("remediation does not name the file: %q", f.Remediation)
	}
	// The device is fast: no slow-device verdict beside the throttle.
	if len(findingtest.All(fs, "io.slow-device")) != 0 {
		t.Error("a device 3 percent busy called slow")
	}
}

// Without the waiters armed (they could not attach), the throttle is
// still told from the requests blk-throttle dispatched, and the report
// says why the waits are missing.
func TestThrottledWithoutWaiters(t *testing.T) {
	s := throttleSnapshot()
	s.Waiters, s.WaitersArmed, s.WaitersOff = nil, false, "--waiters off"
	f := first(t, Conclude(s), "io.throttled")
	if !strings.HasPrefix(f.Title, "blk-throttle held 40 of /x's 40 requests on vda, capped at 1 MiB/s of reads") {
		t.Errorf("title %q", f.Title)
	}
	if f.Severity != finding.Warning || !strings.Contains(f.Summary, "--waiters off") {
		t.Errorf("severity %v, summary %q", f.Severity, f.Summary)
	}
}

// The per-device item of the JSON contract.
func TestDeviceEvidenceContract(t *testing.T) {
	s := throttleSnapshot()
	f := first(t, Conclude(s), "io.device")
	for _, k := range []string{"device", "requests", "window_s", "read_bytes", "write_bytes", "reads", "writes", "p50_us", "p99_us", "max_us",
		"queued_us_avg", "on_device_us_avg", "busy_pct"} {
		if _, ok := f.Evidence[k]; !ok {
			t.Errorf("evidence has no %s: %v", k, f.Evidence)
		}
	}
	if f.Evidence["requests"] != uint64(290) || f.Evidence["window_s"] != 10.0 || f.Evidence["device"] != "vda" {
		t.Errorf("evidence %v", f.Evidence)
	}
	if f.Severity != finding.Info {
		t.Errorf("a device's own item is info, got %v", f.Severity)
	}
	if len(f.Subjects) == 0 || f.Subjects[0].Comm != "postgres" {
		t.Errorf("subjects, most bytes first: %+v", f.Subjects)
	}
}

func TestHealthyDeviceRaisesNothing(t *testing.T) {
	s := &Snapshot{Window: 10 * time.Second, Devices: []*Device{device("nvme0n1", 259, 0, 12,
		usage("/", 1, "postgres", 5000, 2000, 8<<10, 300*time.Microsecond, 250*time.Microsecond))}}
	for _, f := range Conclude(s) {
		if f.Severity > finding.Info {
			t.Errorf("healthy device: %s %v %s", f.ID, f.Severity, f.Title)
		}
	}
}

func TestSlowDevice(t *testing.T) {
	u := usage("/", 77, "fio", 300, 0, 4<<10, 52*time.Millisecond, 50*time.Millisecond)
	s := perThread(&Snapshot{Window: 10 * time.Second, WaitersArmed: true, Devices: []*Device{device("loop3", 7, 3, 100, u)},
		Waiters: []*Waiter{{PID: 77, Comm: "fio", Kind: KindIO, Device: "loop3", ReqCgroup: "/", Count: 300, Total: 15600 * time.Millisecond,
			Max: 60 * time.Millisecond, OnDevice: 15 * time.Second}}})
	f := first(t, Conclude(s), "io.slow-device")
	if !strings.HasPrefix(f.Title, "loop3 is slow: requests take 50 ms on the device") || !strings.Contains(f.Title, "100% busy") ||
		!strings.Contains(f.Title, "fio (pid 77) waits 52 ms per read") {
		t.Errorf("title %q", f.Title)
	}
	fs := Facts(s, Conclude(s))
	var sat *fact.Saturation
	for i := range fs.Saturations {
		if fs.Saturations[i].On == fact.DeviceKey("loop3") {
			sat = &fs.Saturations[i]
		}
	}
	if sat == nil || sat.Level != 1 || sat.Finding != "io.slow-device" {
		t.Fatalf("device saturation %+v", sat)
	}
	if len(fs.Waits) != 1 || fs.Waits[0].On != fact.DeviceKey("loop3") || fs.Waits[0].Kind != fact.WaitIO {
		t.Errorf("waits %+v", fs.Waits)
	}
}

func TestDirtyThrottled(t *testing.T) {
	held := usage("/", 0, "", 0, 30, 1<<20, 200*time.Millisecond, 5*time.Millisecond)
	held.Throttled = 30
	s := perThread(&Snapshot{Window: 10 * time.Second, WaitersArmed: true, Devices: []*Device{device("loop1", 7, 1, 4, held)},
		Waiters: []*Waiter{{PID: 9, Comm: "dd", Kind: KindDirty, Device: "loop1", Count: 80, Total: 8 * time.Second, Max: 200 * time.Millisecond}}})
	f := first(t, Conclude(s), "io.dirty-throttled")
	if f.Title != "dd (pid 9) was paused 8 s of 10 s by dirty throttling on loop1" || f.Severity != finding.Critical {
		t.Errorf("%v %q", f.Severity, f.Title)
	}
	if f.Evidence["throttled_write_requests"] != uint64(30) {
		t.Errorf("evidence %v", f.Evidence)
	}
	fs := Facts(s, Conclude(s))
	var wb *fact.Usage
	for i := range fs.Usage {
		if fs.Usage[i].For == fact.DirtyKey("loop1") {
			wb = &fs.Usage[i]
		}
	}
	if wb == nil || wb.On != fact.IOLimitKey("/", "loop1") || wb.Activity != "writeback" {
		t.Errorf("writeback usage for the dirty pages: %+v", wb)
	}
	if len(fs.Waits) != 1 || fs.Waits[0].Kind != fact.WaitDirty || fs.Waits[0].On != fact.DirtyKey("loop1") {
		t.Errorf("waits %+v", fs.Waits)
	}
}

// The journal stall of the issue: an unrelated process's fsync waits for
// a commit whose committer waits for another cgroup's throttled data.
func journalSnapshot() *Snapshot {
	held := usage("/lab", 0, "", 0, 20, 1<<20, 300*time.Millisecond, 2*time.Millisecond)
	held.Throttled = 20
	return perThread(&Snapshot{
		Window: 10 * time.Second, WaitersArmed: true, Throttle: true, CgroupVersion: 1,
		Devices: []*Device{device("loop0", 7, 0, 2, held)},
		Journals: []*Journal{{Device: "loop0", Commits: 3, Total: 7 * time.Second, Flushing: 6800 * time.Millisecond,
			Logging: 30 * time.Millisecond, Max: 3 * time.Second, Committer: 311, CommitterComm: "jbd2/loop0-8"}},
		Waiters: []*Waiter{
			{PID: 500, Comm: "victim", Cgroup: "/", Kind: KindFsync, Device: "loop0", Count: 3, Total: 7 * time.Second, Max: 3 * time.Second},
			{PID: 311, TID: 311, Comm: "jbd2/loop0-8", Cgroup: "/", Kind: KindIO, Device: "loop0", ReqCgroup: "/lab", Throttled: true,
				Count: 12, Total: 6500 * time.Millisecond, Max: 900 * time.Millisecond, Held: 6400 * time.Millisecond},
		},
		Limits: []Limit{{Cgroup: "/lab", Device: "loop0", File: "blkio.throttle.write_bps_device", Key: "wbps", Value: 1 << 20, Own: true}},
	})
}

// Without the committer's own wait in the window, the title still names
// the fsync outside the cgroup an I/O limit holds back on the device.
func TestJournalStallTitleWithoutCommitterWait(t *testing.T) {
	s := journalSnapshot()
	s.Waiters = []*Waiter{
		{PID: 400, Comm: "writer", Cgroup: "/lab", Kind: KindFsync, Device: "loop0", Count: 2, Total: 8 * time.Second, Max: 4 * time.Second},
		s.Waiters[0],
	}
	f := first(t, Conclude(s), "io.journal-stall")
	if !strings.HasPrefix(f.Title, "victim (pid 500) waited up to 3 s in fsync on loop0 behind the journal") {
		t.Errorf("title %q", f.Title)
	}
	// Nor does the committer's wait for its own journal blocks (cgroup /,
	// not held by the throttle) make the throttled writer the news.
	s.Waiters = append(s.Waiters, &Waiter{PID: 311, TID: 311, Comm: "jbd2/loop0-8", Cgroup: "/", Kind: KindIO, Device: "loop0", ReqCgroup: "/",
		Count: 3, Total: 14 * time.Millisecond, Max: 5 * time.Millisecond})
	s.Waiters[len(s.Waiters)-1].PerThread = nil
	f = first(t, Conclude(perThread(s)), "io.journal-stall")
	if !strings.HasPrefix(f.Title, "victim (pid 500) waited up to 3 s in fsync on loop0 behind the journal") {
		t.Errorf("title beside the committer's own writes %q", f.Title)
	}
	// With no limit on the device, the longest waiter is named.
	s.Limits = nil
	f = first(t, Conclude(s), "io.journal-stall")
	if !strings.HasPrefix(f.Title, "writer (pid 400) waited up to 4 s") {
		t.Errorf("title without limits %q", f.Title)
	}
}

// A commit already flushing when the waiters attached leaves no wait of
// the committer's: its flushing is then a likely wait on the limit that
// held the device's writes, and nothing is placed without one.
func TestJournalCommitterWaitInferred(t *testing.T) {
	s := journalSnapshot()
	s.Waiters = s.Waiters[:1] // the victim's fsync only
	s.Devices[0].Users[0].ThrottledBytes = 20 << 20
	var got *fact.Wait
	set := Facts(s, Conclude(s))
	for i, w := range set.Waits {
		if w.Task.PID == 311 {
			got = &set.Waits[i]
		}
	}
	if got == nil || !got.Likely || got.On != fact.IOLimitKey("/lab", "loop0") || got.Total != 6830*time.Millisecond {
		t.Fatalf("committer's wait %+v", got)
	}
	var h *fact.Hold
	for i := range set.Holds {
		if set.Holds[i].Holder.PID == 311 {
			h = &set.Holds[i]
		}
	}
	if h == nil || h.Split == nil || h.Split.IO != 6830*time.Millisecond {
		t.Errorf("hold %+v", h)
	}
	// With some of it seen, the rest of the flushing is placed.
	seen := journalSnapshot()
	seen.Devices[0].Users[0].ThrottledBytes = 20 << 20
	seen.Waiters[1].Total, seen.Waiters[1].PerThread = 2*time.Second, nil
	seen = perThread(seen)
	var likely time.Duration
	for _, w := range Facts(seen, Conclude(seen)).Waits {
		if w.Task.PID == 311 && w.Likely {
			likely += w.Total
		}
	}
	if likely != 4830*time.Millisecond {
		t.Errorf("likely wait %s beside 2 s seen, want 4.83 s", likely)
	}
	s.Limits = nil
	for _, w := range Facts(s, Conclude(s)).Waits {
		if w.Task.PID == 311 {
			t.Errorf("a wait placed with no limit on the device: %+v", w)
		}
	}
}

func TestJournalStall(t *testing.T) {
	s := journalSnapshot()
	// The throttled cgroup's own writer waits longer in fsync, but the
	// title names the process outside it that waits for its data.
	s.Waiters = append([]*Waiter{{PID: 400, Comm: "writer", Cgroup: "/lab", Kind: KindFsync, Device: "loop0", Count: 2, Total: 8 * time.Second, Max: 4 * time.Second}}, s.Waiters...)
	fs := Conclude(s)
	f := first(t, fs, "io.journal-stall")
	if !strings.HasPrefix(f.Title, "victim (pid 500) waited up to 3 s in fsync on loop0 behind the journal: commits took up to 3 s") ||
		!strings.HasSuffix(f.Title, "jbd2/loop0-8 waiting 900 ms for writes of cgroup /lab held by blk-throttle") {
		t.Errorf("title %q", f.Title)
	}
	if h := findingtest.Subjects(f, finding.RoleHolder); len(h) != 1 || h[0].PID != 311 || h[0].Evidence["waited_for_cgroup"] != "/lab" {
		t.Errorf("holder %+v", h)
	}
	// The committer's own waits make a throttle finding of their own.
	th := first(t, fs, "io.throttled")
	if !strings.HasPrefix(th.Title, "jbd2/loop0-8 (pid 311) in cgroup /lab waits 542 ms per write: /lab is capped at 1 MiB/s of writes") {
		t.Errorf("throttle title %q", th.Title)
	}
	facts := Facts(s, Conclude(s))
	var jw, cw *fact.Wait
	for i := range facts.Waits {
		switch facts.Waits[i].Task.PID {
		case 500:
			jw = &facts.Waits[i]
		case 311:
			cw = &facts.Waits[i]
		}
	}
	if jw == nil || jw.Kind != fact.WaitJournal || jw.On != fact.JournalKey("loop0") {
		t.Fatalf("victim's wait %+v", jw)
	}
	if cw == nil || cw.On != fact.IOLimitKey("/lab", "loop0") {
		t.Fatalf("committer's wait %+v", cw)
	}
	if len(facts.Holds) != 1 || facts.Holds[0].On != fact.JournalKey("loop0") || facts.Holds[0].Holder.PID != 311 || facts.Holds[0].Split.IO != 6500*time.Millisecond {
		t.Errorf("holds %+v", facts.Holds)
	}
}

func TestThrottleFacts(t *testing.T) {
	fs := Facts(throttleSnapshot(), nil)
	k := fact.IOLimitKey("/x", "vda")
	if r := fs.Resources[k]; r == nil || r.Kind != fact.IOLimit || r.Cgroup != "/x" || r.Device != "vda" {
		t.Fatalf("resource %+v", fs.Resources[k])
	}
	var sat *fact.Saturation
	for i := range fs.Saturations {
		if fs.Saturations[i].On == k {
			sat = &fs.Saturations[i]
		}
	}
	if sat == nil || sat.Limit != 1<<20 || sat.Unit != "bytes_per_s" || sat.Numbers["held_ms_avg"] != 247.5 || sat.Numbers["device_busy_pct"] != 3 {
		t.Fatalf("limit saturation %+v", sat)
	}
	if got := sat.Used; got != float64(40*64<<10)/10 {
		t.Errorf("used %v", got)
	}
	var ws []fact.Wait
	for _, w := range fs.Waits {
		if w.Task.PID == 4242 {
			ws = append(ws, w)
		}
	}
	if len(ws) != 4 || ws[0].On != k || ws[0].Count != 10 || ws[0].Total != 2500*time.Millisecond || ws[0].Finding != "io.throttled" {
		t.Errorf("fio's waits, one per thread: %+v", ws)
	}
}

func TestAdmissionFromStacks(t *testing.T) {
	stack := []string{"__schedule+0x3c1", "schedule+0x27", "io_schedule+0x46", "rq_qos_wait+0xbf", "wbt_wait+0x9f", "__rq_qos_throttle+0x24",
		"blk_mq_submit_bio+0x1c8", "submit_bio_noacct_nocheck+0x2b3", "ext4_io_submit+0x24"}
	site := classify(stack)
	if site.Kind != SiteWBT || site.Func != "wbt_wait" {
		t.Fatalf("site %+v", site)
	}
	s := &Snapshot{Window: 10 * time.Second, LongWaits: []LongWait{{PID: 3, TID: 4, Comm: "rsync", Kind: KindOther, Device: "vda", Wait: 1500 * time.Millisecond, Stack: stack, Site: site}},
		QoS: []QoS{{Device: "vda", WBTSteps: 4, WBTStep: 3, WBTNormal: 2}}}
	f := first(t, Conclude(s), "io.admission")
	if f.Title != "1 task waited up to 1.5 s for writeback throttling (wbt) to admit a write (last request from vda)" || f.Severity != finding.Critical {
		t.Errorf("%v %q", f.Severity, f.Title)
	}
	if f.Evidence["wbt_step"] != 3 {
		t.Errorf("evidence %v", f.Evidence)
	}
}

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		stack []string
		want  string
	}{
		{[]string{"io_schedule+0x1", "blk_mq_get_tag+0x11", "__blk_mq_alloc_requests+0x5"}, SiteTags},
		{[]string{"io_schedule_timeout+0x1", "balance_dirty_pages+0x6ff", "balance_dirty_pages_ratelimited_flags+0x2"}, SiteDirty},
		{[]string{"io_schedule+0x1", "folio_wait_bit_common+0x13", "folio_wait_writeback+0x2b", "__filemap_fdatawait_range+0x8"}, SiteWriteback},
		{[]string{"schedule+0x1", "jbd2_log_wait_commit+0xb0", "ext4_sync_file+0x1"}, SiteJournal},
		{[]string{"io_schedule+0x1", "submit_bio_wait+0x5", "__blkdev_direct_IO_simple+0x1c4"}, SiteDirect},
		{[]string{"io_schedule+0x1", "ioc_rqos_throttle+0x3"}, SiteIOCost},
		{[]string{"io_schedule+0x1", "something_else+0x3"}, SiteIO},
		{nil, ""},
	} {
		if got := classify(c.stack).Kind; got != c.want {
			t.Errorf("%v: %q, want %q", c.stack, got, c.want)
		}
	}
}

func TestParseLimits(t *testing.T) {
	v1 := parseV1Limits("7:0 1048576\n254:0 0\n\n")
	if len(v1) != 1 || v1[0].dev != "7:0" || v1[0].v != 1<<20 {
		t.Errorf("v1 %+v", v1)
	}
	v2 := parseIOMax("8:16 rbps=2097152 wbps=max riops=max wiops=120\n")
	if len(v2) != 2 || v2[0] != (devValue{"8:16", "rbps", 2 << 20}) || v2[1] != (devValue{"8:16", "wiops", 120}) {
		t.Errorf("v2 %+v", v2)
	}
	lat := parseIOMax("8:16 target=10000\n")
	if len(lat) != 1 || lat[0].key != "target" || lat[0].v != 10000 {
		t.Errorf("io.latency %+v", lat)
	}
}

func TestBindingLimit(t *testing.T) {
	ls := []Limit{
		{Cgroup: "/", Key: "rbps", Value: 10 << 20},
		{Cgroup: "/x", Key: "wbps", Value: 1 << 20, Own: true},
		{Cgroup: "/x", Key: "riops", Value: 100, Own: true},
		{Cgroup: "/x", Key: "rbps", Value: 2 << 20, Own: true},
	}
	reads := Ops{Reads: 5}
	if l, _ := bindingLimit(ls, &reads); l.Key != "rbps" || !l.Own {
		t.Errorf("reads: %+v", l)
	}
	writes := Ops{Writes: 5}
	if l, _ := bindingLimit(ls, &writes); l.Key != "wbps" {
		t.Errorf("writes: %+v", l)
	}
}

func TestFindHierarchy(t *testing.T) {
	mounts := []procfs.Mount{
		{FSType: "cgroup", Root: "/", Point: "/sys/fs/cgroup/memory", SuperOptions: []string{"rw", "memory"}},
		{FSType: "cgroup", Root: "/", Point: "/sys/fs/cgroup/blkio", SuperOptions: []string{"rw", "blkio"}},
		{FSType: "cgroup2", Root: "/", Point: "/sys/fs/cgroup/unified"},
	}
	h, err := findIn(mounts, func(string) string { return "" })
	if err != nil || h.Version != 1 || h.Mount != "/sys/fs/cgroup/blkio" {
		t.Errorf("v1: %+v %v", h, err)
	}
	h, err = findIn(mounts[2:], func(string) string { return "cpu io memory" })
	if err != nil || h.Version != 2 {
		t.Errorf("v2: %+v %v", h, err)
	}
	if _, err = findIn(mounts[2:], func(string) string { return "cpu memory" }); err == nil {
		t.Error("no io controller: want an error")
	}
	cgs := []procfs.Cgroup{{Hierarchy: 4, Controllers: []string{"blkio"}, Path: "/x"}, {Hierarchy: 0, Path: "/y"}}
	if p, ok := h.pathOf(cgs); !ok || p != "/y" {
		t.Errorf("v2 path %q", p)
	}
}

func TestHistogramsPerDeviceAndCgroup(t *testing.T) {
	hs := throttleSnapshot().Histograms()
	names := map[string]int{}
	for _, h := range hs {
		names[h.Name]++
		if h.Name == "io_cgroup_latency_us" && h.Labels["cgroup"] == "/x" && h.Count != 40 {
			t.Errorf("/x's histogram counts %d", h.Count)
		}
	}
	if names["io_latency_us"] != 1 || names["io_device_latency_us"] != 1 || names["io_cgroup_latency_us"] != 2 {
		t.Errorf("histograms %v", names)
	}
}

func TestNotesSayWhatIsLost(t *testing.T) {
	s := &Snapshot{WaitersOff: "nothing held I/O back", Lost: Lost{Untracked: 3, Waits: 2}}
	n := strings.Join(s.Notes(), "\n")
	for _, w := range []string{"waiters not watched: nothing held I/O back", "blk-throttle's dispatch function is not in kallsyms", "3 completed without their issue seen", "2 waits"} {
		if !strings.Contains(n, w) {
			t.Errorf("notes lack %q:\n%s", w, n)
		}
	}
}

// first is the first finding with id; the test fails without one.
func first(t *testing.T, fs []finding.Finding, id string) finding.Finding {
	t.Helper()
	f := findingtest.First(fs, id)
	if f == nil {
		var ids []string
		for _, x := range fs {
			ids = append(ids, x.ID)
		}
		t.Fatalf("no %s among %v", id, ids)
	}
	return *f
}

// The gauges watch exports come from the findings' evidence.
func TestGauges(t *testing.T) {
	s := throttleSnapshot()
	res := &investigator.Result{Findings: Conclude(s)}
	_, gauges := New().Metrics()
	got := map[string][]investigator.GaugeValue{}
	for _, g := range gauges {
		got[g.Name] = g.Values(res)
	}
	if v := got["wolf_io_device_busy_ratio"]; len(v) != 1 || v[0].Labels[0] != "vda" || v[0].Value != 0.03 {
		t.Errorf("busy %+v", v)
	}
	if v := got["wolf_io_throttled_seconds"]; len(v) != 1 || v[0].Labels[1] != "/x" || v[0].Value != 9.9 {
		t.Errorf("throttled seconds %+v", v)
	}
	if v := got["wolf_io_throttled_requests"]; len(v) != 1 || v[0].Value != 40 {
		t.Errorf("throttled requests %+v", v)
	}
}

func TestSlowDiskArmsWaiters(t *testing.T) {
	prev := map[string]sysstat.DiskStat{"loop3": {Reads: 100, ReadMs: 1000, IOMs: 1000}, "vda": {Reads: 10, ReadMs: 10, IOMs: 10}}
	slow := map[string]sysstat.DiskStat{"loop3": {Reads: 140, ReadMs: 1000 + 40*25, IOMs: 1000 + 950}, "vda": {Reads: 5000, ReadMs: 2000, IOMs: 990}}
	if !slowDisk(prev, slow, time.Second, "") || !slowDisk(prev, slow, time.Second, "loop3") {
		t.Error("loop3, 95% busy at 25 ms a request, is slow")
	}
	if slowDisk(prev, slow, time.Second, "vda") {
		t.Error("vda, busy at 0.4 ms a request, is not slow")
	}
}

func TestBusyDiskArmsWaiters(t *testing.T) {
	prev := map[string]sysstat.DiskStat{"vda": {Reads: 10, ReadMs: 10, IOMs: 10}, "sdb": {Reads: 10, IOMs: 10}}
	cur := map[string]sysstat.DiskStat{"vda": {Reads: 5000, ReadMs: 2000, IOMs: 800}, "sdb": {Reads: 15, IOMs: 900}}
	if !busyDisk(prev, cur, time.Second, "") || !busyDisk(prev, cur, time.Second, "vda") {
		t.Error("vda, 79% busy with 4990 fast requests, is busy")
	}
	if busyDisk(prev, cur, time.Second, "sdb") {
		t.Error("sdb made 5 requests: too few to say")
	}
	idle := map[string]sysstat.DiskStat{"vda": {Reads: 5000, ReadMs: 2000, IOMs: 300}}
	if busyDisk(prev, idle, time.Second, "") {
		t.Error("vda 29% busy is not busy")
	}
}
