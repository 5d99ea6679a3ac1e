package io

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/human"
)

// Thresholds of the verdicts.
const (
	// A wait this long on average, or a device this slow on average, is
	// worth a warning; this long, critical.
	waitWarn = 100 * time.Millisecond
	waitCrit = 1 * time.Second
	// A device at least this busy, its requests at least this slow on
	// it, is slow by itself.
	busyWarnPct   = 80
	deviceWarnAvg = 20 * time.Millisecond
	// Waiters that lost at least this share of the window to a cause
	// make it critical.
	lostCritShare = 0.5
	// Fewer requests than this say nothing about a device's speed.
	minRequests = 10
	// A task still waiting this long at the end of the window is stuck.
	stuckWarn = 2 * time.Second
)

// Write-ups the findings cite.
const refHungTasks = `Cloudflare, "Searching for the cause of hung tasks in the Linux kernel" (2025), https://blog.cloudflare.com/searching-for-the-cause-of-hung-tasks-in-the-linux-kernel/`

// Conclude turns a window into findings: one per device that did I/O (the
// JSON contract's per-device item), and one per cause that held I/O back:
// blk-throttle, a slow device, dirty throttling, a journal commit, the
// XFS log, the block layer's admission (wbt, iocost, io.latency, tags),
// and tasks still stuck at the window's end.
func Conclude(s *Snapshot) []finding.Finding {
	var out []finding.Finding
	out = append(out, throttled(s)...)
	out = append(out, slowDevices(s)...)
	out = append(out, dirty(s)...)
	out = append(out, journals(s)...)
	out = append(out, xfsLog(s)...)
	out = append(out, admission(s)...)
	out = append(out, stuck(s)...)
	for _, d := range s.Devices {
		if d.Requests() > 0 {
			out = append(out, deviceFinding(s, d))
		}
	}
	return out
}

// who names a process for people: "fio (pid 12, 4 threads)".
func who(comm string, pid, threads int) string {
	if comm == "" {
		comm = "?"
	}
	if pid == 0 {
		return comm
	}
	if threads > 1 {
		return fmt.Sprintf("%s (pid %d, %d threads)", comm, pid, threads)
	}
	return fmt.Sprintf("%s (pid %d)", comm, pid)
}

func ms(d time.Duration) float64 { return human.Round(float64(d)/1e6, 3) }

func avg(total time.Duration, n int) time.Duration {
	if n <= 0 {
		return 0
	}
	return total / time.Duration(n)
}

// opWord is what most of a waiter's requests were: "read", "write", or
// "request".
func opWord(o *Ops) string {
	switch {
	case o.Reads > 0 && o.Writes == 0:
		return "read"
	case o.Writes > 0 && o.Reads == 0:
		return "write"
	}
	return "request"
}

func findDevice(s *Snapshot, name string) *Device {
	for _, d := range s.Devices {
		if d.Name == name {
			return d
		}
	}
	return nil
}

func busy(d *Device) (float64, bool) {
	if d == nil || d.Stat == nil {
		return 0, false
	}
	return d.Stat.BusyPct, true
}

// limitsOf are the limits on dev that apply to cgroup cg (its own and
// its ancestors').
func limitsOf(s *Snapshot, cg, dev string) []Limit {
	var out []Limit
	for _, l := range s.Limits {
		if l.Device != dev {
			continue
		}
		if l.Cgroup == cg || l.Cgroup == "/" || strings.HasPrefix(cg, l.Cgroup+"/") {
			out = append(out, l)
		}
	}
	return out
}

// limitWords says a limit: "1 MiB/s of reads (blkio.throttle.read_bps_device)".
func limitWords(l Limit) string {
	var v string
	switch l.Key {
	case "rbps":
		v = human.Bytes(int64(l.Value)) + "/s of reads"
	case "wbps":
		v = human.Bytes(int64(l.Value)) + "/s of writes"
	case "riops":
		v = fmt.Sprintf("%d reads/s", l.Value)
	case "wiops":
		v = fmt.Sprintf("%d writes/s", l.Value)
	case "target":
		v = fmt.Sprintf("an io.latency target of %s", human.Duration(time.Duration(l.Value)*time.Microsecond))
	default:
		v = fmt.Sprintf("%s=%d", l.Key, l.Value)
	}
	where := l.File
	if !l.Own {
		where = l.Cgroup + "/" + l.File
	}
	return v + " (" + where + ")"
}

// bindingLimit picks the limit that fits what was held: a read limit for
// reads, write for writes, bandwidth before IOPS, the cgroup's own first.
func bindingLimit(ls []Limit, o *Ops) (Limit, bool) {
	if len(ls) == 0 {
		return Limit{}, false
	}
	rank := func(l Limit) int {
		r := 0
		switch l.Key {
		case "rbps", "riops":
			if o.Reads == 0 {
				r += 10
			}
		case "wbps", "wiops":
			if o.Writes == 0 {
				r += 10
			}
		}
		if strings.HasSuffix(l.Key, "iops") {
			r++
		}
		if !l.Own {
			r += 2
		}
		return r
	}
	best := slices.MinFunc(ls, func(a, b Limit) int { return cmp.Compare(rank(a), rank(b)) })
	return best, true
}

// cgroupOps sums a device's usage by one cgroup.
func cgroupOps(d *Device, cg string) Ops {
	var o Ops
	for _, u := range d.Users {
		if u.Cgroup == cg {
			o.add(&u.Ops)
		}
	}
	return o
}

