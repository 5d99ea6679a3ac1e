// Package lab is the framework for reproducers: small, safe, bounded
// programs that induce a real kernel pathology on this machine so that
// wolf (and its tests, and its users) can see it at work.
package lab

import (
	"context"
	"fmt"
	"sort"
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
