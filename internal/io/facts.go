package io

import (
	"fmt"
	"strings"
	"time"

	"github.com/wolf-investigator/wolf/internal/fact"
	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/human"
)

// Facts are the window's measurements for the diagnosis stage, from the
// same snapshot as the findings (fs, Conclude's, whose titles tell apart
// the facts of findings that share an id):
//
//   - the devices (fact.Device) with their busy share (Saturation) and
//     consumers (Usage, bytes per cgroup and issuing process);
//   - each cgroup's I/O limit on a device that blk-throttle enforced in
//     the window (fact.IOLimit): the limit, the demand and the time its
//     bios were held (Saturation), and who used it (Usage);
//   - the waiters, thread by thread: waiting for requests (on the device,
//     or on the limit when blk-throttle held them), paused by dirty
//     throttling (fact.Dirty), in fsync behind a journal (fact.Journal);
//   - a journal's committer holding the commit others wait for (Hold),
//     and what it waits for itself (its own Waits, on a limit or device);
//   - dirty pages' writeback as use of the limit or device it went to,
//     made for the dirty throttling (Usage.For).
func Facts(s *Snapshot, fs []finding.Finding) *fact.Set {
	b := &factBuilder{s: s, set: &fact.Set{Window: s.Window}, titles: map[string]string{}}
	for _, f := range fs {
		dev, _ := f.Evidence["device"].(string)
		cg, _ := f.Evidence["cgroup"].(string)
		b.titles[f.ID+"\x00"+dev+"\x00"+cg] = f.Title
	}
	for _, d := range s.Devices {
		b.device(d)
	}
	b.limits()
	for _, w := range s.Waiters {
		b.wait(w)
	}
	for _, o := range s.Ongoing {
		b.ongoing(o)
	}
	for _, j := range s.Journals {
		b.journal(j)
	}
	b.dirty()
	return b.set
}

type factBuilder struct {
	s      *Snapshot
	set    *fact.Set
	titles map[string]string // by finding id, device and cgroup
}

// title is the title of finding id about dev (and cg), "" when there is
// only one of its kind or none.
func (b *factBuilder) title(id, dev, cg string) string {
	if t, ok := b.titles[id+"\x00"+dev+"\x00"+cg]; ok {
		return t
	}
	return b.titles[id+"\x00"+dev+"\x00"]
}

func (b *factBuilder) deviceKey(name string) string {
	k := fact.DeviceKey(name)
	b.set.Resource(fact.Resource{Kind: fact.Device, Key: k, Name: name, Device: name})
	return k
}

func (b *factBuilder) limitKey(cg, dev string) string {
	k := fact.IOLimitKey(cg, dev)
	b.set.Resource(fact.Resource{Kind: fact.IOLimit, Key: k, Name: fmt.Sprintf("the I/O limit of cgroup %s on %s", cg, dev), Cgroup: cg, Device: dev})
	return k
}

func (b *factBuilder) dirtyKey(dev string) string {
	k := fact.DirtyKey(dev)
	b.set.Resource(fact.Resource{Kind: fact.Dirty, Key: k, Name: "dirty-page writeback of " + dev, Device: dev})
	return k
}

func (b *factBuilder) journalKey(dev string) string {
	k := fact.JournalKey(dev)
	b.set.Resource(fact.Resource{Kind: fact.Journal, Key: k, Name: "the journal on " + dev, Device: dev})
	return k
}

func usageTask(u *Usage) fact.Task {
	return fact.Task{PID: u.PID, TID: u.PID, Comm: u.Comm, IOCgroup: u.Cgroup, CgroupID: u.CgroupID}
}

