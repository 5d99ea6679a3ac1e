package io

import (
	"fmt"
	"strings"
	"time"

	"github.com/wolf-investigator/wolf/internal/fact"
	"github.com/wolf-investigator/wolf/internal/human"
)

// Facts are the window's measurements for the diagnosis stage, from the
// same snapshot as the findings:
//
//   - the devices (fact.Device) with their busy share (Saturation) and
//     consumers (Usage, bytes per cgroup and issuing process);
//   - each cgroup's I/O limit on a device that blk-throttle enforced in
//     the window (fact.IOLimit): the limit, the demand and the time its
//     bios were held (Saturation), the members that used it (Usage);
//   - the waiters: a process waiting for requests (on the device, or on
//     the limit when blk-throttle held them), paused by dirty throttling
//     (fact.Dirty), in fsync behind a journal (fact.Journal);
//   - a journal's committer holding the commit others wait for (Hold),
//     and what it waits for itself (its own Wait, on a limit or device).
func Facts(s *Snapshot) *fact.Set {
	fs := &fact.Set{Window: s.Window}
	for _, d := range s.Devices {
		deviceFacts(fs, s, d)
	}
	limitFacts(fs, s)
	for _, w := range s.Waiters {
		waitFact(fs, s, w)
	}
	for _, o := range s.Ongoing {
		ongoingFact(fs, s, o)
	}
	for _, j := range s.Journals {
		journalFacts(fs, s, j)
	}
	dirtyFacts(fs, s)
	return fs
}

func deviceResource(fs *fact.Set, name string) string {
	k := fact.DeviceKey(name)
	fs.Resource(fact.Resource{Kind: fact.Device, Key: k, Name: name, Device: name})
	return k
}

func limitResource(fs *fact.Set, cg, dev string) string {
	k := fact.IOLimitKey(cg, dev)
	fs.Resource(fact.Resource{Kind: fact.IOLimit, Key: k, Name: fmt.Sprintf("cgroup %s's I/O limit on %s", cg, dev), Cgroup: cg, Device: dev})
	return k
}

func deviceFacts(fs *fact.Set, s *Snapshot, d *Device) {
	k := deviceResource(fs, d.Name)
	total := d.ReadBytes + d.WriteBytes + d.OtherBytes
	for _, u := range d.Users {
		b := u.ReadBytes + u.WriteBytes + u.OtherBytes
		use := fact.Usage{On: k, By: fact.Task{PID: u.PID, TID: u.PID, Comm: u.Comm, IOCgroup: u.Cgroup, CgroupID: u.CgroupID},
			Amount: float64(b), Unit: "bytes", Finding: "io.device"}
		if total > 0 {
			use.Share = float64(b) / float64(total)
		}
		if u.Kworker || u.PID == 0 {
			use.Activity = "writeback"
		}
		fs.Usage = append(fs.Usage, use)
	}
	if d.Stat == nil {
		return
	}
	sat := fact.Saturation{On: k, Level: d.Stat.BusyPct / 100, Used: d.Stat.BusyPct, Limit: 100, Unit: "busy_pct",
		Numbers: map[string]float64{"busy_pct": human.Round(d.Stat.BusyPct, 1), "requests": float64(d.Requests()),
			"aqu_sz": human.Round(d.Stat.AvgQueue, 2)}, Finding: "io.device"}
	if d.Timed > 0 {
		sat.Numbers["on_device_ms_avg"] = ms(time.Duration(d.DeviceNs / d.Timed))
		sat.Numbers["queued_ms_avg"] = ms(time.Duration(d.QueuedNs / d.Timed))
		if d.Stat.BusyPct >= busyWarnPct && time.Duration(d.DeviceNs/d.Timed) >= deviceWarnAvg {
			sat.Finding = "io.slow-device"
		}
	}
	fs.Saturations = append(fs.Saturations, sat)
}

