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
// the kernel matrix in data: keep it in step with the matrix table the
// qemu scripts under scripts/ produce, adding a row only for a kernel a
// script in the repository ran and passed on. wolf version prints it.
func TestedKernels() []TestedKernel {
	return []TestedKernel{
		{Kernel: "6.1", Arch: "x86_64", Where: "qemu (TCG): Debian bookworm 6.1", Scope: "wolf check and wolf hung with its labs (scripts/qemu/hung-on-debian-6.1.sh)"},
		{Kernel: "6.18", Arch: "x86_64", Where: "the development and CI machine", Scope: "the full suite, every investigator and lab (go test ./... with WOLF_REQUIRE_BPF=1)"},
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
