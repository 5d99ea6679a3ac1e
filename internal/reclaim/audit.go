package reclaim

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/human"
	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/kconfig"
	"github.com/wolf-investigator/wolf/internal/probekit"
	"github.com/wolf-investigator/wolf/internal/sysctl"
)

// Requirements implements investigator.Requirer.
func (*Investigator) Requirements() []investigator.Requirement {
	reqs := []investigator.Requirement{
		{Feature: "btf", Why: "CO-RE: read the task's memory cgroup and reclaim statistics on any kernel layout"},
		{Feature: "tp_btf", Why: "attach to the vmscan tracepoints with typed arguments: direct reads, no helper call per field"},
	}
	reqs = append(reqs, probekit.Requirements(attachTable)...)
	return append(reqs,
		investigator.Requirement{Feature: "cgroup_v1", Why: "limits, usage, failcnt and OOM kills of v1 memory cgroups", Optional: true},
		investigator.Requirement{Feature: "cgroup_v2", Why: "memory.max, memory.events and per-cgroup PSI of v2 memory cgroups", Optional: true},
		investigator.Requirement{Feature: "psi", Why: "host-wide memory pressure (/proc/pressure/memory)", Optional: true},
	)
}

// MGLRU states.
const (
	MGLRUUnknown = iota
	MGLRUAbsent  // not built (CONFIG_LRU_GEN unset)
	MGLRUOff     // built, disabled
	MGLRUOn
)

// MGLRU is the multi-generational LRU's state.
type MGLRU struct {
	State  int
	Raw    string // /sys/kernel/mm/lru_gen/enabled, e.g. "0x0007"
	Detail string // why absent, in plain words
}

const lruGenEnabled = "/sys/kernel/mm/lru_gen/enabled"

// ReadMGLRU reads /sys/kernel/mm/lru_gen/enabled, and when it is missing
// asks the kernel config why.
func ReadMGLRU() MGLRU {
	return readMGLRU(os.ReadFile, kconfig.Load)
}

func readMGLRU(read func(string) ([]byte, error), cfg func() (*kconfig.Config, error)) MGLRU {
	b, err := read(lruGenEnabled)
	if err == nil {
		raw := strings.TrimSpace(string(b))
		v, perr := strconv.ParseUint(strings.TrimPrefix(raw, "0x"), 16, 32)
		switch {
		case perr != nil:
			return MGLRU{State: MGLRUUnknown, Raw: raw, Detail: "unreadable value " + strconv.Quote(raw)}
		case v == 0:
			return MGLRU{State: MGLRUOff, Raw: raw}
		}
		return MGLRU{State: MGLRUOn, Raw: raw}
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return MGLRU{State: MGLRUUnknown, Detail: err.Error()}
	}
	if c, cerr := cfg(); cerr == nil {
		if !c.Enabled("LRU_GEN") {
			return MGLRU{State: MGLRUAbsent, Detail: c.Describe("LRU_GEN")}
		}
		return MGLRU{State: MGLRUUnknown, Detail: "CONFIG_LRU_GEN is set but " + lruGenEnabled + " is missing"}
	}
	return MGLRU{State: MGLRUAbsent, Detail: lruGenEnabled + " does not exist (kernel built without CONFIG_LRU_GEN, or older than 6.1)"}
}

// Audit implements investigator.Auditor: MGLRU, swap and the vm settings
// that shape reclaim, read the way "The case of the vanishing CPU" discusses them.
func (*Investigator) Audit(ctx context.Context) []finding.Finding {
	return audit(ReadMGLRU(), swapTotal(), sysctl.ReadInt)
}

// swapTotal reads SwapTotal from /proc/meminfo, in bytes (-1: unknown).
func swapTotal() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "SwapTotal:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
					return kb << 10
				}
			}
		}
	}
	return -1
}