// limitFacts: every (cgroup, device) whose requests blk-throttle held.
func limitFacts(fs *fact.Set, s *Snapshot) {
	for _, d := range s.Devices {
		held := map[string]*Ops{}
		var cgs []string
		for _, u := range d.Users {
			if u.Throttled == 0 {
				continue
			}
			if held[u.Cgroup] == nil {
				held[u.Cgroup] = &Ops{}
				cgs = append(cgs, u.Cgroup)
			}
		}
		for _, cg := range cgs {
			all := cgroupOps(d, cg)
			k := limitResource(fs, cg, d.Name)
			sat := fact.Saturation{On: k, Finding: "io.throttled",
				Numbers: map[string]float64{"throttled_requests": float64(all.Throttled), "requests": float64(all.Requests()),
					"read_bytes_per_s": float64(all.ReadBytes) / max(s.Window.Seconds(), 1e-9), "write_bytes_per_s": float64(all.WriteBytes) / max(s.Window.Seconds(), 1e-9)}}
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
				used /= max(s.Window.Seconds(), 1e-9)
				sat.Limit, sat.Used = float64(lim.Value), used
				sat.Unit = "bytes_per_s"
				if strings.HasSuffix(lim.Key, "iops") {
					sat.Unit = "iops"
				}
				if lim.Value > 0 {
					sat.Level = used / float64(lim.Value)
				}
				sat.Numbers["limit_"+sat.Unit] = float64(lim.Value)
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
			fs.Saturations = append(fs.Saturations, sat)
			for _, u := range d.Users {
				if u.Cgroup != cg {
					continue
				}
				fs.Usage = append(fs.Usage, fact.Usage{On: k, By: fact.Task{PID: u.PID, TID: u.PID, Comm: u.Comm, IOCgroup: u.Cgroup, CgroupID: u.CgroupID},
					Amount: float64(u.ReadBytes + u.WriteBytes + u.OtherBytes), Unit: "bytes", Finding: "io.throttled"})
			}
		}
	}
}

func waiterTask(w *Waiter) fact.Task {
	return fact.Task{PID: w.PID, TID: w.TID, Comm: w.Comm, IOCgroup: w.Cgroup}
}

// journalDevice says whether a journal committed on the device.
func journalDevice(s *Snapshot, dev string) *Journal {
	for _, j := range s.Journals {
		if j.Device == dev {
			return j
		}
	}
	return nil
}

func waitFact(fs *fact.Set, s *Snapshot, w *Waiter) {
	if w.Device == "" {
		return
	}
	fw := fact.Wait{Task: waiterTask(w), Total: w.Total, Max: w.Max, Count: w.Count}
	switch w.Kind {
	case KindIO:
		fw.Kind = fact.WaitIO
		if w.Throttled {
			fw.On = limitResource(fs, w.ReqCgroup, w.Device)
			fw.Finding = "io.throttled"
		} else {
			fw.On = deviceResource(fs, w.Device)
			fw.Finding = "io.device"
			if d := findDevice(s, w.Device); d != nil && d.Timed > 0 && time.Duration(d.DeviceNs/d.Timed) >= deviceWarnAvg {
				fw.Finding = "io.slow-device"
			}
		}
	case KindDirty:
		fw.Kind = fact.WaitDirty
		fw.On = dirtyResource(fs, w.Device)
		fw.Finding = "io.dirty-throttled"
	case KindFsync:
		if journalDevice(s, w.Device) == nil {
			fw.Kind = fact.WaitIO
			fw.On = deviceResource(fs, w.Device)
			fw.Finding = "io.device"
		} else {
			fw.Kind = fact.WaitJournal
			fw.On = journalResource(fs, w.Device)
			fw.Finding = "io.journal-stall"
		}
	case KindXFSLog:
		fw.Kind = fact.WaitJournal
		fw.On = journalResource(fs, w.Device)
		fw.Finding = "io.xfs-log"
	default:
		return
	}
	fs.Waits = append(fs.Waits, fw)
}

