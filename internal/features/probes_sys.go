package features

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/kconfig"
	"github.com/wolf-investigator/wolf/internal/kernelbtf"
	"github.com/wolf-investigator/wolf/internal/procfs"
	"github.com/wolf-investigator/wolf/internal/sysctl"
	"github.com/wolf-investigator/wolf/internal/tracefs"
)

// loadConfig reads the kernel config once; several probes quote it.
var loadConfig = sync.OnceValues(kconfig.Load)

const vmlinuxBTF = "/sys/kernel/btf/vmlinux"

// kernelTaskStruct loads the kernel's BTF (or the --btf file's) and finds
// task_struct.
func kernelTaskStruct() (*btf.Struct, error) {
	spec, err := kernelbtf.Spec()
	if err != nil {
		if errors.Is(err, ebpf.ErrNotSupported) || errors.Is(err, fs.ErrNotExist) {
			reason := "the kernel publishes no BTF (" + vmlinuxBTF + " is missing)"
			if c, cerr := loadConfig(); cerr == nil && !c.Enabled("DEBUG_INFO_BTF") {
				reason += ": " + c.Describe("DEBUG_INFO_BTF")
			}
			return nil, errors.New(reason + "; CO-RE programs cannot be relocated. Give wolf the kernel's BTF with --btf FILE: BTFHub (https://github.com/aquasecurity/btfhub-archive) has it by distribution and kernel release, or make it with pahole -J from the kernel's debug package")
		}
		return nil, fmt.Errorf("%s does not parse: %s", vmlinuxBTF, plain(err))
	}
	var ts *btf.Struct
	if err := spec.TypeByName("task_struct", &ts); err != nil {
		return nil, fmt.Errorf("%s has no task_struct: %s", vmlinuxBTF, plain(err))
	}
	return ts, nil
}

func probeBTF(ctx context.Context) (string, error) {
	if _, err := kernelTaskStruct(); err != nil {
		return "", err
	}
	if f := kernelbtf.External(); f != "" {
		return f + " (--btf), task_struct found", nil
	}
	detail := vmlinuxBTF
	if fi, err := os.Stat(vmlinuxBTF); err == nil {
		detail += fmt.Sprintf(" (%.1f MiB)", float64(fi.Size())/(1<<20))
	}
	return detail + ", task_struct found", nil
}

func probeTracefs(ctx context.Context) (string, error) {
	return tracefs.Ensure()
}

func probeUprobes(ctx context.Context) (string, error) {
	const pmu = "/sys/bus/event_source/devices/uprobe/type"
	b, err := os.ReadFile(pmu)
	if err != nil {
		reason := "no uprobe PMU (" + pmu + ": " + plain(err) + ")"
		if c, cerr := loadConfig(); cerr == nil && !c.Enabled("UPROBE_EVENTS") {
			reason = c.Describe("UPROBE_EVENTS") + "; " + reason
		}
		return "", errors.New(reason)
	}
	return "uprobe PMU type " + strings.TrimSpace(string(b)), nil
}

func probeBPFStats(ctx context.Context) (string, error) {
	v, err := sysctl.Read("kernel.bpf_stats_enabled")
	if err != nil {
		return "", fmt.Errorf("kernel.bpf_stats_enabled does not exist (needs Linux 5.1+): per-program run time cannot be measured: %s", plain(err))
	}
	if v == "0" {
		return "kernel.bpf_stats_enabled=0 (wolf samples run times itself through BPF_ENABLE_STATS, 10% of each window)", nil
	}
	// Left on by the administrator: every BPF program on the host pays two
	// clock reads per run for as long as it stays so.
	return "kernel.bpf_stats_enabled=" + v + " (on host-wide: every BPF program's runs pay for the accounting)", nil
}

