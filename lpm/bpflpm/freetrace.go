package bpflpm

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/wolf-investigator/wolf/internal/kallsyms"
)

// wolfMaps is how many maps closing a Table frees: the words, and the
// two that wait for grace periods.
const wolfMaps = 3

// freeTracer times bpf_map_free_deferred work items (freetrace.bpf.c).
type freeTracer struct {
	objs struct {
		freetracePrograms
		freetraceMaps
	}
	links []link.Link
}

func newFreeTracer() (*freeTracer, error) {
	syms, err := kallsyms.Load(context.Background())
	if err != nil {
		return nil, err
	}
	addr, ok := syms.Lookup("bpf_map_free_deferred")
	if !ok || addr == 0 {
		return nil, errors.New("bpf_map_free_deferred is not in /proc/kallsyms")
	}
	spec, err := loadFreetrace()
	if err != nil {
		return nil, err
	}
	if err := spec.Variables["free_fn"].Set(addr); err != nil {
		return nil, err
	}
	ft := &freeTracer{}
	if err := spec.LoadAndAssign(&ft.objs, nil); err != nil {
		return nil, fmt.Errorf("load freetrace.bpf.c: %w", err)
	}
	for name, p := range map[string]*ebpf.Program{"workqueue_execute_start": ft.objs.FreeBegin, "workqueue_execute_end": ft.objs.FreeDone} {
		l, err := link.Tracepoint("workqueue", name, p, nil)
		if err != nil {
			ft.close()
			return nil, fmt.Errorf("attach to workqueue:%s: %w", name, err)
		}
		ft.links = append(ft.links, l)
	}
	return ft, nil
}

func (f *freeTracer) close() {
	for _, l := range f.links {
		l.Close()
	}
	f.links = nil
	f.objs.freetracePrograms.Close()
	f.objs.freetraceMaps.Close()
}

func (f *freeTracer) stat() (freetraceFreeStat, error) {
	var st freetraceFreeStat
	err := f.objs.Stats.Lookup(uint32(0), &st)
	return st, err
}

// measure waits for frees already queued to finish, calls closeFn, and
// returns the time the kernel then spent in want map frees.
func (f *freeTracer) measure(ctx context.Context, closeFn func() error, want uint64) (time.Duration, error) {
	// Settle: no free finished for 200 ms (maps closed just before).
	last, quiet := uint64(1<<63), time.Now()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		st, err := f.stat()
		if err != nil {
			return 0, err
		}
		if st.Count != last {
			last, quiet = st.Count, time.Now()
		} else if time.Since(quiet) > 200*time.Millisecond {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := f.objs.Stats.Put(uint32(0), freetraceFreeStat{}); err != nil {
		return 0, err
	}
	if err := closeFn(); err != nil {
		return 0, err
	}
	for deadline := time.Now().Add(2 * time.Minute); ; {
		st, err := f.stat()
		if err != nil {
			return 0, err
		}
		if st.Count >= want {
			return time.Duration(st.Ns), nil
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("only %d of %d map frees seen in 2 minutes", st.Count, want)
		}
		time.Sleep(time.Millisecond)
	}
}