func waiterSubject(w *Waiter, role string) finding.Subject {
	sub := finding.Subject{Role: role, PID: w.PID, TID: w.TID, Comm: w.Comm, Cgroup: w.Cgroup,
		Evidence: map[string]any{"waits": w.Count, "wait_ms_total": ms(w.Total), "wait_ms_avg": ms(avg(w.Total, w.Count)), "wait_ms_max": ms(w.Max)}}
	if w.Kind == KindIO {
		sub.Evidence["held_ms_total"] = ms(w.Held)
		sub.Evidence["queued_ms_total"] = ms(w.Queued)
		sub.Evidence["on_device_ms_total"] = ms(w.OnDevice)
	}
	if w.Threads > 1 {
		sub.Detail = fmt.Sprintf("%d threads", w.Threads)
	}
	return sub
}

// throttled: a cgroup's requests held by blk-throttle on a device.
func throttled(s *Snapshot) []finding.Finding {
	type key struct{ cg, dev string }
	held := map[key]*Ops{}
	var keys []key
	for _, d := range s.Devices {
		for _, u := range d.Users {
			if u.Throttled == 0 {
				continue
			}
			k := key{u.Cgroup, d.Name}
			if held[k] == nil {
				held[k] = &Ops{}
				keys = append(keys, k)
			}
			held[k].add(&u.Ops)
		}
	}
	// Waiters whose requests were held, also when the requests completed
	// out of --pid's sight.
	for _, w := range s.Waiters {
		if w.Kind == KindIO && w.Throttled {
			k := key{w.ReqCgroup, w.Device}
			if held[k] == nil {
				held[k] = &Ops{}
				keys = append(keys, k)
			}
		}
	}
	var out []finding.Finding
	for _, k := range keys {
		d := findDevice(s, k.dev)
		all := Ops{}
		if d != nil {
			all = cgroupOps(d, k.cg)
		}
		h := held[k]
		var ws []*Waiter
		var waited, heldT time.Duration
		var n int
		for _, w := range s.Waiters {
			if w.Kind == KindIO && w.Throttled && w.ReqCgroup == k.cg && w.Device == k.dev {
				ws = append(ws, w)
				waited += w.Total
				heldT += w.Held
				n += w.Count
			}
		}
		lim, hasLim := bindingLimit(limitsOf(s, k.cg, k.dev), &all)
		bz, hasBusy := busy(d)
		sev := finding.Warning
		span := s.Window - s.WaitersFrom
		if avg(waited, n) >= waitCrit || (span > 0 && len(ws) > 0 && float64(waited)/float64(span) >= lostCritShare*float64(len(ws))) {
			sev = finding.Critical
		}
		cgName := k.cg
		if cgName == "" {
			cgName = "(unknown cgroup)"
		}
		var title string
		if len(ws) > 0 {
			top := ws[0]
			title = fmt.Sprintf("%s in cgroup %s waits %s per %s", who(top.Comm, top.PID, top.Threads), cgName,
				human.Duration(avg(top.Total, top.Count)), opWord(&all))
			if hasLim {
				title += fmt.Sprintf(": %s is capped at %s on %s", cgName, limitWords(lim), k.dev)
			} else {
				title += fmt.Sprintf(": blk-throttle holds %s's I/O on %s", cgName, k.dev)
			}
		} else {
			title = fmt.Sprintf("blk-throttle held %s of %s's %s on %s", human.Count(h.Throttled), cgName,
				human.Plural(int(all.Requests()), "request", "requests"), k.dev)
			if hasLim {
				title += ", capped at " + limitWords(lim)
			}
		}
		if hasBusy {
			title += fmt.Sprintf("; %s itself is %s busy", k.dev, human.Percent(bz))
		}
		ev := map[string]any{
			"device": k.dev, "cgroup": k.cg, "window_s": human.Round(s.Window.Seconds(), 3),
			"throttled_requests": h.Throttled, "throttled_bytes": h.ThrottledBytes,
			"requests": all.Requests(), "read_bytes": all.ReadBytes, "write_bytes": all.WriteBytes,
			"read_bytes_per_s":  human.Round(float64(all.ReadBytes)/max(s.Window.Seconds(), 1e-9), 0),
			"write_bytes_per_s": human.Round(float64(all.WriteBytes)/max(s.Window.Seconds(), 1e-9), 0),
		}
		if hasLim {
			ev["limit_file"] = lim.File
			ev["limit_cgroup"] = lim.Cgroup
			switch {
			case strings.HasSuffix(lim.Key, "bps"):
				ev["limit_bytes_per_s"] = lim.Value
			case strings.HasSuffix(lim.Key, "iops"):
				ev["limit_iops"] = lim.Value
			}
		}
		if hasBusy {
			ev["device_busy_pct"] = human.Round(bz, 1)
		}
		if n > 0 {
			ev["waits"] = n
			ev["wait_ms_avg"] = ms(avg(waited, n))
			ev["held_ms_avg"] = ms(avg(heldT, n))
			ev["held_s_total"] = human.Round(heldT.Seconds(), 3)
		}
		subjects := []finding.Subject{{Role: finding.RoleCgroup, Cgroup: k.cg, Detail: fmt.Sprintf("%s of %s held by blk-throttle on %s",
			human.Count(h.Throttled), human.Plural(int(all.Requests()), "request", "requests"), k.dev)}}
		for i, w := range ws {
			if i == 8 {
				break
			}
			subjects = append(subjects, waiterSubject(w, finding.RoleWaiter))
		}
		summary := fmt.Sprintf("blk-throttle held %s of the %s %s's requests completed on %s in %s (%s of %s): they waited in the throttle's queue before the block layer made requests of them.",
			human.Count(h.Throttled), human.Count(all.Requests()), cgName, k.dev, human.Duration(s.Window),
			human.Bytes(int64(h.ThrottledBytes)), human.Bytes(int64(all.ReadBytes+all.WriteBytes)))
		if n > 0 {
			summary += fmt.Sprintf(" Its waiters waited %s per wait, %s of it before the request existed (held), the device took %s.",
				human.Duration(avg(waited, n)), human.Duration(avg(heldT, n)), human.Duration(avg(sumOnDevice(ws), n)))
		} else if !s.WaitersArmed {
			summary += " Who waits was not measured: " + s.WaitersOff + "."
		}
		rem := []string{}
		if hasLim {
			rem = append(rem, fmt.Sprintf("raise or remove the limit if it is not meant to bind: %s (a line \"%s\")", limitPath(s, lim), limitLine(s, lim, d)))
		}
		rem = append(rem, "or move the work to a cgroup with the I/O budget it needs; the device has room if it is not busy")
		out = append(out, finding.Finding{
			ID: "io.throttled", Investigator: "io", Severity: sev, Title: title, Summary: summary,
			Mechanism: "blk-throttle (cgroup v1 blkio.throttle.*, v2 io.max) queues a cgroup's bios once it has used its bytes or IOs per second, and dispatches them from a kernel worker when the budget allows: the submitting task sleeps meanwhile while the device may stand idle. wolf sees the requests born in that worker, and ties each waiter's sleep to the completion that ends it.",
			Subjects:  subjects, Evidence: ev, Remediation: rem, References: []string{refHungTasks},
		})
	}
	return out
}

