// Package lab is the framework for reproducers: small, safe, bounded
// programs that induce a real kernel pathology on this machine so that
// wolf (and its tests, and its users) can see it at work.
//
// # What a killed lab leaves, and who removes it
//
// A lab undoes everything in Close, on success, failure and Ctrl-C. A lab
// killed with SIGKILL cannot: its children die with it (give them
// Pdeathsig) and the kernel drops its descriptors, locks, BPF programs and
// namespaces, but mounts, cgroups, directories, sysctl values and
// processes that do not die with it stay. Every lab that makes such a
// thing records it in a Ledger before making it:
//
//	led, err := lab.NewLedger(name, logf) // first cleans up after dead labs
//	dir := filepath.Join(os.TempDir(), lab.Name("mylab")) // wolf-mylab-PID-RANDOM
//	it := lab.Dir(dir)
//	led.Add(it)            // before
//	os.Mkdir(dir, 0o700)
//	...
//	os.Remove(dir)
//	led.Done(it)           // after undoing it
//	led.Close()            // in Close, at the very end
//
// Kinds: Mount (unmounted only if it still has the lab's file system type
// and source), Dir, Tree, File, Cgroup (its processes killed, then
// removed), Sysctl (set back only if it still holds the lab's value) and
// Process (killed only if the pid still names the same process). Clean,
// which NewLedger and `wolf lab clean` run, undoes what the ledgers of dead
// labs hold, newest first: a ledger's owner is dead when the flock it held
// for its whole life is free and its pid is gone or names a later process.
// Paths must be named with Name ("wolf-WHAT-PID-..."): Clean removes
// nothing whose name does not carry its dead owner's pid. Ledgers live in
// /run/wolf/labs (on tmpfs: they go with a reboot, as mounts and sysctls
// do).
//
// # Privileges
//
// A lab says in WhyRoot (Privileged) what it needs root for, in a few
// words for the one-line error a user without it gets, or "" when it
// needs nothing; a lab that does not say is taken to need root.
package lab

import (
	"context"
	"fmt"
	"sort"
	"time"
)

// Options configure a lab run.
type Options struct {
	// Victims is how many tasks to block behind the offender (labs that have
	// victims); 0 means the lab's default.
	Victims int
	// Logf, when set, receives progress lines.
	Logf func(format string, args ...any)
}

// Tasks are the pids a lab put in place, for tests to compare with what an
// investigator found.
type Tasks struct {
	Offender int   // the task everyone waits for
	Daemon   int   // the task the offender itself waits on, if any
	Victims  []int // tasks blocked behind the offender
}

// Instance is a running lab.
type Instance interface {
	// Describe says in a few lines what is happening and who is involved.
	Describe() string
	// Tasks lists the pids involved.
	Tasks() Tasks
	// Close undoes everything the lab did. It is safe to call more than
	// once and from a signal handler's goroutine.
	Close() error
}

// Lab is a reproducer.
type Lab interface {
	Name() string
	Summary() string // one line, for `wolf lab list`
	// Start induces the pathology and returns once it is in place. On
	// error, everything already done is undone.
	Start(ctx context.Context, opt Options) (Instance, error)
}

// Privileged is implemented by labs that need root.
type Privileged interface {
	// WhyRoot says in a few words what the lab does that needs root:
	// "mounts a FUSE file system it serves itself".
	WhyRoot() string
}

// WhyRoot returns what l needs root for, or "" if it runs without. A lab
// that does not say is taken to need root.
func WhyRoot(l Lab) string {
	if p, ok := l.(Privileged); ok {
		return p.WhyRoot()
	}
	return "changes machine-wide state"
}

// MaxStall is the longest a lab may keep tasks in uninterruptible sleep
// (ARCHITECTURE.md#every-pathology-has-a-lab: no stall, held lock or
// D-state task outlives 60 s: a long one can hang every process lister on
// the machine).
const MaxStall = 60 * time.Second

// Stalling is implemented by labs whose pathology keeps tasks in D state
// for as long as the lab runs: `wolf lab run` runs them in episodes of at
// most MaxStall, each a fresh instance with fresh tasks.
type Stalling interface {
	// Stalls says whether the lab's tasks sleep in D while it runs.
	Stalls() bool
}

// Stalls says whether l keeps tasks in D state while it runs.
func Stalls(l Lab) bool {
	s, ok := l.(Stalling)
	return ok && s.Stalls()
}

// Registry maps lab names to labs.
type Registry struct{ labs map[string]Lab }

// NewRegistry returns a registry holding labs.
func NewRegistry(labs ...Lab) *Registry {
	r := &Registry{labs: map[string]Lab{}}
	for _, l := range labs {
		r.labs[l.Name()] = l
	}
	return r
}

// List returns the labs sorted by name.
func (r *Registry) List() []Lab {
	out := make([]Lab, 0, len(r.labs))
	for _, l := range r.labs {
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out
}

// Get finds a lab by name.
func (r *Registry) Get(name string) (Lab, error) {
	l, ok := r.labs[name]
	if !ok {
		return nil, fmt.Errorf("no lab named %q (see `wolf lab list`)", name)
	}
	return l, nil
}