func (b *factBuilder) device(d *Device) {
	k := b.deviceKey(d.Name)
	if len(d.Under) > 0 {
		b.set.Resource(fact.Resource{Kind: fact.Device, Key: k, Under: d.Under})
	}
	slow := isSlow(d)
	id := "io.device"
	if slow {
		id = "io.slow-device"
	}
	t := b.title(id, d.Name, "")
	total := d.ReadBytes + d.WriteBytes + d.OtherBytes
	for _, u := range d.Users {
		by := u.ReadBytes + u.WriteBytes + u.OtherBytes
		use := fact.Usage{On: k, By: usageTask(u), Amount: float64(by), Unit: "bytes", Finding: id, FindingTitle: t}
		if total > 0 {
			use.Share = float64(by) / float64(total)
		}
		if u.Kworker || u.PID == 0 {
			use.Activity = "writeback"
		}
		b.set.Usage = append(b.set.Usage, use)
	}
	if d.Stat == nil {
		return
	}
	sat := fact.Saturation{On: k, Level: d.Stat.BusyPct / 100, Used: d.Stat.BusyPct, Limit: 100, Unit: "busy_pct",
		Numbers: map[string]float64{"busy_pct": human.Round(d.Stat.BusyPct, 1), "requests": float64(d.Requests()),
			"aqu_sz": human.Round(d.Stat.AvgQueue, 2)}, AtLimit: slow, Finding: id, FindingTitle: t}
	if d.Timed > 0 {
		sat.Numbers["on_device_ms_avg"] = ms(time.Duration(d.DeviceNs / d.Timed))
		sat.Numbers["queued_ms_avg"] = ms(time.Duration(d.QueuedNs / d.Timed))
	}
	if slow {
		sat.Remediation = []string{fmt.Sprintf("%s is slow by itself, not held back in front of it: see its consumers and what is under it (a loop device's backing file, the hypervisor's disk, the disk's health)", d.Name)}
	}
	b.set.Saturations = append(b.set.Saturations, sat)
}

// isSlow is slowDevices' verdict for one device.
func isSlow(d *Device) bool {
	if d.Timed < minRequests {
		return false
	}
	onAvg := time.Duration(d.DeviceNs / d.Timed)
	bz, hasBusy := busy(d)
	return onAvg >= deviceWarnAvg && (!hasBusy || bz >= busyWarnPct || onAvg >= waitWarn)
}

// limits: every (cgroup, device) whose requests blk-throttle held.
func (b *factBuilder) limits() {
	s := b.s
	for _, d := range s.Devices {
		var cgs []string
		seen := map[string]bool{}
		for _, u := range d.Users {
			if u.Throttled > 0 && !seen[u.Cgroup] {
				seen[u.Cgroup] = true
				cgs = append(cgs, u.Cgroup)
			}
		}
		for _, w := range s.Waiters {
			if w.Kind == KindIO && w.Throttled && w.Device == d.Name && !seen[w.ReqCgroup] {
				seen[w.ReqCgroup] = true
				cgs = append(cgs, w.ReqCgroup)
			}
		}
		for _, cg := range cgs {
			b.limit(d, cg)
		}
	}
}

func (b *factBuilder) limit(d *Device, cg string) {
	s := b.s
	all := cgroupOps(d, cg)
	k := b.limitKey(cg, d.Name)
	t := b.title("io.throttled", d.Name, cg)
	secs := max(s.Window.Seconds(), 1e-9)
	sat := fact.Saturation{On: k, AtLimit: true, Finding: "io.throttled", FindingTitle: t,
		Numbers: map[string]float64{"throttled_requests": float64(all.Throttled), "requests": float64(all.Requests()),
			"read_bytes_per_s": human.Round(float64(all.ReadBytes)/secs, 0), "write_bytes_per_s": human.Round(float64(all.WriteBytes)/secs, 0)}}
	if bz, ok := busy(d); ok {
		sat.Numbers["device_busy_pct"] = human.Round(bz, 1)
	}
	if lim, ok := bindingLimit(limitsOf(s, cg, d.Name), &all); ok {
		used := float64(all.ReadBytes + all.WriteBytes)
		switch lim.Key {
		case "rbps":
			used = float64(all.ReadBytes)
		case "wbps":
			used = float64(all.WriteBytes)
		case "riops":
			used = float64(all.Reads)
		case "wiops":
			used = float64(all.Writes)
		}
		sat.Limit, sat.Used = float64(lim.Value), used/secs
		sat.Unit = "bytes_per_s"
		if strings.HasSuffix(lim.Key, "iops") {
			sat.Unit = "iops"
		}
		if lim.Value > 0 {
			sat.Level = sat.Used / float64(lim.Value)
		}
		sat.Numbers["limit_"+sat.Unit] = float64(lim.Value)
		sat.LimitText = limitWords(lim)
		sat.Remediation = []string{
			fmt.Sprintf("Raise or remove the limit if it is not meant to bind: %s (write \"%s\")", limitPath(s, lim), limitLine(s, lim, d)),
			fmt.Sprintf("Or move the work to a cgroup with the I/O budget it needs: %s has room if it is not busy.", d.Name),
		}
	} else {
		sat.Level = float64(all.Throttled) / float64(max(all.Requests(), 1))
		sat.Unit = "throttled_share"
	}
	var n int
	var held time.Duration
	for _, w := range s.Waiters {
		if w.Kind == KindIO && w.Throttled && w.ReqCgroup == cg && w.Device == d.Name {
			n += w.Count
			held += w.Held
			sat.Members = append(sat.Members, w.PID)
		}
	}
	if n > 0 {
		sat.Numbers["held_ms_avg"] = ms(avg(held, n))
	}
	b.set.Saturations = append(b.set.Saturations, sat)
	for _, u := range d.Users {
		if u.Cgroup == cg {
			b.set.Usage = append(b.set.Usage, fact.Usage{On: k, By: usageTask(u), Amount: float64(u.ReadBytes + u.WriteBytes + u.OtherBytes),
				Unit: "bytes", Finding: "io.throttled", FindingTitle: t})
		}
	}
}

