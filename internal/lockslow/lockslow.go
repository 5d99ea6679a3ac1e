// Package lockslow attaches kprobes to the slow paths of the kernel's
// sleeping locks, for kernels without the lock:contention_begin/end
// tracepoints (before 5.19): only a contended acquire reaches a slow path,
// so its entry is a wait's beginning, the way libbpf-tools' klockstat
// finds lock waits. hung and locks use it.
//
// The wait's end is not probed with a kretprobe: on those kernels a
// kretprobe's trampoline replaces the return address on the waiter's
// stack, and every stack of a waiter (wolf's own reads, /proc/PID/stack)
// then ends there, which is what wolf reads hung tasks by. A waiter still
// waits while its stack is inside a slow path (IsSlowpath, Ranges).
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
	"slices"
	"strconv"
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

// IsSlowpath says whether a kernel function is one of the slow paths, or
// the common mutex path they call (a waiter's stack shows
// __mutex_lock.constprop.0 under __mutex_lock_slowpath).
func IsSlowpath(fn string) bool {
	for _, fns := range Funcs {
		if slices.Contains(fns, fn) {
			return true
		}
	}
	return fn == "__mutex_lock" || strings.HasPrefix(fn, "__mutex_lock.")
}

// Range is a function's text, [Start, End).
type Range struct{ Start, End uint64 }

// Ranges returns the text of each slow path this kernel has, from
// /proc/kallsyms (a function ends where the next symbol begins), at most
// max of them. BPF programs compare stack addresses with them.
func Ranges(ctx context.Context, max int) ([]Range, error) {
	want := map[string]bool{}
	for _, fns := range Funcs {
		for _, fn := range fns {
			want[fn] = true
		}
	}
	var addrs []uint64
	starts := map[uint64]bool{}
	err := readKallsyms(ctx, func(addr uint64, typ byte, name string) {
		if typ != 't' && typ != 'T' {
			return
		}
		addrs = append(addrs, addr)
		if want[name] {
			starts[addr] = true
		}
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(addrs)
	var out []Range
	for i, a := range addrs {
		if !starts[a] || len(out) == max {
			continue
		}
		end := a + 4096 // the last symbol: bounded
		for j := i + 1; j < len(addrs); j++ {
			if addrs[j] > a {
				end = addrs[j]
				break
			}
		}
		out = append(out, Range{a, end})
		delete(starts, a)
	}
	if len(out) == 0 {
		return nil, errors.New("lockslow: no slow path in /proc/kallsyms (addresses hidden by kptr_restrict?)")
	}
	return out, nil
}

// Attach attaches entry[k] to the entry of each slow path of kind k this
// kernel has. It fails when no slow path at all could be probed (no
// kprobes in this kernel, or none of the functions); a missing function
// alone is listed in Missing.
func Attach(ctx context.Context, entry map[Kind]*ebpf.Program) (*Probes, error) {
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
			p.links = append(p.links, in)
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

// kernelFuncs says which slow paths this kernel has (text symbols in
// /proc/kallsyms).
func kernelFuncs(ctx context.Context) (map[string]bool, error) {
	want := map[string]bool{}
	for _, fns := range Funcs {
		for _, fn := range fns {
			want[fn] = true
		}
	}
	have := map[string]bool{}
	err := readKallsyms(ctx, func(_ uint64, typ byte, name string) {
		if (typ == 't' || typ == 'T') && want[name] {
			have[name] = true
		}
	})
	return have, err
}

// readKallsyms calls fn for each line of /proc/kallsyms, under a deadline:
// it is a big file on a sick host. Module symbols are left out.
func readKallsyms(ctx context.Context, fn func(addr uint64, typ byte, name string)) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	type line struct {
		addr uint64
		typ  byte
		name string
	}
	done := make(chan error, 1)
	var lines []line
	go func() {
		f, err := os.Open("/proc/kallsyms")
		if err != nil {
			done <- fmt.Errorf("lockslow: %w", err)
			return
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) != 3 || len(fs[1]) != 1 {
				continue
			}
			a, err := strconv.ParseUint(fs[0], 16, 64)
			if err != nil {
				continue
			}
			lines = append(lines, line{a, fs[1][0], fs[2]})
		}
		done <- sc.Err()
	}()
	select {
	case err := <-done:
		if err != nil {
			return err
		}
		for _, l := range lines {
			fn(l.addr, l.typ, l.name)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("lockslow: read /proc/kallsyms: %w", ctx.Err())
	}
}
