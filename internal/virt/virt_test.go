package virt

import (
	"os"
	"testing"
)

func TestVirtualized(t *testing.T) {
	for _, c := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"bare metal", map[string]string{"/sys/class/dmi/id/sys_vendor": "Dell Inc.\n", "/proc/cpuinfo": "processor\t: 0\nflags\t\t: fpu vme sse\n"}, ""},
		{"qemu x86 (dmi)", map[string]string{"/sys/class/dmi/id/sys_vendor": "QEMU\n"}, "QEMU"},
		{"kvm product", map[string]string{"/sys/class/dmi/id/sys_vendor": "Red Hat\n", "/sys/class/dmi/id/product_name": "KVM\n"}, "KVM"},
		{"cpuid only", map[string]string{"/proc/cpuinfo": "processor\t: 0\nflags\t\t: fpu hypervisor sse\n"}, "a hypervisor (CPUID)"},
		{"arm virt", map[string]string{"/sys/firmware/devicetree/base/compatible": "linux,dummy-virt\x00"}, "QEMU virt"},
		{"xen", map[string]string{"/sys/hypervisor/type": "xen\n"}, "xen"},
	} {
		got := virtualized(func(p string) ([]byte, error) {
			if v, ok := c.files[p]; ok {
				return []byte(v), nil
			}
			return nil, os.ErrNotExist
		})
		if got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