// journalDevice is the journal that committed on dev in the window.
func (b *factBuilder) journalDevice(dev string) *Journal {
	for _, j := range b.s.Journals {
		if j.Device == dev {
			return j
		}
	}
	return nil
}

// wait: a Waiter's waits, one fact per thread.
func (b *factBuilder) wait(w *Waiter) {
	if w.Device == "" {
		return
	}
	var kind fact.WaitKind
	var on, id, cg string
	switch w.Kind {
	case KindIO:
		kind = fact.WaitIO
		if w.Throttled {
			on, id, cg = b.limitKey(w.ReqCgroup, w.Device), "io.throttled", w.ReqCgroup
		} else {
			on, id = b.deviceKey(w.Device), "io.device"
			if d := findDevice(b.s, w.Device); d != nil && isSlow(d) {
				id = "io.slow-device"
			}
		}
	case KindDirty:
		kind, on, id = fact.WaitDirty, b.dirtyKey(w.Device), "io.dirty-throttled"
	case KindFsync:
		if b.journalDevice(w.Device) == nil {
			kind, on, id = fact.WaitIO, b.deviceKey(w.Device), "io.device"
		} else {
			kind, on, id = fact.WaitJournal, b.journalKey(w.Device), "io.journal-stall"
		}
	case KindXFSLog:
		kind, on, id = fact.WaitJournal, b.journalKey(w.Device), "io.xfs-log"
	default:
		return
	}
	t := b.title(id, w.Device, cg)
	for _, th := range w.PerThread {
		fw := fact.Wait{Task: fact.Task{PID: w.PID, TID: th.TID, Comm: w.Comm, IOCgroup: w.Cgroup}, Kind: kind, On: on,
			Total: th.Total, Max: th.Max, Count: th.Count, Finding: id, FindingTitle: t}
		if kind == fact.WaitIO && th.Count > 0 {
			fw.Numbers = map[string]any{"wait_ms_avg": ms(avg(th.Total, th.Count))}
		}
		b.set.Waits = append(b.set.Waits, fw)
	}
}

func (b *factBuilder) ongoing(o Ongoing) {
	if o.Device == "" {
		return
	}
	fw := fact.Wait{Task: fact.Task{PID: o.PID, TID: o.TID, Comm: o.Comm}, Total: o.For, Max: o.For, Count: 1, Ongoing: true, Finding: "io.stuck"}
	switch o.Kind {
	case KindDirty:
		fw.Kind, fw.On = fact.WaitDirty, b.dirtyKey(o.Device)
	case KindFsync, KindXFSLog:
		if b.journalDevice(o.Device) == nil && o.Kind == KindFsync {
			fw.Kind, fw.On = fact.WaitIO, b.deviceKey(o.Device)
		} else {
			fw.Kind, fw.On = fact.WaitJournal, b.journalKey(o.Device)
		}
	default:
		return
	}
	b.set.Waits = append(b.set.Waits, fw)
}

