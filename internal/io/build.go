package io

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/wolf-investigator/wolf/internal/bpfrec"
	"github.com/wolf-investigator/wolf/internal/kallsyms"
	"github.com/wolf-investigator/wolf/internal/sysstat"
)

// Bounds on what one window reports.
const (
	maxDevices      = 32
	maxUsersPerDev  = 32
	maxWaiters      = 128
	maxLongWaits    = 64
	maxSlowRequests = 32
	maxOngoing      = 32
)

// builder turns one window's readings into the snapshot.
type builder struct {
	ctx   context.Context
	s     *session
	snap  *Snapshot
	cur   *raw
	devs  map[uint32]*Device
	comms map[int]string
	procs map[int]procInfo
}

type procInfo struct {
	comm    string
	threads int
	cgroup  string
	ok      bool
}

func (s *session) builder(ctx context.Context, snap *Snapshot, cur *raw) *builder {
	return &builder{ctx: ctx, s: s, snap: snap, cur: cur, devs: map[uint32]*Device{}, comms: map[int]string{}, procs: map[int]procInfo{}}
}

// cgroupPath maps a cgroup id the programs reported to its path, walking
// the hierarchy again when an id is new.
func (b *builder) cgroupPath(id uint64) string {
	if id == 0 || b.s.herr != nil {
		return ""
	}
	if p, ok := b.s.ids[id]; ok {
		return p
	}
	ids, _, err := b.s.h.IDs(b.ctx, maxCgroupsWalked)
	if err == nil {
		if b.s.ids == nil {
			b.s.ids = map[uint64]string{}
		}
		for k, v := range ids {
			b.s.ids[k] = v
		}
	}
	if p, ok := b.s.ids[id]; ok {
		return p
	}
	// Remember the miss: a cgroup removed since does not come back.
	if b.s.ids == nil {
		b.s.ids = map[uint64]string{}
	}
	b.s.ids[id] = fmt.Sprintf("(cgroup %d, removed)", id)
	return b.s.ids[id]
}

// proc reads a process's name, thread count and I/O cgroup (once a window).
func (b *builder) proc(pid int) procInfo {
	if pi, ok := b.procs[pid]; ok {
		return pi
	}
	var pi procInfo
	if pid > 0 {
		if st, err := b.s.iv.Proc.Stat(b.ctx, pid, 0); err == nil {
			pi.comm, pi.threads, pi.ok = st.Comm, st.NumThreads, true
		}
		if b.s.herr == nil {
			if cgs, err := b.s.iv.Proc.Cgroup(b.ctx, pid, 0); err == nil {
				pi.cgroup, _ = b.s.h.pathOf(cgs)
			}
		}
	}
	b.procs[pid] = pi
	return pi
}

func (b *builder) device(d uint32) *Device {
	if dv, ok := b.devs[d]; ok {
		return dv
	}
	maj, mnr := splitKdev(d)
	dv := &Device{Name: deviceName(maj, mnr), Major: maj, Minor: mnr}
	dv.Backing = backing(dv.Name)
	dv.Under = under(dv.Name)
	b.devs[d] = dv
	return dv
}

func (b *builder) keepPID(pid int) bool { return b.s.opts.PID == 0 || pid == b.s.opts.PID }

