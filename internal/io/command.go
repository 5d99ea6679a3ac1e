package io

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"

	"github.com/wolf-investigator/wolf/internal/investigator"
)

// Command implements investigator.Commander: wolf io.
func (iv *Investigator) Command() investigator.Command {
	return investigator.Command{
		Short: "Block I/O per disk, cgroup and process: latency before and on the device, who waits, and what holds it back",
		Long: `io times every block request from the block layer's tracepoints: how long
it was queued before the device and how long the device took, per disk, per
cgroup (the one its bytes are charged to: a flusher writing back a cgroup's
pages counts for that cgroup) and per issuing process, with the kernel's own
busy time beside it.

Then it says what held I/O back before the device: blk-throttle (cgroup v1
blkio.throttle.*, v2 io.max), measured per request (the requests born in the
throttle's dispatch worker) and per waiter (how long each waiting task slept,
and how much of that before its request existed); dirty throttling
(balance_dirty_pages pauses); ext4 journal commits that fsync waits behind,
and what the committer waits for; XFS log space; writeback throttling,
iocost, io.latency and a full tag set, read off long waiters' stacks.

Waiters are watched from the moment something holds I/O back (a throttled or
slow request, a dirty pause, a slow commit or fsync): their programs run on
every context switch of the host, so a healthy host does not pay for them
(--waiters on watches them from the start).`,
		Example: `  wolf io                                # watch 10 s, every disk
  wolf io --device vda --duration 30s
  wolf io --cgroup /kubepods/pod1 --format json
  wolf io --pid 1234                     # one process's I/O and waits`,
		PID: "only this process's requests and waits",
		Flags: func(f *pflag.FlagSet) {
			f.StringVar(&iv.Device, "device", "", "only this disk (`NAME` as in /sys/block, or MAJ:MIN)")
			f.StringVar(&iv.Cgroup, "cgroup", "", "only requests charged to this cgroup (path in the blkio/io hierarchy) and its descendants, and their waiters")
			f.StringVar(&iv.Waiters, "waiters", WaitersAuto, "watch waiting tasks: auto (once something holds I/O back), on, off")
			f.DurationVar(&iv.SlowRequest, "slow", DefaultSlowRequest, "report single requests at least this slow")
		},
		Validate: func(ctx context.Context, _ int) error {
			switch iv.Waiters {
			case WaitersAuto, WaitersOn, WaitersOff:
			default:
				return fmt.Errorf("--waiters must be auto, on or off, got %q", iv.Waiters)
			}
			if iv.SlowRequest <= 0 || iv.SlowRequest > time.Minute {
				return fmt.Errorf("--slow must be between 0 and 1m, got %v", iv.SlowRequest)
			}
			if iv.Device != "" {
				if _, _, err := devNumber(iv.Device); err != nil {
					return err
				}
			}
			if iv.Cgroup == "" {
				return nil
			}
			h, err := findHierarchy(ctx, iv.Proc)
			if err != nil {
				return fmt.Errorf("--cgroup: %v: %w", err, investigator.ErrUnsupported)
			}
			if st, err := os.Stat(h.Dir(iv.Cgroup)); err != nil || !st.IsDir() {
				return fmt.Errorf("--cgroup %s: no such cgroup under %s", iv.Cgroup, h.Mount)
			}
			iv.Cgroup = filepath.Clean("/" + iv.Cgroup)
			return nil
		},
	}
}

// Metrics implements investigator.Exporter: latency histograms per device
// and per (device, cgroup), the devices' busy share, and the time
// blk-throttle held each cgroup's bios, per device.
func (*Investigator) Metrics() ([]investigator.HistogramMetric, []investigator.GaugeMetric) {
	return []investigator.HistogramMetric{
			{Histogram: "io_latency_us", Name: "wolf_io_request_seconds", Help: "Block requests from their creation to completion, by device.",
				Labels: []string{"device"}, MaxName: "wolf_io_request_max_seconds"},
			{Histogram: "io_device_latency_us", Name: "wolf_io_device_seconds", Help: "Block requests from their issue to the driver to completion (time on the device), by device.",
				Labels: []string{"device"}, MaxName: "wolf_io_device_max_seconds"},
			{Histogram: "io_cgroup_latency_us", Name: "wolf_io_cgroup_request_seconds", Help: "Block requests from creation to completion, by device and the cgroup they are charged to, top N cgroups.",
				Labels: []string{"device", "cgroup"}, TopN: true, MaxName: "wolf_io_cgroup_request_max_seconds"},
		}, []investigator.GaugeMetric{
			{Name: "wolf_io_device_busy_ratio", Help: "Share of the last window a device had a request in flight (its io_ticks).",
				Labels: []string{"device"}, Values: deviceBusy},
			{Name: "wolf_io_throttled_seconds", Help: "Time the waiters of a cgroup's requests spent before their requests existed, held by blk-throttle, in the last window, by device and cgroup, top N.",
				Labels: []string{"device", "cgroup"}, TopN: true, Values: throttledTime},
			{Name: "wolf_io_throttled_requests", Help: "Requests blk-throttle held in the last window, by device and cgroup, top N.",
				Labels: []string{"device", "cgroup"}, TopN: true, Values: throttledRequests},
		}
}

func deviceBusy(res *investigator.Result) []investigator.GaugeValue {
	var out []investigator.GaugeValue
	for _, f := range res.Findings {
		if f.ID != "io.device" {
			continue
		}
		dev, _ := f.Evidence["device"].(string)
		b, ok := f.Evidence["busy_pct"].(float64)
		if dev == "" || !ok {
			continue
		}
		out = append(out, investigator.GaugeValue{Labels: []string{dev}, Value: b / 100})
	}
	return out
}

func throttledGauge(res *investigator.Result, key string, scale float64) []investigator.GaugeValue {
	var out []investigator.GaugeValue
	for _, f := range res.Findings {
		if f.ID != "io.throttled" {
			continue
		}
		dev, _ := f.Evidence["device"].(string)
		cg, _ := f.Evidence["cgroup"].(string)
		var v float64
		switch x := f.Evidence[key].(type) {
		case float64:
			v = x
		case uint64:
			v = float64(x)
		case int:
			v = float64(x)
		}
		out = append(out, investigator.GaugeValue{Labels: []string{dev, cg}, Value: v * scale})
	}
	return out
}

func throttledTime(res *investigator.Result) []investigator.GaugeValue {
	return throttledGauge(res, "held_s_total", 1)
}

func throttledRequests(res *investigator.Result) []investigator.GaugeValue {
	return throttledGauge(res, "throttled_requests", 1)
}