func probePSI(ctx context.Context) (string, error) {
	var parts []string
	for _, res := range []string{"cpu", "memory", "io"} {
		p := "/proc/pressure/" + res
		b, err := os.ReadFile(p)
		switch {
		case errors.Is(err, unix.EOPNOTSUPP):
			return "", errors.New("PSI is built in but disabled at boot (CONFIG_PSI_DEFAULT_DISABLED=y): boot with psi=1")
		case errors.Is(err, fs.ErrNotExist):
			if c, cerr := loadConfig(); cerr == nil && !c.Enabled("PSI") {
				return "", errors.New(c.Describe("PSI") + ": no pressure stall information")
			}
			return "", fmt.Errorf("%s does not exist: no pressure stall information", p)
		case err != nil:
			return "", fmt.Errorf("reading %s: %s", p, plain(err))
		}
		some, full, err := parsePSI(b)
		if err != nil {
			return "", fmt.Errorf("%s: %w", p, err)
		}
		s := fmt.Sprintf("%s some avg10=%.2f", res, some)
		if full >= 0 {
			s += fmt.Sprintf(" full avg10=%.2f", full)
		}
		parts = append(parts, s)
	}
	detail := strings.Join(parts, "; ")
	if c, err := loadConfig(); err == nil && c.Enabled("PSI_DEFAULT_DISABLED") {
		detail += "; enabled by psi=1 on the kernel command line (CONFIG_PSI_DEFAULT_DISABLED=y)"
	}
	return detail, nil
}

// parsePSI returns the avg10 of the "some" and "full" lines of a
// /proc/pressure file; full is -1 when there is no full line (cpu on older
// kernels).
func parsePSI(b []byte) (some, full float64, err error) {
	some, full = -1, -1
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || !strings.HasPrefix(f[1], "avg10=") {
			return 0, 0, fmt.Errorf("unexpected PSI line %q", line)
		}
		v, perr := strconv.ParseFloat(strings.TrimPrefix(f[1], "avg10="), 64)
		if perr != nil {
			return 0, 0, fmt.Errorf("PSI line %q: %w", line, perr)
		}
		switch f[0] {
		case "some":
			some = v
		case "full":
			full = v
		}
	}
	if some < 0 {
		return 0, 0, errors.New("no \"some\" line")
	}
	return some, full, nil
}

// cgroupMount is one cgroup filesystem from mountinfo.
type cgroupMount struct {
	version     int // 1 or 2
	point       string
	controllers []string // v1: the controllers (and name=) bound to it
}

// cgroupMountsOf picks the cgroup filesystems out of mounts. For v1, the
// controllers are the super options that are known controllers (from
// /proc/cgroups) or name= entries.
func cgroupMountsOf(mounts []procfs.Mount, known map[string]bool) []cgroupMount {
	var out []cgroupMount
	for _, mnt := range mounts {
		switch mnt.FSType {
		case "cgroup2":
			out = append(out, cgroupMount{version: 2, point: mnt.Point})
		case "cgroup":
			m := cgroupMount{version: 1, point: mnt.Point}
			for _, opt := range mnt.SuperOptions {
				if known[opt] || strings.HasPrefix(opt, "name=") {
					m.controllers = append(m.controllers, opt)
				}
			}
			out = append(out, m)
		}
	}
	return out
}

// knownControllers reads the controller names from /proc/cgroups.
func knownControllers() map[string]bool {
	known := map[string]bool{}
	b, err := os.ReadFile("/proc/cgroups")
	if err != nil {
		return known
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 0 && !strings.HasPrefix(f[0], "#") {
			known[f[0]] = true
		}
	}
	return known
}

func cgroupMounts(ctx context.Context) ([]cgroupMount, error) {
	mounts, err := procfs.Reader{}.Mounts(ctx, 0)
	if err != nil {
		return nil, fmt.Errorf("reading mounts: %s", plain(err))
	}
	return cgroupMountsOf(mounts, knownControllers()), nil
}

func probeCgroupV1(ctx context.Context) (string, error) {
	mounts, err := cgroupMounts(ctx)
	if err != nil {
		return "", err
	}
	var parts []string
	for _, m := range mounts {
		if m.version == 1 {
			parts = append(parts, strings.Join(m.controllers, ",")+" at "+m.point)
		}
	}
	if len(parts) == 0 {
		return "", errors.New("no cgroup v1 hierarchy is mounted (/proc/self/mountinfo)")
	}
	sort.Strings(parts)
	return strings.Join(parts, "; "), nil
}

