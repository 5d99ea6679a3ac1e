package io

import (
	"github.com/wolf-investigator/wolf/internal/kstack"
)

// Site is where a long wait slept, read from the waiter's stack: what in
// the storage stack held it.
type Site struct {
	Kind string // one of the Site* kinds
	Func string // the frame that named it
}

// Wait sites, most specific first in siteFuncs.
const (
	SiteDirty       = "dirty-throttle" // balance_dirty_pages
	SiteWBT         = "wbt"            // writeback throttling admits a write
	SiteIOCost      = "iocost"         // iocost: the cgroup over its budget
	SiteIOLatency   = "io.latency"     // io.latency throttles a cgroup for a protected one
	SiteTags        = "tags"           // no free request tag: the queue is full
	SiteQueueFreeze = "queue-freeze"   // the queue is frozen (elevator switch, reset)
	SiteJournal     = "journal"        // a jbd2 commit or handle, the XFS log
	SiteWriteback   = "writeback"      // a page under writeback
	SiteBuffer      = "buffer"         // a buffer head's I/O (metadata)
	SiteDirect      = "direct-io"      // a direct read or write
	SitePageRead    = "page-read"      // a page cache read
	SiteIO          = "io"             // somewhere else in io_schedule
)

// siteFuncs maps the functions that decide a storage wait to its kind. A
// stack is matched innermost first, so that the block layer's admission
// (wbt, tags) beats the direct I/O or writeback that called it.
var siteFuncs = map[string]string{
	"balance_dirty_pages":             SiteDirty,
	"balance_dirty_pages_ratelimited": SiteDirty,
	"wbt_wait":                        SiteWBT,
	"__wbt_wait":                      SiteWBT,
	"ioc_rqos_throttle":               SiteIOCost,
	"blkcg_iolatency_throttle":        SiteIOLatency,
	"__blkcg_iolatency_throttle":      SiteIOLatency,
	"blkcg_maybe_throttle_current":    SiteIOLatency,
	"blk_mq_get_tag":                  SiteTags,
	"blk_queue_enter":                 SiteQueueFreeze,
	"bio_queue_enter":                 SiteQueueFreeze,
	"__bio_queue_enter":               SiteQueueFreeze,
	"jbd2_log_wait_commit":            SiteJournal,
	"jbd2_journal_commit_transaction": SiteJournal,
	"wait_transaction_locked":         SiteJournal,
	"start_this_handle":               SiteJournal,
	"jbd2_journal_lock_updates":       SiteJournal,
	"xlog_grant_head_wait":            SiteJournal,
	"xlog_wait":                       SiteJournal,
	"xlog_wait_on_iclog":              SiteJournal,
	"folio_wait_writeback":            SiteWriteback,
	"wait_on_page_writeback":          SiteWriteback,
	"__filemap_fdatawait_range":       SiteWriteback,
	"filemap_fdatawait_range":         SiteWriteback,
	"__wait_on_buffer":                SiteBuffer,
	"submit_bio_wait":                 SiteDirect,
	"__blkdev_direct_IO_simple":       SiteDirect,
	"__blkdev_direct_IO":              SiteDirect,
	"blkdev_direct_IO":                SiteDirect,
	"iomap_dio_rw":                    SiteDirect,
	"__iomap_dio_rw":                  SiteDirect,
	"do_blockdev_direct_IO":           SiteDirect,
	"filemap_read":                    SitePageRead,
	"filemap_fault":                   SitePageRead,
	"folio_wait_bit_common":           "",
	"folio_wait_locked_killable":      "",
}

// classify reads a long wait's stack (innermost first, "func+0x1f"). The
// first frame with a kind wins; "" entries (generic waits) are skipped.
func classify(stack []string) Site {
	for _, f := range stack {
		fn := kstack.FuncName(f)
		if k, ok := siteFuncs[fn]; ok && k != "" {
			return Site{Kind: k, Func: fn}
		}
	}
	if len(stack) > 0 {
		return Site{Kind: SiteIO}
	}
	return Site{}
}

// siteWords says a site for people, after "waits for" or "in".
func siteWords(k string) string {
	switch k {
	case SiteDirty:
		return "dirty throttling (balance_dirty_pages)"
	case SiteWBT:
		return "writeback throttling (wbt) to admit a write"
	case SiteIOCost:
		return "iocost: its cgroup over its I/O budget"
	case SiteIOLatency:
		return "io.latency, throttled for a protected cgroup"
	case SiteTags:
		return "a free request tag: the device queue is full"
	case SiteQueueFreeze:
		return "a frozen request queue"
	case SiteJournal:
		return "the filesystem journal"
	case SiteWriteback:
		return "pages under writeback"
	case SiteBuffer:
		return "a buffer's I/O (metadata)"
	case SiteDirect:
		return "direct I/O"
	case SitePageRead:
		return "a page cache read"
	}
	return "I/O"
}
