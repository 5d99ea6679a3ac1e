#!/bin/sh
# Regenerates include/vmlinux.h, the kernel type definitions every wolf BPF
# program is compiled against. CO-RE relocations make the compiled objects
# run on other kernels, so this only needs redoing to use types or fields
# that this header lacks. The committed header came from Linux 6.18
# (CONFIG_DEBUG_INFO_BTF=y) with Debian's bpftool 7.1.0:
#
#   bpftool btf dump file /sys/kernel/btf/vmlinux format c > include/vmlinux.h
set -eu
cd "$(dirname "$0")"
btf=${1:-/sys/kernel/btf/vmlinux}
bpftool btf dump file "$btf" format c > include/vmlinux.h.tmp
mv include/vmlinux.h.tmp include/vmlinux.h
echo "wrote $(pwd)/include/vmlinux.h from $btf ($(uname -r))"
