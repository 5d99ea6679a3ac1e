#!/usr/bin/env bash
# Prove wolf's diagnoses on a kernel before 6.18, under qemu (TCG, no KVM),
# with cgroup v2: Debian's 6.12 by default.
#
# Why another kernel: since 6.18 CFS bandwidth control throttles a task only
# on its way back to user space, so a task holding a kernel lock (an
# mmap_lock inside mprotect) is never throttled, and the cpu-quota-lock lab
# cannot make its quota hold the lock there; wolf measures that and says
# so. Before 6.18 a throttled cgroup's tasks all leave the CPU at once, the
# holder with its lock: the pathology of the issue, and the chain wolf must
# draw. The host runs cgroup v1 for cpu and memory; the VM runs v2.
#
# What it does:
#   1. uses a Debian kernel already extracted by scripts/qemu (the matrix or
#      hung-on-debian-6.1.sh put vmlinuz, config and modules there):
#      WOLF_QEMU_KDIR, default $CACHE/kernels/$(cat $CACHE/kernels/current-6.12-amd64);
#   2. go build (static) of cmd/wolf; a busybox initramfs whose /init mounts
#      cgroup2 with the cpu and memory controllers enabled for children, and
#      for each lab in WOLF_QEMU_LABS runs `wolf lab run LAB` and, once it is
#      up, `wolf doctor --format json` (10 s; 5 s for ps-hang-fuse);
#   3. qemu-system-x86_64 -m 2G -smp 2 under `timeout`; serial 1 carries the
#      framed outputs the checks parse;
#   4. checks, per lab, that diagnoses[0] has the expected root and names the
#      lab's tasks (the lab's "offender pid N, victims [...]" line).
#
# Exit status: 0 when every check passes, 1 when one fails, 2 on a setup error.
#
# Environment:
#   WOLF_QEMU_CACHE    cache dir (default /var/cache/wolf-qemu as root, else ~/.cache/wolf-qemu)
#   WOLF_QEMU_KDIR     extracted kernel dir (vmlinuz, config, modules.load)
#   WOLF_QEMU_LABS     labs (default "cpu-quota-lock ps-hang-fuse")
#   WOLF_QEMU_TIMEOUT  hard limit for qemu, seconds (default 900)
#   WOLF_QEMU_OUT      where the logs go (default $CACHE/runs/diagnose-DATE)
set -euo pipefail

SELF_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SELF_DIR/../.." && pwd)
T0=$(date +%s)
if [[ -n "${WOLF_QEMU_CACHE:-}" ]]; then
	CACHE=$WOLF_QEMU_CACHE
elif [[ $(id -u) -eq 0 ]]; then
	CACHE=/var/cache/wolf-qemu
else
	CACHE=$HOME/.cache/wolf-qemu
fi
LABS=${WOLF_QEMU_LABS:-cpu-quota-lock ps-hang-fuse}
TIMEOUT=${WOLF_QEMU_TIMEOUT:-900}
OUT=${WOLF_QEMU_OUT:-$CACHE/runs/diagnose-$(date +%Y%m%d-%H%M%S)}
log() { printf '[qemu-diagnose %4ds] %s\n' "$(($(date +%s) - T0))" "$*"; }
die() { log "SETUP ERROR: $*"; exit 2; }

KDIR=${WOLF_QEMU_KDIR:-}
if [[ -z "$KDIR" && -s "$CACHE/kernels/current-6.12-amd64" ]]; then
	KDIR=$CACHE/kernels/$(cat "$CACHE/kernels/current-6.12-amd64")
