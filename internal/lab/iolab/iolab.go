// Package iolab holds the labs of wolf io: block I/O held back before the
// device, or by it. Each works on a loop device of its own, over a file
// of its own (Loop), so that nothing the host uses is throttled, filled
// or slowed:
//
//   - io-throttle: a process of four threads reads the device with
//     O_DIRECT from a cgroup capped at 1 MiB/s of reads on it (v1
//     blkio.throttle.read_bps_device, v2 io.max): each 64 KiB read waits
//     about 250 ms in blk-throttle while the device stands idle;
//   - dirty-throttle: a process writes the device through the page cache
//     as fast as it can, while the device's writeback is capped at
//     1 MiB/s and its dirty pages at 8 MiB: balance_dirty_pages pauses it;
//   - journal-stall: ext4 (data=ordered) on the device; a writer in a
//     cgroup capped at 1 MiB/s of writes writes and fsyncs 2 MiB at a
//     time, and an unrelated process's 4 KiB fsyncs wait for the journal
//     commits that wait for the writer's throttled data;
//   - slow-device: the device's backing file is on a FUSE file system the
//     lab serves itself, which answers every read and write after 150 ms:
//     the device is slow by itself, and a reader waits on it.
//
// Bounded: every wait is a fraction of a second to a few seconds (the
// sizes and limits fix it), the processes die with the lab (Pdeathsig),
// exit when it closes their stdin and after their MaxLife; a watchdog
// lifts a throttle whose waits outgrow their bound. The ledger records
// the cgroup, the file, the loop device and the mount before they are
// made, so that a killed lab's leftovers are undone by the next lab or
// `wolf lab clean`; removing the loop device removes the throttle rules
// and dirty limits set on it.
package iolab

import (
	"context"
	"fmt"

	"github.com/wolf-investigator/wolf/internal/lab/labproc"
)

// newCgroup makes a cgroup with the I/O controller: v1 blkio, else v2 io
// (version 1 or 2 insists on one).
func newCgroup(ctx context.Context, prefix string, version int) (*labproc.Cgroup, error) {
	if version != 2 {
		if _, _, err := labproc.Hierarchy(ctx, "blkio", 1); err == nil {
			return labproc.NewCgroup(ctx, "blkio", prefix, 1)
		} else if version == 1 {
			return nil, err
		}
	}
	return labproc.NewCgroup(ctx, "io", prefix, 2)
}

// limit caps the cgroup's I/O on dev ("MAJ:MIN"): key is rbps or wbps (v2
// io.max's names), bps bytes per second (0 lifts it).
func limit(cg *labproc.Cgroup, dev, key string, bps int64) error {
	if cg.Version == 1 {
		file := map[string]string{"rbps": "blkio.throttle.read_bps_device", "wbps": "blkio.throttle.write_bps_device"}[key]
		return cg.Set(file, fmt.Sprintf("%s %d", dev, bps))
	}
	v := "max"
	if bps > 0 {
		v = fmt.Sprint(bps)
	}
	return cg.Set("io.max", fmt.Sprintf("%s %s=%s", dev, key, v))
}

// limitFile names where limit writes, for people.
func limitFile(cg *labproc.Cgroup, key string) string {
	if cg.Version == 2 {
		return "io.max"
	}
	return map[string]string{"rbps": "blkio.throttle.read_bps_device", "wbps": "blkio.throttle.write_bps_device"}[key]
}
