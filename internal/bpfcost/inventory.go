package bpfcost

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/kernelbtf"
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
			r.kernel, r.kernelErr = kernelbtf.Spec()
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

// Links reads every BPF link on the host and what it attaches to, by
// program id (for the cost benchmarks: the tracepoints a process's
// programs are attached to).
func Links() (map[uint32][]Attach, error) { return listLinks(&resolver{}) }

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
// prog_id. It also asks the kernel (BPF_TASK_FD_QUERY) what each perf
// event a process holds runs and where it is attached: kernels before 6.6
// do not say so in a perf-event link's info, and programs attached by
// ioctl (before 5.15) have no link at all. This reads no process memory
// and takes no mmap_lock; the walk runs in a goroutine abandoned after
// ownerScanTimeout, so one odd process cannot hold wolf.
func scanOwners(ctx context.Context) (map[uint32][]Owner, map[uint32][]fdAttach, error) {
	type res struct {
		m    map[uint32][]Owner
		perf map[uint32][]fdAttach
		err  error
	}
	done := make(chan res, 1)
	go func() {
		m, perf, err := walkFDs("/proc", taskFDQuery)
		done <- res{m, perf, err}
	}()
	select {
	case r := <-done:
		return r.m, r.perf, r.err
	case <-time.After(ownerScanTimeout):
		return nil, nil, fmt.Errorf("bpf: scanning /proc for BPF file descriptors: timed out after %v", ownerScanTimeout)
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
}

func walkFDs(root string, query func(pid, fd int) (fdAttach, bool)) (map[uint32][]Owner, map[uint32][]fdAttach, error) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, nil, err
	}
	out := map[uint32][]Owner{}
	perf := map[uint32][]fdAttach{}
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
			if err == nil && target == "anon_inode:[perf_event]" && query != nil {
				if n, err := strconv.Atoi(fd.Name()); err == nil {
					if a, ok := query(pid, n); ok {
						perf[a.ProgID] = append(perf[a.ProgID], a)
					}
				}
				continue
			}
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
	return out, perf, nil
}

// fdAttach is what BPF_TASK_FD_QUERY says of a perf event with a program.
type fdAttach struct {
	ProgID uint32
	Type   uint32 // BPF_FD_TYPE_*
	Name   string // tracepoint, kernel function, or file
	Offset uint64 // probe offset (kprobe, uprobe)
	Addr   uint64 // kprobe address when Name is empty
}

// BPF_FD_TYPE_* (include/uapi/linux/bpf.h).
const (
	fdTypeRawTracepoint = 0
	fdTypeTracepoint    = 1
	fdTypeKprobe        = 2
	fdTypeKretprobe     = 3
	fdTypeUprobe        = 4
	fdTypeUretprobe     = 5
)

// taskFDQuery asks the kernel which program process pid's perf event fd
// runs and where it is attached (BPF_TASK_FD_QUERY, 4.17+).
func taskFDQuery(pid, fd int) (fdAttach, bool) {
	var buf [4096]byte
	attr := struct {
		PID, FD, Flags, BufLen uint32
		Buf                    uint64
		ProgID, FDType         uint32
		ProbeOffset, ProbeAddr uint64
	}{PID: uint32(pid), FD: uint32(fd), BufLen: uint32(len(buf)), Buf: uint64(uintptr(unsafe.Pointer(&buf[0])))}
	_, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_TASK_FD_QUERY, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	runtime.KeepAlive(&buf)
	if errno != 0 || attr.ProgID == 0 {
		return fdAttach{}, false
	}
	n := min(int(attr.BufLen), len(buf))
	name := string(buf[:n])
	if i := strings.IndexByte(name, 0); i >= 0 {
		name = name[:i]
	}
	return fdAttach{ProgID: attr.ProgID, Type: attr.FDType, Name: name, Offset: attr.ProbeOffset, Addr: attr.ProbeAddr}, true
}

// describeFD turns a perf event's query answer into an Attach.
func describeFD(r *resolver, a fdAttach) Attach {
	switch a.Type {
	case fdTypeUprobe, fdTypeUretprobe:
		kind := KindUprobe
		if a.Type == fdTypeUretprobe {
			kind = KindUretprobe
		}
		at := Attach{Kind: kind, File: a.Name, Offset: a.Offset, SharedBy: r.sharedBy(a.Name)}
		at.Symbol = r.symbol(a.Name, a.Offset)
		at.Target = fmt.Sprintf("%s:%#x", a.Name, a.Offset)
		if at.Symbol != "" {
			at.Target = a.Name + ":" + at.Symbol
		}
		return at
	case fdTypeKprobe, fdTypeKretprobe:
		kind := KindKprobe
		if a.Type == fdTypeKretprobe {
			kind = KindKretprobe
		}
		if a.Name == "" {
			return Attach{Kind: kind, Target: fmt.Sprintf("%#x", a.Addr)}
		}
		return Attach{Kind: kind, Target: fmt.Sprintf("%s+%#x", a.Name, a.Offset)}
	case fdTypeTracepoint:
		return Attach{Kind: KindTracepoint, Target: a.Name}
	case fdTypeRawTracepoint:
		return Attach{Kind: KindRawTracepoint, Target: a.Name}
	}
	return Attach{Kind: KindPerfEvent, Target: "?"}
}

// withFDAttaches fills in what the links could not say: a program whose
// attachments are unknown ("?" perf-event links, or none) takes those the
// perf events held by processes say, once per (kind, target).
func withFDAttaches(r *resolver, links []Attach, fds []fdAttach) []Attach {
	if len(fds) == 0 {
		return links
	}
	known := false
	for _, a := range links {
		if a.Kind != KindPerfEvent || a.Target != "?" {
			known = true
		}
	}
	if known {
		return links
	}
	var out []Attach
	seen := map[string]bool{}
	for _, f := range fds {
		a := describeFD(r, f)
		if k := a.Kind + " " + a.Target; !seen[k] {
			seen[k] = true
			out = append(out, a)
		}
	}
	return out
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
