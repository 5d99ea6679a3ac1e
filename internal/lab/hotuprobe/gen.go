package hotuprobe

// The BPF object and its Go bindings are generated from hotuprobe.bpf.c and
// committed, so that building wolf needs no clang.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel hotuprobe hotuprobe.bpf.c -- -I../../../bpf/include
