// Package reclaim is wolf's memory-reclaim investigator: per memory cgroup
// and per task, how often and how long tasks reclaimed, how many pages each
// reclaim scanned for each one it freed, and what the cgroup and its
// processes looked like meanwhile (limit, usage, limit hits, OOM kills, LRU
// sizes, PSI, pidstat's %usr/%sys and fault rates). Its verdict names the
// livelock of ClickHouse's "The case of the vanishing CPU": a cgroup at its limit whose reclaim calls last seconds and
// free almost nothing of what they scan, its tasks all in the kernel, and no
// OOM kill to end it.
//
// The BPF side is reclaim.bpf.c (vmscan tracepoints only); Conclude
// (analyze.go) turns a Snapshot into findings and is tested without BPF;
// audit.go checks MGLRU, swap and the vm settings.
package reclaim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/wolf-investigator/wolf/internal/bpfrec"
	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/memcg"
	"github.com/wolf-investigator/wolf/internal/overhead"
	"github.com/wolf-investigator/wolf/internal/procfs"
)

// Bounds on what one run reads from cgroupfs and /proc.
const (
	maxCgroupsWalked  = 4096 // cgroups snapshotted at the start
	maxProcsSnapshot  = 8192 // processes whose /proc stat is read at the start
	maxProcsPerCgroup = 64   // processes reported per cgroup
	progressInterval  = 250 * time.Millisecond
	statReaderTimeout = 500 * time.Millisecond
	collectTimeout    = 5 * time.Second // bounds the reads after the window
)

// Investigator watches reclaim. The zero value is ready to use; New sets
// the defaults explicitly.
type Investigator struct {
	// Cgroup, when set, limits the report to this memory cgroup and its
	// descendants (a path within the memory hierarchy, e.g. /kubepods/x).
	Cgroup string
	Proc   procfs.Reader

	// Test hooks: attached runs when the window opens (every program
	// attached, the gate open); collecting when it has closed (the gate
	// shut, before the programs detach).
	// Tests read independent counters there, over the same window.
	attached, collecting func()
	// absent makes tracepoints look missing from the kernel (tests).
	absent map[string]bool
}

// New returns an investigator with the defaults.
func New() *Investigator {
	return &Investigator{Proc: procfs.Reader{Timeout: statReaderTimeout}}
}

// Name implements investigator.Investigator.
func (*Investigator) Name() string { return "reclaim" }

// Summary implements investigator.Investigator.
func (*Investigator) Summary() string {
	return "memory reclaim per cgroup and task: stalls, pages scanned per page freed, the memcg livelock"
}

// procSample is one process's /proc/PID/stat at one moment.
type procSample struct {
	st procfs.Stat
	at time.Time
}

// Start reads every cgroup's counters, loads and attaches.
func (iv *Investigator) Start(ctx context.Context, opts investigator.Options) (investigator.Session, error) {
	s := &session{iv: *iv, opts: opts, meter: overhead.Start()}
	ok := false
	defer func() {
		if !ok {
			s.Close()
		}
	}()
	h, herr := memcg.Find(ctx, iv.Proc)
	s.h, s.useMemcg = h, herr == nil
	var err error
	if s.sc, err = iv.scope(ctx, h, herr, opts.PID); err != nil {
		return nil, err
	}

	// Before: every cgroup's counters, every process's stat, host PSI.
	s.before = map[string]memcg.State{}
	if s.useMemcg {
		s.idPaths, _, _ = h.IDs(ctx, maxCgroupsWalked)
		for _, p := range s.idPaths {
			if st, err := h.ReadCounters(p); err == nil {
				s.before[p] = st
			}
		}
	}
	s.procs0 = iv.sampleProcs(ctx, opts.PID)
	s.psi0, s.psiErr = memcg.ReadPSI(memcg.SystemPressure)
	s.oom0 = vmstatOOMKills()

	if s.p, err = openProbe(s.useMemcg, iv.absent); err != nil {
		return nil, err
	}
	if err := s.p.setGate(true); err != nil {
		return nil, err
	}
	s.meter.Track(s.p.programs()...)
	s.started = time.Now()
	if iv.attached != nil {
		iv.attached()
	}
	ok = true
	return s, nil
}

// session is reclaim attached.
type session struct {
	iv       Investigator
	opts     investigator.Options
	meter    *overhead.Meter
	h        memcg.Hierarchy
	useMemcg bool
	sc       scope
	idPaths  map[uint64]string
	before   map[string]memcg.State
	procs0   map[int]procSample
	psi0     memcg.PSI
	psiErr   error
	oom0     int64
	p        *probe
	started  time.Time
}

