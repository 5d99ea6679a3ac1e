// The memory area: free -m, vmstat si/so.

package sysstat

import (
	"fmt"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/human"
)

func (a *analysis) memory() {
	mem := a.w.Last.Mem
	total := mem["MemTotal"]
	if total == 0 {
		a.unavailable("memory", "/proc/meminfo unreadable")
		return
	}
	avail, ok := mem["MemAvailable"]
	if !ok { // before 3.14
		avail = mem["MemFree"] + mem["Cached"]
	}
	availPct := 100 * float64(avail) / float64(total)
	swapUsed := mem["SwapTotal"] - min(mem["SwapTotal"], mem["SwapFree"])
	vm0, vm1 := a.w.First.VM, a.w.Last.VM
	delta := func(k string) float64 { return sub(vm1[k], vm0[k]) }
	swapIn, swapOut := a.rate(delta("pswpin")), a.rate(delta("pswpout"))
	directScan := a.rate(delta("pgscan_direct"))
	_, hasOOM := vm1["oom_kill"]
	ooms := delta("oom_kill")
	v := map[string]any{
		"total_mib": total >> 10, "available_mib": avail >> 10, "available_pct": human.Round(availPct, 1),
		"used_mib": (total - min(total, avail)) >> 10, "dirty_mib": mem["Dirty"] >> 10, "writeback_mib": mem["Writeback"] >> 10,
		"swap_total_mib": mem["SwapTotal"] >> 10, "swap_used_mib": swapUsed >> 10,
		"swap_in_pages_per_s": human.Round(swapIn, 1), "swap_out_pages_per_s": human.Round(swapOut, 1),
		"direct_scan_pages_per_s": human.Round(directScan, 1),
	}
	summary := fmt.Sprintf("avail %s of %s (%s), dirty %s", human.Bytes(int64(avail<<10)), human.Bytes(int64(total<<10)), human.Percent(availPct), human.Bytes(int64(mem["Dirty"]<<10)))
	if mem["SwapTotal"] > 0 {
		summary += fmt.Sprintf(", swap %s used, si/so %s/%s pages/s", human.Bytes(int64(swapUsed<<10)), human.Number(swapIn), human.Number(swapOut))
	} else {
		summary += ", no swap"
	}
	if directScan > 0 {
		summary += fmt.Sprintf(", direct reclaim %s pages/s", human.Number(directScan))
	}
	if hasOOM {
		v["oom_kills"] = int64(ooms)
		if ooms > 0 {
			summary += fmt.Sprintf(", OOM kills %d", int64(ooms))
		}
	}
	var fs []finding.Finding
	if availPct < memAvailWarnPct {
		sev := finding.Warning
		if availPct < memAvailCritPct {
			sev = finding.Critical
		}
		fs = append(fs, finding.Finding{
			ID:        "system.memory-low",
			Severity:  sev,
			Title:     fmt.Sprintf("Only %s of memory available (%s of %s)", human.Percent(availPct), human.Bytes(int64(avail<<10)), human.Bytes(int64(total<<10))),
			Summary:   "MemAvailable, the kernel's estimate of what can be allocated without swapping, is low: allocations will reclaim page cache, swap, or end in the OOM killer.",
			Mechanism: "Below the watermarks, allocating tasks reclaim memory themselves (direct reclaim) and stall. The page cache that made I/O fast is evicted first.",
			Evidence:  map[string]any{"available_mib": avail >> 10, "total_mib": total >> 10, "available_pct": human.Round(availPct, 1), "direct_scan_pages_per_s": human.Round(directScan, 1)},
			Remediation: []string{
				"wolf reclaim --duration 10s: who reclaims, how efficiently, and in which cgroup",
				"find the consumers: ps -eo pid,rss,comm --sort=-rss | head, and memory.current of the cgroups",
			},
		})
	}
	if swapIn >= swapInWarnPerS {
		fs = append(fs, finding.Finding{
			ID:          "system.swapping",
			Severity:    finding.Warning,
			Title:       fmt.Sprintf("Swapping in %s pages/s", human.Number(swapIn)),
			Summary:     fmt.Sprintf("%s pages/s came back from swap (%s/s went out): tasks wait for memory they had.", human.Number(swapIn), human.Number(swapOut)),
			Mechanism:   "Swap-in is a major page fault served from the swap device. The faulting task sleeps for the read, so steady swap-in is steady latency.",
			Evidence:    map[string]any{"swap_in_pages_per_s": human.Round(swapIn, 1), "swap_out_pages_per_s": human.Round(swapOut, 1), "swap_used_mib": swapUsed >> 10},
			Remediation: []string{"wolf reclaim --duration 10s", "reduce the working set or add memory; lower vm.swappiness if anonymous memory is swapped while cache is kept"},
		})
	}
	if directScan >= directScanWarnPerS {
		fs = append(fs, finding.Finding{
			ID:          "system.direct-reclaim",
			Severity:    finding.Warning,
			Title:       fmt.Sprintf("Direct reclaim scanning %s pages/s", human.Number(directScan)),
			Summary:     "Allocating tasks reclaimed memory themselves instead of leaving it to kswapd: each of them stalled while it did.",
			Mechanism:   "When free memory falls below the min watermark, or a cgroup reaches its limit, the allocating task scans LRU lists itself. Its latency then includes the scan.",
			Evidence:    map[string]any{"direct_scan_pages_per_s": human.Round(directScan, 1), "available_pct": human.Round(availPct, 1)},
			Remediation: []string{"wolf reclaim --duration 10s: which cgroup and task reclaim and how efficiently", "raise vm.min_free_kbytes / vm.watermark_scale_factor so kswapd starts earlier"},
		})
	}
	if ooms > 0 {
		fs = append(fs, finding.Finding{
			ID:          "system.oom-kill",
			Severity:    finding.Critical,
			Title:       fmt.Sprintf("The OOM killer killed %d task(s) during the window", int64(ooms)),
			Summary:     "Memory ran out (system-wide or in a cgroup) and the kernel killed a task to recover.",
			Mechanism:   "When reclaim cannot free enough memory for an allocation, the OOM killer picks the task with the highest badness score. Its work is lost.",
			Evidence:    map[string]any{"oom_kills": int64(ooms)},
			Remediation: []string{"dmesg | grep -A20 'invoked oom-killer': which task, which cgroup and its limit", "wolf reclaim --duration 10s"},
		})
	}
	a.check("memory", summary, v, fs...)
}
