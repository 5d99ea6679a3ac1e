package sched

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/finding/findingtest"
	"github.com/wolf-investigator/wolf/internal/kallsyms"
	"github.com/wolf-investigator/wolf/internal/kconfig"
	"github.com/wolf-investigator/wolf/internal/testutil"
)

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// fakeSysCPU builds /sys/devices/system/cpu for n CPUs whose L2 is shared
// by groups of `share` CPUs ("The Network Is Slow"'s quad-core ARM: one L2 for four).
func fakeSysCPU(t *testing.T, n, share int) string {
	root := t.TempDir()
	for c := 0; c < n; c++ {
		base := filepath.Join(root, fmt.Sprintf("cpu%d", c), "cache")
		write(t, filepath.Join(base, "index0", "level"), "1")
		write(t, filepath.Join(base, "index0", "type"), "Data")
		write(t, filepath.Join(base, "index0", "shared_cpu_list"), fmt.Sprint(c))
		write(t, filepath.Join(base, "index1", "level"), "1")
		write(t, filepath.Join(base, "index1", "type"), "Instruction")
		write(t, filepath.Join(base, "index1", "shared_cpu_list"), fmt.Sprint(c))
		lo := c / share * share
		write(t, filepath.Join(base, "index2", "level"), "2")
		write(t, filepath.Join(base, "index2", "type"), "Unified")
		write(t, filepath.Join(base, "index2", "size"), "512K")
		write(t, filepath.Join(base, "index2", "shared_cpu_list"), fmt.Sprintf("%d-%d", lo, lo+share-1))
	}
	write(t, filepath.Join(root, "online"), fmt.Sprintf("0-%d", n-1))
	return root
}

func TestReadHardware(t *testing.T) {
	hw, err := ReadHardware(fakeSysCPU(t, 8, 4))
	if err != nil {
		t.Fatal(err)
	}
	g := hw.LLC[5]
	if g.Level != 2 || g.Size != "512K" || !reflect.DeepEqual(g.CPUs, []int{4, 5, 6, 7}) {
		t.Errorf("cpu5 LLC %+v", g)
	}
	if groups := hw.SharedGroups(); len(groups) != 2 || FormatCPUs(groups[1].CPUs) != "4-7" {
		t.Errorf("shared groups %+v", groups)
	}
	if _, err := ReadHardware(t.TempDir()); err == nil {
		t.Error("no caches: want an error")
	}
}

func TestReadHardwareThisMachine(t *testing.T) {
	if _, err := os.Stat("/sys/devices/system/cpu/cpu0/cache"); err != nil {
		t.Skip("no cache information in sysfs here")
	}
	hw, err := ReadHardware("/sys/devices/system/cpu")
	if err != nil {
		t.Fatal(err)
	}
	if g, ok := hw.LLC[0]; !ok || g.Level < 1 || len(g.CPUs) == 0 {
		t.Errorf("cpu0 LLC %+v", hw.LLC[0])
	}
}