// Close detaches and frees everything.
func (s *session) Close() error {
	// The meter's duty cycle reads the programs' statistics in the
	// background: stop it before the programs close under it.
	s.meter.Close()
	if s.p != nil {
		s.p.close()
	}
	return nil
}

// Collect concludes the window since Start.
func (s *session) Collect(ctx context.Context) (*investigator.Result, error) {
	iv, p, opts, started := &s.iv, s.p, s.opts, s.started
	h, useMemcg, sc, idPaths, before, procs0 := s.h, s.useMemcg, s.sc, s.idPaths, s.before, s.procs0
	psi0, psiErr, oom0 := s.psi0, s.psiErr, s.oom0
	if err := p.setGate(false); err != nil {
		return nil, err
	}
	window := time.Since(started)
	if iv.collecting != nil {
		iv.collecting()
	}
	raw, err := p.read()
	if err != nil {
		return nil, err
	}

	snap := &Snapshot{Window: window}
	if psiErr == nil {
		if psi1, err := memcg.ReadPSI(memcg.SystemPressure); err == nil {
			snap.System.HasPSI = true
			snap.System.PSISome = memcg.StallPct(psi0, psi1, window, false)
			snap.System.PSIFull = memcg.StallPct(psi0, psi1, window, true)
		}
	}
	if oom1 := vmstatOOMKills(); oom1 >= oom0 && oom0 >= 0 {
		snap.System.OOMKills = uint64(oom1 - oom0)
	}
	if sw := swapTotal(); sw >= 0 {
		snap.System.SwapTotalBytes = uint64(sw)
	}
	snap.System.MGLRU = ReadMGLRU()
	snap.Kswapd = Kswapd{
		Wakes: raw.stats[statKswapdWakes], Sleeps: raw.stats[statKswapdSleeps], Requests: raw.stats[statWakeupKswapd],
		Awake: time.Duration(raw.stats[statKswapdNs]), Scanned: raw.stats[statKswapdScanned], Reclaimed: raw.stats[statKswapdReclaimed],
		AwakeHist: raw.kswapd,
	}
	// The window is over, possibly because ctx was cancelled (Ctrl-C): the
	// reads that complete the report get a context of their own.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), collectTimeout)
	defer cancel()
	iv.buildCgroups(cctx, snap, raw, h, useMemcg, idPaths, before, procs0, sc, opts.PID)

	res := &investigator.Result{
		Findings:     Conclude(snap),
		Histograms:   snap.Histograms(),
		Capabilities: map[string]bool{"memcg": useMemcg},
	}
	for _, tp := range tracepoints {
		res.Capabilities["tracepoint:vmscan/"+tp.name] = p.attached[tp.name]
	}
	dropped := raw.stats[statCgFull] + raw.stats[statTaskFull] + raw.stats[statInflightFull] + raw.stats[statHistFull]
	res.Overhead = s.meter.Lap(raw.stats[statEvents], dropped, p.programs()...)
	return res, nil
}

// scope is what --cgroup and --pid keep: a cgroup and its descendants,
// and the one cgroup a process is charged to.
type scope struct {
	under string // --cgroup: this path and below; "" for all
	exact string // --pid: only this path; "" for any
}

func (sc scope) keeps(path string, known bool) bool {
	if sc.under == "" && sc.exact == "" {
		return true
	}
	if !known {
		return false
	}
	if sc.exact != "" && path != sc.exact {
		return false
	}
	return sc.under == "" || sc.under == "/" || path == sc.under || strings.HasPrefix(path, sc.under+"/")
}

// scope turns --cgroup and --pid into what to report.
func (iv *Investigator) scope(ctx context.Context, h memcg.Hierarchy, herr error, pid int) (scope, error) {
	var sc scope
	if iv.Cgroup != "" {
		if herr != nil {
			return sc, fmt.Errorf("reclaim: --cgroup %s: %v: %w", iv.Cgroup, herr, investigator.ErrUnsupported)
		}
		sc.under = filepath.Clean("/" + iv.Cgroup)
		if _, err := os.Stat(h.Dir(sc.under)); err != nil {
			return sc, fmt.Errorf("reclaim: no memory cgroup %s under %s: %w", sc.under, h.Mount, err)
		}
	}
	if pid != 0 && herr == nil {
		cgs, err := iv.Proc.Cgroup(ctx, pid, 0)
		if err != nil {
			return sc, fmt.Errorf("reclaim: process %d: %w", pid, err)
		}
		if p, ok := h.PathOf(cgs); ok {
			sc.exact = p
		}
	}
	return sc, nil
}

