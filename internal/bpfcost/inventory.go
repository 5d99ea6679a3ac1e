package bpfcost

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// eachProgram calls fn with every loaded program, by id. Programs are
// opened one at a time and closed as soon as fn returns, so wolf never
// keeps someone else's program alive; one unloaded meanwhile is skipped.
func eachProgram(fn func(id ebpf.ProgramID, p *ebpf.Program)) error {
	id := ebpf.ProgramID(0)
	for {
		next, err := ebpf.ProgramGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("bpf: next program id after %d: %w", id, err)
		}
		id = next
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue // unloaded meanwhile
		}
		fn(id, p)
		p.Close()
	}
}

// sampleStats reads every loaded program's run statistics, by id.
func sampleStats() (map[uint32]Stat, error) {
	out := map[uint32]Stat{}
	err := eachProgram(func(id ebpf.ProgramID, p *ebpf.Program) {
		if st, err := p.Stats(); err == nil {
			out[uint32(id)] = Stat{RunNs: uint64(st.Runtime.Nanoseconds()), Runs: st.RunCount, Misses: st.RecursionMisses}
		}
	})
	return out, err
}

// bootTime is when the system booted, for program load times (which the
// kernel gives since boot).
func bootTime() time.Time {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return time.Time{}
	}
	return time.Now().Add(-time.Duration(ts.Nano()))
}

// listPrograms reads every loaded program's metadata.
func listPrograms() ([]Program, error) {
	boot := bootTime()
	var out []Program
	err := eachProgram(func(id ebpf.ProgramID, p *ebpf.Program) {
		info, err := p.Info()
		if err != nil {
			return
		}
		prog := Program{ID: uint32(id), Type: info.Type.String(), Name: info.Name, Tag: info.Tag, UID: -1}
		if uid, ok := info.CreatedByUID(); ok {
			prog.UID = int64(uid)
		}
		if lt, ok := info.LoadTime(); ok && !boot.IsZero() {
			prog.Loaded = boot.Add(lt).UTC().Truncate(time.Second)
		}
		if maps, ok := info.MapIDs(); ok {
			prog.Maps = len(maps)
		}
		out = append(out, prog)
	})
	return out, err
}

// resolver names attach targets: kernel BTF ids and user-space offsets.
type resolver struct {
	kernel    *btf.Spec
	kernelErr error
	loaded    bool
	syms      map[string]*elfSyms
	exes      map[string]int // executable path -> processes running it
}

func (r *resolver) btfName(objID uint32, typeID btf.TypeID) string {
	if objID == 0 || !r.loaded {
		if !r.loaded {
			r.kernel, r.kernelErr = btf.LoadKernelSpec()
			r.loaded = true
		}
	}
	if objID == 0 && r.kernelErr == nil {
		if t, err := r.kernel.TypeByID(typeID); err == nil && t.TypeName() != "" {
			return t.TypeName()
		}
	}
	if objID != 0 {
		return fmt.Sprintf("btf type %d of object %d (a module or a BPF program)", typeID, objID)
	}
	return fmt.Sprintf("btf type %d", typeID)
}

func (r *resolver) symbol(file string, off uint64) string {
	if r.syms == nil {
		r.syms = map[string]*elfSyms{}
	}
	s, ok := r.syms[file]
	if !ok {
		s, _ = loadELFSyms(file)
		r.syms[file] = s
	}
	return s.lookup(off)
}

// sharedBy says how many processes map file: -1 for a shared library,
// else how many run it as their executable (read from /proc/PID/exe, which
// takes no mmap_lock).
func (r *resolver) sharedBy(file string) int {
	base := filepath.Base(file)
	if strings.Contains(base, ".so") {
		return -1
	}
	if r.exes == nil {
		r.exes = map[string]int{}
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			if _, err := strconv.Atoi(e.Name()); err != nil {
				continue
			}
			if exe, err := os.Readlink("/proc/" + e.Name() + "/exe"); err == nil {
				r.exes[exe]++
			}
		}
	}
	return r.exes[file]
}

// listLinks reads every BPF link and what it attaches to, by program id.
func listLinks(r *resolver) (map[uint32][]Attach, error) {
	out := map[uint32][]Attach{}
	it := new(link.Iterator)
	defer it.Close()
	for it.Next() {
		info, err := it.Link.Info()
		if err != nil {
			continue
		}
		a := describeLink(r, info)
		a.LinkID = uint32(info.ID)
		out[uint32(info.Program)] = append(out[uint32(info.Program)], a)
	}
	return out, it.Err()
}

