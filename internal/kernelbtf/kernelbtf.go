// Package kernelbtf is where wolf gets the kernel's type information
// (BTF) from: the kernel's own /sys/kernel/btf/vmlinux, or a file given
// with --btf for kernels built without it (CONFIG_DEBUG_INFO_BTF=n), such
// as those BTFHub (https://github.com/aquasecurity/btfhub-archive) ships
// BTF for. CO-RE relocations of every BPF object, and wolf's own reads of
// kernel types, use it.
//
// The choice is made once per process, by the command line, before any
// investigator loads: it is process-wide state on purpose, like the
// kernel's own BTF that cilium/ebpf caches for the process.
package kernelbtf

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

var state struct {
	mu   sync.Mutex
	path string
	spec *btf.Spec
}

// Use makes path (a raw BTF file, or an ELF with a .BTF section) the
// kernel's types for this process. It fails, before any work, when the
// file is missing or holds no kernel types.
func Use(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("--btf: %w", err)
	}
	defer f.Close()
	spec, err := btf.LoadSpecFromReader(f)
	if err != nil {
		return fmt.Errorf("--btf %s: not BTF (a raw .btf file or an ELF with .BTF, as BTFHub ships after unpacking): %w", path, err)
	}
	var ts *btf.Struct
	if err := spec.TypeByName("task_struct", &ts); err != nil {
		return fmt.Errorf("--btf %s: has no struct task_struct: not a kernel's BTF", path)
	}
	state.mu.Lock()
	defer state.mu.Unlock()
	state.path, state.spec = path, spec
	return nil
}

// External is the --btf file in use, "" when the kernel's own BTF is.
func External() string {
	state.mu.Lock()
	defer state.mu.Unlock()
	return state.path
}

// Spec is the kernel's types: the --btf file's, else the kernel's own.
func Spec() (*btf.Spec, error) {
	state.mu.Lock()
	s := state.spec
	state.mu.Unlock()
	if s != nil {
		return s, nil
	}
	spec, err := btf.LoadKernelSpec()
	if errors.Is(err, btf.ErrNotSupported) || errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w (%s)", err, Advice)
	}
	return spec, err
}

// Advice says where BTF comes from when the kernel has none.
const Advice = "this kernel has no BTF (/sys/kernel/btf/vmlinux; CONFIG_DEBUG_INFO_BTF): give wolf one with --btf FILE, from BTFHub (https://github.com/aquasecurity/btfhub-archive, by distribution and kernel release) or made with pahole -J from the kernel's debug package (vmlinux with DWARF)"

// Options are the collection options every BPF object is loaded with: the
// --btf types for CO-RE when one is given, else none (cilium/ebpf reads
// the kernel's own).
func Options() *ebpf.CollectionOptions {
	state.mu.Lock()
	defer state.mu.Unlock()
	if state.spec == nil {
		return nil
	}
	return &ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{KernelTypes: state.spec}}
}