// sampleProcs reads /proc/PID/stat of every process (or only pid), for
// pidstat-like deltas at the end. Unreadable processes are skipped.
func (iv *Investigator) sampleProcs(ctx context.Context, pid int) map[int]procSample {
	out := map[int]procSample{}
	pids := []int{pid}
	if pid == 0 {
		var err error
		if pids, err = iv.Proc.Processes(ctx); err != nil {
			return out
		}
	}
	for i, p := range pids {
		if i == maxProcsSnapshot || ctx.Err() != nil {
			break
		}
		if st, err := iv.Proc.Stat(ctx, p, 0); err == nil {
			out[p] = procSample{st, time.Now()}
		}
	}
	return out
}

// buildCgroups fills snap.Cgroups from the maps: one entry per cgroup the
// BPF side saw, with its state, its processes and their reclaim.
func (iv *Investigator) buildCgroups(ctx context.Context, snap *Snapshot, raw *raw, h memcg.Hierarchy, useMemcg bool,
	idPaths map[uint64]string, before map[string]memcg.State, procs0 map[int]procSample, sc scope, pid int) {
	// Ids first seen during the window (new cgroups) need a second walk.
	if useMemcg {
		for id := range raw.cgroups {
			if _, ok := idPaths[id]; !ok {
				idPaths, _, _ = h.IDs(ctx, maxCgroupsWalked)
				break
			}
		}
	}
	// Per-process reclaim, from the per-thread counters and the calls still
	// in flight.
	type procReclaim struct {
		Proc
		cgid uint64
	}
	byPID := map[int]*procReclaim{}
	procOf := func(tgid int, cgid uint64) *procReclaim {
		pr := byPID[tgid]
		if pr == nil {
			pr = &procReclaim{Proc: Proc{PID: tgid}, cgid: cgid}
			byPID[tgid] = pr
		}
		return pr
	}
	for _, ts := range raw.tasks {
		pr := procOf(int(ts.Tgid), ts.Cgid)
		pr.Calls += ts.Calls
		pr.InReclaim += time.Duration(ts.Ns)
		pr.ReclaimCPU += time.Duration(ts.CpuNs)
		pr.MaxReclaim = max(pr.MaxReclaim, time.Duration(ts.MaxNs))
		pr.Scanned += ts.Scanned
		pr.Reclaimed += ts.Reclaimed
		if pr.Comm == "" {
			pr.Comm = bpfrec.CString(ts.Comm[:])
		}
	}
	inflight := map[uint64][]Call{}
	for tid, f := range raw.inflight {
		if f.Kind >= numKinds || time.Duration(f.StartNs) > raw.now {
			continue
		}
		d := raw.now - time.Duration(f.StartNs)
		c := Call{TID: int(tid), PID: int(f.Tgid), Kind: kindNames[f.Kind], Duration: d, Scanned: f.Scanned, Reclaimed: f.Reclaimed, InFlight: true}
		c.Comm, _ = iv.Proc.Comm(ctx, c.PID, c.TID)
		inflight[f.Cgid] = append(inflight[f.Cgid], c)
		pr := procOf(c.PID, f.Cgid)
		pr.InReclaim += d
		pr.MaxReclaim = max(pr.MaxReclaim, d)
		pr.Scanned += f.Scanned
		pr.Reclaimed += f.Reclaimed
	}

	for id, s := range raw.cgroups {
		path, known := idPaths[id]
		if !useMemcg {
			path, known = "", false
		}
		if !sc.keeps(path, known) {
			continue
		}
		c := &Cgroup{ID: id, Path: path, Window: snap.Window, Reclaim: reclaimOf(s, raw, id, inflight[id])}
		if c.Reclaim.Worst != nil {
			c.Reclaim.Worst.Comm, _ = iv.Proc.Comm(ctx, c.Reclaim.Worst.PID, c.Reclaim.Worst.TID)
			if c.Reclaim.Worst.Comm == "" {
				if ts, ok := raw.tasks[uint32(c.Reclaim.Worst.TID)]; ok {
					c.Reclaim.Worst.Comm = bpfrec.CString(ts.Comm[:])
				}
			}
		}
		if known {
			if st, err := h.Read(path); err == nil {
				c.State = &st
				if b, ok := before[path]; ok {
					c.Before = &b
					if b.Pressure != nil && st.Pressure != nil {
						c.PSISome = memcg.StallPct(*b.Pressure, *st.Pressure, snap.Window, false)
						c.PSIFull = memcg.StallPct(*b.Pressure, *st.Pressure, snap.Window, true)
					}
				}
			}
		}
		// Its processes: those in it now, and those whose threads
		// reclaimed charged to it (they may have left or exited).
		var pids []int
		if known {
			pids, _ = h.Procs(path)
		}
		for tgid, pr := range byPID {
			if pr.cgid == id && !slices.Contains(pids, tgid) {
				pids = append(pids, tgid)
			}
		}
		if pid != 0 {
			pids = slices.DeleteFunc(pids, func(p int) bool { return p != pid })
		}
		// The busiest reclaimers first, then the rest, up to the bound.
		slices.SortStableFunc(pids, func(a, b int) int {
			var ra, rb time.Duration
			if x := byPID[a]; x != nil {
				ra = x.InReclaim
			}
			if x := byPID[b]; x != nil {
				rb = x.InReclaim
			}
			return cmp.Compare(rb, ra)
		})
		if len(pids) > maxProcsPerCgroup {
			pids = pids[:maxProcsPerCgroup]
		}
		for _, p := range pids {
			pr := Proc{PID: p}
			if x := byPID[p]; x != nil && x.cgid == id {
				pr = x.Proc
			}
			if st, err := iv.Proc.Stat(ctx, p, 0); err == nil {
				pr.Comm, pr.Threads = st.Comm, st.NumThreads
				prev, ok := procs0[p]
				if !ok || prev.st.StartTime != st.StartTime {
					// Started during the window: count from zero.
					prev = procSample{at: time.Now().Add(-snap.Window)}
				}
				if el := time.Since(prev.at); el > 0 {
					pr.StatKnown = true
					pr.UserPct = 100 * (st.UTime - prev.st.UTime).Seconds() / el.Seconds()
					pr.SysPct = 100 * (st.STime - prev.st.STime).Seconds() / el.Seconds()
					pr.Faults = (st.MinFlt + st.MajFlt) - (prev.st.MinFlt + prev.st.MajFlt)
					pr.MajFaults = st.MajFlt - prev.st.MajFlt
				}
			} else if errors.Is(err, fs.ErrNotExist) && pr.Calls == 0 {
				continue // gone, and nothing to say about it
			}
			c.Procs = append(c.Procs, pr)
		}
		snap.Cgroups = append(snap.Cgroups, c)
	}
	slices.SortFunc(snap.Cgroups, func(a, b *Cgroup) int { return strings.Compare(a.Path, b.Path) })
}

