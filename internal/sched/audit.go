package sched

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/human"
	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/kconfig"
	"github.com/wolf-investigator/wolf/internal/probekit"
)

// Requirements implements investigator.Requirer: the attach table's, and
// what the programs use inside.
func (*Investigator) Requirements() []investigator.Requirement {
	reqs := []investigator.Requirement{
		{Feature: "btf", Why: "CO-RE and typed (tp_btf) tracepoint arguments: task_struct, run queues, scheduling domains"},
		{Feature: "tp_btf", Why: "attach to the scheduler's tracepoints with typed arguments and task-local storage"},
	}
	reqs = append(reqs, probekit.Requirements(attachTable)...)
	return append(reqs, investigator.Requirement{Feature: "bpf_stats", Why: "wolf's own cost per event (kernel.bpf_stats_enabled)", Optional: true})
}

// Audit implements investigator.Auditor: the cache topology against the
// scheduler's domains where they are visible, CONFIG_SCHED_MC, and the
// 32-bit jiffies wrap. No BPF: the live run reads the scheduler's own view.
func (s *Investigator) Audit(ctx context.Context) []finding.Finding {
	root := s.SysCPU
	if root == "" {
		root = "/sys/devices/system/cpu"
	}
	hw, _ := ReadHardware(root)
	cfg, _ := kconfig.Load()
	view, _ := ReadDomainsFS([]string{"/sys/kernel/debug/sched/domains", "/proc/sys/kernel/sched_domain"}, legacyFlagNames)
	in := auditInput{Hardware: hw, Config: cfg, Domains: view, Now: time.Now()}
	in.Uptime, _ = uptime()
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		in.Machine = unix.ByteSliceToString(u.Machine[:])
	}
	return audit(in)
}

type auditInput struct {
	Hardware *Hardware
	Config   *kconfig.Config // nil when the config cannot be found
	Domains  *SchedView      // from debugfs/procfs; nil when not visible
	Machine  string          // uname -m
	Uptime   time.Duration
	Now      time.Time
}

// schedMCOff: the kernel was built without CONFIG_SCHED_MC on hardware
// whose cores share a cache.
func schedMCOff(hw *Hardware) bool {
	cfg, err := kconfig.Load()
	if err != nil || hw == nil {
		return false
	}
	return mcOff(cfg) && len(hw.SharedGroups()) > 0
}

func mcOff(cfg *kconfig.Config) bool {
	if cfg == nil {
		return false
	}
	v, known := cfg.Get("CONFIG_SCHED_MC")
	if known {
		return v == "n"
	}
	// Absent: its dependencies were not met; it matters where the
	// architecture supports it.
	return cfg.Enabled("CONFIG_ARCH_SUPPORTS_SCHED_MC")
}

func audit(in auditInput) []finding.Finding {
	var out []finding.Finding
	var shared []CacheGroup
	if in.Hardware != nil {
		shared = in.Hardware.SharedGroups()
	}
	mcReported := false
	if len(shared) > 0 && mcOff(in.Config) {
		mcReported = true
		g := shared[0]
		out = append(out, finding.Finding{
			ID:           "audit.sched-mc-off",
			Investigator: "audit",
			Severity:     finding.Warning,
			Title:        fmt.Sprintf("CONFIG_SCHED_MC is off, but CPUs %s share an L%d cache: the scheduler does not know", FormatCPUs(g.CPUs), g.Level),
			Summary:      in.Config.Describe("CONFIG_SCHED_MC") + fmt.Sprintf("; the hardware has %d group(s) of CPUs sharing a last-level cache.", len(shared)),
			Mechanism:    "Without CONFIG_SCHED_MC no scheduling domain carries SD_SHARE_LLC, so sd_llc_size is 1 and cpus_share_cache() is false between cores that do share a cache. Wake-ups then move tasks to the waker's CPU instead of leaving them on their idle previous CPU, and with the load balancer they ping-pong (in \"The Network Is Slow\", UDP throughput halved).",
			Subjects:     []finding.Subject{{Role: finding.RoleCPU, CPU: &g.CPUs[0], Detail: "LLC shared with CPUs " + FormatCPUs(g.CPUs)}},
			Evidence: map[string]any{
				"config_sched_mc":    configValue(in.Config, "CONFIG_SCHED_MC"),
				"hardware_llc_cpus":  FormatCPUs(g.CPUs),
				"hardware_llc_level": g.Level,
				"shared_llc_groups":  len(shared),
			},
			Remediation: []string{"Rebuild the kernel with CONFIG_SCHED_MC=y (Processor type and features → Multi-core scheduler support); on the board of \"The Network Is Slow\" the bouncing vanished with it."},
			References:  []string{storyRef},
		})
	}
	if !mcReported && in.Domains != nil && in.Hardware != nil {
		if ms := Mismatches(in.Hardware, in.Domains); len(ms) > 0 {
			f := mismatchFinding(ms, in.Domains)
			f.ID, f.Investigator = "audit.sched-llc-unknown", "audit"
			out = append(out, f)
		}
	}
	if f := jiffiesNote(in); f != nil {
		out = append(out, *f)
	}
	return out
}