fi
[[ -n "$KDIR" && -s "$KDIR/vmlinuz" && -s "$KDIR/config" ]] ||
	die "no extracted kernel (set WOLF_QEMU_KDIR to a dir with vmlinuz, config, modules.load; scripts/qemu/hung-on-debian-6.1.sh makes one)"
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 missing (apt-get install qemu-system-x86)"
command -v jq >/dev/null || die "jq missing"
file -L /bin/busybox 2>/dev/null | grep -q 'statically linked' || die "/bin/busybox must be busybox-static"
grep -q '^CONFIG_CFS_BANDWIDTH=y' "$KDIR/config" || die "$KDIR: no CONFIG_CFS_BANDWIDTH"
mkdir -p "$OUT"
log "kernel $(basename "$KDIR"), logs in $OUT"

ROOT=$OUT/rootfs
rm -rf "$ROOT" && mkdir -p "$ROOT"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,tmp,run,lib/modules,etc,root}
(cd "$REPO" && CGO_ENABLED=0 go build -trimpath -o "$ROOT/bin/wolf" ./cmd/wolf) || die "go build ./cmd/wolf failed"
cp /bin/busybox "$ROOT/bin/busybox"
i=0
if [[ -s "$KDIR/modules.load" ]]; then
	while read -r m; do
		cp "$m" "$ROOT/lib/modules/$(printf '%02d' $i)-$(basename "$m")"
		i=$((i + 1))
	done <"$KDIR/modules.load"
fi

