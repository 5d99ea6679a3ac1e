// Package bpfexplain turns the kernel's refusals of a BPF program (the
// verifier's log, an attach's errno) into words a person can act on:
// which helper or feature is missing, and since which Linux version it
// exists, so that `wolf check` says "needs bpf_get_current_task_btf
// (Linux 5.11+)" rather than "invalid func unknown#158".
package bpfexplain

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
)

// helper is a BPF helper by id (enum bpf_func_id) with the release it
// came in.
type helper struct {
	name  string
	since string
}

// helpers lists those wolf's programs call, and a few near them, by id.
var helpers = map[int]helper{
	27:  {"bpf_get_stackid", "4.6"},
	35:  {"bpf_get_current_task", "4.8"},
	67:  {"bpf_get_stack", "4.18"},
	80:  {"bpf_get_current_cgroup_id", "4.18"},
	113: {"bpf_probe_read_kernel", "5.5"},
	115: {"bpf_probe_read_kernel_str", "5.5"},
	120: {"bpf_get_ns_current_pid_tgid", "5.7"},
	125: {"bpf_ktime_get_boot_ns", "5.8"},
	127: {"bpf_seq_write", "5.7"},
	130: {"bpf_ringbuf_output", "5.8"},
	131: {"bpf_ringbuf_reserve", "5.8"},
	132: {"bpf_ringbuf_submit", "5.8"},
	141: {"bpf_get_task_stack", "5.9"},
	153: {"bpf_per_cpu_ptr", "5.10"},
	154: {"bpf_this_cpu_ptr", "5.10"},
	156: {"bpf_task_storage_get", "5.11"},
	157: {"bpf_task_storage_delete", "5.11"},
	158: {"bpf_get_current_task_btf", "5.11"},
	160: {"bpf_ktime_get_coarse_ns", "5.11"},
	164: {"bpf_for_each_map_elem", "5.13"},
	165: {"bpf_snprintf", "5.13"},
	173: {"bpf_get_func_ip", "5.15"},
	174: {"bpf_get_attach_cookie", "5.15"},
	180: {"bpf_find_vma", "5.17"},
	181: {"bpf_loop", "5.17"},
	208: {"bpf_ktime_get_tai_ns", "6.1"},
	210: {"bpf_cgrp_storage_get", "6.2"},
}

var (
	unknownFunc = regexp.MustCompile(`(?:invalid|unknown) func (?:unknown|[a-z_0-9]+)#(\d+)`)
	unbounded   = regexp.MustCompile(`R\d+ unbounded memory access`)
	kfunc       = regexp.MustCompile(`(?:calling kernel function|kernel function) ([a-z_0-9]+) is not allowed|cannot find (?:address for )?kernel function ([a-z_0-9]+)`)
)

// Error explains err; an error it does not recognise is returned as it is.
func Error(err error) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	var ve *ebpf.VerifierError
	log := msg
	if errors.As(err, &ve) {
		log = strings.Join(ve.Log, "\n") + "\n" + msg
	}
	if why := explain(log); why != "" {
		return why + " (" + firstLine(msg) + ")"
	}
	return msg
}

func explain(log string) string {
	if m := unknownFunc.FindStringSubmatch(log); m != nil {
		id, _ := strconv.Atoi(m[1])
		if h, ok := helpers[id]; ok {
			return fmt.Sprintf("this kernel has no BPF helper %s (Linux %s+)", h.name, h.since)
		}
		return fmt.Sprintf("this kernel has no BPF helper number %d (newer than this kernel)", id)
	}
	if m := kfunc.FindStringSubmatch(log); m != nil {
		name := m[1] + m[2]
		return fmt.Sprintf("this kernel does not let this program call the kernel function %s (kfuncs: 6.2+ for most)", name)
	}
	switch {
	case strings.Contains(log, "BPF_STX uses reserved fields"), strings.Contains(log, "BPF_ATOMIC uses invalid atomic opcode"):
		return "this kernel's BPF has no atomic fetch operations (Linux 5.12+)"
	case unbounded.MatchString(log):
		return "this kernel's verifier cannot prove a memory access bounded where newer verifiers can (a wolf bug for this kernel: please report it with this message)"
	case strings.Contains(log, "unknown map type"), strings.Contains(log, "map type") && strings.Contains(log, "not supported"):
		return "this kernel lacks a BPF map type wolf uses"
	case strings.Contains(log, "attach_btf_id") || strings.Contains(log, "find target"):
		return "a BTF tracepoint or function wolf attaches to is not in this kernel's BTF"
	case strings.Contains(log, "doesn't have") && strings.Contains(log, "-th argument"):
		return "a tracepoint has fewer arguments in this kernel than wolf reads (it gained them in a newer release)"
	}
	return ""
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
