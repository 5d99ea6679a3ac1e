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
	"github.com/wolf-investigator/wolf/internal/probekit"
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
	// snapshot sees each window's snapshot before it is concluded (tests).
	snapshot func(*Snapshot)
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
	s := &session{iv: *iv, opts: opts}
	h, herr := memcg.Find(ctx, iv.Proc)
	s.h, s.useMemcg = h, herr == nil
	var err error
	if s.sc, err = iv.scope(ctx, h, herr, opts.PID); err != nil {
		return nil, err
	}
	// Before: every cgroup's counters, every process's stat.
	s.baseline(ctx, nil, nil)

	refuse := map[string]bool{}
	for name := range iv.absent {
		refuse["vmscan/"+name] = true
	}
	s.ranges = loadSampleRanges(ctx)
	if s.p, err = openProbe(s.useMemcg, refuse, s.ranges); err != nil {
		return nil, err
	}
	// Host PSI and OOM kills from the window's start: PSI is a share of
	// the window's time.
	s.psi0, s.psiErr = memcg.ReadPSI(memcg.SystemPressure)
	s.oom0 = vmstatOOMKills()
	s.started = time.Now()
	if iv.attached != nil {
		iv.attached()
	}
	return s, nil
}

// session is reclaim attached. Its windows: the maps are cumulative (the
// gate opens once, at Start) and each window is the reading at its Collect
// minus the previous one; maxima and the longest call are kept per window
// by the programs (wolf.h's struct wolf_max). A call in flight at Collect
// is shown as such, its time so far counted in the window; when it ends,
// the window it ends in counts only the rest (see windows). cgroupfs,
// /proc and PSI are read at each Collect: one window's after is the next
// one's before.
type session struct {
	iv       Investigator
	opts     investigator.Options
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
	started  time.Time // the window's start
	win      windows
	ranges   sampleRanges
	sampWin  sampleWindows
	rereWin  rereadWindows
}

// baseline reads what the next window is measured against: every
// cgroup's counters and every process's stat, except those the window
// that just ended read already (states, procs), which are kept as read.
func (s *session) baseline(ctx context.Context, states map[string]memcg.State, procs map[int]procSample) {
	s.before = map[string]memcg.State{}
	if s.useMemcg {
		s.idPaths, _, _ = s.h.IDs(ctx, maxCgroupsWalked)
		for _, p := range s.idPaths {
			if st, ok := states[p]; ok {
				s.before[p] = st
			} else if st, err := s.h.ReadCounters(p); err == nil {
				s.before[p] = st
			}
		}
	}
	s.procs0 = s.iv.sampleProcs(ctx, s.opts.PID, procs)
}

// Restart implements investigator.Restarter for the CPU samples only:
// what the sampler counted while the runner's other investigators were
// loading (seconds of verifier work at wolf's raised priority on a slow
// machine) is left out, so that the shares of the CPUs' busy time it
// gives are of the host's own work. The rest of the window (reclaim
// calls, cgroup counters) is the host's whatever wolf did meanwhile.
func (s *session) Restart(ctx context.Context) error {
	cur, err := s.p.readSamples()
	if err != nil {
		return err
	}
	s.sampWin.restart(cur)
	return nil
}

// Close detaches and frees everything.
func (s *session) Close() error {
	// The kit stops its cost meter before it closes the programs.
	if s.p != nil {
		s.p.close()
	}
	return nil
}

