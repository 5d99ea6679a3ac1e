package diagnosistest

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/lab/iolab"
	"github.com/wolf-investigator/wolf/internal/testutil"
)

// wolf io's acceptance tests: with each I/O lab running, doctor's first
// item is the diagnosis that names the device, the limiting mechanism
// and the waiting tasks with their numbers.

// ioLab starts an I/O lab for a test, closed at its end.
func ioLab(t *testing.T, l lab.Lab) lab.Instance {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.Exclusive(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	in, err := l.Start(ctx, lab.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := in.Close(); err != nil {
			t.Error(err)
		}
	})
	return in
}

// firstDiagnosis is the lab's diagnosis, rooted at id on cgroup cg (any
// when "") and device dev: first, or after diagnoses of other work of the
// machine that name none of the lab's tasks (pids), its cgroup nor its
// device.
func firstDiagnosis(t *testing.T, rep *finding.Report, id, cg, dev string, pids ...int) *finding.Diagnosis {
	t.Helper()
	logDiagnoses(t, rep)
	what, want, ours := ioLabJudge(id, cg, dev, pids...)
	return labDiagnosis(t, rep, what, want, ours)
}

// ioLabJudge says what the I/O lab's diagnosis is (want) and what is the
// lab's (ours), for labDiagnosis.
func ioLabJudge(id, cg, dev string, pids ...int) (what string, want func(*finding.Diagnosis) bool, ours func(*finding.Subject) bool) {
	what = id + " on " + dev
	if cg != "" {
		what = id + " of " + cg + " on " + dev
	}
	want = func(d *finding.Diagnosis) bool {
		return d.ID == id && (cg == "" || d.Root.Cgroup == cg) && d.Root.Device == dev
	}
	ours = func(s *finding.Subject) bool {
		// The root cgroup is everyone's (the dirty lab's writeback is
		// charged there on v1): it names no task of the lab's.
		return s.Device == dev || (s.PID != 0 && slices.Contains(pids, s.PID)) || (cg != "" && cg != "/" && s.Cgroup == cg)
	}
	return what, want, ours
}

func TestDoctorDiagnosesIOThrottle(t *testing.T) {
	in := ioLab(t, iolab.NewThrottle()).(*iolab.ThrottleInstance)
	rep := doctorJSON(t, 5*time.Second)
	d := firstDiagnosis(t, &rep, "diagnose.io-limit", in.Cgroup().Path, in.Device(), in.PID())
	// "wolf-ioreader (pid N, 4 threads) in cgroup /x waits 250 ms per
	// read: cgroup /x is capped at 1 MiB/s of reads (…) on loopN; loopN
	// itself is 0% busy"
	for _, w := range []string{"wolf-ioreader (pid ", "4 threads", "waits ", "per read", "capped at 1 MiB/s of reads", "on " + in.Device(), "busy"} {
		if !strings.Contains(d.Title, w) {
			t.Errorf("title %q lacks %q", d.Title, w)
		}
	}
	if find(d, finding.RoleVictim, func(s *finding.Subject) bool { return s.PID == in.PID() }) == nil {
		t.Errorf("the readers (pid %d) are not victims", in.PID())
	}
	checkHopNumbers(t, d)
}

func TestDoctorDiagnosesDirtyThrottle(t *testing.T) {
	in := ioLab(t, iolab.NewDirty()).(*iolab.DirtyInstance)
	rep := doctorJSON(t, 5*time.Second)
	d := firstDiagnosis(t, &rep, "diagnose.io-limit", in.Cgroup(), in.Device(), in.PID())
	if !strings.Contains(d.Title, "paused") || !strings.Contains(d.Title, "dirty throttling on "+in.Device()) {
		t.Errorf("title %q", d.Title)
	}
	if find(d, finding.RoleVictim, func(s *finding.Subject) bool { return s.PID == in.PID() }) == nil {
		t.Errorf("the writer (pid %d) is not a victim", in.PID())
	}
	checkHopNumbers(t, d)
}

func TestDoctorDiagnosesJournalStall(t *testing.T) {
	in := ioLab(t, iolab.NewJournal()).(*iolab.JournalInstance)
	rep := doctorJSON(t, 8*time.Second)
	d := firstDiagnosis(t, &rep, "diagnose.io-limit", in.Cgroup(), in.Device(), in.Victim())
	if !strings.Contains(d.Title, "per fsync") || !strings.Contains(d.Title, "behind the journal") {
		t.Errorf("title %q: want the unrelated fsync behind the journal first", d.Title)
	}
	if find(d, finding.RoleVictim, func(s *finding.Subject) bool { return s.PID == in.Victim() }) == nil {
		t.Errorf("the unrelated fsync (pid %d) is not a victim", in.Victim())
	}
	var held bool
	for _, h := range d.Chain {
		held = held || (h.Relation == finding.HeldBy && strings.HasPrefix(h.To.Comm, "jbd2/"))
	}
	if !held {
		t.Error("no hop says the journal is committed by its jbd2 thread")
	}
	if in.Lifted() {
		t.Error("the watchdog had to lift the throttle")
	}
}

func TestDoctorDiagnosesSlowDevice(t *testing.T) {
	_, err := os.Stat("/dev/fuse")
	testutil.Require(t, err == nil, "needs /dev/fuse")
	in := ioLab(t, iolab.NewSlow()).(*iolab.SlowInstance)
	rep := doctorJSON(t, 5*time.Second)
	d := firstDiagnosis(t, &rep, "diagnose.device", "", in.Device(), in.PID())
	if find(d, finding.RoleVictim, func(s *finding.Subject) bool { return s.PID == in.PID() }) == nil {
		t.Errorf("the readers (pid %d) are not victims", in.PID())
	}
	checkHopNumbers(t, d)
}
