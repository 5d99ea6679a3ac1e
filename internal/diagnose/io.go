package diagnose

// Block I/O: what a journal or dirty-page throttling leads to, and the
// words of an I/O limit's diagnosis.

import (
	"fmt"
	"strings"
	"time"

	"github.com/wolf-investigator/wolf/internal/fact"
	"github.com/wolf-investigator/wolf/internal/finding"
)

const (
	// mechJournalCommit: the committer holds the commit every fsync of
	// the filesystem waits for.
	mechJournalCommit = "One thread commits a filesystem's journal (jbd2/<dev>); every fsync that needs a commit waits for it, and in data=ordered mode the commit first writes and waits for the data of every file in the transaction."
	// mechWriteback: dirty pages are written back by the flusher, whose
	// requests are charged to the cgroup that dirtied them.
	mechWriteback = "Dirty pages are written back by the kernel's flusher; balance_dirty_pages lets writers go only as fast as that writeback, so whatever holds the writeback's requests back holds the writers back."
)

// journal follows a journal to its committer, like a lock to its holder:
// what the committer waits for (another cgroup's throttled data, a slow
// device) is what the fsyncs behind it wait for.
func (e *engine) journal(b *branch, k string, depth int, seen map[string]bool) []*branch {
	if e.bestHold(k) == nil || depth >= maxDepth {
		return b.end(k, "journal", e.subjectOf(k))
	}
	if seen == nil {
		seen = map[string]bool{}
	}
	return e.held(b, k, depth, seen)
}

// journalHop: the journal is committed by its committer.
func journalHop(j finding.Subject, h *fact.Hold, holder finding.Subject) finding.Hop {
	text := fmt.Sprintf("%s is committed by %s", nameOf(j), label(holder))
	var ev map[string]any
	if h.Holds > 0 || h.Total > 0 {
		text += fmt.Sprintf(": %d commit%s, the longest %s, %s in all", h.Holds, map[bool]string{true: "", false: "s"}[h.Holds == 1], ms(msOf(h.Max)), ms(msOf(h.Total)))
		ev = map[string]any{"commits": h.Holds, "commit_ms_max": msOf(h.Max), "commit_ms_total": msOf(h.Total)}
	}
	if h.Split != nil && h.Split.State == "D" {
		text += ", one still going"
	}
	return finding.Hop{From: j, Relation: finding.HeldBy, To: holder, Evidence: ev, Text: text, Mechanism: mechJournalCommit}
}

// dirty follows dirty-page throttling on a device to what holds its
// writeback back: the I/O limit the writeback's requests were held by, or
// the device itself when it is saturated. Without either, the throttling
// is the root.
func (e *engine) dirty(b *branch, k string, depth int, seen map[string]bool) []*branch {
	var best *fact.Usage
	for _, on := range sortedKeys(e.usage) {
		for _, u := range e.usage[on] {
			if e.canon(u.For) != k {
				continue
			}
			s := e.saturation(e.canon(u.On))
			if s == nil || !s.AtLimit {
				continue
			}
			if best == nil || u.Amount > best.Amount {
				best = u
			}
		}
	}
	if best == nil || depth >= maxDepth {
		return b.end(k, "dirty-throttle", e.subjectOf(k))
	}
	next := e.canon(best.On)
	from := e.subjectOf(k)
	to := e.subjectOf(next)
	text := fmt.Sprintf("the writeback of %s's dirty pages (%s written by %s) is held back by %s", from.Device, mib(best.Amount), consumerLabel(best), nameOf(to))
	b.hop(finding.Hop{From: from, Relation: finding.ConstrainedBy, To: to, Mechanism: mechWriteback, Text: text,
		Evidence: map[string]any{"writeback_bytes": best.Amount}}, refOf(best.Finding, best.FindingTitle))
	return e.resolve(b, next, depth+1, seen)
}

