package sched

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/wolf-investigator/wolf/internal/perfsample"
)

// CacheGroup is a set of CPUs sharing one cache, as the hardware (sysfs)
// describes it.
type CacheGroup struct {
	Level int    // 2, 3, …
	Type  string // "Unified", "Data"
	Size  string // "32768K"
	CPUs  []int
}

// Hardware is the machine's cache topology from
// /sys/devices/system/cpu/cpu*/cache/index*/.
type Hardware struct {
	// LLC maps each CPU to the group sharing its last-level cache (the
	// highest-level data or unified cache it has).
	LLC map[int]CacheGroup
}

// ReadHardware reads the cache topology under root (normally
// "/sys/devices/system/cpu"). CPUs without cache information are left out.
func ReadHardware(root string) (*Hardware, error) {
	cpuDirs, err := filepath.Glob(filepath.Join(root, "cpu[0-9]*"))
	if err != nil {
		return nil, fmt.Errorf("sched: list CPUs: %w", err)
	}
	hw := &Hardware{LLC: map[int]CacheGroup{}}
	for _, dir := range cpuDirs {
		cpu, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(dir), "cpu"))
		if err != nil {
			continue
		}
		idx, _ := filepath.Glob(filepath.Join(dir, "cache", "index[0-9]*"))
		best := CacheGroup{}
		for _, d := range idx {
			typ := readTrim(filepath.Join(d, "type"))
			if typ == "Instruction" {
				continue
			}
			level, err := strconv.Atoi(readTrim(filepath.Join(d, "level")))
			if err != nil || level <= best.Level {
				continue
			}
			cpus, err := perfsample.ParseCPUList(readTrim(filepath.Join(d, "shared_cpu_list")))
			if err != nil || len(cpus) == 0 {
				continue
			}
			best = CacheGroup{Level: level, Type: typ, Size: readTrim(filepath.Join(d, "size")), CPUs: cpus}
		}
		if best.Level > 0 {
			hw.LLC[cpu] = best
		}
	}
	if len(hw.LLC) == 0 {
		return nil, fmt.Errorf("sched: no cache information under %s", root)
	}
	return hw, nil
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// SharedGroups returns the distinct LLC groups holding more than one CPU.
func (hw *Hardware) SharedGroups() []CacheGroup {
	seen := map[string]bool{}
	var out []CacheGroup
	for _, g := range hw.LLC {
		if len(g.CPUs) < 2 {
			continue
		}
		k := FormatCPUs(g.CPUs)
		if !seen[k] {
			seen[k] = true
			out = append(out, g)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CPUs[0] < out[j].CPUs[0] })
	return out
}

// Domain is one level of a CPU's scheduling-domain hierarchy.
type Domain struct {
	Name  string // "SMT", "MC", "PKG", "NUMA", or "" when the kernel keeps no names
	Level int
	Flags []string // "SD_SHARE_LLC", …; decoded from the kernel's BTF when read live
	Span  []int    // CPUs; nil when unknown (debugfs does not show it)
}

// SharesLLC says whether the domain carries the flag that makes the
// scheduler treat its CPUs as sharing a cache (SD_SHARE_LLC, called
// SD_SHARE_PKG_RESOURCES before 6.9).
func (d Domain) SharesLLC() bool {
	return slices.Contains(d.Flags, "SD_SHARE_LLC") || slices.Contains(d.Flags, "SD_SHARE_PKG_RESOURCES")
}

// SchedView is the scheduler's own idea of the topology, per CPU.
type SchedView struct {
	// LLCSize and LLCID are per_cpu(sd_llc_size) and per_cpu(sd_llc_id):
	// what wake_wide() and cpus_share_cache() use. Missing when unreadable.
	LLCSize map[int]int
	LLCID   map[int]int
	Domains map[int][]Domain
	Source  string // "bpf", "debugfs", "procfs"
}

// LLCOf returns the CPUs the scheduler believes share cpu's last-level
// cache, from sd_llc_id (or the highest domain flagged as sharing it).
func (v *SchedView) LLCOf(cpu int) ([]int, bool) {
	if id, ok := v.LLCID[cpu]; ok {
		var out []int
		for c, other := range v.LLCID {
			if other == id {
				out = append(out, c)
			}
		}
		sort.Ints(out)
		return out, true
	}
	doms, ok := v.Domains[cpu]
	if !ok {
		return nil, false
	}
	var span []int
	known := false
	for _, d := range doms {
		if d.SharesLLC() && d.Span != nil {
			span, known = d.Span, true
		}
	}
	if !known {
		// No domain shares a cache: the scheduler treats the CPU as alone,
		// unless the spans are unknown (debugfs) and some domain shares.
		for _, d := range doms {
			if d.SharesLLC() {
				return nil, false
			}
		}
		return []int{cpu}, true
	}
	return span, true
}