// Collect concludes the window since Start or the previous Collect.
func (s *session) Collect(ctx context.Context) (*investigator.Result, error) {
	iv, p, opts := &s.iv, s.p, s.opts
	// The window's maxima stop here; the maps are read after.
	w, err := p.kit.EndWindow()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	window := now.Sub(s.started)
	if iv.collecting != nil {
		iv.collecting()
	}
	cur, err := p.read(w)
	if err != nil {
		return nil, err
	}
	raw, ev := s.win.step(cur)
	curSamples, err := p.readSamples()
	if err != nil {
		return nil, err
	}
	samples, sev := s.sampWin.step(curSamples)
	ev.samples = sev
	curRereads, err := p.readRereads()
	if err != nil {
		return nil, err
	}
	rereads, rev := s.rereWin.step(curRereads)
	ev.rereads = rev
	p.evict(ev)
	c, err := p.kit.WindowCounters()
	if err != nil {
		return nil, fmt.Errorf("reclaim: %w", err)
	}

	snap := &Snapshot{Window: window}
	if p.kit.Attached("perf_event") {
		snap.Samples = Samples{Hz: sampleHz, Classified: s.ranges.n > 0}
		for _, c := range samples {
			snap.Samples.Busy += c.Busy
		}
	}
	if s.psiErr == nil {
		if psi1, err := memcg.ReadPSI(memcg.SystemPressure); err == nil {
			snap.System.HasPSI = true
			snap.System.PSISome = memcg.StallPct(s.psi0, psi1, window, false)
			snap.System.PSIFull = memcg.StallPct(s.psi0, psi1, window, true)
			s.psi0 = psi1
		}
	}
	if oom1 := vmstatOOMKills(); oom1 >= s.oom0 && s.oom0 >= 0 {
		snap.System.OOMKills = uint64(oom1 - s.oom0)
		s.oom0 = oom1
	}
	if sw := swapTotal(); sw >= 0 {
		snap.System.SwapTotalBytes = uint64(sw)
	}
	snap.System.MGLRU = ReadMGLRU()
	snap.Kswapd = Kswapd{
		Wakes: c[reclaimStatIndexSTAT_KSWAPD_WAKES], Sleeps: c[reclaimStatIndexSTAT_KSWAPD_SLEEPS], Requests: c[reclaimStatIndexSTAT_WAKEUP_KSWAPD],
		Awake: time.Duration(c[reclaimStatIndexSTAT_KSWAPD_NS]), Scanned: c[reclaimStatIndexSTAT_KSWAPD_SCANNED], Reclaimed: c[reclaimStatIndexSTAT_KSWAPD_RECLAIMED],
		AwakeHist: raw.kswapd,
	}
	// The window is over, possibly because ctx was cancelled (Ctrl-C): the
	// reads that complete the report get a context of their own.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), collectTimeout)
	defer cancel()
	states, procs := map[string]memcg.State{}, map[int]procSample{}
	iv.buildCgroups(cctx, snap, raw, s.h, s.useMemcg, s.idPaths, s.before, s.procs0, s.sc, opts.PID, states, procs)
	// Detached for part of the window by the budget, the measure is short
	// of that part: still a floor, which is how the diagnosis stage uses it.
	snap.Rereads = p.kit.Attached(rereadDelete) && p.kit.Attached(rereadAdd)
	for _, c := range snap.Cgroups {
		c.CPU = samples[c.ID]
		c.Rereads = rereads[c.ID]
	}

	if iv.snapshot != nil {
		iv.snapshot(snap)
	}
	fs, facts := ConcludeFacts(snap)
	res := &investigator.Result{
		Findings:     fs,
		Facts:        facts,
		Histograms:   snap.Histograms(),
		Capabilities: p.kit.Capabilities(attachTable),
		Notes:        p.kit.Notes(),
	}
	if s.ranges.why != "" && snap.Samples.Hz > 0 {
		res.Notes = append(res.Notes, s.ranges.why)
	}
	res.Capabilities["memcg"] = s.useMemcg
	dropped := c[reclaimStatIndexSTAT_CG_FULL] + c[reclaimStatIndexSTAT_TASK_FULL] + c[reclaimStatIndexSTAT_INFLIGHT_FULL] + c[reclaimStatIndexSTAT_HIST_FULL]
	res.Overhead = p.kit.Overhead(c[reclaimStatIndexSTAT_EVENTS], dropped)
	// What the next window is measured against.
	s.baseline(cctx, states, procs)
	s.started = now
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
// pidstat-like deltas at the end, except those in read (kept as read).
// Unreadable processes are skipped.
func (iv *Investigator) sampleProcs(ctx context.Context, pid int, read map[int]procSample) map[int]procSample {
	out := map[int]procSample{}
	for p, ps := range read {
		out[p] = ps
	}
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
		if _, ok := out[p]; ok {
			continue
		}
		if st, err := iv.Proc.Stat(ctx, p, 0); err == nil {
			out[p] = procSample{st, time.Now()}
		}
	}
	return out
}