func describeLink(r *resolver, info *link.Info) Attach {
	switch info.Type {
	case link.RawTracepointType:
		if rt := info.RawTracepoint(); rt != nil {
			return Attach{Kind: KindRawTracepoint, Target: rt.Name}
		}
		return Attach{Kind: KindRawTracepoint, Target: "?"}
	case link.TracingType:
		t := info.Tracing()
		if t == nil {
			return Attach{Kind: KindFentry, Target: "?"}
		}
		kind := KindOther
		switch ebpf.AttachType(t.AttachType) {
		case ebpf.AttachTraceFEntry:
			kind = KindFentry
		case ebpf.AttachTraceFExit:
			kind = KindFexit
		case ebpf.AttachModifyReturn:
			kind = KindFmodRet
		case ebpf.AttachTraceRawTp:
			kind = KindTPBTF
		case ebpf.AttachLSMMac:
			kind = KindLSM
		}
		name := r.btfName(t.TargetObjectId, btf.TypeID(t.TargetBtfId))
		if kind == KindTPBTF {
			name = strings.TrimPrefix(name, "btf_trace_")
		}
		return Attach{Kind: kind, Target: name}
	case link.PerfEventType:
		pe := info.PerfEvent()
		if pe == nil {
			return Attach{Kind: KindPerfEvent, Target: "?"}
		}
		switch pe.Type {
		case link.PerfEventUprobe, link.PerfEventUretprobe:
			kind := KindUprobe
			if pe.Type == link.PerfEventUretprobe {
				kind = KindUretprobe
			}
			u := pe.Uprobe()
			if u == nil {
				return Attach{Kind: kind, Target: "?"}
			}
			a := Attach{Kind: kind, File: u.File, Offset: uint64(u.Offset), SharedBy: r.sharedBy(u.File)}
			a.Symbol = r.symbol(u.File, a.Offset)
			a.Target = fmt.Sprintf("%s:%#x", u.File, u.Offset)
			if a.Symbol != "" {
				a.Target = u.File + ":" + a.Symbol
			}
			return a
		case link.PerfEventKprobe, link.PerfEventKretprobe:
			kind := KindKprobe
			if pe.Type == link.PerfEventKretprobe {
				kind = KindKretprobe
			}
			k := pe.Kprobe()
			if k == nil {
				return Attach{Kind: kind, Target: "?"}
			}
			return Attach{Kind: kind, Target: fmt.Sprintf("%s+%#x", k.Function, k.Offset), Missed: k.Missed}
		case link.PerfEventTracepoint:
			if tp := pe.Tracepoint(); tp != nil {
				return Attach{Kind: KindTracepoint, Target: tp.Tracepoint}
			}
			return Attach{Kind: KindTracepoint, Target: "?"}
		case link.PerfEventEvent:
			if ev := pe.Event(); ev != nil {
				return Attach{Kind: KindPerfEvent, Target: fmt.Sprintf("perf event type %d config %#x", ev.Type, ev.Config)}
			}
		}
		return Attach{Kind: KindPerfEvent, Target: "?"}
	case link.KprobeMultiType:
		kind := KindKprobeMulti
		target := "?"
		var missed uint64
		if km := info.KprobeMulti(); km != nil {
			target = fmt.Sprintf("%d kernel functions", km.Count)
			missed = km.Missed
			if km.Flags&unix.BPF_F_KPROBE_MULTI_RETURN != 0 {
				kind = KindKretMulti
			}
		}
		return Attach{Kind: kind, Target: target, Missed: missed}
	case link.UprobeMultiType:
		a := Attach{Kind: KindUprobeMulti, Target: "?"}
		if um := info.UprobeMulti(); um != nil {
			a.Target = fmt.Sprintf("%d offsets", um.Count)
			a.SharedBy = -1
		}
		return a
	case link.CgroupType:
		if c := info.Cgroup(); c != nil {
			return Attach{Kind: KindCgroup, Target: fmt.Sprintf("cgroup id %d (%s)", c.CgroupId, ebpf.AttachType(c.AttachType))}
		}
		return Attach{Kind: KindCgroup, Target: "?"}
	case link.XDPType:
		if x := info.XDP(); x != nil {
			return Attach{Kind: KindXDP, Target: ifName(x.Ifindex)}
		}
		return Attach{Kind: KindXDP, Target: "?"}
	case link.TCXType:
		if x := info.TCX(); x != nil {
			return Attach{Kind: KindTCX, Target: fmt.Sprintf("%s (%s)", ifName(x.Ifindex), ebpf.AttachType(x.AttachType))}
		}
		return Attach{Kind: KindTCX, Target: "?"}
	case link.NetkitType:
		if x := info.Netkit(); x != nil {
			return Attach{Kind: KindNetkit, Target: ifName(x.Ifindex)}
		}
		return Attach{Kind: KindNetkit, Target: "?"}
	case link.NetNsType:
		if n := info.NetNs(); n != nil {
			return Attach{Kind: KindNetns, Target: fmt.Sprintf("netns inode %d", n.NetnsInode)}
		}
		return Attach{Kind: KindNetns, Target: "?"}
	case link.NetfilterType:
		if n := info.Netfilter(); n != nil {
			return Attach{Kind: KindNetfilter, Target: fmt.Sprintf("pf %d hook %d prio %d", n.ProtocolFamily, n.Hook, n.Priority)}
		}
		return Attach{Kind: KindNetfilter, Target: "?"}
	case link.IterType:
		return Attach{Kind: KindIter, Target: "iterator"}
	case link.StructOpsType:
		return Attach{Kind: KindStructOps, Target: "struct_ops map"}
	}
	return Attach{Kind: KindOther, Target: fmt.Sprintf("link type %d", info.Type)}
}