func sumOnDevice(ws []*Waiter) time.Duration {
	var t time.Duration
	for _, w := range ws {
		t += w.OnDevice
	}
	return t
}

func limitPath(s *Snapshot, l Limit) string {
	root := "/sys/fs/cgroup/blkio"
	if s.CgroupVersion == 2 {
		root = "/sys/fs/cgroup"
	}
	return strings.TrimSuffix(root+l.Cgroup, "/") + "/" + l.File
}

func limitLine(s *Snapshot, l Limit, d *Device) string {
	dev := l.Device
	if d != nil {
		dev = fmt.Sprintf("%d:%d", d.Major, d.Minor)
	}
	if s.CgroupVersion == 2 {
		return dev + " " + l.Key + "=max"
	}
	return dev + " 0"
}

// slowDevices: a device that is busy and slow by itself, its requests
// taking long on the device (not before it).
func slowDevices(s *Snapshot) []finding.Finding {
	var out []finding.Finding
	for _, d := range s.Devices {
		if !isSlow(d) {
			continue
		}
		onAvg := time.Duration(d.DeviceNs / d.Timed)
		qAvg := time.Duration(d.QueuedNs / d.Timed)
		bz, hasBusy := busy(d)
		var ws []*Waiter
		var waited time.Duration
		var n int
		for _, w := range s.Waiters {
			if w.Kind == KindIO && !w.Throttled && w.Device == d.Name {
				ws = append(ws, w)
				waited += w.Total
				n += w.Count
			}
		}
		sev := finding.Warning
		span := s.Window - s.WaitersFrom
		if onAvg >= waitCrit || (span > 0 && len(ws) > 0 && float64(ws[0].Total)/float64(span) >= lostCritShare) {
			sev = finding.Critical
		}
		p99 := time.Duration(d.OnDevice.Quantile(0.99))
		title := fmt.Sprintf("%s is slow: requests take %s on the device (p99 %s)", d.Name, human.Duration(onAvg), human.Duration(p99))
		if hasBusy {
			title += fmt.Sprintf(", %s busy", human.Percent(bz))
		}
		if len(ws) > 0 {
			top := ws[0]
			title += fmt.Sprintf("; %s waits %s per %s", who(top.Comm, top.PID, top.Threads), human.Duration(avg(top.Total, top.Count)), opWord(&d.Ops))
		}
		ev := deviceEvidence(s, d)
		if n > 0 {
			ev["waits"] = n
			ev["wait_ms_avg"] = ms(avg(waited, n))
		}
		var subjects []finding.Subject
		for i, u := range d.Users {
			if i == 5 {
				break
			}
			subjects = append(subjects, usageSubject(u))
		}
		for i, w := range ws {
			if i == 5 {
				break
			}
			subjects = append(subjects, waiterSubject(w, finding.RoleWaiter))
		}
		out = append(out, finding.Finding{
			ID: "io.slow-device", Investigator: "io", Severity: sev, Title: title,
			Summary: fmt.Sprintf("%s completed %s in %s; each spent %s on average on the device and %s queued before it: the time is the device's own, not something in front of it.",
				d.Name, human.Plural(int(d.Requests()), "request", "requests"), human.Duration(s.Window), human.Duration(onAvg), human.Duration(qAvg)),
			Mechanism: "A request's time on the device runs from its issue to the driver (block_rq_issue) to its completion (block_rq_complete); when that dominates and the device is busy most of the window, the device (or what is under it: a loop device's backing file, a network disk, the hypervisor) is the limit, and its consumers share it.",
			Subjects:  subjects, Evidence: ev,
			Remediation: []string{
				"see who uses the device most (its consumers here) and whether that load is expected",
				"check the device under it: the backing file or filesystem of a loop device, the hypervisor's disk limits, the disk's own health (smartctl)",
			},
		})
	}
	return out
}