// Mismatch is a group of CPUs that share a cache in hardware but not in the
// scheduler's eyes: the CONFIG_SCHED_MC=n board of "The Network Is Slow".
type Mismatch struct {
	Hardware CacheGroup
	// Sched maps each CPU of the group to the CPUs the scheduler thinks
	// share its LLC.
	Sched map[int][]int
}

// Mismatches compares the hardware's LLC groups with the scheduler's view.
// CPUs the view does not cover are skipped.
func Mismatches(hw *Hardware, v *SchedView) []Mismatch {
	if hw == nil || v == nil {
		return nil
	}
	var out []Mismatch
	for _, g := range hw.SharedGroups() {
		m := Mismatch{Hardware: g, Sched: map[int][]int{}}
		bad := false
		for _, cpu := range g.CPUs {
			llc, ok := v.LLCOf(cpu)
			if !ok {
				continue
			}
			m.Sched[cpu] = llc
			for _, other := range g.CPUs {
				if !slices.Contains(llc, other) {
					bad = true
				}
			}
		}
		if bad {
			out = append(out, m)
		}
	}
	return out
}

// FormatCPUs writes CPUs the way the kernel does: "0-3,6".
func FormatCPUs(cpus []int) string {
	if len(cpus) == 0 {
		return ""
	}
	s := slices.Clone(cpus)
	sort.Ints(s)
	s = slices.Compact(s)
	var b strings.Builder
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		if j == i {
			fmt.Fprintf(&b, "%d", s[i])
		} else {
			fmt.Fprintf(&b, "%d-%d", s[i], s[j])
		}
		i = j + 1
	}
	return b.String()
}

// ReadDomainsFS reads the scheduling domains where the kernel shows them:
// /sys/kernel/debug/sched/domains (5.13+, with debugfs mounted and
// sched_verbose on) or /proc/sys/kernel/sched_domain (before 5.13, with
// CONFIG_SCHED_DEBUG). Flags there are names (newer kernels) or a number
// (older; decoded with the kernel's own flag names when given). It returns
// nil and the reason when neither is readable.
func ReadDomainsFS(roots []string, flagNames []string) (*SchedView, string) {
	var why []string
	for _, root := range roots {
		cpuDirs, err := filepath.Glob(filepath.Join(root, "cpu[0-9]*"))
		if err != nil || len(cpuDirs) == 0 {
			why = append(why, root+" not present")
			continue
		}
		v := &SchedView{Domains: map[int][]Domain{}, LLCSize: map[int]int{}, LLCID: map[int]int{}, Source: root}
		readable := false
		for _, dir := range cpuDirs {
			cpu, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(dir), "cpu"))
			if err != nil {
				continue
			}
			doms, _ := filepath.Glob(filepath.Join(dir, "domain[0-9]*"))
			sort.Strings(doms)
			list := []Domain{}
			for _, d := range doms {
				lvl, _ := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "domain"))
				flags, err := os.ReadFile(filepath.Join(d, "flags"))
				if err != nil {
					why = append(why, fmt.Sprintf("%s: %v", filepath.Join(d, "flags"), err))
					continue
				}
				readable = true
				list = append(list, Domain{Name: readTrim(filepath.Join(d, "name")), Level: lvl, Flags: parseFlags(strings.TrimSpace(string(flags)), flagNames)})
			}
			v.Domains[cpu] = list
		}
		if readable {
			return v, ""
		}
	}
	return nil, strings.Join(why, "; ")
}

// parseFlags reads "SD_BALANCE_NEWIDLE SD_SHARE_LLC …" or a decimal mask.
func parseFlags(s string, names []string) []string {
	if n, err := strconv.ParseUint(s, 10, 32); err == nil {
		return DecodeFlags(uint32(n), names)
	}
	return strings.Fields(s)
}

// DecodeFlags turns a domain flag mask into names; names[i] is bit i.
func DecodeFlags(mask uint32, names []string) []string {
	var out []string
	for i := 0; i < 32; i++ {
		if mask&(1<<i) == 0 {
			continue
		}
		if i < len(names) && names[i] != "" {
			out = append(out, names[i])
		} else {
			out = append(out, fmt.Sprintf("bit%d", i))
		}
	}
	return out
}
