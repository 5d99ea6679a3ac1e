package io

// The BPF object and its Go bindings are generated from io.bpf.c and
// committed, so that building wolf needs no clang. .ci/run regenerates them
// and fails if the result differs from what is committed.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type rq_slot -type batch -type io_key -type io_stats -type wait_key -type wait_stats -type slow_rq -type long_wait -type journal -type in_sync -type sleep -type qos -type stat_index io io.bpf.c -- -I../../bpf/include