// dirty: writers paused by balance_dirty_pages.
func dirty(s *Snapshot) []finding.Finding {
	byDev := map[string][]*Waiter{}
	var devs []string
	for _, w := range s.Waiters {
		if w.Kind != KindDirty {
			continue
		}
		if byDev[w.Device] == nil {
			devs = append(devs, w.Device)
		}
		byDev[w.Device] = append(byDev[w.Device], w)
	}
	var out []finding.Finding
	for _, dev := range devs {
		ws := byDev[dev]
		var paused time.Duration
		var n int
		for _, w := range ws {
			paused += w.Total
			n += w.Count
		}
		top := ws[0]
		span := s.Window - s.WaitersFrom
		sev := finding.Warning
		if span > 0 && float64(top.Total)/float64(span) >= lostCritShare {
			sev = finding.Critical
		}
		name := dev
		if name == "" {
			name = "(unknown device)"
		}
		title := fmt.Sprintf("%s was paused %s of %s by dirty throttling on %s", who(top.Comm, top.PID, top.Threads), human.Duration(top.Total), human.Duration(span), name)
		ev := map[string]any{"device": dev, "pauses": n, "paused_ms_total": ms(paused), "paused_ms_max": ms(top.Max), "window_s": human.Round(s.Window.Seconds(), 3)}
		d := findDevice(s, dev)
		summary := fmt.Sprintf("balance_dirty_pages paused %s %s times for %s in all: they dirtied page cache faster than %s writes it back.",
			human.Plural(len(ws), "process", "processes"), human.Count(uint64(n)), human.Duration(paused), name)
		if d != nil {
			wbps := float64(d.WriteBytes) / max(s.Window.Seconds(), 1e-9)
			ev["device_write_bytes_per_s"] = human.Round(wbps, 0)
			summary += fmt.Sprintf(" %s wrote %s/s in the window.", name, human.Bytes(int64(wbps)))
			if d.Throttled > 0 {
				ev["throttled_write_requests"] = d.Throttled
				summary += fmt.Sprintf(" blk-throttle held %s of its requests.", human.Count(d.Throttled))
			}
			if bz, ok := busy(d); ok {
				ev["device_busy_pct"] = human.Round(bz, 1)
			}
		}
		var subjects []finding.Subject
		for i, w := range ws {
			if i == 8 {
				break
			}
			sub := waiterSubject(w, finding.RoleVictim)
			sub.Evidence = map[string]any{"pauses": w.Count, "paused_ms_total": ms(w.Total), "paused_ms_max": ms(w.Max)}
			subjects = append(subjects, sub)
		}
		out = append(out, finding.Finding{
			ID: "io.dirty-throttled", Investigator: "io", Severity: sev, Title: title, Summary: summary,
			Mechanism: "A task that dirties pages past its share of the dirty limit (vm.dirty_ratio or _bytes, the device's share of it by its writeback speed, a memory cgroup's) sleeps in balance_dirty_pages until writeback catches up: the writer runs at the speed the device writes back, whatever holds that back.",
			Subjects:  subjects, Evidence: ev,
			Remediation: []string{
				"see what holds the device's writeback back (a throttle on the flusher's cgroup, a slow device) in the findings on " + name,
				"write less at once, or with O_DIRECT; or give the device's writeback more room (vm.dirty_bytes, /sys/class/bdi/<dev>/max_ratio) if memory allows",
			},
		})
	}
	return out
}

