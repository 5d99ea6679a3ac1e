package watch

import (
	"testing"

	"github.com/wolf-investigator/wolf/internal/finding"
)

func hungGroup(victims []int, blocked float64, sev finding.Severity) finding.Finding {
	f := finding.Finding{ID: "hung.lock-owner", Investigator: "hung", Severity: sev,
		Evidence: map[string]any{"victims": len(victims), "blocked_s": blocked, "lock_addr": "0xffff1"},
		Subjects: []finding.Subject{{Role: finding.RoleOffender, PID: 10, TID: 10, Comm: "fz"}}}
	for _, v := range victims {
		f.Subjects = append(f.Subjects, finding.Subject{Role: finding.RoleVictim, PID: v, TID: v, Comm: "cat"})
	}
	return f
}

func TestKeyIgnoresVictimsAndNumbers(t *testing.T) {
	a, b := hungGroup([]int{1, 2}, 6, finding.Warning), hungGroup([]int{1, 2, 3}, 60, finding.Critical)
	if Key(&a) != Key(&b) {
		t.Errorf("a new victim or a longer block changed the key: %q vs %q", Key(&a), Key(&b))
	}
	c := hungGroup([]int{1}, 6, finding.Warning)
	c.Subjects[0].PID = 11
	if Key(&a) == Key(&c) {
		t.Errorf("another offender kept the key %q", Key(&a))
	}
	// A finding naming only victims is keyed by them.
	io1 := finding.Finding{ID: "hung.io", Subjects: []finding.Subject{{Role: finding.RoleVictim, PID: 5, Comm: "dd"}}}
	io2 := finding.Finding{ID: "hung.io", Subjects: []finding.Subject{{Role: finding.RoleVictim, PID: 6, Comm: "dd"}}}
	if Key(&io1) == Key(&io2) {
		t.Errorf("victim-only findings share key %q", Key(&io1))
	}
	// A bouncing task's current CPU is not its identity.
	c0, c1 := 0, 1
	s1 := finding.Finding{ID: "sched.bounce", Subjects: []finding.Subject{{Role: finding.RoleTask, PID: 7, Comm: "x", CPU: &c0}}}
	s2 := finding.Finding{ID: "sched.bounce", Subjects: []finding.Subject{{Role: finding.RoleTask, PID: 7, Comm: "x", CPU: &c1}}}
	if Key(&s1) != Key(&s2) {
		t.Errorf("task CPU in key: %q vs %q", Key(&s1), Key(&s2))
	}
}

func TestMaterial(t *testing.T) {
	base := hungGroup([]int{1, 2}, 10, finding.Warning)
	for _, c := range []struct {
		name string
		cur  finding.Finding
		want bool
	}{
		{"same", hungGroup([]int{1, 2}, 10, finding.Warning), false},
		{"blocked +40%", hungGroup([]int{1, 2}, 14, finding.Warning), false},
		{"blocked +50%", hungGroup([]int{1, 2}, 15, finding.Warning), true},
		{"victims 2->3", hungGroup([]int{1, 2, 3}, 10, finding.Warning), true},
		{"severity", hungGroup([]int{1, 2}, 10, finding.Critical), true},
	} {
		if got := Material(&base, &c.cur) != ""; got != c.want {
			t.Errorf("%s: material %v, want %v (%q)", c.name, got, c.want, Material(&base, &c.cur))
		}
	}
	// JSON numbers (float64) against Go ints compare as numbers.
	j := hungGroup([]int{1, 2}, 10, finding.Warning)
	j.Evidence["victims"] = float64(2)
	if why := Material(&base, &j); why != "" {
		t.Errorf("int vs float64 of the same value: %q", why)
	}
}

func TestDiffStartChangeClear(t *testing.T) {
	active := map[string]*Active{}
	events := func(cs []Change) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Event+":"+c.Finding.ID)
		}
		return out
	}
	check := func(step string, got, want []string) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: events %v, want %v", step, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%s: events %v, want %v", step, got, want)
			}
		}
	}
	other := finding.Finding{ID: "hung.io", Investigator: "hung", Subjects: []finding.Subject{{Role: finding.RoleVictim, PID: 99}}}
	check("first", events(Diff(active, []finding.Finding{hungGroup([]int{1}, 6, finding.Warning), other}, 1)), []string{"start:hung.lock-owner", "start:hung.io"})
	check("same", events(Diff(active, []finding.Finding{hungGroup([]int{1}, 8, finding.Warning), other}, 1)), nil)
	// Drift: 6 -> 8 -> 9 is +50% of the emitted 6, not of the last window.
	check("drift", events(Diff(active, []finding.Finding{hungGroup([]int{1}, 9, finding.Warning), other}, 1)), []string{"change:hung.lock-owner"})
	check("clear", events(Diff(active, []finding.Finding{other}, 1)), []string{"clear:hung.lock-owner"})
	// With clearAfter 2, one window without it is not enough.
	check("missed once", events(Diff(active, nil, 2)), nil)
	check("back", events(Diff(active, []finding.Finding{other}, 2)), nil)
	check("missed once more", events(Diff(active, nil, 2)), nil)
	check("missed twice", events(Diff(active, nil, 2)), []string{"clear:hung.io"})
	if len(active) != 0 {
		t.Errorf("active after clearing: %v", active)
	}
	// Two findings the key cannot tell apart both survive.
	cs := Diff(active, []finding.Finding{other, other}, 1)
	if len(cs) != 2 || cs[0].Key == cs[1].Key {
		t.Errorf("duplicates: %+v", cs)
	}
}