func probeCgroupV2(ctx context.Context) (string, error) {
	mounts, err := cgroupMounts(ctx)
	if err != nil {
		return "", err
	}
	for _, m := range mounts {
		if m.version != 2 {
			continue
		}
		b, err := os.ReadFile(filepath.Join(m.point, "cgroup.controllers"))
		ctrl := strings.Join(strings.Fields(string(b)), ",")
		switch {
		case err != nil:
			ctrl = "unknown (" + plain(err) + ")"
		case ctrl == "":
			ctrl = "none (all are bound to v1 hierarchies)"
		}
		return fmt.Sprintf("%s, controllers: %s", m.point, ctrl), nil
	}
	return "", errors.New("no cgroup2 filesystem is mounted (/proc/self/mountinfo)")
}

func probeHungTask(ctx context.Context) (string, error) {
	if c, err := loadConfig(); err == nil && !c.Enabled("DETECT_HUNG_TASK") {
		return "", errors.New(c.Describe("DETECT_HUNG_TASK") + ": the kernel never reports hung tasks")
	}
	timeout, err := sysctl.ReadInt("kernel.hung_task_timeout_secs")
	if err != nil {
		return "", fmt.Errorf("the hung task detector's settings are missing: %s", plain(err))
	}
	detail := fmt.Sprintf("kernel.hung_task_timeout_secs=%d", timeout)
	if w, err := sysctl.Read("kernel.hung_task_warnings"); err == nil {
		detail += ", kernel.hung_task_warnings=" + w
	}
	if p, err := sysctl.Read("kernel.hung_task_panic"); err == nil && p != "0" {
		detail += ", kernel.hung_task_panic=" + p + " (a hung task panics this host)"
	}
	if timeout == 0 {
		detail += "; the detector is off until kernel.hung_task_timeout_secs is set above 0"
	}
	return detail, nil
}

func probeTaskBlocker(ctx context.Context) (string, error) {
	ts, err := kernelTaskStruct()
	if err != nil {
		return "", err
	}
	switch {
	case hasMember(ts, "blocker"):
		return "task_struct.blocker (Linux 6.16+, CONFIG_DETECT_HUNG_TASK_BLOCKER): a hung task's mutex, semaphore or rw-semaphore is recorded", nil
	case hasMember(ts, "blocker_mutex"):
		return "task_struct.blocker_mutex (Linux 6.14-6.15): only mutex waits are recorded", nil
	}
	reason := "task_struct has neither blocker (6.16+) nor blocker_mutex (6.14-6.15): the kernel does not record which lock a hung task waits on"
	if c, err := loadConfig(); err == nil && !c.Enabled("DETECT_HUNG_TASK_BLOCKER") {
		reason += "; " + c.Describe("DETECT_HUNG_TASK_BLOCKER")
	}
	return "", errors.New(reason)
}

// hasMember looks for a member by name, descending into anonymous structs
// and unions.
func hasMember(t btf.Type, name string) bool {
	var members []btf.Member
	switch v := t.(type) {
	case *btf.Struct:
		members = v.Members
	case *btf.Union:
		members = v.Members
	default:
		return false
	}
	for _, m := range members {
		if m.Name == name {
			return true
		}
		if m.Name == "" && hasMember(btf.UnderlyingType(m.Type), name) {
			return true
		}
	}
	return false
}

func probeSysctl(name string) (string, error) {
	fsys := sysctl.FS{}
	v, err := fsys.Read(name)
	if errors.Is(err, fs.ErrNotExist) {
		p, _ := fsys.Path(name)
		return "", fmt.Errorf("%s does not exist on this kernel (%s)", name, p)
	}
	if err != nil {
		return "", errors.New(plain(err))
	}
	return v, nil
}

func probeConfig(name string) (string, error) {
	c, err := loadConfig()
	if err != nil {
		return "", fmt.Errorf("the kernel build config is not available: %s", plain(err))
	}
	v, known := c.Get(name)
	if !known || v == "n" || v == "" {
		return "", errors.New(c.Describe(name))
	}
	return c.Describe(name), nil
}
