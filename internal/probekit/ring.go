package probekit

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/wolf-investigator/wolf/internal/bpfrec"
)

// Ring reads fixed-size records of type T (a bpf2go-generated struct) from
// a BPF ring buffer in the background and keeps them until Take, up to a
// bound; records beyond it are counted, never silently dropped.
type Ring[T any] struct {
	rd   *ringbuf.Reader
	keep int
	done chan struct{}

	mu   sync.Mutex
	recs []T
	lost uint64 // records read but not kept (over the bound, or undecodable)
	err  error  // why reading stopped early
}

// OpenRing starts reading the probe's ring buffer map mapName, keeping at
// most keep records between two Takes. The probe closes it.
func OpenRing[T any](p *Probe, mapName string, keep int) (*Ring[T], error) {
	m := p.maps[mapName]
	if m == nil {
		return nil, fmt.Errorf("%s: the BPF object has no map %s", p.name, mapName)
	}
	rd, err := ringbuf.NewReader(m)
	if err != nil {
		return nil, fmt.Errorf("%s: open ring buffer %s: %w", p.name, mapName, err)
	}
	r := &Ring[T]{rd: rd, keep: keep, done: make(chan struct{})}
	go r.read()
	p.mu.Lock()
	p.rings = append(p.rings, r)
	p.mu.Unlock()
	return r, nil
}

func (r *Ring[T]) read() {
	defer close(r.done)
	for {
		rec, err := r.rd.Read()
		if err != nil {
			if !errors.Is(err, ringbuf.ErrClosed) {
				r.mu.Lock()
				r.err = err
				r.mu.Unlock()
			}
			return
		}
		v, err := bpfrec.Decode[T](rec.RawSample)
		r.mu.Lock()
		if err != nil || len(r.recs) >= r.keep {
			r.lost++
		} else {
			r.recs = append(r.recs, v)
		}
		r.mu.Unlock()
	}
}

// Take returns the records received since the previous Take, how many were
// received but not kept, and the error that stopped the reader, if any.
func (r *Ring[T]) Take() ([]T, uint64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	recs, lost := r.recs, r.lost
	r.recs, r.lost = nil, 0
	return recs, lost, r.err
}

func (r *Ring[T]) close() {
	_ = r.rd.Close()
	<-r.done
}
