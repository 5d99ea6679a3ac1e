package reclaim

// The BPF object and its Go bindings are generated from reclaim.bpf.c and
// committed, so that building wolf needs no clang. .ci/run regenerates them
// and fails if the result differs from what is committed.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type cg_stats -type inflight -type wolf_reclaim_task -type hist_key -type call_hists -type cpu_samples -type stat_index reclaim reclaim.bpf.c -- -I../../bpf/include