cat >"$ROOT/init" <<'INIT'
#!/bin/busybox sh
export PATH=/bin:/sbin:/usr/bin:/usr/sbin HOME=/root
/bin/busybox --install -s
mkdir -p /sys/kernel/tracing /sys/fs/bpf /sys/fs/cgroup
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
mount -t bpf bpf /sys/fs/bpf
mount -t cgroup2 cgroup2 /sys/fs/cgroup
echo "+cpu +memory" >/sys/fs/cgroup/cgroup.subtree_control
stty -F /dev/ttyS1 raw -echo 2>/dev/null
for m in /lib/modules/*.ko; do [ -e "$m" ] && insmod "$m"; done
mount -t fusectl fusectl /sys/fs/fuse/connections 2>/dev/null
emit() {
	{ echo "@@WOLF-BEGIN $1"; cat "$3"; echo; echo "@@WOLF-END $1 rc=$2"; } >/tmp/frame
	cat /tmp/frame >/dev/ttyS1
	cat /tmp/frame
}
note() { echo "@@WOLF-NOTE $*" >/dev/ttyS1; echo "== $*"; }
{ uname -a; cat /sys/fs/cgroup/cgroup.subtree_control; ls -l /dev/fuse; } >/tmp/env.out 2>&1
emit env 0 /tmp/env.out
for l in __LABS__; do
	d=10s
	[ "$l" = ps-hang-fuse ] && d=5s
	note "$l start"
	wolf lab run $l --duration 90s >/tmp/$l-lab.out 2>/tmp/$l-lab.err &
	lab=$!
	n=0
	while ! grep -q 'offender pid' /tmp/$l-lab.out 2>/dev/null && kill -0 $lab 2>/dev/null && [ $n -lt 900 ]; do usleep 100000; n=$((n + 1)); done
	sleep 2
	note "$l doctor"
	wolf doctor --duration $d --format json >/tmp/$l-doctor.json 2>/tmp/$l-doctor.err; rc=$?
	emit $l-doctor $rc /tmp/$l-doctor.json
	emit $l-doctor-stderr $rc /tmp/$l-doctor.err
	kill -INT $lab; n=0; while kill -0 $lab 2>/dev/null && [ $n -lt 300 ]; do usleep 100000; n=$((n + 1)); done; kill -KILL $lab 2>/dev/null
	emit $l-lab 0 /tmp/$l-lab.out
	emit $l-lab-stderr 0 /tmp/$l-lab.err
done
note "done"
sync
poweroff -f
INIT
sed -i -e "s/__LABS__/$LABS/" "$ROOT/init"
chmod +x "$ROOT/init"
(cd "$ROOT" && find . | /bin/busybox cpio -o -H newc -R 0:0 2>/dev/null | gzip -1 >"$OUT/initrd.gz")
rm -rf "$ROOT"

CONSOLE=$OUT/console.log DATA=$OUT/data.log
: >"$CONSOLE"; : >"$DATA"
log "booting under qemu (TCG, limit ${TIMEOUT}s)"
set +e
timeout --kill-after=10 "$TIMEOUT" qemu-system-x86_64 -accel tcg,thread=single -m 2G -smp 2 -no-reboot \
	-display none -monitor none -nic none \
	-serial "file:$CONSOLE" -serial "file:$DATA" \
	-kernel "$KDIR/vmlinuz" -initrd "$OUT/initrd.gz" \
	-append "console=ttyS0 panic=-1 quiet oops=panic" </dev/null >"$OUT/qemu.log" 2>&1
QRC=$?
set -e
log "qemu exited rc=$QRC"

tr -d '\r' <"$DATA" >"$OUT/data.txt"
section() { awk -v n="$1" '$0=="@@WOLF-BEGIN " n {on=1; next} on && index($0, "@@WOLF-END " n " rc=")==1 {exit} on' "$OUT/data.txt"; }
for s in $(sed -n 's/^@@WOLF-BEGIN //p' "$OUT/data.txt" | sort -u); do section "$s" >"$OUT/$s.out"; done

PASS=0 FAIL=0
result() { printf '%-4s %-40s %s\n' "$1" "$2" "$3"; case $1 in PASS) PASS=$((PASS + 1)) ;; FAIL) FAIL=$((FAIL + 1)) ;; esac; }
check() { local name=$1 detail=$2; shift 2; if "$@"; then result PASS "$name" "$detail"; else result FAIL "$name" "$detail"; fi; }
check "vm booted, ran, powered off" "qemu rc=$QRC" bash -c "[[ $QRC -eq 0 ]] && grep -q '^@@WOLF-NOTE done' '$OUT/data.txt'"
check "cgroup v2 with cpu and memory" "$(sed -n 2p "$OUT/env.out" 2>/dev/null)" grep -q 'cpu' "$OUT/env.out"

for l in $LABS; do
	j=$OUT/$l-doctor.out
	p=$(grep -m1 '^offender pid' "$OUT/$l-lab.out" 2>/dev/null | sed -E 's/^offender pid ([0-9]+), victims \[([0-9 ]*)\].*/\1 \2/' || true)
	if [[ -z "$p" ]]; then
		result FAIL "$l: lab started" "$(head -c 300 "$OUT/$l-lab-stderr.out" 2>/dev/null)"
		continue
	fi
	off=${p%% *}; vic=${p#* }
	if ! jq -e .diagnoses "$j" >/dev/null 2>&1; then
		result FAIL "$l: doctor ran" "$(head -c 300 "$OUT/$l-doctor-stderr.out")"
		continue
	fi
	d0=$(jq -c '.diagnoses[0] // {} | {id, title}' "$j")
	case $l in
	cpu-quota-lock) want=diagnose.cpu-quota ;;
	ps-hang-fuse) want=diagnose.fuse-daemon ;;
	*) want=diagnose. ;;
	esac
	check "$l: first diagnosis $want" "$d0" bash -c "jq -e --arg w '$want' '.diagnoses[0].id | startswith(\$w)' '$j' >/dev/null"
	check "$l: names the offender tid $off" "" bash -c "jq -e --argjson t $off '[.diagnoses[0].subjects[] | select(.tid==\$t)] | length > 0' '$j' >/dev/null"
	for v in $vic; do
		check "$l: names victim $v" "" bash -c "jq -e --argjson t $v '[.diagnoses[0].subjects[] | select(.role==\"victim\" and (.tid==\$t or .pid==\$t))] | length > 0' '$j' >/dev/null"
	done
	jq -r '.diagnoses[0].chain[]? | "      " + .relation + ": " + .text' "$j" | head -12
done
log "$PASS passed, $FAIL failed; logs in $OUT"
[[ $FAIL -eq 0 ]]
