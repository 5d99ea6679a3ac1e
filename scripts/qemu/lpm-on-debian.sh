#!/usr/bin/env bash
# Prove wolf_lpm.h (lpm/bpflpm) on an older Debian kernel under qemu (TCG, no
# KVM): lpm/bpflpm's live tests, whose test program falls back to one lookup
# per BPF_PROG_TEST_RUN (lookup_probe) where the kernel lacks bpf_loop
# (before 5.17), so that the header's own bounded loops meet that kernel's
# verifier.
#
#   scripts/qemu/lpm-on-debian.sh          # Debian bullseye's 5.10
#   scripts/qemu/lpm-on-debian.sh 6.1      # another series of lib.sh's
#
# It shares lib.sh with hung-on-debian-6.1.sh and the kernel matrix (private
# apt in the cache dir, static build, busybox initramfs, qemu under timeout).
# Exit status: 0 when the tests passed in the guest, 1 when not, 2 on a setup
# error. Logs stay in $CACHE/runs/DATE/ (console.log, tests.out).
#
# Environment: WOLF_QEMU_CACHE, WOLF_QEMU_REFRESH, WOLF_QEMU_TIMEOUT (default
# 900), WOLF_QEMU_OUT, WOLF_QEMU_ACCEL, WOLF_QEMU_SHOW (as in
# hung-on-debian-6.1.sh).
set -euo pipefail
SERIES=${1:-5.10}
LOG_TAG=qemu-lpm-$SERIES
SELF_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$SELF_DIR/lib.sh"
qemu_setup

TIMEOUT=${WOLF_QEMU_TIMEOUT:-900}
OUT=${WOLF_QEMU_OUT:-$CACHE/runs/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"

read -r -a mods <<<"$(qemu_modules amd64)"
qemu_kernel "$SERIES" amd64 "${mods[@]}"
log "kernel: $KPKG $KVER"

ROOT=$OUT/rootfs
qemu_rootfs "$ROOT" amd64
(cd "$REPO" && CGO_ENABLED=0 go test -c -trimpath -o "$ROOT/bin/bpflpm.test" ./lpm/bpflpm) || die "go test -c ./lpm/bpflpm failed"

TASKS=$OUT/tasks.sh
cat >"$TASKS" <<'TASKS'
uname -a >/tmp/env.out 2>&1
emit env 0 /tmp/env.out
note "tests start uptime=$(up)s"
cd /tmp && timeout 600 /bin/bpflpm.test -test.v -test.run 'TestBPFProperty|TestGenerationSwitch|TestPrefixAtomicity' -test.timeout 580s >/tmp/tests.out 2>&1; rc=$?
emit tests $rc /tmp/tests.out
note "done uptime=$(up)s"
sync
poweroff -f
TASKS
qemu_init "$ROOT" /dev/ttyS1 "$TASKS"
qemu_initramfs "$ROOT" "$OUT/initrd.gz"
rm -rf "$ROOT"

qemu_boot amd64 "$OUT/initrd.gz" "$OUT" "$TIMEOUT"
rm -f "$OUT/initrd.gz"
qemu_sections "$OUT"
rc=$(cat "$OUT/tests.rc" 2>/dev/null || echo none)
grep -E '^\s*--- (PASS|FAIL|SKIP)' "$OUT/tests.out" 2>/dev/null >&2 || true
log "tests rc=$rc on $KPKG (logs: $OUT)"
[[ $rc == 0 ]] || exit 1