func ongoingFact(fs *fact.Set, s *Snapshot, o Ongoing) {
	if o.Device == "" {
		return
	}
	fw := fact.Wait{Task: fact.Task{PID: o.PID, TID: o.TID, Comm: o.Comm}, Total: o.For, Max: o.For, Count: 1, Ongoing: true, Finding: "io.stuck"}
	switch o.Kind {
	case KindDirty:
		fw.Kind, fw.On = fact.WaitDirty, dirtyResource(fs, o.Device)
	case KindFsync, KindXFSLog:
		if journalDevice(s, o.Device) == nil && o.Kind == KindFsync {
			fw.Kind, fw.On = fact.WaitIO, deviceResource(fs, o.Device)
		} else {
			fw.Kind, fw.On = fact.WaitJournal, journalResource(fs, o.Device)
		}
	default:
		return
	}
	fs.Waits = append(fs.Waits, fw)
}

func dirtyResource(fs *fact.Set, dev string) string {
	k := fact.DirtyKey(dev)
	fs.Resource(fact.Resource{Kind: fact.Dirty, Key: k, Name: "dirty-page writeback of " + dev, Device: dev})
	return k
}

func journalResource(fs *fact.Set, dev string) string {
	k := fact.JournalKey(dev)
	fs.Resource(fact.Resource{Kind: fact.Journal, Key: k, Name: "the journal on " + dev, Device: dev})
	return k
}

// journalFacts: the committer holds the journal while it commits; its
// own waits (for another cgroup's data) are Waits like any task's.
func journalFacts(fs *fact.Set, s *Snapshot, j *Journal) {
	if j.Committer == 0 || j.Device == "" {
		return
	}
	k := journalResource(fs, j.Device)
	h := fact.Hold{On: k, Holder: fact.Task{PID: j.Committer, TID: j.Committer, Comm: j.CommitterComm}, Exact: true,
		Max: max(j.Max, j.InProgress), Total: j.Total + j.InProgress, Holds: int(j.Commits), Finding: "io.journal-stall"}
	var io time.Duration
	for _, w := range s.Waiters {
		if w.Kind == KindIO && w.PID == j.Committer {
			io += w.Total
		}
	}
	h.Split = &fact.Split{Span: h.Total, IO: io, Finding: "io.journal-stall"}
	if j.InProgress > 0 {
		h.Split.State = "D"
	}
	fs.Holds = append(fs.Holds, h)
}

// dirtyFacts: dirty throttling on a device is as slow as the device's
// writeback, and that writeback's requests are consumers of the device
// (or of a cgroup's limit on it, when blk-throttle held them), made for
// the dirty pages.
func dirtyFacts(fs *fact.Set, s *Snapshot) {
	devs := map[string]bool{}
	for _, w := range s.Waiters {
		if w.Kind == KindDirty && w.Device != "" {
			devs[w.Device] = true
		}
	}
	for dev := range devs {
		k := dirtyResource(fs, dev)
		d := findDevice(s, dev)
		sat := fact.Saturation{On: k, Finding: "io.dirty-throttled", Numbers: map[string]float64{}}
		var paused time.Duration
		for _, w := range s.Waiters {
			if w.Kind == KindDirty && w.Device == dev {
				paused += w.Total
				sat.Members = append(sat.Members, w.PID)
			}
		}
		sat.Numbers["paused_ms_total"] = ms(paused)
		if d != nil {
			sat.Numbers["device_write_bytes_per_s"] = float64(d.WriteBytes) / max(s.Window.Seconds(), 1e-9)
			for _, u := range d.Users {
				if u.Writes == 0 {
					continue
				}
				on := deviceResource(fs, dev)
				if u.Throttled > 0 {
					on = limitResource(fs, u.Cgroup, dev)
				}
				fs.Usage = append(fs.Usage, fact.Usage{On: on, By: fact.Task{PID: u.PID, TID: u.PID, Comm: u.Comm, IOCgroup: u.Cgroup, CgroupID: u.CgroupID},
					Amount: float64(u.WriteBytes), Unit: "bytes", Activity: "writeback", For: k, Finding: "io.dirty-throttled"})
			}
		}
		fs.Saturations = append(fs.Saturations, sat)
	}
}