func ifName(idx uint32) string {
	if ifc, err := net.InterfaceByIndex(int(idx)); err == nil {
		return fmt.Sprintf("%s (ifindex %d)", ifc.Name, idx)
	}
	return fmt.Sprintf("ifindex %d", idx)
}

// ownerScanTimeout bounds the whole /proc walk for BPF file descriptors.
const ownerScanTimeout = 3 * time.Second

// scanOwners finds, for every program, the processes holding a file
// descriptor of it or of one of its links: /proc/PID/fd links named
// anon_inode:bpf-prog or anon_inode:bpf_link, whose fdinfo gives the
// prog_id. This reads no process memory and takes no mmap_lock; the walk
// runs in a goroutine abandoned after ownerScanTimeout, so one odd
// process cannot hold wolf.
func scanOwners(ctx context.Context) (map[uint32][]Owner, error) {
	type res struct {
		m   map[uint32][]Owner
		err error
	}
	done := make(chan res, 1)
	go func() {
		m, err := walkFDs("/proc")
		done <- res{m, err}
	}()
	select {
	case r := <-done:
		return r.m, r.err
	case <-time.After(ownerScanTimeout):
		return nil, fmt.Errorf("bpf: scanning /proc for BPF file descriptors: timed out after %v", ownerScanTimeout)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func walkFDs(root string) (map[uint32][]Owner, error) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	out := map[uint32][]Owner{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		dir := filepath.Join(root, e.Name())
		fds, err := os.ReadDir(filepath.Join(dir, "fd"))
		if err != nil {
			continue
		}
		seen := map[uint32]bool{}
		var comm string
		for _, fd := range fds {
			target, err := os.Readlink(filepath.Join(dir, "fd", fd.Name()))
			if err != nil || (target != "anon_inode:bpf-prog" && target != "anon_inode:bpf_link") {
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, "fdinfo", fd.Name()))
			if err != nil {
				continue
			}
			id, ok := fdinfoProgID(string(b))
			if !ok || seen[id] {
				continue
			}
			seen[id] = true
			if comm == "" {
				c, _ := os.ReadFile(filepath.Join(dir, "comm"))
				comm = strings.TrimSpace(string(c))
			}
			out[id] = append(out[id], Owner{PID: pid, Comm: comm})
		}
	}
	return out, nil
}

// fdinfoProgID finds "prog_id:\tN" in a bpf-prog or bpf_link fdinfo.
func fdinfoProgID(s string) (uint32, bool) {
	for _, l := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(l, ":")
		if ok && strings.TrimSpace(k) == "prog_id" {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
			return uint32(n), err == nil
		}
	}
	return 0, false
}

// elfSyms symbolizes file offsets of one ELF file.
type elfSyms struct {
	progs []elf.ProgHeader
	syms  []elf.Symbol
}

func loadELFSyms(path string) (*elfSyms, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s := &elfSyms{}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			s.progs = append(s.progs, p.ProgHeader)
		}
	}
	if syms, err := f.Symbols(); err == nil {
		s.syms = append(s.syms, syms...)
	}
	if syms, err := f.DynamicSymbols(); err == nil {
		s.syms = append(s.syms, syms...)
	}
	return s, nil
}

// lookup names the function at file offset off ("write" or "write+0x4"),
// "" when unknown.
func (s *elfSyms) lookup(off uint64) string {
	if s == nil {
		return ""
	}
	var vaddr uint64
	found := false
	for _, p := range s.progs {
		if off >= p.Off && off < p.Off+p.Filesz {
			vaddr, found = off-p.Off+p.Vaddr, true
			break
		}
	}
	if !found {
		return ""
	}
	best := ""
	for _, sym := range s.syms {
		if elf.ST_TYPE(sym.Info) != elf.STT_FUNC || sym.Value == 0 {
			continue
		}
		if vaddr >= sym.Value && vaddr < sym.Value+max(sym.Size, 1) {
			name := sym.Name
			if i := strings.IndexByte(name, '@'); i > 0 {
				name = name[:i]
			}
			// Prefer the plain name among aliases (write over __write).
			if best == "" || (strings.HasPrefix(best, "_") && !strings.HasPrefix(name, "_")) {
				best = name
				if d := vaddr - sym.Value; d != 0 {
					best = fmt.Sprintf("%s+%#x", name, d)
				}
			}
		}
	}
	return best
}