// journals: fsync waits behind journal commits.
func journals(s *Snapshot) []finding.Finding {
	var out []finding.Finding
	for _, j := range s.Journals {
		var ws []*Waiter
		var waited time.Duration
		var n int
		var worst time.Duration
		for _, w := range s.Waiters {
			if w.Kind == KindFsync && w.Device == j.Device {
				ws = append(ws, w)
				waited += w.Total
				n += w.Count
				worst = max(worst, w.Max)
			}
		}
		for _, o := range s.Ongoing {
			if o.Kind == KindFsync && o.Device == j.Device {
				worst = max(worst, o.For)
			}
		}
		longest := max(j.Max, j.InProgress)
		if longest < waitWarn && worst < waitWarn {
			continue
		}
		if len(ws) == 0 && !anyOngoingFsync(s, j.Device) {
			continue // slow commits nobody waited for
		}
		sev := finding.Warning
		if worst >= waitCrit {
			sev = finding.Critical
		}
		committer := who(j.CommitterComm, j.Committer, 0)
		// What the committer waited for while flushing.
		var cw *Waiter
		for _, w := range s.Waiters {
			if w.Kind == KindIO && j.Committer != 0 && w.PID == j.Committer && (cw == nil || w.Total > cw.Total) {
				cw = w
			}
		}
		var title string
		if len(ws) > 0 {
			// The title's waiter: one outside the cgroup whose data the
			// committer waited for, when there is one. That another
			// process's fsync waits for this cgroup's data is the news; the
			// cgroup's own writers wait for their own data anyway.
			top := ws[0]
			// The committer's own journal blocks are its requests too
			// (cgroup /): only a wait blk-throttle held names the cgroup.
			if cw != nil && cw.Throttled {
				for _, w := range ws {
					if w.Cgroup != cw.ReqCgroup {
						top = w
						break
					}
				}
			} else if len(limitsOf(s, top.Cgroup, j.Device)) > 0 {
				// The committer's own wait was not seen (its flush
				// began before the waiters were watched, or ran under
				// the window's bound): a cgroup held back by an I/O
				// limit on the device is the one whose data the commits
				// wait for, so an fsync outside every such cgroup is the
				// news.
				for _, w := range ws {
					if len(limitsOf(s, w.Cgroup, j.Device)) == 0 {
						top = w
						break
					}
				}
			}
			title = fmt.Sprintf("%s waited up to %s in fsync on %s behind the journal", who(top.Comm, top.PID, top.Threads), human.Duration(top.Max), j.Device)
		} else {
			title = fmt.Sprintf("fsync has waited %s on %s behind the journal", human.Duration(worst), j.Device)
		}
		title += fmt.Sprintf(": commits took up to %s", human.Duration(longest))
		switch {
		case cw != nil && cw.Throttled:
			title += fmt.Sprintf(", %s waiting %s for writes of cgroup %s held by blk-throttle", j.CommitterComm, human.Duration(cw.Max), cw.ReqCgroup)
		case cw != nil && cw.Max >= waitWarn:
			title += fmt.Sprintf(", %s waiting %s for writes of cgroup %s", j.CommitterComm, human.Duration(cw.Max), cw.ReqCgroup)
		}
		ev := map[string]any{"device": j.Device, "commits": j.Commits, "commit_ms_max": ms(longest),
			"flushing_ms_total": ms(j.Flushing), "logging_ms_total": ms(j.Logging), "locked_ms_total": ms(j.Locked),
			"fsyncs": n, "fsync_ms_max": ms(worst), "committer": j.CommitterComm}
		if n > 0 {
			ev["fsync_ms_avg"] = ms(avg(waited, n))
		}
		if j.InProgress > 0 {
			ev["commit_in_progress_ms"] = ms(j.InProgress)
			ev["commit_phase"] = j.InProgressPhase
		}
		summary := fmt.Sprintf("The journal on %s committed %s in %s; the longest took %s (%s submitting ordered data, %s writing the journal and waiting for the data: data=ordered commits the data of every file in the transaction first).",
			j.Device, human.Plural(int(j.Commits), "transaction", "transactions"), human.Duration(s.Window), human.Duration(longest),
			human.Duration(j.Flushing), human.Duration(j.Logging))
		subjects := []finding.Subject{}
		if j.Committer != 0 {
			sub := finding.Subject{Role: finding.RoleHolder, PID: j.Committer, TID: j.Committer, Comm: j.CommitterComm, Detail: "commits the journal"}
			if cw != nil {
				sub.Evidence = map[string]any{"waited_for_cgroup": cw.ReqCgroup, "throttled": cw.Throttled, "wait_ms_total": ms(cw.Total), "held_ms_total": ms(cw.Held)}
				summary += fmt.Sprintf(" Its committer %s waited %s for requests of cgroup %s", committer, human.Duration(cw.Total), cw.ReqCgroup)
				if cw.Throttled {
					summary += ", which blk-throttle held."
				} else {
					summary += "."
				}
			}
			subjects = append(subjects, sub)
		}
		for i, w := range ws {
			if i == 8 {
				break
			}
			subjects = append(subjects, waiterSubject(w, finding.RoleVictim))
		}
		out = append(out, finding.Finding{
			ID: "io.journal-stall", Investigator: "io", Severity: sev, Title: title, Summary: summary,
			Mechanism: "fsync on ext4 waits for the jbd2 commit of the transaction that holds its file's metadata; in data=ordered mode a commit first writes and waits for the data of every file in that transaction. One writer's slow or throttled data thus makes every other process's fsync on the filesystem wait: the fsync waits on the journal, the journal on someone else's data.",
			Subjects:  subjects, Evidence: ev,
			Remediation: []string{
				"find what holds the committer's writes back (a throttled cgroup writing to the same filesystem, a slow device) and lift it, or move that writer to a filesystem of its own",
				"data=writeback (ext4 mount option) stops commits from waiting for data, at the cost of stale data after a crash",
			},
			References: []string{refHungTasks},
		})
	}
	return out
}

func anyOngoingFsync(s *Snapshot, dev string) bool {
	for _, o := range s.Ongoing {
		if o.Kind == KindFsync && o.Device == dev {
			return true
		}
	}
	return false
}

// xfsLog: tasks asleep for XFS log space.
func xfsLog(s *Snapshot) []finding.Finding {
	byDev := map[string][]*Waiter{}
	var devs []string
	for _, w := range s.Waiters {
		if w.Kind != KindXFSLog {
			continue
		}
		if byDev[w.Device] == nil {
			devs = append(devs, w.Device)
		}
		byDev[w.Device] = append(byDev[w.Device], w)
	}
	var out []finding.Finding
	for _, dev := range devs {
		ws := byDev[dev]
		var t, worst time.Duration
		var n int
		for _, w := range ws {
			t += w.Total
			n += w.Count
			worst = max(worst, w.Max)
		}
		if worst < waitWarn {
			continue
		}
		sev := finding.Warning
		if worst >= waitCrit {
			sev = finding.Critical
		}
		var subjects []finding.Subject
		for i, w := range ws {
			if i == 8 {
				break
			}
			subjects = append(subjects, waiterSubject(w, finding.RoleVictim))
		}
		out = append(out, finding.Finding{
			ID: "io.xfs-log", Investigator: "io", Severity: sev,
			Title:     fmt.Sprintf("%s waited for XFS log space on %s, up to %s", human.Plural(len(ws), "process", "processes"), dev, human.Duration(worst)),
			Summary:   fmt.Sprintf("%s sleeps for XFS log space took %s in all: the log is full until metadata already logged is written in place (the log tail moves).", human.Count(uint64(n)), human.Duration(t)),
			Mechanism: "An XFS transaction reserves log space first (xlog_grant_head_wait); when the log is full it sleeps until writeback of logged metadata frees some. A slow device or a flood of metadata changes keeps every writer waiting there: the XFS example of Cloudflare's hung-task post.",
			Subjects:  subjects, Evidence: map[string]any{"device": dev, "waits": n, "wait_ms_total": ms(t), "wait_ms_max": ms(worst)},
			Remediation: []string{"see the device's findings: the log drains at its write speed", "a larger log (mkfs.xfs -l size=) or an external log device spreads the load"},
			References:  []string{refHungTasks},
		})
	}
	return out
}

