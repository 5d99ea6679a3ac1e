package buildinfo

import (
	"fmt"
	"strconv"
	"strings"
)

// TestedKernel is one kernel wolf's tests have run on, and how far.
type TestedKernel struct {
	Kernel string `json:"kernel"` // major.minor, e.g. "6.1"
	Arch   string `json:"arch"`   // x86_64 or arm64
	Where  string `json:"where"`  // the machine or the qemu image and its kernel release
	Scope  string `json:"scope"`  // what ran there
}

// TestedKernels lists the kernels wolf is proven on, oldest first. It is
// the kernel matrix in data (docs/kernels/matrix.json, made by
// scripts/matrix/run): a kernel is listed when its row has no failed cell,
// and a test keeps the two in step. wolf version prints it.
func TestedKernels() []TestedKernel {
	const matrix = "the kernel matrix: check, three idle doctors, every investigator and every lab (scripts/matrix/run; docs/kernels/matrix.md)"
	return []TestedKernel{
		{Kernel: "5.10", Arch: "x86_64", Where: "qemu (TCG): Debian bullseye 5.10.0-46", Scope: matrix},
		{Kernel: "6.1", Arch: "x86_64", Where: "qemu (TCG): Debian bookworm 6.1.0-56", Scope: matrix + "; wolf hung's rounds (scripts/qemu/hung-on-debian-6.1.sh)"},
		{Kernel: "6.1", Arch: "arm64", Where: "qemu (TCG, virt, -cpu max): Debian bookworm 6.1.0-56", Scope: matrix},
		{Kernel: "6.12", Arch: "x86_64", Where: "qemu (TCG): Debian bookworm 6.12.117", Scope: matrix},
		{Kernel: "6.18", Arch: "x86_64", Where: "the development and CI machine", Scope: matrix + "; the full suite (go test ./... with WOLF_REQUIRE_BPF=1)"},
	}
}

// KernelRange is "oldest–newest" (or the one kernel) of kernels.
func KernelRange(kernels []TestedKernel) string {
	if len(kernels) == 0 {
		return "none"
	}
	lo, hi := kernels[0].Kernel, kernels[0].Kernel
	for _, k := range kernels[1:] {
		if kernelLess(k.Kernel, lo) {
			lo = k.Kernel
		}
		if kernelLess(hi, k.Kernel) {
			hi = k.Kernel
		}
	}
	if lo == hi {
		return lo
	}
	return fmt.Sprintf("%s–%s", lo, hi)
}

// kernelLess orders "major.minor[.patch]" numerically (5.10 after 5.9).
func kernelLess(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(pa) && i < len(pb); i++ {
		x, errx := strconv.Atoi(pa[i])
		y, erry := strconv.Atoi(pb[i])
		if errx != nil || erry != nil {
			if pa[i] != pb[i] {
				return pa[i] < pb[i]
			}
			continue
		}
		if x != y {
			return x < y
		}
	}
	return len(pa) < len(pb)
}