// reclaimOf converts one cgroup's map entries.
func reclaimOf(s *reclaimCgStats, raw *raw, id uint64, inflight []Call) Reclaim {
	r := Reclaim{
		CtxSwitches: s.Csw, Scanned: s.Scanned, Reclaimed: s.Reclaimed, FileScanned: s.FileScanned,
		RefKeep: s.RefKeep, ActivateAnon: s.ActivateAnon, ActivateFile: s.ActivateFile,
		Dirty: s.Dirty, Writeback: s.Writeback, Congested: s.Congested, Immediate: s.Immediate, Unmap: s.UnmapFail,
		ActiveTaken: s.ActiveTaken, ActiveKept: s.ActiveKept, Deactivated: s.Deactivated,
		Throttled: s.Throttled, ThrottledFor: time.Duration(s.ThrottledUs) * time.Microsecond,
		MaxCallScanned: s.MaxCallScanned, InFlight: inflight, UnmatchedEnds: s.UnmatchedEnds,
	}
	for k := range numKinds {
		r.Calls[k] = s.Calls[k]
		r.Time[k] = time.Duration(s.Ns[k])
		r.CPU[k] = time.Duration(s.CpuNs[k])
		r.Max[k] = time.Duration(s.MaxNs[k])
		r.Durations[k] = raw.hists[reclaimHistKey{Cgid: id, Kind: uint32(k)}]
	}
	r.ScannedPerCall = raw.hists[reclaimHistKey{Cgid: id, Kind: histScanned}]
	if s.WorstNs > 0 && s.WorstKind < numKinds {
		w := &Call{TID: int(s.WorstTid), Kind: kindNames[s.WorstKind], Duration: time.Duration(s.WorstNs), Scanned: s.WorstScanned, Reclaimed: s.WorstReclaimed}
		if ts, ok := raw.tasks[s.WorstTid]; ok {
			w.PID = int(ts.Tgid)
		}
		r.Worst = w
	}
	return r
}

// vmstatOOMKills is /proc/vmstat's oom_kill, -1 when unreadable.
func vmstatOOMKills() int64 {
	v, ok := readVMStat()["oom_kill"]
	if !ok {
		return -1
	}
	return int64(v)
}

func readVMStat() map[string]uint64 {
	b, err := os.ReadFile("/proc/vmstat")
	if err != nil {
		return nil
	}
	return memcg.ParseKV(b)
}