// admission: long waits in the block layer's admission (wbt, iocost,
// io.latency, tags, a frozen queue), from the waiters' stacks.
func admission(s *Snapshot) []finding.Finding {
	type agg struct {
		n     int
		t, mx time.Duration
		ws    []LongWait
	}
	by := map[string]*agg{}
	var kinds []string
	for _, lw := range s.LongWaits {
		switch lw.Site.Kind {
		case SiteWBT, SiteIOCost, SiteIOLatency, SiteTags, SiteQueueFreeze:
		default:
			continue
		}
		k := lw.Site.Kind + "\x00" + lw.Device
		if by[k] == nil {
			by[k] = &agg{}
			kinds = append(kinds, k)
		}
		a := by[k]
		a.n++
		a.t += lw.Wait
		a.mx = max(a.mx, lw.Wait)
		a.ws = append(a.ws, lw)
	}
	var out []finding.Finding
	for _, k := range kinds {
		a := by[k]
		site, dev, _ := strings.Cut(k, "\x00")
		where := ""
		if dev != "" {
			where = " (last request from " + dev + ")"
		}
		sev := finding.Warning
		if a.mx >= waitCrit {
			sev = finding.Critical
		}
		var subjects []finding.Subject
		seen := map[int]bool{}
		for _, lw := range a.ws {
			if seen[lw.TID] || len(subjects) == 8 {
				continue
			}
			seen[lw.TID] = true
			subjects = append(subjects, finding.Subject{Role: finding.RoleVictim, PID: lw.PID, TID: lw.TID, Comm: lw.Comm, Stack: lw.Stack,
				Evidence: map[string]any{"wait_ms": ms(lw.Wait)}})
		}
		ev := map[string]any{"site": site, "device": dev, "long_waits": a.n, "wait_ms_total": ms(a.t), "wait_ms_max": ms(a.mx)}
		for _, q := range s.QoS {
			if q.Device == dev {
				if q.WBTSteps > 0 {
					ev["wbt_step"] = q.WBTStep
					ev["wbt_normal_depth"] = q.WBTNormal
				}
				if q.IOCostAdj > 0 {
					ev["iocost_busy_level"] = q.IOCostBusy
					ev["iocost_rq_wait_pct"] = q.IOCostRqWait
				}
			}
		}
		out = append(out, finding.Finding{
			ID: "io.admission", Investigator: "io", Severity: sev,
			Title:     fmt.Sprintf("%s waited up to %s for %s%s", human.Plural(len(seen), "task", "tasks"), human.Duration(a.mx), siteWords(site), where),
			Summary:   fmt.Sprintf("%s waits of at least %s slept in the block layer before their request existed, at %s.", human.Count(uint64(a.n)), human.Duration(s.longWaitMin()), siteWords(site)),
			Mechanism: "Before the block layer makes a request of a bio it may make the submitter wait: writeback throttling (wbt) keeps background writes from crowding out reads, iocost and io.latency hold a cgroup to its share, and a queue with every tag in use has no room for another request. The waiter's stack names the place.",
			Subjects:  subjects, Evidence: ev,
			Remediation: []string{
				"wbt: /sys/block/<dev>/queue/wbt_lat_usec (0 disables it); iocost and io.latency: the cgroup's io.weight, io.latency, the root's io.cost.qos",
				"tags: the device's queue depth (/sys/block/<dev>/queue/nr_requests) is full: its consumers outrun it, see the device's findings",
			},
		})
	}
	return out
}

func (s *Snapshot) longWaitMin() time.Duration {
	m := time.Duration(0)
	for _, lw := range s.LongWaits {
		if m == 0 || lw.Wait < m {
			m = lw.Wait
		}
	}
	return m
}

// stuck: tasks still waiting for I/O, dirty throttling or fsync, long.
func stuck(s *Snapshot) []finding.Finding {
	var ons []Ongoing
	for _, o := range s.Ongoing {
		if o.For >= stuckWarn {
			ons = append(ons, o)
		}
	}
	if len(ons) == 0 {
		return nil
	}
	var subjects []finding.Subject
	for _, o := range ons {
		subjects = append(subjects, finding.Subject{Role: finding.RoleVictim, PID: o.PID, TID: o.TID, Comm: o.Comm, State: "D",
			Detail: fmt.Sprintf("%s for %s", ongoingWords(o), human.Duration(o.For)), Evidence: map[string]any{"waiting_s": human.Round(o.For.Seconds(), 3), "kind": o.Kind, "device": o.Device}})
	}
	top := ons[0]
	sev := finding.Warning
	if top.For >= 10*time.Second {
		sev = finding.Critical
	}
	return []finding.Finding{{
		ID: "io.stuck", Investigator: "io", Severity: sev,
		Title:     fmt.Sprintf("%s still waiting at the end of the window: %s %s for %s", human.Plural(len(ons), "task", "tasks"), who(top.Comm, top.PID, 0), ongoingWords(top), human.Duration(top.For)),
		Summary:   "These waits had not ended when the window closed; their time so far is not in the window's totals.",
		Mechanism: "A task asleep for I/O is woken by the completion it waits for; one still asleep after seconds waits for a request that has not completed, or one that has not been issued yet (held by a throttle, a full queue, a frozen queue).",
		Subjects:  subjects, Evidence: map[string]any{"tasks": len(ons), "waiting_s_max": human.Round(top.For.Seconds(), 3)},
		Remediation: []string{"wolf hung --duration 10s: the tasks' stacks and what they wait on", "see the other io findings on the same device"},
	}}
}

