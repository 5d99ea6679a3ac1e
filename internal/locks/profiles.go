package locks

import (
	"fmt"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
)

// maxProfileLocks bounds the locks whose stacks go into the wait and owner
// profiles: the report's top locks and a few more, so the flame graph shows
// where the time went without thousands of one-off pipe mutexes.
const maxProfileLocks = 20

// Profiles are the snapshot's stack aggregations, for flame graphs and the
// folded and pprof exports:
//   - lock_wait_stacks: nanoseconds waited, by lock and waiter stack;
//   - lock_owner_stacks: nanoseconds others waited, charged to the owner's
//     stack when the wait began (sleeping locks with a known owner);
//   - mmap_lock_profile: samples taken while a thread held its
//     mmap_lock, by process, mode and stack (the profile under lock).
//
// Each stack's first frames are synthetic roots (the lock and its type,
// the owner, the process and lock mode), so one flame graph separates them.
func (s *Snapshot) Profiles(profileHz int) []finding.Profile {
	var out []finding.Profile
	waits := finding.Profile{Name: "lock_wait_stacks", Unit: "ns"}
	owners := finding.Profile{Name: "lock_owner_stacks", Unit: "ns"}
	n := 0
	for _, a := range s.aggregate() {
		if s.LockName != "" && a.name != s.LockName {
			continue
		}
		if n >= maxProfileLocks {
			break
		}
		n++
		for _, w := range a.waits {
			root := fmt.Sprintf("%s (%s)", a.name, w.Type)
			frames := append([]string{root}, outermostFirst(waiterFrames(w.Stack))...)
			waits.Stacks = append(waits.Stacks, finding.StackCount{Frames: frames, Value: w.TotalNs})
		}
		for _, o := range a.owners {
			if len(o.Stack) == 0 {
				continue
			}
			who := o.Comm
			if who == "" {
				who = "?"
			}
			frames := append([]string{a.name, fmt.Sprintf("owner %s (pid %d)", who, o.TGID)}, outermostFirst(o.Stack)...)
			owners.Stacks = append(owners.Stacks, finding.StackCount{Frames: frames, Value: o.TotalNs})
		}
	}
	for _, p := range []finding.Profile{waits, owners} {
		if len(p.Stacks) > 0 {
			out = append(out, p)
		}
	}
	if len(s.Profile) > 0 {
		under := finding.Profile{Name: "mmap_lock_profile", Unit: "samples"}
		if profileHz > 0 {
			under.PeriodNs = int64(time.Second) / int64(profileHz)
		}
		comm := s.processNames()
		for _, p := range s.Profile {
			mode := "mmap_lock read"
			if p.Write {
				mode = "mmap_lock write"
			}
			name := comm[p.TGID]
			if name == "" {
				name = s.comm(p.TGID)
			}
			if name == "" {
				name = "?"
			}
			frames := append([]string{fmt.Sprintf("%s (pid %d)", name, p.TGID), "[" + mode + "]"}, outermostFirst(p.Stack)...)
			under.Stacks = append(under.Stacks, finding.StackCount{Frames: frames, Value: p.Count})
		}
		out = append(out, under)
	}
	return out
}

// outermostFirst reverses a kernel stack (innermost first, as the kernel
// prints it) into the order flame graphs draw.
func outermostFirst(stack []string) []string {
	out := make([]string, len(stack))
	for i, f := range stack {
		out[len(stack)-1-i] = f
	}
	return out
}
