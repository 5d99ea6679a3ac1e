package locks

// The BPF object and its Go bindings are generated from locks.bpf.c and
// committed, so that building wolf needs no clang. .ci/run regenerates them
// and fails if the result differs from what is committed.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type pending -type wait_key -type wait_val -type lock_key -type task_key -type task_val -type owner_key -type owner_val -type queue -type mm_key -type mm_val -type hold_event -type mm_thread -type prof_key -type fold_slots -type mm_fold_slots -type stat_index locks locks.bpf.c -- -I../../bpf/include