func ongoingWords(o Ongoing) string {
	dev := ""
	if o.Device != "" {
		dev = " on " + o.Device
	}
	switch o.Kind {
	case KindDirty:
		return "paused by dirty throttling" + dev
	case KindFsync:
		return "in fsync" + dev
	case KindXFSLog:
		return "asleep for XFS log space" + dev
	}
	return "asleep for I/O"
}

// deviceEvidence is the JSON contract's per-device evidence.
func deviceEvidence(s *Snapshot, d *Device) map[string]any {
	ev := map[string]any{
		"device": d.Name, "requests": d.Requests(), "window_s": human.Round(s.Window.Seconds(), 3),
		"reads": d.Reads, "writes": d.Writes, "other_requests": d.Other,
		"read_bytes": d.ReadBytes, "write_bytes": d.WriteBytes,
		"timed_requests": d.Timed,
	}
	if d.Timed > 0 {
		ev["p50_us"] = human.Round(float64(d.Total.Quantile(0.5))/1e3, 1)
		ev["p90_us"] = human.Round(float64(d.Total.Quantile(0.9))/1e3, 1)
		ev["p99_us"] = human.Round(float64(d.Total.Quantile(0.99))/1e3, 1)
		ev["max_us"] = human.Round(float64(d.MaxTotalNs)/1e3, 1)
		ev["queued_us_avg"] = human.Round(float64(d.QueuedNs)/float64(d.Timed)/1e3, 1)
		ev["on_device_us_avg"] = human.Round(float64(d.DeviceNs)/float64(d.Timed)/1e3, 1)
		ev["on_device_p99_us"] = human.Round(float64(d.OnDevice.Quantile(0.99))/1e3, 1)
	}
	if d.Throttled > 0 {
		ev["throttled_requests"] = d.Throttled
		ev["throttled_bytes"] = d.ThrottledBytes
	}
	if d.Stat != nil {
		ev["busy_pct"] = human.Round(d.Stat.BusyPct, 1)
		ev["aqu_sz"] = human.Round(d.Stat.AvgQueue, 2)
		ev["in_flight"] = d.Stat.InFlight
		if d.Stat.NrRequests > 0 {
			ev["nr_requests"] = d.Stat.NrRequests
		}
	}
	if d.Backing != "" {
		ev["backing_file"] = d.Backing
	}
	if s.AttrSample > 1 {
		ev["attribution_sample_1_in"] = s.AttrSample
	}
	if s.WaitSample > 1 {
		ev["wait_sample_1_in"] = s.WaitSample
	}
	if s.WaitDuty > 1 {
		ev["waiters_watched_1_in"] = s.WaitDuty
	}
	return ev
}

func usageSubject(u *Usage) finding.Subject {
	role := finding.RoleTask
	if u.PID == 0 {
		role = finding.RoleCgroup
	}
	sub := finding.Subject{Role: role, PID: u.PID, Comm: u.Comm, Cgroup: u.Cgroup, CgroupID: u.CgroupID,
		Evidence: map[string]any{"requests": u.Requests(), "read_bytes": u.ReadBytes, "write_bytes": u.WriteBytes}}
	if u.Timed > 0 {
		sub.Evidence["latency_us_avg"] = human.Round(float64(u.Total.Sum)/float64(u.Timed)/1e3, 1)
		sub.Evidence["p99_us"] = human.Round(float64(u.Total.Quantile(0.99))/1e3, 1)
	}
	if u.Throttled > 0 {
		sub.Evidence["throttled_requests"] = u.Throttled
	}
	if u.Estimated {
		sub.Evidence["estimated"] = true
	}
	switch {
	case u.Unattributed:
		sub.Detail = "requests of the cgroup whose issuer was not followed (attribution sampled)"
	case u.PID == 0 && u.Throttled > 0:
		sub.Detail = "dispatched by blk-throttle's worker for the cgroup"
	case u.PID == 0:
		sub.Detail = "issued by the kernel for the cgroup"
	case u.Kworker:
		sub.Detail = "a kernel worker issuing for the cgroup (writeback, a stacked device)"
	}
	return sub
}

