package diagnosistest

import (
	"testing"

	"github.com/wolf-investigator/wolf/internal/finding"
)

// The I/O lab tests let other work of the machine rank before the lab's
// diagnosis; they must still fail when wolf diagnoses the lab wrongly.
func TestIOLabJudgeFailsWrongDiagnoses(t *testing.T) {
	const cg, dev, pid = "/wolf-lab-io-7", "loop7", 4242
	right := finding.Diagnosis{ID: "diagnose.io-limit", Title: "the lab's limit", Root: finding.Subject{Cgroup: cg, Device: dev},
		Subjects: []finding.Subject{{Role: finding.RoleVictim, PID: pid}}}
	fio := finding.Diagnosis{ID: "diagnose.io-limit", Title: "someone's fio", Root: finding.Subject{Cgroup: "/user/fio", Device: "vda"},
		Subjects: []finding.Subject{{Role: finding.RoleVictim, PID: 99, Cgroup: "/user/fio"}}}
	cases := []struct {
		name string
		ds   []finding.Diagnosis
		ok   bool
	}{
		{"the lab's, first", []finding.Diagnosis{right}, true},
		{"the lab's, after other work's", []finding.Diagnosis{fio, right}, true},
		{"none", nil, false},
		{"only other work's", []finding.Diagnosis{fio}, false},
		{"the right kind on the wrong device", []finding.Diagnosis{{ID: "diagnose.io-limit", Root: finding.Subject{Cgroup: cg, Device: "vda"}}}, false},
		{"the wrong kind on the lab's device", []finding.Diagnosis{{ID: "diagnose.device", Root: finding.Subject{Device: dev}}, right}, false},
		{"the lab's readers blamed on something else", []finding.Diagnosis{{ID: "diagnose.host-cpu", Subjects: []finding.Subject{{PID: pid}}}, right}, false},
		{"the lab's cgroup blamed for something else", []finding.Diagnosis{{ID: "diagnose.memcg-limit", Root: finding.Subject{Cgroup: cg}}, right}, false},
		{"the lab's cgroup on the wrong kind", []finding.Diagnosis{{ID: "diagnose.cpu-quota", Root: finding.Subject{Cgroup: cg}}}, false},
	}
	for _, c := range cases {
		what, want, ours := ioLabJudge("diagnose.io-limit", cg, dev, pid)
		judge(t, c.name, c.ds, c.ok, right.Title, what, want, ours)
	}
	// The dirty lab's writeback is charged to the root cgroup: other
	// work's tasks there are not the lab's.
	rootRight := finding.Diagnosis{ID: "diagnose.io-limit", Title: "the lab's limit", Root: finding.Subject{Cgroup: "/", Device: dev}}
	cpus := finding.Diagnosis{ID: "diagnose.host-cpu", Title: "Saturated CPUs", Root: finding.Subject{Role: "cpu", Comm: "all CPUs"},
		Subjects: []finding.Subject{{PID: 7280, Comm: "compile", Cgroup: "/"}}}
	what, want, ours := ioLabJudge("diagnose.io-limit", "/", dev, pid)
	judge(t, "the root cgroup's lab after other work in the root cgroup", []finding.Diagnosis{cpus, rootRight}, true, rootRight.Title, what, want, ours)
	cpus.Subjects = append(cpus.Subjects, finding.Subject{PID: pid})
	judge(t, "the root cgroup's lab's task blamed on the CPUs", []finding.Diagnosis{cpus, rootRight}, false, rootRight.Title, what, want, ours)
}

func judge(t *testing.T, name string, ds []finding.Diagnosis, ok bool, title, what string, want func(*finding.Diagnosis) bool, ours func(*finding.Subject) bool) {
	t.Helper()
	d, _, err := pickLabDiagnosis(&finding.Report{Diagnoses: ds}, what, want, ours)
	if got := err == nil; got != ok {
		t.Errorf("%s: accepted %v (%v), want %v", name, got, err, ok)
	}
	if ok && (d == nil || d.Title != title) {
		t.Errorf("%s: picked %+v", name, d)
	}
}