// devices fills Devices from the per-issuer window and diskstats.
func (b *builder) devices(procs map[ioIoKey]procRead, disks1 map[string]sysstat.DiskStat) {
	rows := map[*Device][]*Usage{}
	for k, v := range procs {
		if v.s.Ops == [3]uint64{} {
			continue
		}
		cg := b.cgroupPath(k.Cgid)
		if !b.s.keepsCgroup(cg) {
			continue
		}
		pid := int(k.Tgid)
		u := &Usage{Cgroup: cg, CgroupID: k.Cgid, PID: pid, Total: v.total, OnDevice: v.device,
			Kworker: k.Flags&fKworker != 0, Unattributed: k.Flags&fUnattributed != 0}
		if pid != 0 {
			u.Comm = b.proc(pid).comm
			if u.Comm == "" {
				u.Comm = b.cur.comms[k.Tgid]
			}
		}
		u.Reads, u.Writes, u.Other = v.s.Ops[opRead], v.s.Ops[opWrite], v.s.Ops[opOther]
		u.ReadBytes, u.WriteBytes, u.OtherBytes = v.s.Bytes[opRead], v.s.Bytes[opWrite], v.s.Bytes[opOther]
		u.Throttled, u.ThrottledBytes = v.s.Throttled, v.s.ThrottledBytes
		u.Timed = v.total.Count
		u.QueuedNs = probeSub(v.total.Sum, v.device.Sum)
		u.DeviceNs = v.device.Sum
		u.MaxTotalNs, u.MaxDeviceNs = v.total.Max, v.device.Max
		dv := b.device(k.Dev)
		dv.Ops.add(&u.Ops)
		dv.Total.Merge(&u.Total)
		dv.OnDevice.Merge(&u.OnDevice)
		rows[dv] = append(rows[dv], u)
	}
	for dv, us := range rows {
		for _, u := range apportion(us) {
			if b.keepPID(u.PID) {
				dv.Users = append(dv.Users, u)
			}
		}
	}
	for _, dv := range b.devs {
		if d1, ok := disks1[dv.Name]; ok {
			st := &DiskStat{InFlight: d1.InFlight, NrRequests: queueInt(dv.Name, "nr_requests")}
			if d0, ok := b.s.disks0[dv.Name]; ok && b.snap.Window > 0 {
				ms := float64(b.snap.Window) / float64(time.Millisecond)
				st.BusyPct = min(100, 100*float64(probeSub(d1.IOMs, d0.IOMs))/ms)
				st.AvgQueue = float64(probeSub(d1.WeightedMs, d0.WeightedMs)) / ms
			}
			dv.Stat = st
		}
		slices.SortFunc(dv.Users, func(a, c *Usage) int {
			return cmp.Or(cmp.Compare(c.ReadBytes+c.WriteBytes, a.ReadBytes+a.WriteBytes), cmp.Compare(c.Requests(), a.Requests()), cmp.Compare(a.PID, c.PID))
		})
		if len(dv.Users) > maxUsersPerDev {
			dv.Users = dv.Users[:maxUsersPerDev]
		}
	}
}

// Request flags, as the programs set them.
const (
	fThrottled    = 1
	fKworker      = 2
	fUnattributed = 8 // its issuer not followed: attribution sampled
)

// apportion gives each cgroup's requests whose issuer was not followed
// (attribution sampled) to the cgroup's followed issuers, in proportion
// to their followed requests, and their latencies to the busiest of
// them: the per-process figures become estimates, the per-cgroup sums
// stay exact. A cgroup none of whose requests was followed keeps them as
// one unattributed consumer.
func apportion(us []*Usage) []*Usage {
	byCg := map[uint64][]*Usage{}
	var rest []*Usage
	for _, u := range us {
		if u.Unattributed {
			rest = append(rest, u)
		} else {
			byCg[u.CgroupID] = append(byCg[u.CgroupID], u)
		}
	}
	out := make([]*Usage, 0, len(us))
	for _, u := range us {
		if !u.Unattributed {
			out = append(out, u)
		}
	}
	for _, r := range rest {
		peers := byCg[r.CgroupID]
		var followed uint64
		var top *Usage
		for _, p := range peers {
			followed += p.Requests()
			if top == nil || p.Requests() > top.Requests() {
				top = p
			}
		}
		if followed == 0 {
			r.PID = 0
			out = append(out, r)
			continue
		}
		share := func(v, n uint64) uint64 { return uint64(float64(v) * float64(n) / float64(followed)) }
		var given Ops
		for _, p := range peers {
			n := p.Requests()
			add := Ops{Reads: share(r.Reads, n), Writes: share(r.Writes, n), Other: share(r.Other, n),
				ReadBytes: share(r.ReadBytes, n), WriteBytes: share(r.WriteBytes, n), OtherBytes: share(r.OtherBytes, n)}
			p.Reads, p.Writes, p.Other = p.Reads+add.Reads, p.Writes+add.Writes, p.Other+add.Other
			p.ReadBytes, p.WriteBytes, p.OtherBytes = p.ReadBytes+add.ReadBytes, p.WriteBytes+add.WriteBytes, p.OtherBytes+add.OtherBytes
			given.add(&add)
			p.Estimated = true
		}
		// What rounding left, and the latencies, to the busiest.
		top.Reads += r.Reads - given.Reads
		top.Writes += r.Writes - given.Writes
		top.Other += r.Other - given.Other
		top.ReadBytes += r.ReadBytes - given.ReadBytes
		top.WriteBytes += r.WriteBytes - given.WriteBytes
		top.OtherBytes += r.OtherBytes - given.OtherBytes
		top.Timed += r.Timed
		top.QueuedNs += r.QueuedNs
		top.DeviceNs += r.DeviceNs
		top.MaxTotalNs = max(top.MaxTotalNs, r.MaxTotalNs)
		top.MaxDeviceNs = max(top.MaxDeviceNs, r.MaxDeviceNs)
		top.Total.Merge(&r.Total)
		top.OnDevice.Merge(&r.OnDevice)
	}
	return out
}

