package probekit

import (
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	cfeatures "github.com/cilium/ebpf/features"
)

// HaveCurrentTaskBTF says whether this kernel has bpf_get_current_task_btf
// (5.11+), which gives tracing programs the current task as a BTF pointer:
// its fields are then plain loads rather than a probe-read helper call
// each. Objects take it as a `const volatile` switch, so that on older
// kernels the verifier never reaches the helper's call.
func HaveCurrentTaskBTF() bool {
	return cfeatures.HaveProgramHelper(ebpf.RawTracepoint, asm.FnGetCurrentTaskBtf) == nil
}
