package probekit

import (
	"errors"
	"fmt"
	"os"
	"regexp"
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
	return err.Error()
}

func explainVerifier(ve *ebpf.VerifierError) string {
	log := ve.Log
	text := strings.Join(log, "\n")
	if m := unknownFunc.FindStringSubmatch(text); m != nil {
		name := m[1]
		if name == "unknown" {
			name = "helper #" + m[2]
		}
		return "the kernel lacks BPF helper " + name + since(m[1])
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
	line := lastMeaningful(log)
	if strings.Contains(line, "unbounded memory access") || strings.Contains(line, "min value is negative") || strings.Contains(line, "max value is outside") {
		return "this kernel's verifier could not prove an access in bounds (older verifiers track fewer facts): " + line
	}
	if line == "" {
		return fmt.Sprintf("the kernel's BPF verifier rejected the program: %v", ve.Cause)
	}
	return "the kernel's BPF verifier rejected the program: " + line
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