// Operation classes, as the programs number them.
const (
	opRead = iota
	opWrite
	opOther
)

func probeSub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

func (b *builder) devName(d uint32) string {
	if d == 0 {
		return ""
	}
	return b.device(d).Name
}

// waiters fills Waiters from the waits window: the threads' waits of one
// kind on one device, for one cgroup's requests, added up by process.
func (b *builder) waiters(waits map[ioWaitKey]waitRead) {
	type key struct {
		pid        int
		kind       uint32
		dev, flags uint32
		cgid       uint64
	}
	by := map[key]*Waiter{}
	for k, v := range waits {
		if v.s.Count == 0 || int(k.Kind) >= len(kindNames) {
			continue
		}
		pid := int(v.s.Tgid)
		if pid == 0 {
			pid = int(k.Tid)
		}
		if !b.keepPID(pid) {
			continue
		}
		wk := key{pid, k.Kind, k.Dev, k.Flags & fThrottled, k.Cgid}
		w := by[wk]
		if w == nil {
			pi := b.proc(pid)
			w = &Waiter{PID: pid, Comm: pi.comm, Cgroup: pi.cgroup, Kind: kindNames[k.Kind], Device: b.devName(k.Dev)}
			if w.Comm == "" {
				w.Comm = v.comm
			}
			if w.Comm == "" {
				w.Comm = b.cur.comms[uint32(pid)]
			}
			if w.Cgroup == "" {
				w.Cgroup = b.issuedFrom(pid) // gone: the cgroup of what it issued
			}
			if w.Kind == KindIO {
				w.ReqCgroup, w.ReqCgroupID = b.cgroupPath(k.Cgid), k.Cgid
				w.Throttled = k.Flags&fThrottled != 0
			}
			by[wk] = w
		}
		t := ThreadWait{TID: int(k.Tid), Count: int(v.s.Count), Total: time.Duration(v.s.Ns), Max: time.Duration(v.max)}
		w.PerThread = append(w.PerThread, t)
		w.Count += t.Count
		w.Total += t.Total
		if t.Max >= w.Max {
			w.Max, w.TID = t.Max, t.TID
		}
		w.Held += time.Duration(v.s.HeldNs)
		w.Queued += time.Duration(v.s.QueuedNs)
		w.OnDevice += time.Duration(v.s.DeviceNs)
	}
	for _, w := range by {
		if b.s.under != "" && !b.s.keepsCgroup(w.Cgroup) && !(w.ReqCgroup != "" && b.s.keepsCgroup(w.ReqCgroup)) {
			continue
		}
		w.Threads = len(w.PerThread)
		slices.SortFunc(w.PerThread, func(a, c ThreadWait) int { return cmp.Or(cmp.Compare(c.Total, a.Total), cmp.Compare(a.TID, c.TID)) })
		if w.TID == 0 {
			w.TID = w.PerThread[0].TID
		}
		b.snap.Waiters = append(b.snap.Waiters, w)
	}
	slices.SortFunc(b.snap.Waiters, func(a, c *Waiter) int {
		return cmp.Or(cmp.Compare(c.Total, a.Total), cmp.Compare(a.PID, c.PID), strings.Compare(a.Kind, c.Kind), strings.Compare(a.Device, c.Device))
	})
	if len(b.snap.Waiters) > maxWaiters {
		b.snap.Waiters = b.snap.Waiters[:maxWaiters]
	}
}

// journals fills Journals.
func (b *builder) journals(js map[uint32]journalRead) {
	for d, v := range js {
		j := v.j
		if j.Commits == 0 && j.StartedNs == 0 {
			continue
		}
		jn := &Journal{Device: b.devName(d), Commits: j.Commits, SyncCommits: uint64(j.SyncCommits),
			Total: time.Duration(j.CommitNs), Flushing: time.Duration(j.FlushingNs), Logging: time.Duration(j.LoggingNs),
			Locked: time.Duration(j.LockedNs), Max: time.Duration(v.max), Committer: int(j.Tid)}
		if j.StartedNs != 0 && b.cur.now > time.Duration(j.StartedNs) {
			jn.InProgress = b.cur.now - time.Duration(j.StartedNs)
			switch {
			case j.LoggingAt != 0:
				jn.InProgressPhase = "logging"
			case j.FlushingAt != 0:
				jn.InProgressPhase = "flushing"
				jn.Flushing += b.cur.now - time.Duration(j.FlushingAt)
			case j.LockedAt != 0:
				jn.InProgressPhase = "locked"
			default:
				jn.InProgressPhase = "starting"
			}
		}
		if jn.Committer != 0 {
			jn.CommitterComm, _ = b.s.iv.Proc.Comm(b.ctx, jn.Committer, jn.Committer)
		}
		b.snap.Journals = append(b.snap.Journals, jn)
	}
	slices.SortFunc(b.snap.Journals, func(a, c *Journal) int { return strings.Compare(a.Device, c.Device) })
}

