package reclaim

import (
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/finding/findingtest"
	"github.com/wolf-investigator/wolf/internal/kconfig"
)

func TestReadMGLRU(t *testing.T) {
	noFile := func(string) ([]byte, error) { return nil, fs.ErrNotExist }
	cfg := func(body string) func() (*kconfig.Config, error) {
		return func() (*kconfig.Config, error) { return kconfig.Parse(strings.NewReader(body), "/proc/config.gz") }
	}
	val := func(v string) func(string) ([]byte, error) {
		return func(string) ([]byte, error) { return []byte(v + "\n"), nil }
	}
	m := readMGLRU(noFile, cfg("# CONFIG_LRU_GEN is not set\n"))
	if m.State != MGLRUAbsent || !strings.Contains(m.Detail, "CONFIG_LRU_GEN is not set in this kernel (/proc/config.gz)") {
		t.Errorf("absent: %+v", m)
	}
	m = readMGLRU(noFile, func() (*kconfig.Config, error) { return nil, kconfig.ErrNotFound })
	if m.State != MGLRUAbsent || !strings.Contains(m.Detail, "CONFIG_LRU_GEN") {
		t.Errorf("absent, no config: %+v", m)
	}
	if m := readMGLRU(val("0x0000"), nil); m.State != MGLRUOff || m.Raw != "0x0000" {
		t.Errorf("off: %+v", m)
	}
	if m := readMGLRU(val("0x0007"), nil); m.State != MGLRUOn {
		t.Errorf("on: %+v", m)
	}
	if m := readMGLRU(func(string) ([]byte, error) { return nil, errors.New("EIO") }, nil); m.State != MGLRUUnknown {
		t.Errorf("unreadable: %+v", m)
	}
}

func sysctls(vals map[string]int64) func(string) (int64, error) {
	return func(n string) (int64, error) {
		v, ok := vals[n]
		if !ok {
			return 0, fs.ErrNotExist
		}
		return v, nil
	}
}

func TestAudit(t *testing.T) {
	sane := map[string]int64{"vm.swappiness": 60, "vm.min_free_kbytes": 67584, "vm.watermark_scale_factor": 10, "vm.zone_reclaim_mode": 0, "vm.vfs_cache_pressure": 100, "vm.dirty_ratio": 20, "vm.dirty_background_ratio": 10}
	// MGLRU on, swap present, sane settings: nothing to say.
	if fs := audit(MGLRU{State: MGLRUOn, Raw: "0x0007"}, 1<<30, sysctls(sane)); len(fs) != 0 {
		t.Errorf("sane host: %+v", fs)
	}
	// This lab machine: no LRU_GEN, no swap.
	fs := audit(MGLRU{State: MGLRUAbsent, Detail: "CONFIG_LRU_GEN is not set in this kernel (/proc/config.gz)"}, 0, sysctls(sane))
	a, s := findingtest.First(fs, "audit.mglru-absent"), findingtest.First(fs, "audit.no-swap")
	if a == nil || s == nil || a.Severity != finding.Info || s.Severity != finding.Info {
		t.Fatalf("findings %+v", fs)
	}
	if !strings.Contains(a.Title, "CONFIG_LRU_GEN is not set") || !strings.Contains(a.Evidence["vm_settings"].(string), "zone_reclaim_mode=0") {
		t.Errorf("mglru-absent %+v", a)
	}
	// Built but off: the seed's cure, spelled out.
	fs = audit(MGLRU{State: MGLRUOff, Raw: "0x0000"}, 1<<30, sysctls(sane))
	if f := findingtest.First(fs, "audit.mglru-off"); f == nil || !strings.Contains(f.Remediation[0], "echo y > /sys/kernel/mm/lru_gen/enabled") {
		t.Errorf("mglru-off: %+v", fs)
	}
	bad := map[string]int64{"vm.zone_reclaim_mode": 1, "vm.vfs_cache_pressure": 0, "vm.dirty_ratio": 80, "vm.dirty_bytes": 0}
	fs = audit(MGLRU{State: MGLRUOn}, 1<<30, sysctls(bad))
	for _, id := range []string{"audit.zone-reclaim", "audit.vfs-cache-pressure", "audit.dirty-ratio"} {
		if f := findingtest.First(fs, id); f == nil || f.Severity != finding.Warning || len(f.Remediation) == 0 {
			t.Errorf("%s: %+v", id, f)
		}
	}
}
