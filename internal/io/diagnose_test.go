package io

import (
	"strings"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/diagnose"
	"github.com/wolf-investigator/wolf/internal/finding"
)

// diagnosis runs the diagnosis stage on a snapshot's findings and facts,
// as doctor does, and returns its first diagnosis.
func diagnosis(t *testing.T, s *Snapshot) finding.Diagnosis {
	t.Helper()
	fs := Conclude(s)
	ds := diagnose.Diagnose(fs, Facts(s, fs))
	if len(ds) == 0 {
		t.Fatal("no diagnosis")
	}
	for _, d := range ds {
		t.Logf("%s: %s", d.ID, d.Title)
		for _, h := range d.Chain {
			t.Logf("   %s: %s", h.Relation, h.Text)
		}
	}
	return ds[0]
}

// The example, said by the diagnosis stage from io's facts.
func TestDiagnosisOfTheThrottle(t *testing.T) {
	d := diagnosis(t, throttleSnapshot())
	want := "fio (pid 4242, 4 threads) in cgroup /x waits 250 ms per read: cgroup /x is capped at 1 MiB/s of reads (blkio.throttle.read_bps_device) on vda; vda itself is 3.0% busy"
	if d.ID != "diagnose.io-limit" || d.Title != want {
		t.Errorf("%s\n got %q\nwant %q", d.ID, d.Title, want)
	}
	if !strings.Contains(strings.Join(d.Remediation, "\n"), "/sys/fs/cgroup/blkio/x/blkio.throttle.read_bps_device") {
		t.Errorf("remediation %q", d.Remediation)
	}
}

// The journal stall: an fsync behind the journal, whose committer waits
// for another cgroup's throttled data: the root is that cgroup's limit.
func TestDiagnosisOfTheJournalStall(t *testing.T) {
	d := diagnosis(t, journalSnapshot())
	if d.ID != "diagnose.io-limit" || d.Root.Cgroup != "/lab" {
		t.Fatalf("%s rooted at %+v: %s", d.ID, d.Root, d.Title)
	}
	var rels []string
	for _, h := range d.Chain {
		rels = append(rels, string(h.Relation))
	}
	if got := strings.Join(rels, " "); !strings.HasPrefix(got, "waits_on held_by") {
		t.Errorf("chain %s: want the victim's wait on the journal, then its committer", got)
	}
	if !strings.Contains(d.Summary, "jbd2/loop0-8") {
		t.Errorf("summary does not name the committer: %s", d.Summary)
	}
}

// Dirty throttling whose writeback blk-throttle holds: the root is the
// limit on the writeback.
func TestDiagnosisOfDirtyThrottling(t *testing.T) {
	held := usage("/", 0, "", 0, 30, 1<<20, 2*time.Millisecond, time.Millisecond)
	held.Throttled = 30
	s := perThread(&Snapshot{Window: 10 * time.Second, WaitersArmed: true, Throttle: true, CgroupVersion: 1,
		Devices: []*Device{device("loop1", 7, 1, 4, held)},
		Waiters: []*Waiter{{PID: 9, Comm: "dd", Kind: KindDirty, Device: "loop1", Count: 80, Total: 8 * time.Second, Max: 200 * time.Millisecond}},
		Limits:  []Limit{{Cgroup: "/", Device: "loop1", File: "blkio.throttle.write_bps_device", Key: "wbps", Value: 1 << 20, Own: true}},
	})
	d := diagnosis(t, s)
	if d.ID != "diagnose.io-limit" || d.Root.Cgroup != "/" {
		t.Fatalf("%s rooted at %+v: %s", d.ID, d.Root, d.Title)
	}
	want := "dd (pid 9) was paused 8.0 s by dirty throttling on loop1: its writeback, charged to cgroup /, is capped at 1 MiB/s of writes (blkio.throttle.write_bps_device); loop1 itself is 4.0% busy"
	if d.Title != want {
		t.Errorf("title\n got %q\nwant %q", d.Title, want)
	}
}