// ioLimitTitle: "fio (pid 12, 4 threads) in cgroup /x waits 250 ms per
// read: /x is capped at 1 MiB/s of reads (blkio.throttle.read_bps_device)
// on vda; vda itself is 3% busy".
func (d *draft) ioLimitTitle(e *engine, rs *sat) string {
	r := e.resource(d.root)
	// The victims who waited for the limit directly, else all of them.
	var n int
	var total time.Duration
	for _, v := range d.shownVictims() {
		if v.w.Kind == fact.WaitIO && e.on(v.w) == d.root {
			n += v.w.Count
			total += v.w.Total
		}
	}
	limit := satShort(rs)
	if rs != nil && rs.LimitText != "" {
		limit = " at " + rs.LimitText
	}
	// Victims outside the limit's cgroup that reached it through a
	// journal or dirty throttling come first: they are the collateral the
	// limit was not meant for.
	var jn, dn int
	var jt, dt time.Duration
	for _, v := range d.shownVictims() {
		switch {
		case v.w.Kind == fact.WaitJournal && v.w.Task.IOCgroup != r.Cgroup:
			jn += v.w.Count
			jt += v.w.Total
		case v.w.Kind == fact.WaitDirty:
			dn += v.w.Count
			dt += v.w.Total
		}
	}
	var title string
	switch {
	case jn > 0:
		outside := func(v *victim) bool { return v.w.Task.IOCgroup != r.Cgroup }
		title = fmt.Sprintf("%s waits %s per fsync on %s behind the journal, whose commits wait for cgroup %s's writes, capped%s",
			d.whoWordsWhere(fact.WaitJournal, outside), ms(msOf(jt/time.Duration(jn))), r.Device, r.Cgroup, limit)
	case dn > 0 && n == 0:
		title = fmt.Sprintf("%s was paused %s by dirty throttling on %s: its writeback, charged to cgroup %s, is capped%s",
			d.whoWords(fact.WaitDirty), ms(msOf(dt)), r.Device, r.Cgroup, limit)
	case n > 0:
		who := d.whoWords(fact.WaitIO)
		cg := ""
		if vs := d.shownVictims(); len(vs) > 0 && vs[0].w.Task.IOCgroup == r.Cgroup {
			cg = " in cgroup " + r.Cgroup
		}
		per := "request"
		if rs != nil && rs.LimitText != "" {
			switch {
			case strings.Contains(rs.LimitText, "reads"):
				per = "read"
			case strings.Contains(rs.LimitText, "writes"):
				per = "write"
			}
		}
		title = fmt.Sprintf("%s%s waits %s per %s: cgroup %s is capped%s on %s", who, cg, ms(msOf(total/time.Duration(n))), per, r.Cgroup, limit, r.Device)
		if dn > 0 {
			// Writers paused because the limit holds their writeback
			// back are its victims too.
			title += fmt.Sprintf(", and %s was paused %s by dirty throttling behind it", d.whoWords(fact.WaitDirty), ms(msOf(dt)))
		}
	default:
		title = fmt.Sprintf("I/O limit of cgroup %s on %s%s: %s", r.Cgroup, r.Device, limit, d.victimsPhrase())
	}
	if v, ok := satNum(rs, "device_busy_pct"); ok {
		title += fmt.Sprintf("; %s itself is %s busy", r.Device, pct1(v/100))
	}
	return title
}

// ioLimitNumbers says an I/O limit in words: ", 1 MiB/s of reads
// (blkio.throttle.read_bps_device), its requests held 250 ms each on
// average".
func ioLimitNumbers(s *sat) string {
	if s == nil {
		return ""
	}
	var parts []string
	if s.LimitText != "" {
		parts = append(parts, s.LimitText)
	}
	if v, ok := satNum(s, "held_ms_avg"); ok {
		parts = append(parts, fmt.Sprintf("its requests held %s each on average", ms(v)))
	}
	if len(parts) == 0 {
		return satNumbers(s)
	}
	return ": " + strings.Join(parts, ", ")
}

// deviceNumbers says how busy and slow a device was: ", 100% busy, 20 ms
// a request on the device".
func deviceNumbers(s *sat) string {
	var parts []string
	if v, ok := satNum(s, "busy_pct"); ok {
		parts = append(parts, pct1(v/100)+" busy")
	}
	if v, ok := satNum(s, "on_device_ms_avg"); ok && v > 0 {
		parts = append(parts, ms(v)+" a request on the device")
	}
	if len(parts) == 0 {
		return ""
	}
	return ", " + strings.Join(parts, ", ")
}
