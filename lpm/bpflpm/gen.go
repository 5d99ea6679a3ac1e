package bpflpm

// The BPF objects and their Go bindings are generated from the .bpf.c
// files and committed, so that building wolf needs no clang.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type lpm_probe -type lpm_req lookup lookup.bpf.c -- -I../../bpf/include
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type bench_ctl -type bench_out -type trie_key4 -type trie_key6 -type addr6 -type bench_op bench bench.bpf.c -- -I../../bpf/include
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type free_stat freetrace freetrace.bpf.c -- -I../../bpf/include