// qos fills QoS with the devices where wbt or iocost did something.
func (b *builder) qos(qs map[string]ioQos) {
	for name, q := range qs {
		if q.WbtSteps == 0 && q.WbtLatEvents == 0 && q.IocostAdjusts == 0 {
			continue
		}
		b.snap.QoS = append(b.snap.QoS, QoS{Device: name, WBTSteps: q.WbtSteps, WBTStep: int(q.WbtStep), WBTNormal: q.WbtNormal,
			WBTLatEvents: q.WbtLatEvents, WBTLat: time.Duration(q.WbtLatNs), IOCostAdj: q.IocostAdjusts,
			IOCostBusy: int(q.IocostBusy), IOCostRqWait: q.IocostRqWait})
	}
	slices.SortFunc(b.snap.QoS, func(a, c QoS) int { return strings.Compare(a.Device, c.Device) })
}

// ongoing fills Ongoing: tasks asleep for I/O or in fsync for long, now.
func (b *builder) ongoing(cur *raw) {
	add := func(tid uint32, tgid uint32, kind uint32, dev uint32, start uint64) {
		if time.Duration(start) > cur.now || int(kind) >= len(kindNames) {
			return
		}
		d := cur.now - time.Duration(start)
		if d < ongoingMin || !b.keepPID(int(tgid)) {
			return
		}
		o := Ongoing{PID: int(tgid), TID: int(tid), Kind: kindNames[kind], Device: b.devName(dev), For: d}
		if o.Kind == KindIO {
			o.Kind = KindOther // not ended yet: the request is unknown
		}
		o.Comm, _ = b.s.iv.Proc.Comm(b.ctx, o.PID, o.TID)
		b.snap.Ongoing = append(b.snap.Ongoing, o)
	}
	for tid, sl := range cur.sleeps {
		add(tid, sl.Tgid, sl.Kind, sl.Dev, sl.StartNs)
	}
	for tid, sy := range cur.syncs {
		add(tid, sy.Tgid, sy.Kind, sy.Dev, sy.StartNs)
	}
	slices.SortFunc(b.snap.Ongoing, func(a, c Ongoing) int { return cmp.Or(cmp.Compare(c.For, a.For), cmp.Compare(a.TID, c.TID)) })
	if len(b.snap.Ongoing) > maxOngoing {
		b.snap.Ongoing = b.snap.Ongoing[:maxOngoing]
	}
}

var opNames = [...]string{"read", "write", "other"}

// at turns a CLOCK_MONOTONIC stamp into time since the window's start.
func (b *builder) at(ns uint64, now time.Time) time.Duration {
	ago := b.cur.now - time.Duration(ns)
	return max(0, b.snap.Window-ago-time.Since(now))
}

// slow fills SlowRequests.
func (b *builder) slow(recs []ioSlowRq, now time.Time) {
	for _, r := range recs {
		pid := int(r.Tgid)
		cg := b.cgroupPath(r.Cgid)
		if !b.keepPID(pid) || !b.s.keepsCgroup(cg) {
			continue
		}
		q := Request{Device: b.devName(r.Dev), Bytes: r.Bytes, Cgroup: cg, PID: pid,
			Throttled: r.Flags&fThrottled != 0, Kworker: r.Flags&fKworker != 0,
			Total: time.Duration(r.TotalNs), Queued: time.Duration(r.QueuedNs), On: time.Duration(r.DeviceNs),
			At: b.at(r.AtNs, now)}
		if r.Op < uint32(len(opNames)) {
			q.Op = opNames[r.Op]
		}
		if pid != 0 {
			q.Comm = b.proc(pid).comm
			if q.Comm == "" {
				q.Comm = b.cur.comms[r.Tgid]
			}
		}
		b.snap.SlowRequests = append(b.snap.SlowRequests, q)
	}
	slices.SortFunc(b.snap.SlowRequests, func(a, c Request) int { return cmp.Compare(c.Total, a.Total) })
	if len(b.snap.SlowRequests) > maxSlowRequests {
		b.snap.SlowRequests = b.snap.SlowRequests[:maxSlowRequests]
	}
}

