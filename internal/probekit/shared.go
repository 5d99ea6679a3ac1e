package probekit

import (
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
)

// Shared maps. Investigators that run in one process (doctor) often watch
// the same events: reclaim and locks both follow every memory reclaim
// call, and a program each on a tracepoint that fires tens of thousands of
// times a second costs each one's run. Instead one object's programs can
// keep what another's need in a map the two share: the object that writes
// it does the work once, the other reads it where it needs it (locks
// reads a thread's reclaim totals at an mmap_lock's acquire and release,
// not at every reclaim batch).
//
// Both objects declare the map, with one name and one definition (a macro
// of wolf.h), and name it in Object.Share. The first object opened creates
// it; the others get the same kernel map (as cilium/ebpf's
// MapReplacements, each through a descriptor of its own), which lives
// until the last of them closes. Written says whether an object that
// writes it is open, so that a reader can tell a map nobody fills.

// ShareRole is what an object's programs do with a shared map.
type ShareRole int

const (
	// Reads: the object's programs only read it.
	Reads ShareRole = iota + 1
	// Writes: the object's programs keep it (they may read it too).
	Writes
)

// sharedMap is one shared map of this process.
type sharedMap struct {
	m       *ebpf.Map // the registry's own descriptor
	users   int       // probes holding it
	claimed bool      // a probe that writes it holds it
	writers int       // of which, opened probes whose programs write it
}

var (
	sharedMu sync.Mutex
	shared   = map[string]*sharedMap{}
)

// shareMaps takes a use of each of o's shared maps, made if it is the
// first, for MapReplacements (which gives the probe a descriptor of its
// own, closed with its other maps), and says which it holds (a second
// writer holds none). On error nothing is held.
func shareMaps(name string, spec *ebpf.CollectionSpec, share map[string]ShareRole) (map[string]*ebpf.Map, map[string]ShareRole, error) {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	out := map[string]*ebpf.Map{}
	held := map[string]ShareRole{}
	fail := func(err error) (map[string]*ebpf.Map, map[string]ShareRole, error) {
		for n, role := range held {
			releaseLocked(n, role, false)
		}
		return nil, nil, err
	}
	for n, role := range share {
		ms, ok := spec.Maps[n]
		if !ok {
			return fail(fmt.Errorf("%s: the BPF object has no map %s to share", name, n))
		}
		s := shared[n]
		if s != nil && role == Writes && s.claimed {
			continue
		}
		if s == nil {
			m, err := ebpf.NewMap(ms)
			if err != nil {
				return fail(fmt.Errorf("%s: create shared map %s: %w", name, n, err))
			}
			s = &sharedMap{m: m}
			shared[n] = s
		} else if err := ms.Compatible(s.m); err != nil {
			return fail(fmt.Errorf("%s: shared map %s differs from the one another investigator made: %w", name, n, err))
		}
		s.users++
		if role == Writes {
			s.claimed = true
		}
		out[n] = s.m
		held[n] = role
	}
	return out, held, nil
}

// releaseLocked drops one user of shared map n (its writer if role says
// so, counted in writers if it attached), and the map with its last user.
func releaseLocked(n string, role ShareRole, attached bool) {
	s := shared[n]
	if s == nil {
		return
	}
	s.users--
	if role == Writes {
		s.claimed = false
		if attached {
			s.writers--
		}
	}
	if s.users <= 0 {
		_ = s.m.Close()
		delete(shared, n)
	}
}

// markWriters counts p's shared maps it writes, once its programs are
// attached.
func (p *Probe) markWriters() {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	for n, r := range p.share {
		if s := shared[n]; s != nil && r == Writes {
			s.writers++
			p.writing = append(p.writing, n)
		}
	}
}

// releaseShared lets p's shared maps go (its own descriptors are closed
// with its other maps).
func (p *Probe) releaseShared() {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	for n, role := range p.share {
		attached := false
		for _, w := range p.writing {
			attached = attached || w == n
		}
		releaseLocked(n, role, attached)
	}
	p.share, p.writing = nil, nil
}

// A map has one writer: a second object that would write it (two
// sessions of one investigator in a process, as tests run them) keeps a
// map of its own, so that neither counts the other's events nor evicts its
// keys.

// Written says whether a probe open in this process writes the shared map
// named name: whether a reader of it sees events or an empty map.
func Written(name string) bool {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	s := shared[name]
	return s != nil && s.writers > 0
}
