package softirq

// The BPF object and its Go bindings are generated from softirq.bpf.c and
// committed, so that building wolf needs no clang. .ci/run regenerates them
// and fails if the result differs from what is committed.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type stall -type napi_stat -type cpu_state -type task_softirq softirq softirq.bpf.c -- -I../../bpf/include