// buildCgroups fills snap.Cgroups from the window of the maps (raw, from
// windows.step): one entry per cgroup the BPF side saw, with its state,
// its processes and their reclaim. The cgroup states and process stats it
// reads go to states and procs, to measure the next window from.
func (iv *Investigator) buildCgroups(ctx context.Context, snap *Snapshot, raw *raw, h memcg.Hierarchy, useMemcg bool,
	idPaths map[uint64]string, before map[string]memcg.State, procs0 map[int]procSample, sc scope, pid int,
	states map[string]memcg.State, procs map[int]procSample) {
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
	for tid, ts := range raw.tasks {
		if ts.Calls == 0 && ts.Ns == 0 && ts.Scanned == 0 {
			continue // nothing this window
		}
		pr := procOf(int(ts.Tgid), ts.Cgid)
		pr.Calls += ts.Calls
		pr.InReclaim += time.Duration(ts.Ns)
		pr.ReclaimCPU += time.Duration(ts.CpuNs)
		pr.MaxReclaim = max(pr.MaxReclaim, time.Duration(raw.taskMax[tid]))
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
		was := raw.before[tid]
		c := Call{TID: int(tid), PID: int(f.Tgid), Kind: kindNames[f.Kind], Duration: d, Before: min(was.elapsed, d),
			Scanned: f.Scanned, Reclaimed: f.Reclaimed, InFlight: true}
		c.Comm, _ = iv.Proc.Comm(ctx, c.PID, c.TID)
		inflight[f.Cgid] = append(inflight[f.Cgid], c)
		pr := procOf(c.PID, f.Cgid)
		pr.InReclaim += d - c.Before
		pr.MaxReclaim = max(pr.MaxReclaim, d)
		pr.Scanned += probekit.Sub(f.Scanned, was.scanned)
		pr.Reclaimed += probekit.Sub(f.Reclaimed, was.reclaimed)
	}

	for id, s := range raw.cgroups {
		if s.sum == (reclaimCgStats{}) && s.worst == nil && len(inflight[id]) == 0 {
			continue // nothing in this window
		}
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
				states[path] = st
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
				procs[p] = procSample{st, time.Now()}
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

// reclaimOf converts one cgroup's window.
func reclaimOf(c *cgRead, raw *raw, id uint64, inflight []Call) Reclaim {
	s := &c.sum
	r := Reclaim{
		CtxSwitches: s.Csw, Scanned: s.Scanned, Reclaimed: s.Reclaimed, FileScanned: s.FileScanned,
		RefKeep: s.RefKeep, ActivateAnon: s.ActivateAnon, ActivateFile: s.ActivateFile,
		Dirty: s.Dirty, Writeback: s.Writeback, Congested: s.Congested, Immediate: s.Immediate, Unmap: s.UnmapFail,
		ActiveTaken: s.ActiveTaken, ActiveKept: s.ActiveKept, Deactivated: s.Deactivated,
		Throttled: s.Throttled, ThrottledFor: time.Duration(s.ThrottledUs) * time.Microsecond,
		MaxCallScanned: c.maxCallScanned, InFlight: inflight, UnmatchedEnds: s.UnmatchedEnds,
	}
	for k := range numKinds {
		r.Calls[k] = s.Calls[k]
		r.Time[k] = time.Duration(s.Ns[k])
		r.CPU[k] = time.Duration(s.CpuNs[k])
		r.Max[k] = time.Duration(c.max[k])
		r.Durations[k] = raw.hists[reclaimHistKey{Cgid: id, Kind: uint32(k)}]
		sc := raw.hists[reclaimHistKey{Cgid: id, Kind: histScanned + uint32(k)}]
		r.ScannedPerCall.Merge(&sc)
	}
	if c.worst != nil {
		w := *c.worst
		if ts, ok := raw.tasks[uint32(w.TID)]; ok {
			w.PID = int(ts.Tgid)
		}
		r.Worst = &w
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
