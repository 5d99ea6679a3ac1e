// The disk area: iostat -xz.

package sysstat

import (
	"fmt"
	"math"
	"sort"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/human"
)

// DiskRate is one device's I/O over the window, as iostat -x prints it.
type DiskRate struct {
	Name                      string
	Partition                 bool
	ReadsPerS, WritesPerS     float64
	ReadKBPerS, WriteKBPerS   float64
	ReadAwaitMs, WriteAwaitMs float64
	AwaitMs                   float64 // reads, writes and discards together
	UtilPct                   float64
	QueueSize                 float64 // aqu-sz: average requests in flight
	IOs                       uint64  // completed in the window
}

// DiskRates computes every device's I/O over the window; devices without
// any I/O in it are left out (iostat -z).
func DiskRates(first, last Snapshot) []DiskRate {
	dt := last.At.Sub(first.At).Seconds()
	if dt <= 0 {
		return nil
	}
	prev := map[string]DiskStat{}
	for _, d := range first.Disks {
		prev[d.Name] = d
	}
	var out []DiskRate
	for _, b := range last.Disks {
		a, ok := prev[b.Name]
		if !ok {
			continue
		}
		reads, writes, discards := sub(b.Reads, a.Reads), sub(b.Writes, a.Writes), sub(b.Discards, a.Discards)
		ioMs := sub(b.IOMs, a.IOMs)
		if reads+writes+discards == 0 && ioMs == 0 {
			continue
		}
		r := DiskRate{
			Name:        b.Name,
			Partition:   last.WholeDisks != nil && !last.WholeDisks[b.Name],
			ReadsPerS:   reads / dt,
			WritesPerS:  writes / dt,
			ReadKBPerS:  sub(b.SectorsRead, a.SectorsRead) / 2 / dt,
			WriteKBPerS: sub(b.SectorsWritten, a.SectorsWritten) / 2 / dt,
			UtilPct:     math.Min(100, 100*ioMs/(dt*1000)),
			QueueSize:   sub(b.WeightedMs, a.WeightedMs) / (dt * 1000),
			IOs:         uint64(reads + writes + discards),
		}
		if reads > 0 {
			r.ReadAwaitMs = sub(b.ReadMs, a.ReadMs) / reads
		}
		if writes > 0 {
			r.WriteAwaitMs = sub(b.WriteMs, a.WriteMs) / writes
		}
		if n := reads + writes + discards; n > 0 {
			r.AwaitMs = (sub(b.ReadMs, a.ReadMs) + sub(b.WriteMs, a.WriteMs) + sub(b.DiscardMs, a.DiscardMs)) / n
		}
		out = append(out, r)
	}
	return out
}

func (d DiskRate) values() map[string]any {
	return map[string]any{"device": d.Name, "partition": d.Partition,
		"r_per_s": human.Round(d.ReadsPerS, 1), "w_per_s": human.Round(d.WritesPerS, 1),
		"r_kb_per_s": human.Round(d.ReadKBPerS, 1), "w_kb_per_s": human.Round(d.WriteKBPerS, 1),
		"r_await_ms": human.Round(d.ReadAwaitMs, 2), "w_await_ms": human.Round(d.WriteAwaitMs, 2), "await_ms": human.Round(d.AwaitMs, 2),
		"util_pct": human.Round(d.UtilPct, 1), "aqu_sz": human.Round(d.QueueSize, 2)}
}

func (d DiskRate) line() string {
	return fmt.Sprintf("%s r %s/s w %s/s %s kB/s await %s ms util %s", d.Name, human.Number(d.ReadsPerS), human.Number(d.WritesPerS),
		human.Number(d.ReadKBPerS+d.WriteKBPerS), human.Number(d.AwaitMs), human.Percent(d.UtilPct))
}

func (a *analysis) disk() {
	if a.w.Last.Disks == nil {
		a.unavailable("disk", "/proc/diskstats unreadable")
		return
	}
	rates := DiskRates(a.w.First, a.w.Last)
	var disks, parts []DiskRate
	for _, r := range rates {
		if r.Partition {
			parts = append(parts, r)
		} else {
			disks = append(disks, r)
		}
	}
	sort.Slice(disks, func(i, j int) bool { return disks[i].UtilPct > disks[j].UtilPct })
	v := map[string]any{}
	dv := make([]map[string]any, 0, len(disks))
	for _, d := range disks {
		dv = append(dv, d.values())
	}
	v["disks"] = dv
	if len(parts) > 0 {
		pv := make([]map[string]any, 0, len(parts))
		for _, p := range parts {
			pv = append(pv, p.values())
		}
		v["partitions"] = pv
	}
	var summary string
	switch len(disks) {
	case 0:
		summary = "no disk I/O in the window"
	case 1:
		summary = disks[0].line()
	default:
		summary = disks[0].line() + fmt.Sprintf(" (+%d more active)", len(disks)-1)
	}
	var fs []finding.Finding
	for _, d := range disks {
		ev := d.values()
		if d.UtilPct >= diskUtilWarnPct {
			fs = append(fs, finding.Finding{
				ID:        "system.disk-saturated",
				Severity:  finding.Warning,
				Title:     fmt.Sprintf("%s busy %s of the time (await %s ms, queue %s)", d.Name, human.Percent(d.UtilPct), human.Number(d.AwaitMs), human.Number(d.QueueSize)),
				Summary:   fmt.Sprintf("%s had I/O in flight %s of the window: %s reads/s, %s writes/s, %s kB/s.", d.Name, human.Percent(d.UtilPct), human.Number(d.ReadsPerS), human.Number(d.WritesPerS), human.Number(d.ReadKBPerS+d.WriteKBPerS)),
				Mechanism: "Utilisation is the share of time at least one request was outstanding. For a single-queue disk near 100% means requests queue; devices that serve requests in parallel (SSD, NVMe, RAID) may still have headroom, so read it with await and the queue size.",
				Evidence:  ev,
				Remediation: []string{
					"iotop or pidstat -d 1: which tasks do the I/O",
					"wolf hung --duration 10s: tasks stuck in D state on this device",
				},
			})
		}
		if d.AwaitMs >= diskAwaitWarnMs && d.IOs >= diskAwaitMinIOs {
			fs = append(fs, finding.Finding{
				ID:        "system.disk-latency",
				Severity:  finding.Warning,
				Title:     fmt.Sprintf("%s requests took %s ms on average", d.Name, human.Number(d.AwaitMs)),
				Summary:   fmt.Sprintf("%d requests completed with an average wait of %s ms (reads %s ms, writes %s ms), queueing included.", d.IOs, human.Number(d.AwaitMs), human.Number(d.ReadAwaitMs), human.Number(d.WriteAwaitMs)),
				Mechanism: "await is the time from a request's submission to its completion, queueing included. Every task that reads or syncs through this device waits that long per request.",
				Evidence:  ev,
				Remediation: []string{
					"iotop or pidstat -d 1: which tasks do the I/O",
					"writes: large dirty bursts (vm.dirty_bytes / dirty_background_bytes) make reads wait behind writeback",
				},
			})
		}
	}
	a.check("disk", summary, v, fs...)
}
