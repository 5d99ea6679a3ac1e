package probekit

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// helperSince is the Linux version that brought the BPF helpers wolf's
// programs call, for saying why an older kernel refused one.
var helperSince = map[string]string{
	"bpf_ringbuf_output":                 "5.8",
	"bpf_ringbuf_reserve":                "5.8",
	"bpf_ringbuf_submit":                 "5.8",
	"bpf_seq_write":                      "5.7",
	"bpf_seq_printf":                     "5.7",
	"bpf_get_task_stack":                 "5.9",
	"bpf_task_storage_get":               "5.11",
	"bpf_task_storage_delete":            "5.11",
	"bpf_get_current_task_btf":           "5.11",
	"bpf_per_cpu_ptr":                    "5.10",
	"bpf_this_cpu_ptr":                   "5.10",
	"bpf_ktime_get_boot_ns":              "5.8",
	"bpf_get_func_ip":                    "5.15",
	"bpf_loop":                           "5.17",
	"bpf_ktime_get_tai_ns":               "6.1",
	"bpf_get_current_ancestor_cgroup_id": "5.6",
	"bpf_probe_read_kernel":              "5.5",
	"bpf_probe_read_kernel_str":          "5.5",
	"bpf_get_stack":                      "4.18",
}

// helperByID names the helpers above by number (enum bpf_func_id): older
// kernels' verifiers name a helper they do not know as "unknown#158".
var helperByID = map[string]string{
	"27": "bpf_get_stackid", "35": "bpf_get_current_task", "67": "bpf_get_stack",
	"113": "bpf_probe_read_kernel", "115": "bpf_probe_read_kernel_str",
	"125": "bpf_ktime_get_boot_ns", "126": "bpf_seq_printf", "127": "bpf_seq_write",
	"130": "bpf_ringbuf_output", "131": "bpf_ringbuf_reserve", "132": "bpf_ringbuf_submit",
	"141": "bpf_get_task_stack", "153": "bpf_per_cpu_ptr", "154": "bpf_this_cpu_ptr",
	"156": "bpf_task_storage_get", "157": "bpf_task_storage_delete", "158": "bpf_get_current_task_btf",
	"173": "bpf_get_func_ip", "181": "bpf_loop", "208": "bpf_ktime_get_tai_ns",
}

var (
	// "unknown func bpf_get_current_task_btf#158", "invalid func unknown#158"
	unknownFunc = regexp.MustCompile(`(?:unknown|invalid) func (\w+)#(\d+)`)
	// "program of this type cannot use helper bpf_x#12"
	cannotUse = regexp.MustCompile(`cannot use helper (\w+)#\d+`)
	kfuncGone = regexp.MustCompile(`(?:kernel function|kfunc) (\w+)`)
)

// Explain turns a load or attach error into one line a user can act on:
// what the kernel refused and, where wolf knows, since which version the
// thing exists. The verifier's own line is kept, shortened, for experts.
func Explain(err error) string {
	if err == nil {
		return ""
	}
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return explainVerifier(ve)
	}
	switch {
	case errors.Is(err, btf.ErrNotFound):
		return "this kernel's BTF lacks the type or function the program attaches to (an older kernel, or a tracepoint it does not have)"
	case errors.Is(err, os.ErrNotExist):
		return "this kernel does not have it (" + err.Error() + ")"
	case errors.Is(err, ebpf.ErrNotSupported):
		return "not supported by this kernel (" + err.Error() + ")"
	case errors.Is(err, os.ErrPermission):
		return "permission denied (root, or CAP_BPF and CAP_PERFMON, and no lockdown forbidding it): " + err.Error()
	}
	if why := explainText(err.Error()); why != "" {
		return why + " (" + firstLine(err.Error()) + ")"
	}
	return err.Error()
}

// firstLine is s up to its first newline, at most 200 bytes.
func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

func explainVerifier(ve *ebpf.VerifierError) string {
	log := ve.Log
	if why := explainText(strings.Join(log, "\n")); why != "" {
		return why
	}
	line := lastMeaningful(log)
	if strings.Contains(line, "unbounded memory access") || strings.Contains(line, "min value is negative") || strings.Contains(line, "max value is outside") {
		return "this kernel's verifier could not prove an access in bounds (older verifiers track fewer facts): " + line
	}
	if line == "" {
		return fmt.Sprintf("the kernel's BPF verifier rejected the program: %v", ve.Cause)
	}
	return "the kernel's BPF verifier rejected the program: " + line
}

// explainText recognises the verifier's telling lines in any text: a log,
// or an error that quotes one without wrapping the VerifierError (wolf's
// own loaders before the kit did). "" when nothing is recognised.
func explainText(text string) string {
	if m := unknownFunc.FindStringSubmatch(text); m != nil {
		name := m[1]
		if m[2] == strconv.Itoa(btf.COREBadRelocationSentinel) {
			// Not a helper: cilium/ebpf turns an access whose CO-RE
			// relocation found no target into this call, so the
			// program loads only where that path is never taken.
			return "a type or field the program reads is not in this kernel's BTF (a module not loaded, or a kernel without it)"
		}
		if name == "unknown" {
			name = helperByID[m[2]]
		}
		if name == "" {
			return "the kernel lacks BPF helper #" + m[2] + " (newer than this kernel)"
		}
		return "the kernel lacks BPF helper " + name + since(name)
	}
	if m := cannotUse.FindStringSubmatch(text); m != nil {
		return "this kernel does not let this program type call " + m[1] + since(m[1])
	}
	if strings.Contains(text, "uses reserved fields") || strings.Contains(text, "invalid atomic opcode") {
		return "the kernel's BPF lacks atomic fetch operations (Linux 5.12+)"
	}
	if m := kfuncGone.FindStringSubmatch(text); m != nil && (strings.Contains(text, "not allowed") || strings.Contains(text, "not found") || strings.Contains(text, "invalid kernel function")) {
		return "the kernel lacks kfunc " + m[1] + " or does not allow this program type to call it"
	}
	if strings.Contains(text, "unbounded memory access") {
		return "this kernel's verifier could not prove an access in bounds (older verifiers track fewer facts)"
	}
	return ""
}

// since says since when a helper exists, when wolf knows.
func since(helper string) string {
	if v, ok := helperSince[helper]; ok {
		return " (Linux " + v + "+)"
	}
	return ""
}

// lastMeaningful is the verifier's last line that is not a summary.
func lastMeaningful(log []string) string {
	for i := len(log) - 1; i >= 0; i-- {
		l := strings.TrimSpace(log[i])
		if l == "" || strings.HasPrefix(l, "processed ") || strings.HasPrefix(l, "verification time") ||
			strings.HasPrefix(l, "stack depth") || strings.HasPrefix(l, "-- END PROG LOAD LOG --") {
			continue
		}
		return l
	}
	return ""
}