func TestFormatCPUs(t *testing.T) {
	for _, c := range []struct {
		in   []int
		want string
	}{{nil, ""}, {[]int{0}, "0"}, {[]int{3, 0, 1, 2}, "0-3"}, {[]int{0, 1, 2, 6, 8, 9}, "0-2,6,8-9"}, {[]int{1, 1, 2}, "1-2"}} {
		if got := FormatCPUs(c.in); got != c.want {
			t.Errorf("FormatCPUs(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestDomainsFromDebugfs(t *testing.T) {
	root := t.TempDir()
	// "The Network Is Slow"'s board: only a package-level domain, no LLC sharing.
	for c := 0; c < 4; c++ {
		d := filepath.Join(root, fmt.Sprintf("cpu%d", c), "domain0")
		write(t, filepath.Join(d, "name"), "PKG")
		write(t, filepath.Join(d, "flags"), "SD_BALANCE_NEWIDLE SD_BALANCE_EXEC SD_BALANCE_FORK SD_WAKE_AFFINE SD_PREFER_SIBLING")
	}
	v, why := ReadDomainsFS([]string{filepath.Join(root, "missing"), root}, legacyFlagNames)
	if v == nil {
		t.Fatalf("not read: %s", why)
	}
	if llc, ok := v.LLCOf(2); !ok || !reflect.DeepEqual(llc, []int{2}) {
		t.Errorf("LLCOf(2) = %v %v, want alone", llc, ok)
	}
	hw, _ := ReadHardware(fakeSysCPU(t, 4, 4))
	ms := Mismatches(hw, v)
	if len(ms) != 1 || FormatCPUs(ms[0].Hardware.CPUs) != "0-3" {
		t.Errorf("mismatches %+v", ms)
	}
	// With an MC domain sharing the LLC (spans unknown): no claim.
	for c := 0; c < 4; c++ {
		d := filepath.Join(root, fmt.Sprintf("cpu%d", c), "domain0")
		write(t, filepath.Join(d, "name"), "MC")
		write(t, filepath.Join(d, "flags"), "SD_BALANCE_NEWIDLE SD_SHARE_LLC")
	}
	v, _ = ReadDomainsFS([]string{root}, legacyFlagNames)
	if ms := Mismatches(hw, v); len(ms) != 0 {
		t.Errorf("MC domain present, mismatches %+v", ms)
	}
}

func TestDomainsFromOldProcfs(t *testing.T) {
	root := t.TempDir()
	d := filepath.Join(root, "cpu0", "domain0")
	write(t, filepath.Join(d, "name"), "MC")
	write(t, filepath.Join(d, "flags"), fmt.Sprint(0x22f)) // pre-5.10 numbers, SD_SHARE_PKG_RESOURCES = 0x200
	v, _ := ReadDomainsFS([]string{root}, legacyFlagNames)
	if v == nil || !v.Domains[0][0].SharesLLC() {
		t.Fatalf("domains %+v", v)
	}
	if got := DecodeFlags(0x3, []string{"A"}); !reflect.DeepEqual(got, []string{"A", "bit1"}) {
		t.Errorf("DecodeFlags %v", got)
	}
}

func TestUnreadableDomainsSayWhy(t *testing.T) {
	v, why := ReadDomainsFS([]string{"/nonexistent/sched/domains"}, nil)
	if v != nil || !strings.Contains(why, "not present") {
		t.Errorf("view %v, why %q", v, why)
	}
}

func kcfg(t *testing.T, lines ...string) *kconfig.Config {
	t.Helper()
	c, err := kconfig.Parse(strings.NewReader(strings.Join(lines, "\n")), "test.config")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestAuditSchedMCOff(t *testing.T) {
	hw, _ := ReadHardware(fakeSysCPU(t, 4, 4))
	in := auditInput{Hardware: hw, Config: kcfg(t, "CONFIG_64BIT=y", "# CONFIG_SCHED_MC is not set"), Now: time.Now(), Uptime: time.Hour}
	fs := audit(in)
	f := findingtest.First(fs, "audit.sched-mc-off")
	if f == nil || f.Severity != finding.Warning || !strings.Contains(f.Title, "CPUs 0-3 share an L2 cache") || f.Evidence["config_sched_mc"] != "n" {
		t.Fatalf("findings %+v", fs)
	}
	// Set: nothing to say.
	in.Config = kcfg(t, "CONFIG_64BIT=y", "CONFIG_SCHED_MC=y")
	if fs := audit(in); len(fs) != 0 {
		t.Errorf("SCHED_MC=y: %+v", fs)
	}
	// No CPUs share a cache: nothing either.
	hw1, _ := ReadHardware(fakeSysCPU(t, 4, 1))
	in = auditInput{Hardware: hw1, Config: kcfg(t, "CONFIG_64BIT=y", "# CONFIG_SCHED_MC is not set")}
	if fs := audit(in); len(fs) != 0 {
		t.Errorf("private caches: %+v", fs)
	}
	// Absent from the config: matters only where the arch supports it.
	if mcOff(kcfg(t, "CONFIG_64BIT=y")) || !mcOff(kcfg(t, "CONFIG_ARCH_SUPPORTS_SCHED_MC=y")) {
		t.Error("mcOff with the option absent")
	}
}

func TestAuditDomainsWhenVisible(t *testing.T) {
	hw, _ := ReadHardware(fakeSysCPU(t, 4, 4))
	v := &SchedView{Domains: map[int][]Domain{}, Source: "/sys/kernel/debug/sched/domains"}
	for c := 0; c < 4; c++ {
		v.Domains[c] = []Domain{{Name: "PKG", Flags: []string{"SD_BALANCE_NEWIDLE"}}}
	}
	fs := audit(auditInput{Hardware: hw, Config: kcfg(t, "CONFIG_64BIT=y", "CONFIG_SCHED_MC=y"), Domains: v})
	if f := findingtest.First(fs, "audit.sched-llc-unknown"); f == nil || f.Investigator != "audit" {
		t.Errorf("findings %+v", fs)
	}
}

func TestJiffiesNote(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	cfg32 := kcfg(t, "# CONFIG_64BIT is not set", "CONFIG_HZ=100")
	f := jiffiesNote(auditInput{Config: cfg32, Uptime: time.Hour, Now: now})
	if f == nil {
		t.Fatal("32-bit kernel: no jiffies note")
	}
	if f.Severity != finding.Info || f.Evidence["jiffies_wrap_at"] != "2025-01-01T11:05:00Z" || f.Evidence["jiffies_period_days"] != 497.1 {
		t.Errorf("note %+v", f)
	}
	if g := jiffiesNote(auditInput{Config: cfg32, Uptime: time.Minute, Now: now}); g == nil || !strings.Contains(g.Summary, "still ahead") {
		t.Errorf("before the wrap: %+v", g)
	}
	if jiffiesNote(auditInput{Config: kcfg(t, "CONFIG_64BIT=y"), Uptime: time.Hour, Now: now}) != nil {
		t.Error("64-bit kernel: jiffies do not wrap")
	}
	// No config: the machine name decides.
	if jiffiesNote(auditInput{Machine: "armv7l", Uptime: time.Hour, Now: now}) == nil || jiffiesNote(auditInput{Machine: "x86_64", Uptime: time.Hour, Now: now}) != nil {
		t.Error("machine-name fallback")
	}
}

// Kernels whose BTF lists no per-CPU variables (Debian's 5.10) get their
// offsets from kallsyms instead: the two must agree where both exist.
func TestPercpuOffsetsFromKallsyms(t *testing.T) {
	testutil.RequireRoot(t)
	want := map[string]bool{"runqueues": true, "__preempt_count": true, "sd_llc_size": true, "sd_llc_id": true}
	fromBTF, err := percpuOffsets()
	testutil.Require(t, err == nil, fmt.Sprintf("no per-CPU variables in this kernel's BTF: %v", err))
	syms, err := kallsyms.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !syms.HasDataSymbols() {
		// Not a missing privilege: a kernel config (the matrix's 5.10 row
		// exercises this path on Debian's kernel, which has them).
		t.Skip("this kernel's kallsyms lists no variables (CONFIG_KALLSYMS_ALL is off)")
	}
	fromSyms, err := percpuFromKallsyms(want)
	if err != nil {
		t.Fatal(err)
	}
	for name := range want {
		if fromBTF[name] != fromSyms[name] {
			t.Errorf("%s: BTF offset %#x, kallsyms %#x", name, fromBTF[name], fromSyms[name])
		}
	}
}

func TestParseCPUTimes(t *testing.T) {
	stat := "cpu  100 0 50 1000 10 0 5 0 0 0\n" +
		"cpu0 80 0 40 100 5 0 5 0 7 0\n" +
		"cpu1 20 0 10 900 5 0 0 0 0 0\n" +
		"intr 12345\n"
	got := parseCPUTimes(stat)
	want := map[int]cpuTime{0: {busy: 125, idle: 105}, 1: {busy: 30, idle: 905}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("parseCPUTimes = %+v, want %+v", got, want)
	}
	if mostlyIdle(cpuTime{}, got[0]) {
		t.Error("CPU 0 (busy 125, idle 105) read as mostly idle")
	}
	if !mostlyIdle(cpuTime{}, got[1]) {
		t.Error("CPU 1 (busy 30, idle 905) not read as mostly idle")
	}
	if mostlyIdle(got[1], cpuTime{}) {
		t.Error("counters going backwards read as idle")
	}
}
