package sched

// The BPF object and its Go bindings are generated from sched.bpf.c and
// committed, so that building wolf needs no clang. .ci/run regenerates them
// and fails if the result differs from what is committed.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type task_rec -type aff_rec -type cpu_topo -type topo_args -type mig_key -type mig_event -type exit_key -type exit_cpu_val -type stat_index sched sched.bpf.c -- -I../../bpf/include