func audit(m MGLRU, swapBytes int64, read func(string) (int64, error)) []finding.Finding {
	var out []finding.Finding
	ref := []string{storyRef, "https://docs.kernel.org/admin-guide/mm/multigen_lru.html"}
	switch m.State {
	case MGLRUOff:
		out = append(out, finding.Finding{
			ID: "audit.mglru-off", Investigator: "audit", Severity: finding.Info,
			Title:   "The multi-generational LRU is built in but off (" + lruGenEnabled + " = " + m.Raw + ")",
			Summary: "Reclaim uses the classic active/inactive lists, under which the cgroups of \"The case of the vanishing CPU\" livelocked: reclaim scanning a million pages to free 32.",
			Mechanism: "The classic LRU needs two scans to free a page and rotates every referenced page it meets; with many threads touching a cgroup's pages, reclaim at the limit can scan for seconds per call. " +
				"MGLRU ages pages by generation and evicts the oldest, which cured the livelock of \"The case of the vanishing CPU\".",
			Evidence:    map[string]any{"lru_gen_enabled": m.Raw},
			Remediation: []string{"echo y > " + lruGenEnabled + " (takes effect at once; check that it reads 0x0007), then watch reclaim for lru_lock contention in evict_folios"},
			References:  ref,
		})
	case MGLRUAbsent:
		out = append(out, finding.Finding{
			ID: "audit.mglru-absent", Investigator: "audit", Severity: finding.Info,
			Title:       "This kernel has no multi-generational LRU: " + m.Detail,
			Summary:     "Reclaim uses the classic active/inactive lists, under which the cgroups of \"The case of the vanishing CPU\" livelocked; MGLRU, their cure, cannot be turned on here.",
			Evidence:    map[string]any{"lru_gen": "absent"},
			Remediation: []string{"For hosts whose cgroups run at their memory limit, prefer a kernel built with CONFIG_LRU_GEN=y (CONFIG_LRU_GEN_ENABLED=y or echo y > " + lruGenEnabled + ")."},
			References:  ref,
		})
	}
	if swapBytes == 0 {
		out = append(out, finding.Finding{
			ID: "audit.no-swap", Investigator: "audit", Severity: finding.Info,
			Title:    "No swap: only file pages can be reclaimed",
			Summary:  "Anonymous memory stays resident, so a cgroup at its limit reclaims page cache (mapped files, binaries) alone; with a hot page cache that is the setting of the livelock in \"The case of the vanishing CPU\".",
			Evidence: map[string]any{"swap_bytes": 0},
		})
	}
	vals := map[string]int64{}
	for _, n := range []string{"vm.swappiness", "vm.min_free_kbytes", "vm.watermark_scale_factor", "vm.zone_reclaim_mode", "vm.vfs_cache_pressure", "vm.dirty_ratio", "vm.dirty_background_ratio", "vm.dirty_bytes", "vm.overcommit_memory"} {
		if v, err := read(n); err == nil {
			vals[n] = v
		}
	}
	if v, ok := vals["vm.zone_reclaim_mode"]; ok && v != 0 {
		out = append(out, finding.Finding{
			ID: "audit.zone-reclaim", Investigator: "audit", Severity: finding.Warning,
			Title:       fmt.Sprintf("vm.zone_reclaim_mode = %d: allocations reclaim on their own node before using another", v),
			Summary:     "Node reclaim stalls allocating tasks and evicts page cache while other nodes have free memory; it suits few workloads.",
			Evidence:    map[string]any{"zone_reclaim_mode": v},
			Remediation: []string{"sysctl -w vm.zone_reclaim_mode=0"},
		})
	}
	if v, ok := vals["vm.vfs_cache_pressure"]; ok && v == 0 {
		out = append(out, finding.Finding{
			ID: "audit.vfs-cache-pressure", Investigator: "audit", Severity: finding.Warning,
			Title:       "vm.vfs_cache_pressure = 0: dentries and inodes are never reclaimed",
			Summary:     "The kernel documentation warns that 0 can lead to out-of-memory conditions.",
			Evidence:    map[string]any{"vfs_cache_pressure": v},
			Remediation: []string{"sysctl -w vm.vfs_cache_pressure=100"},
		})
	}
	if r, ok := vals["vm.dirty_ratio"]; ok && vals["vm.dirty_bytes"] == 0 && r >= 50 {
		out = append(out, finding.Finding{
			ID: "audit.dirty-ratio", Investigator: "audit", Severity: finding.Warning,
			Title:       fmt.Sprintf("vm.dirty_ratio = %d%%: reclaim may meet mostly dirty pages", r),
			Summary:     "Dirty pages cannot be freed until written back; reclaim then throttles on writeback (VMSCAN_THROTTLE_WRITEBACK) instead of freeing memory.",
			Evidence:    map[string]any{"dirty_ratio": r, "dirty_background_ratio": vals["vm.dirty_background_ratio"]},
			Remediation: []string{"sysctl -w vm.dirty_ratio=20 vm.dirty_background_ratio=10"},
		})
	}
	// The settings ride along as evidence of the notes about the LRU and
	// swap, rather than as a note of their own on every run.
	line := settingsLine(vals, swapBytes)
	for i := range out {
		if out[i].ID == "audit.mglru-off" || out[i].ID == "audit.mglru-absent" || out[i].ID == "audit.no-swap" {
			out[i].Evidence["vm_settings"] = line
		}
	}
	return out
}

func settingsLine(vals map[string]int64, swapBytes int64) string {
	var parts []string
	for _, n := range []string{"vm.swappiness", "vm.min_free_kbytes", "vm.watermark_scale_factor", "vm.zone_reclaim_mode", "vm.dirty_ratio"} {
		if v, ok := vals[n]; ok {
			parts = append(parts, fmt.Sprintf("%s=%d", strings.TrimPrefix(n, "vm."), v))
		}
	}
	switch {
	case swapBytes == 0:
		parts = append(parts, "no swap")
	case swapBytes > 0:
		parts = append(parts, "swap "+human.MiB(swapBytes))
	}
	return strings.Join(parts, ", ")
}
