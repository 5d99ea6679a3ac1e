// Package lockslow attaches kprobes to the slow paths of the kernel's
// sleeping locks, for kernels without the lock:contention_begin/end
// tracepoints (before 5.19): only a contended acquire reaches a slow path,
// so its entry is a wait's beginning and its return the wait's end, the
// way libbpf-tools' klockstat finds lock waits. hung and locks use it.
//
// Kprobes are attached through perf events (the kprobe PMU), never through
// tracefs's kprobe_events: those outlive a killed wolf, perf events do not.
package lockslow

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Kind is the lock a slow path is for; each kind has its own entry program
// (the wait's flags differ), and all share one return program.
type Kind int

// The kinds of sleeping lock with slow paths wolf probes.
const (
	Mutex Kind = iota
	RWSemRead
	RWSemWrite
)

func (k Kind) String() string {
	return [...]string{"mutex", "rw-semaphore (read)", "rw-semaphore (write)"}[k]
}

// Funcs are the slow paths, by kind, under the names the kernel has had
// since 5.3 (rwsem) and 4.10 (mutex). Only exact names are used: a
// compiler clone (".isra.0", ".constprop.0") may take other arguments.
var Funcs = map[Kind][]string{
	Mutex:      {"__mutex_lock_slowpath", "__mutex_lock_interruptible_slowpath", "__mutex_lock_killable_slowpath"},
	RWSemRead:  {"rwsem_down_read_slowpath"},
	RWSemWrite: {"rwsem_down_write_slowpath"},
}

// Probes are the attached kprobes. Close detaches them.
type Probes struct {
	links []link.Link
	// Funcs are the functions probed; Missing those this kernel lacks.
	Funcs, Missing []string
}

// Attach attaches entry[k] to the entry of each slow path of kind k this
// kernel has, and ret to their returns. It fails when no slow path at all
// could be probed (no kprobes in this kernel, or none of the functions);
// a missing function alone is listed in Missing.
func Attach(ctx context.Context, entry map[Kind]*ebpf.Program, ret *ebpf.Program) (*Probes, error) {
	have, err := kernelFuncs(ctx)
	if err != nil {
		return nil, err
	}
	p := &Probes{}
	var firstErr error
	for _, k := range []Kind{Mutex, RWSemRead, RWSemWrite} {
		prog := entry[k]
		if prog == nil {
			continue
		}
		for _, fn := range Funcs[k] {
			if !have[fn] {
				p.Missing = append(p.Missing, fn)
				continue
			}
			in, err := link.Kprobe(fn, prog, nil)
			if err != nil {
				if firstErr == nil {
					firstErr = fmt.Errorf("kprobe %s: %w", fn, err)
				}
				p.Missing = append(p.Missing, fn)
				continue
			}
			out, err := link.Kretprobe(fn, ret, nil)
			if err != nil {
				_ = in.Close()
				if firstErr == nil {
					firstErr = fmt.Errorf("kretprobe %s: %w", fn, err)
				}
				p.Missing = append(p.Missing, fn)
				continue
			}
			p.links = append(p.links, in, out)
			p.Funcs = append(p.Funcs, fn)
		}
	}
	if len(p.Funcs) == 0 {
		if firstErr == nil {
			firstErr = errors.New("none of the sleeping locks' slow paths is in this kernel's symbols")
		}
		return nil, fmt.Errorf("lockslow: %w", firstErr)
	}
	return p, nil
}

// Close detaches every probe.
func (p *Probes) Close() {
	if p == nil {
		return
	}
	for _, l := range p.links {
		_ = l.Close()
	}
	p.links = nil
}

// kernelFuncs reads the slow paths' names from /proc/kallsyms (text
// symbols only), under a deadline: it is a big file on a sick host.
func kernelFuncs(ctx context.Context) (map[string]bool, error) {
	want := map[string]bool{}
	for _, fns := range Funcs {
		for _, fn := range fns {
			want[fn] = true
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	type result struct {
		have map[string]bool
		err  error
	}
	done := make(chan result, 1)
	go func() {
		f, err := os.Open("/proc/kallsyms")
		if err != nil {
			done <- result{nil, fmt.Errorf("lockslow: %w", err)}
			return
		}
		defer f.Close()
		have := map[string]bool{}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) >= 3 && (fs[1] == "t" || fs[1] == "T") && want[fs[2]] {
				have[fs[2]] = true
			}
		}
		done <- result{have, sc.Err()}
	}()
	select {
	case r := <-done:
		return r.have, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("lockslow: read /proc/kallsyms: %w", ctx.Err())
	}
}
