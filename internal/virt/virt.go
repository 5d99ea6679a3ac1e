// Package virt says whether wolf runs on a virtual machine, and under
// which hypervisor or emulator, for findings that must not blame the host's
// own tasks for time its virtual CPUs did not run.
package virt

import (
	"os"
	"strings"
)

// Detect names the hypervisor or emulator this kernel runs under, ""
// on bare metal or when nothing says. A virtual CPU can stop executing at
// any instant without the guest knowing: steal time says so only where the
// hypervisor accounts it (KVM with a paravirtual clock does; QEMU's TCG
// emulation, where the vCPUs take turns on host threads, does not).
func Detect() string { return virtualized(os.ReadFile) }

func virtualized(read func(string) ([]byte, error)) string {
	first := func(path string) string {
		b, err := read(path)
		if err != nil {
			return ""
		}
		return strings.TrimSpace(strings.SplitN(strings.ReplaceAll(string(b), "\x00", "\n"), "\n", 2)[0])
	}
	// DMI (x86, and arm64 machines booted through UEFI).
	for _, p := range []string{"/sys/class/dmi/id/sys_vendor", "/sys/class/dmi/id/product_name"} {
		v := first(p)
		for _, known := range []string{"QEMU", "KVM", "VMware", "Xen", "Microsoft Corporation", "innotek", "Amazon EC2", "Google", "Bochs", "BHYVE", "Parallels"} {
			if strings.Contains(v, known) {
				return v
			}
		}
	}
	if v := first("/sys/hypervisor/type"); v != "" {
		return v
	}
	// Device tree: qemu's arm "virt" machine.
	if b, err := read("/sys/firmware/devicetree/base/compatible"); err == nil && strings.Contains(string(b), "linux,dummy-virt") {
		return "QEMU virt"
	}
	// x86: the CPUID hypervisor bit.
	if b, err := read("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "flags") {
				for _, f := range strings.Fields(line) {
					if f == "hypervisor" {
						return "a hypervisor (CPUID)"
					}
				}
				break
			}
		}
	}
	return ""
}
