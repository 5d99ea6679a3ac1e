package costbench

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// The measurements of BPF programs that the cost benchmarks compare: a
// process's programs (wolf's, perf's) and the floor, empty programs on the
// same tracepoints, read with the kernel's run statistics over the same
// kind of window.

// Stat is one program's run statistics.
type Stat struct {
	Name  string
	RunNs uint64
	Runs  uint64
	// Misses are the runs the kernel skipped because a BPF program
	// already ran on that CPU (its recursion misses).
	Misses uint64
}

// EnableStats turns the kernel's BPF run statistics on until the returned
// closer is closed (reference-counted by the kernel; the sysctl is never
// written).
func EnableStats() (interface{ Close() error }, error) {
	c, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return nil, fmt.Errorf("costbench: turn on BPF run statistics: %w", err)
	}
	return c, nil
}

// HeldPrograms lists the BPF programs process pid holds a file descriptor
// of (a program's own, or its link's).
func HeldPrograms(pid int) ([]ebpf.ProgramID, error) {
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("costbench: %w", err)
	}
	seen := map[ebpf.ProgramID]bool{}
	for _, e := range ents {
		b, err := os.ReadFile(dir + "/" + e.Name())
		if err != nil {
			continue // closed meanwhile
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "prog_id:"); ok {
				if id, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32); err == nil && id != 0 {
					seen[ebpf.ProgramID(id)] = true
				}
			}
		}
	}
	out := make([]ebpf.ProgramID, 0, len(seen))
	for id := range seen {
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

// WaitPrograms waits, up to timeout, until process pid holds programs and
// their number has not grown for settle: every investigator attached.
func WaitPrograms(pid int, settle, timeout time.Duration) ([]ebpf.ProgramID, error) {
	deadline := time.Now().Add(timeout)
	var last []ebpf.ProgramID
	stable := time.Now()
	for time.Now().Before(deadline) {
		ids, err := HeldPrograms(pid)
		if err != nil {
			return nil, err
		}
		if len(ids) != len(last) {
			last, stable = ids, time.Now()
		} else if len(ids) > 0 && time.Since(stable) >= settle {
			return ids, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(last) == 0 {
		return nil, fmt.Errorf("costbench: process %d attached no BPF program in %v", pid, timeout)
	}
	return last, nil
}

// ReadStats reads the run statistics of programs ids; programs gone are
// left out.
func ReadStats(ids []ebpf.ProgramID) map[ebpf.ProgramID]Stat {
	out := map[ebpf.ProgramID]Stat{}
	for _, id := range ids {
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue
		}
		st, err := p.Stats()
		info, ierr := p.Info()
		p.Close()
		if err != nil || ierr != nil {
			continue
		}
		out[id] = Stat{Name: info.Name, RunNs: uint64(st.Runtime.Nanoseconds()), Runs: st.RunCount, Misses: st.RecursionMisses}
	}
	return out
}

// Delta is what the programs ran between two readings, per program name
// (programs of one name summed), and in all.
type Delta struct {
	ByName map[string]Stat
	RunNs  uint64
	Runs   uint64
}

// Since is b minus a, over the programs both readings have.
func Since(a, b map[ebpf.ProgramID]Stat) Delta {
	d := Delta{ByName: map[string]Stat{}}
	for id, y := range b {
		x, ok := a[id]
		if !ok || y.Runs < x.Runs || y.RunNs < x.RunNs {
			continue
		}
		s := d.ByName[y.Name]
		s.Name = y.Name
		s.RunNs += y.RunNs - x.RunNs
		s.Runs += y.Runs - x.Runs
		d.ByName[y.Name] = s
		d.RunNs += y.RunNs - x.RunNs
		d.Runs += y.Runs - x.Runs
	}
	return d
}

// Floor is an empty program on each of a set of raw tracepoints: the cost
// of running any BPF program there at all.
type Floor struct {
	progs []*ebpf.Program
	links []link.Link
	ids   []ebpf.ProgramID
	tps   []string // the tracepoint of each of ids
}

// AttachFloor attaches an empty raw-tracepoint program to each tracepoint
// (its event name: "sched_switch").
func AttachFloor(tracepoints []string) (*Floor, error) {
	f := &Floor{}
	for _, tp := range tracepoints {
		name := "floor_" + tp
		if len(name) > 15 {
			name = name[:15]
		}
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: sanitize(name), Type: ebpf.RawTracepoint, License: "GPL",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("costbench: floor program for %s: %w", tp, err)
		}
		f.progs = append(f.progs, prog)
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: tp, Program: prog})
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("costbench: attach the floor to %s: %w", tp, err)
		}
		f.links = append(f.links, l)
		info, err := prog.Info()
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("costbench: floor program: %w", err)
		}
		id, _ := info.ID()
		f.ids = append(f.ids, id)
		f.tps = append(f.tps, tp)
	}
	return f, nil
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
			return r
		}
		return '_'
	}, s)
}

// IDs are the floor's programs.
func (f *Floor) IDs() []ebpf.ProgramID { return f.ids }

// IDsOf are the floor's programs on the tracepoints tps.
func (f *Floor) IDsOf(tps ...string) []ebpf.ProgramID {
	var out []ebpf.ProgramID
	for i, tp := range f.tps {
		for _, want := range tps {
			if tp == want {
				out = append(out, f.ids[i])
			}
		}
	}
	return out
}

// Close detaches and unloads the floor.
func (f *Floor) Close() {
	for _, l := range f.links {
		_ = l.Close()
	}
	for _, p := range f.progs {
		_ = p.Close()
	}
	f.links, f.progs = nil, nil
}

// ProcessCPU is the CPU time (user + system) process pid has used so far,
// from /proc/PID/stat.
func ProcessCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("costbench: %w", err)
	}
	s := string(b)
	// The fields after the command, which may hold spaces and parens.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("costbench: /proc/%d/stat: no command", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("costbench: /proc/%d/stat: %d fields", pid, len(f))
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64) // utime, field 14
	st, err2 := strconv.ParseUint(f[12], 10, 64) // stime, field 15
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("costbench: /proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// architecture Linux runs wolf on.
const clockTicks = 100
