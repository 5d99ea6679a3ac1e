package hung

// The BPF object and its Go bindings are generated from hung.bpf.c and
// committed, so that building wolf needs no clang. .ci/run regenerates them
// and fails if the result differs from what is committed.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type task_rec -type hang_event -type stat_index -type mm_queue_rec -type fuse_req_rec -type pre_end hung hung.bpf.c -- -I../../bpf/include