// deviceFinding is the per-device item of the JSON contract: what the
// device did in the window.
func deviceFinding(s *Snapshot, d *Device) finding.Finding {
	title := fmt.Sprintf("%s: %s in %s", d.Name, human.Plural(int(d.Requests()), "request", "requests"), human.Duration(s.Window))
	var parts []string
	if d.ReadBytes > 0 {
		parts = append(parts, human.Bytes(int64(d.ReadBytes))+" read")
	}
	if d.WriteBytes > 0 {
		parts = append(parts, human.Bytes(int64(d.WriteBytes))+" written")
	}
	if len(parts) > 0 {
		title += " (" + strings.Join(parts, ", ") + ")"
	}
	if d.Timed > 0 {
		title += fmt.Sprintf(", p99 %s: %s queued, %s on the device on average", human.Duration(time.Duration(d.Total.Quantile(0.99))),
			human.Duration(time.Duration(d.QueuedNs/d.Timed)), human.Duration(time.Duration(d.DeviceNs/d.Timed)))
	}
	if bz, ok := busy(d); ok {
		title += fmt.Sprintf("; %s busy", human.Percent(bz))
	}
	var subjects []finding.Subject
	for i, u := range d.Users {
		if i == 8 {
			break
		}
		subjects = append(subjects, usageSubject(u))
	}
	for _, r := range s.SlowRequests {
		if r.Device != d.Name || len(subjects) >= 12 {
			continue
		}
		subjects = append(subjects, finding.Subject{Role: finding.RoleTask, PID: r.PID, Comm: r.Comm, Cgroup: r.Cgroup,
			Detail: fmt.Sprintf("a slow %s of %s: %s (%s queued, %s on the device)", r.Op, human.Bytes(int64(r.Bytes)),
				human.Duration(r.Total), human.Duration(r.Queued), human.Duration(r.On)),
			Evidence: map[string]any{"latency_ms": ms(r.Total), "queued_ms": ms(r.Queued), "on_device_ms": ms(r.On), "bytes": r.Bytes}})
	}
	return finding.Finding{
		ID: "io.device", Investigator: "io", Severity: finding.Info, Title: title,
		Summary: fmt.Sprintf("%s completed %s reads and %s writes in the window; its consumers by cgroup and issuing process follow.",
			d.Name, human.Count(d.Reads), human.Count(d.Writes)),
		Mechanism: "Counted in the kernel from block_rq_issue to block_rq_complete: queued is from the request's creation to its issue to the driver, on the device from issue to completion; busy is the kernel's own io_ticks (/proc/diskstats).",
		Subjects:  subjects, Evidence: deviceEvidence(s, d),
	}
}

// Notes says what the window could not see.
func (s *Snapshot) Notes() []string {
	var out []string
	if !s.WaitersArmed && s.WaitersOff != "" {
		out = append(out, "waiters not watched: "+s.WaitersOff)
	} else if s.WaitersArmed && s.WaitersFrom > 0 {
		out = append(out, fmt.Sprintf("waiters watched from %s into the %s window, once something held I/O back (the waiter programs run on every context switch, so they start only when needed)",
			human.Duration(s.WaitersFrom), human.Duration(s.Window)))
	}
	if !s.Throttle {
		out = append(out, "blk-throttle's dispatch function is not in kallsyms: requests it held are not told apart")
	}
	if s.AttrSample > 1 {
		how := ""
		if s.AttrDuty > 1 {
			how = fmt.Sprintf(" (its first sight watched 1/%d of each %s)", s.AttrDuty, human.Duration(dutyPeriod))
		}
		out = append(out, fmt.Sprintf("requests came faster than %s a second: 1 in %d of those tasks issued was followed to its issuer%s; per-device and per-cgroup counts, bytes and latencies are every request's, per-process ones are estimated from the followed ones (evidence estimated: true)",
			human.Count(attrRate), s.AttrSample, how))
	}
	if s.WaitDuty > 1 {
		out = append(out, fmt.Sprintf("a disk was busy and nothing held its I/O back: the waiter programs (run on every context switch and wake-up) ran %s of every %s, and a wait noted counts for %d; waits' counts and totals are estimates, their averages unbiased, and a wait longer than %s begun late in that time is missed",
			human.Duration(dutyOn), human.Duration(dutyPeriod), s.WaitDuty, human.Duration(dutyGrace)))
	}
	if s.WaitSample > max(s.WaitDuty, 1) {
		out = append(out, fmt.Sprintf("tasks slept for I/O more than %s times a second: 1 sleep in %d was followed to its wake-up and counts for %d; waits' counts and totals are estimates, their averages unbiased, and a wait still going may be unseen",
			human.Count(attrRate), s.WaitSample, s.WaitSample))
	}
	l := s.Lost
	if l.Untracked > 0 {
		out = append(out, fmt.Sprintf("%s completed without their issue seen (issued before wolf attached, or not through the driver): counted, not timed", human.Count(l.Untracked)))
	}
	if l.SlotTaken > 0 {
		out = append(out, fmt.Sprintf("%s in flight shared a tracking slot with another: their times were lost", human.Plural(int(l.SlotTaken), "request", "requests")))
	}
	if t := l.Total(); t > 0 {
		out = append(out, fmt.Sprintf("dropped: %d completions (full map), %d waits, %d sleeps, %d slow requests and %d long waits (rings), %d over the window's bound, %d fsyncs, %d journals",
			l.Procs, l.Waits, l.Sleeps, l.SlowLost, l.LongLost, l.Kept, l.FsyncFull, l.JournalFull))
	}
	return out
}

// Histograms are the window's latency distributions: per device (birth to
// completion, and on the device) and per (device, cgroup), microseconds.
func (s *Snapshot) Histograms() []finding.Histogram {
	var out []finding.Histogram
	for _, d := range s.Devices {
		if d.Total.Count == 0 {
			continue
		}
		out = append(out, d.Total.Report("io_latency_us", "us", map[string]string{"device": d.Name}, 1e3))
		out = append(out, d.OnDevice.Report("io_device_latency_us", "us", map[string]string{"device": d.Name}, 1e3))
		byCg := map[string]*Usage{}
		var cgs []string
		for _, u := range d.Users {
			c := byCg[u.Cgroup]
			if c == nil {
				c = &Usage{}
				byCg[u.Cgroup] = c
				cgs = append(cgs, u.Cgroup)
			}
			c.Total.Merge(&u.Total)
		}
		slices.Sort(cgs)
		for _, cg := range cgs {
			if byCg[cg].Total.Count == 0 {
				continue
			}
			out = append(out, byCg[cg].Total.Report("io_cgroup_latency_us", "us", map[string]string{"device": d.Name, "cgroup": cg}, 1e3))
		}
	}
	return out
}