// journal: the committer holds the journal while it commits; its own
// waits (for another cgroup's data) are Waits like any task's.
func (b *factBuilder) journal(j *Journal) {
	if j.Committer == 0 || j.Device == "" {
		return
	}
	k := b.journalKey(j.Device)
	t := b.title("io.journal-stall", j.Device, "")
	h := fact.Hold{On: k, Holder: fact.Task{PID: j.Committer, TID: j.Committer, Comm: j.CommitterComm}, Exact: true,
		Max: max(j.Max, j.InProgress), Total: j.Total + j.InProgress, Holds: int(j.Commits), Finding: "io.journal-stall", FindingTitle: t}
	var io time.Duration
	for _, w := range b.s.Waiters {
		if w.Kind == KindIO && w.PID == j.Committer {
			io += w.Total
		}
	}
	io += b.inferCommitterWait(j, h.Total, io)
	h.Split = &fact.Split{Span: h.Total, IO: min(io, h.Total), Finding: "io.journal-stall", FindingTitle: t}
	if j.InProgress > 0 {
		h.Split.State = "D"
	}
	b.set.Holds = append(b.set.Holds, h)
}

// inferCommitterWait: the committer's own waits are seen only from when
// the waiter programs attached, so a commit already flushing then shows
// none, and sleeps a throttle's timer ends are no request's. Its time
// flushing and waiting for ordered data (data=ordered) beyond the I/O waits seen (seen),
// when they are less than half of it, is then a likely wait on the writes blk-throttle held on its device in
// the window: on the limit of the cgroup whose writes it held most, when
// one did. It returns the time so placed.
func (b *factBuilder) inferCommitterWait(j *Journal, held, seen time.Duration) time.Duration {
	d := findDevice(b.s, j.Device)
	// Only when most of the flushing went unseen: what is left of a
	// flushing seen waiting is submitting, on the CPU.
	// jbd2 submits the ordered data while flushing and waits for it after
	// writing the journal's own blocks, in the time it counts as logging.
	data := min(j.Flushing+j.Logging, held)
	if d == nil || data <= 2*seen {
		return 0
	}
	var top *Usage
	for _, u := range d.Users {
		if u.Cgroup != "" && u.Writes > 0 && u.Throttled > 0 && (top == nil || u.ThrottledBytes > top.ThrottledBytes) {
			top = u
		}
	}
	if top == nil || len(limitsOf(b.s, top.Cgroup, j.Device)) == 0 {
		return 0
	}
	total := data - seen
	cg := top.Cgroup
	b.set.Waits = append(b.set.Waits, fact.Wait{
		Task: fact.Task{PID: j.Committer, TID: j.Committer, Comm: j.CommitterComm}, Kind: fact.WaitIO,
		On: b.limitKey(cg, j.Device), Total: total, Max: min(j.Max, total), Count: max(int(j.Commits), 1), Likely: true,
		Detail:  fmt.Sprintf("flushing and waiting for the ordered data of its commits while blk-throttle held cgroup %s's writes on %s", cg, j.Device),
		Finding: "io.throttled", FindingTitle: b.title("io.throttled", j.Device, cg)})
	return total
}

// dirty: dirty throttling on a device is as slow as the device's
// writeback, and the writeback's requests are use of the device (or of a
// cgroup's limit on it, when blk-throttle held them) made for it.
func (b *factBuilder) dirty() {
	s := b.s
	var devs []string
	seen := map[string]bool{}
	for _, w := range s.Waiters {
		if w.Kind == KindDirty && w.Device != "" && !seen[w.Device] {
			seen[w.Device] = true
			devs = append(devs, w.Device)
		}
	}
	for _, dev := range devs {
		k := b.dirtyKey(dev)
		t := b.title("io.dirty-throttled", dev, "")
		sat := fact.Saturation{On: k, AtLimit: true, Finding: "io.dirty-throttled", FindingTitle: t, Numbers: map[string]float64{}}
		var paused time.Duration
		for _, w := range s.Waiters {
			if w.Kind == KindDirty && w.Device == dev {
				paused += w.Total
				sat.Members = append(sat.Members, w.PID)
			}
		}
		sat.Numbers["paused_ms_total"] = ms(paused)
		if d := findDevice(s, dev); d != nil {
			sat.Numbers["device_write_bytes_per_s"] = human.Round(float64(d.WriteBytes)/max(s.Window.Seconds(), 1e-9), 0)
			for _, u := range d.Users {
				if u.Writes == 0 {
					continue
				}
				on := b.deviceKey(dev)
				if u.Throttled > 0 {
					on = b.limitKey(u.Cgroup, dev)
				}
				b.set.Usage = append(b.set.Usage, fact.Usage{On: on, By: usageTask(u), Amount: float64(u.WriteBytes), Unit: "bytes",
					Activity: "writeback", For: k, Finding: "io.dirty-throttled", FindingTitle: t})
			}
		}
		b.set.Saturations = append(b.set.Saturations, sat)
	}
}
