package io

import (
	"strings"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/human"
)

func TestAttrShift(t *testing.T) {
	for _, c := range []struct {
		rate float64
		want uint32
	}{
		{0, 0}, {attrRate, 0}, {attrRate + 1, 1}, {50000, 4}, {1e9, 10},
	} {
		if got := attrShift(c.rate); got != c.want {
			t.Errorf("attrShift(%v) = %d, want %d", c.rate, got, c.want)
		}
	}
}

// A cgroup's requests whose issuer was not followed go to its followed
// issuers in proportion, their latencies to the busiest; the cgroup's
// sums are unchanged; a cgroup with no followed issuer keeps them apart.
func TestApportion(t *testing.T) {
	a := usage("/a", 10, "fio", 30, 0, 4096, time.Millisecond, time.Millisecond/2)
	b := usage("/a", 11, "dd", 10, 0, 4096, time.Millisecond, time.Millisecond/2)
	restA := usage("/a", 0, "", 400, 0, 4096, 2*time.Millisecond, time.Millisecond)
	restA.Unattributed = true
	restB := usage("/b", 0, "", 7, 0, 4096, time.Millisecond, time.Millisecond)
	restB.Unattributed = true
	a.CgroupID, b.CgroupID, restA.CgroupID, restB.CgroupID = 1, 1, 1, 2
	d := &Device{Name: "loop0"}
	for _, u := range []*Usage{a, b, restA, restB} {
		d.Ops.add(&u.Ops)
	}
	out := apportion([]*Usage{a, b, restA, restB})
	if len(out) != 3 {
		t.Fatalf("%d consumers, want 3 (fio, dd, /b unattributed)", len(out))
	}
	if a.Reads != 330 || b.Reads != 110 || a.ReadBytes != 330*4096 || b.ReadBytes != 110*4096 {
		t.Errorf("fio %d reads %d bytes, dd %d reads %d bytes: want 330 and 110 reads", a.Reads, a.ReadBytes, b.Reads, b.ReadBytes)
	}
	if !a.Estimated || !b.Estimated {
		t.Errorf("estimated: fio %v, dd %v", a.Estimated, b.Estimated)
	}
	if a.Timed != 430 || a.Total.Count != 430 || b.Timed != 10 {
		t.Errorf("timed: fio %d (hist %d), dd %d: the rest's latencies go to the busiest (fio)", a.Timed, a.Total.Count, b.Timed)
	}
	var sum Ops
	for _, u := range out {
		sum.add(&u.Ops)
	}
	if sum.Requests() != d.Requests() || sum.ReadBytes != d.ReadBytes || sum.Timed != d.Timed {
		t.Errorf("consumers sum to %d requests %d bytes %d timed; the device has %d, %d, %d", sum.Requests(), sum.ReadBytes, sum.Timed,
			d.Requests(), d.ReadBytes, d.Timed)
	}
	var left *Usage
	for _, u := range out {
		if u.Cgroup == "/b" {
			left = u
		}
	}
	if left == nil || !left.Unattributed || left.PID != 0 || left.Reads != 7 {
		t.Fatalf("/b: %+v, want its 7 reads unattributed", left)
	}
	if sub := usageSubject(left); !strings.Contains(sub.Detail, "not followed") {
		t.Errorf("unattributed consumer's detail %q", sub.Detail)
	}
	if sub := usageSubject(a); sub.Evidence["estimated"] != true {
		t.Errorf("estimated consumer's evidence %v", sub.Evidence)
	}
}

// A sampled window says so, in its notes and its devices' evidence.
func TestSampledWindowSaysSo(t *testing.T) {
	s := &Snapshot{Window: time.Second, Throttle: true, AttrSample: 16, WaitSample: 8, Devices: []*Device{{Name: "loop0"}}}
	var note string
	for _, n := range s.Notes() {
		if strings.Contains(n, "1 in 16") {
			note = n
		}
	}
	if note == "" || !strings.Contains(strings.Join(s.Notes(), "\n"), "1 sleep in 8") {
		t.Errorf("notes %q do not say 1 in 16 and 1 sleep in 8", s.Notes())
	}
	if ev := deviceEvidence(s, s.Devices[0]); ev["attribution_sample_1_in"] != 16 || ev["wait_sample_1_in"] != 8 {
		t.Errorf("evidence %v", ev)
	}
	s.AttrSample, s.WaitSample = 1, 1
	if ev := deviceEvidence(s, s.Devices[0]); ev["attribution_sample_1_in"] != nil || ev["wait_sample_1_in"] != nil {
		t.Errorf("unsampled evidence %v", ev)
	}
	// Waiters watched part of the time (a disk merely busy), every sleep
	// then noted: the duty says so, not the rate of sleeps.
	s.WaitSample, s.WaitDuty = 16, 16
	notes := strings.Join(s.Notes(), "\n")
	if !strings.Contains(notes, "ran "+human.Duration(dutyOn)+" of every 1 s") || strings.Contains(notes, "1 sleep in 16") {
		t.Errorf("duty-cycled notes %q", notes)
	}
	if ev := deviceEvidence(s, s.Devices[0]); ev["wait_sample_1_in"] != 16 || ev["waiters_watched_1_in"] != 16 {
		t.Errorf("duty-cycled evidence %v", ev)
	}
}