func configValue(cfg *kconfig.Config, name string) string {
	if cfg == nil {
		return "unknown"
	}
	v, known := cfg.Get(name)
	if !known {
		return "absent"
	}
	return v
}

// is32Bit says whether the kernel keeps jiffies in 32 bits: from its
// config when known, else from the machine name.
func is32Bit(cfg *kconfig.Config, machine string) bool {
	if cfg != nil {
		if _, known := cfg.Get("CONFIG_64BIT"); known {
			return !cfg.Enabled("CONFIG_64BIT")
		}
	}
	switch {
	case machine == "":
		return false
	case strings.HasPrefix(machine, "i") && strings.HasSuffix(machine, "86"),
		strings.HasPrefix(machine, "armv6"), strings.HasPrefix(machine, "armv7"),
		machine == "arm", machine == "mips", machine == "mipsel", machine == "ppc", machine == "m68k", machine == "sh4":
		return true
	}
	return false
}

// jiffiesWrapAfterBoot: INITIAL_JIFFIES is -300*HZ so that the 32-bit
// counter wraps five minutes after boot, whatever HZ is.
const jiffiesWrapAfterBoot = 300 * time.Second

// jiffiesNote is the lesson of "The Network Is Slow": on a 32-bit kernel, anything that
// changed about five minutes after boot may be a jiffies-wrap effect.
func jiffiesNote(in auditInput) *finding.Finding {
	if !is32Bit(in.Config, in.Machine) || in.Uptime <= 0 {
		return nil
	}
	boot := in.Now.Add(-in.Uptime)
	wrap := boot.Add(jiffiesWrapAfterBoot)
	hz := int64(0)
	if in.Config != nil {
		if v, ok := in.Config.Get("CONFIG_HZ"); ok {
			hz, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	ev := map[string]any{
		"uptime_s":           int64(in.Uptime.Seconds()),
		"jiffies_wrap_at":    wrap.UTC().Format(time.RFC3339),
		"jiffies_wrap_after": "300 s after boot",
	}
	summary := fmt.Sprintf("This kernel keeps jiffies in 32 bits; they start at -300*HZ so that they wrap 5 minutes after boot, at %s. ", wrap.UTC().Format(time.RFC3339))
	if hz > 0 {
		period := time.Duration(float64(1<<32) / float64(hz) * float64(time.Second))
		ev["hz"] = hz
		ev["jiffies_period_days"] = human.Round(period.Hours()/24, 1)
		summary += fmt.Sprintf("At HZ=%d they wrap again every %.1f days. ", hz, period.Hours()/24)
	}
	if in.Uptime < jiffiesWrapAfterBoot {
		summary += "The first wrap is still ahead."
	} else {
		summary += "If a slowdown started near then, suspect code that compares jiffies without time_after()."
	}
	return &finding.Finding{
		ID:           "audit.jiffies-wrap",
		Investigator: "audit",
		Severity:     finding.Info,
		Title:        fmt.Sprintf("32-bit jiffies wrapped 5 minutes after boot (%s): did the problem start then?", wrap.UTC().Format(time.RFC3339)),
		Summary:      summary,
		Mechanism:    "In \"The Network Is Slow\" (Eric's Place), task->wakee_flip_decay_ts starts at 0 while jiffies start just below the wrap, so record_wakee() never decays wakee_flips until jiffies wrap; from then on wake_wide() changes its answer and wake-up placement changes with it. Throughput halved three to five minutes after every boot.",
		Evidence:     ev,
		Remediation:  []string{"Compare the onset of the symptom with the wrap time; reproduce by measuring before and after it (wolf sched at 4 and at 6 minutes of uptime)."},
		References:   []string{storyRef},
	}
}

// uptime reads /proc/uptime.
func uptime() (time.Duration, error) {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0, fmt.Errorf("sched: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("sched: /proc/uptime is empty")
	}
	secs, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0, fmt.Errorf("sched: /proc/uptime: %w", err)
	}
	return time.Duration(secs * float64(time.Second)), nil
}