// long fills LongWaits, symbolizing the waiters' stacks.
func (b *builder) long(recs []ioLongWait, now time.Time, syms *kallsyms.Table) {
	for _, r := range recs {
		pid := int(r.Tgid)
		if !b.keepPID(pid) || int(r.Kind) >= len(kindNames) {
			continue
		}
		lw := LongWait{PID: pid, TID: int(r.Tid), Comm: bpfrec.CString(r.Comm[:]), Kind: kindNames[r.Kind],
			Device: b.devName(r.Dev), Throttled: r.Flags&1 != 0, Wait: time.Duration(r.WaitNs), Held: time.Duration(r.HeldNs),
			Queued: time.Duration(r.QueuedNs), OnDevice: time.Duration(r.DeviceNs), At: b.at(r.AtNs, now)}
		if lw.Kind == KindIO {
			lw.ReqCgroup = b.cgroupPath(r.Cgid)
		}
		if syms != nil {
			n := int(r.StackBytes / 8)
			n = min(n, len(r.Stack))
			lw.Stack = syms.SymbolizeStack(r.Stack[:n])
		}
		lw.Site = classify(lw.Stack)
		if b.s.under != "" && !b.s.keepsCgroup(b.proc(pid).cgroup) && !(lw.ReqCgroup != "" && b.s.keepsCgroup(lw.ReqCgroup)) {
			continue
		}
		b.snap.LongWaits = append(b.snap.LongWaits, lw)
	}
	slices.SortFunc(b.snap.LongWaits, func(a, c LongWait) int { return cmp.Compare(c.Wait, a.Wait) })
	if len(b.snap.LongWaits) > maxLongWaits {
		b.snap.LongWaits = b.snap.LongWaits[:maxLongWaits]
	}
}

// limits reads the I/O limits of the cgroups whose requests blk-throttle
// held or that waited, on the devices they used.
func (b *builder) limits() {
	if b.s.herr != nil {
		return
	}
	type cd struct{ cg, dev string }
	seen := map[cd]bool{}
	want := func(cg string, dv *Device) {
		if cg == "" || strings.HasPrefix(cg, "(") || dv == nil || seen[cd{cg, dv.Name}] {
			return
		}
		seen[cd{cg, dv.Name}] = true
		for _, l := range b.s.h.limits(cg, fmt.Sprintf("%d:%d", dv.Major, dv.Minor)) {
			l.Device = dv.Name
			dup := false
			for _, o := range b.snap.Limits {
				if o.Cgroup == l.Cgroup && o.Device == l.Device && o.File == l.File && o.Key == l.Key {
					dup = true
				}
			}
			if !dup {
				b.snap.Limits = append(b.snap.Limits, l)
			}
		}
	}
	for _, dv := range b.devs {
		for _, u := range dv.Users {
			want(u.Cgroup, dv)
		}
	}
	for _, w := range b.snap.Waiters {
		for _, dv := range b.devs {
			if dv.Name == w.Device {
				want(w.ReqCgroup, dv)
				want(w.Cgroup, dv)
			}
		}
	}
	slices.SortFunc(b.snap.Limits, func(a, c Limit) int {
		return cmp.Or(strings.Compare(a.Device, c.Device), strings.Compare(a.Cgroup, c.Cgroup), strings.Compare(a.Key, c.Key))
	})
}

// finish orders the devices, busiest first, and drops those with nothing.
func (b *builder) finish() {
	for _, dv := range b.devs {
		if dv.Requests() == 0 && !b.waitedOn(dv.Name) {
			continue
		}
		if b.s.opts.PID != 0 && len(dv.Users) == 0 && !b.waitedOn(dv.Name) {
			continue
		}
		b.snap.Devices = append(b.snap.Devices, dv)
	}
	slices.SortFunc(b.snap.Devices, func(a, c *Device) int {
		return cmp.Or(cmp.Compare(c.Requests(), a.Requests()), strings.Compare(a.Name, c.Name))
	})
	if len(b.snap.Devices) > maxDevices {
		b.snap.Devices = b.snap.Devices[:maxDevices]
	}
}

func (b *builder) waitedOn(name string) bool {
	for _, w := range b.snap.Waiters {
		if w.Device == name {
			return true
		}
	}
	return false
}

// issuedFrom is the cgroup of the requests process pid issued in the
// window, "" if none (or several).
func (b *builder) issuedFrom(pid int) string {
	cg := ""
	for _, d := range b.devs {
		for _, u := range d.Users {
			if u.PID != pid || pid == 0 {
				continue
			}
			if cg != "" && cg != u.Cgroup {
				return ""
			}
			cg = u.Cgroup
		}
	}
	return cg
}
