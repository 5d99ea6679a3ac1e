#!/usr/bin/env bash
# Prove wolf's diagnoses on a kernel before 6.18, under qemu (TCG, no KVM),
# with cgroup v2: Debian's 6.12 by default. CI runs it.
#
# Why another kernel: since 6.18 CFS bandwidth control throttles a task only
# on its way back to user space, so a task holding a kernel lock (an
# mmap_lock inside mprotect) is never throttled, and the cpu-quota-lock lab
# cannot make its quota hold the lock there; wolf measures that and says
# so. Before 6.18 a throttled cgroup's tasks all leave the CPU at once, the
# holder with its lock: the pathology, and the chain wolf must draw. The
# development host runs cgroup v1 for cpu and memory; the VM runs v2, so
# the memory-limit chain is proven on v2 here too.
#
# What it does (scripts/qemu/lib.sh, shared with the kernel matrix):
#   1. fetches Debian's newest 6.12 kernel package (or the series in
#      WOLF_QEMU_SERIES) and the guest's userland through a private apt,
#      and extracts vmlinuz, its config and the modules the labs need;
#   2. builds a static wolf; a busybox initramfs whose /init mounts cgroup2
#      with the cpu and memory controllers enabled for children, and for
#      each lab in WOLF_QEMU_LABS runs `wolf lab run LAB` and, once it is
#      up, `wolf doctor --format json` (10 s; 5 s for ps-hang-fuse);
#   3. boots qemu-system-x86_64 -m 2G -smp 2 under `timeout`; a second
#      serial port carries the framed outputs the checks parse;
#   4. checks, per lab, that diagnoses[0] has the expected root, names the
#      lab's tasks (the lab's "offender pid N, victims [...]" line) and
#      carries the root's numbers on its hops (the cgroup's memory limit,
#      or its CPU quota and the share of periods it was throttled in);
#   5. then a Kubernetes pod's container as the kubelet (systemd driver)
#      and containerd's CRI plugin lay it out on cgroup v2: its cgroup
#      kubepods.slice/…/kubepods-burstable-pod<uid>.slice/cri-containerd-ID.scope
#      with a CPU quota (cpu.max) and a spinning task in it, and the OCI
#      bundle containerd keeps for it
#      (/run/containerd/io.containerd.runtime.v2.task/k8s.io/ID/config.json)
#      with the annotations the CRI plugin writes (no containerd runs: its
#      state is written as containerd writes it); checks that doctor's
#      first diagnosis names the pod, its namespace and the container, and
#      that doctor --pod puts it first (WOLF_QEMU_POD=0 skips it);
#   6. then runs scenarios of the scenario suite (scripts/scenarios, built
#      static, with the host's stress-ng and fio and the shared libraries
#      ldd lists for them) under cgroup v2: a CPU quota (cpu.max), a memory
#      limit (memory.max), I/O throttles (io.max) on a loop device and on
#      the VM's disk. Each is reported; the
#      check fails when one listed as "v2 NAME" in
#      scripts/scenarios/required.txt fails. The table lands in
#      $OUT/scenarios-table.out (markdown) and scenarios-json.out
#      (docs/scenarios-v2.md and .json are a copy of a 3-run pass).
#
# Exit status: 0 when every check passes, 1 when one fails, 2 on a setup error.
#
# Environment:
#   WOLF_QEMU_SERIES   kernel series (default 6.12; must be before 6.18)
#   WOLF_QEMU_LABS     labs (default "cpu-quota-lock memcg-mmap-lock ps-hang-fuse"; empty: none)
#   WOLF_QEMU_POD      1 (default): the Kubernetes pod step; 0: not
#   WOLF_QEMU_SCENARIOS  scenarios of scripts/scenarios to run under cgroup v2
#                      (default "cpu-quota memcg-thrash io-throttle-loop io-throttle-disk"; empty: none)
#   WOLF_QEMU_SCENARIO_RUNS  runs per scenario (default 1)
#   WOLF_QEMU_TIMEOUT  hard limit for qemu, seconds (default 1200)
#   WOLF_QEMU_OUT      where the logs go (default $CACHE/runs/diagnose-DATE)
#   and lib.sh's: WOLF_QEMU_CACHE, WOLF_QEMU_REFRESH, WOLF_QEMU_ACCEL
set -euo pipefail
LOG_TAG=qemu-diagnose
SELF_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$SELF_DIR/lib.sh"

SERIES=${WOLF_QEMU_SERIES:-6.12}
LABS=${WOLF_QEMU_LABS-cpu-quota-lock memcg-mmap-lock ps-hang-fuse}
POD=${WOLF_QEMU_POD:-1}
TIMEOUT=${WOLF_QEMU_TIMEOUT:-1200}
SCENARIOS=${WOLF_QEMU_SCENARIOS-cpu-quota memcg-thrash io-throttle-loop io-throttle-disk}
SCENARIO_RUNS=${WOLF_QEMU_SCENARIO_RUNS:-1}
[[ $(id -u) -eq 0 ]] || die "run as root (the private apt's cache, and qemu's disk image)"
command -v jq >/dev/null || die "jq missing (apt-get install jq)"
if [[ -n $SCENARIOS ]]; then
	for t in stress-ng fio ldd; do command -v $t >/dev/null || die "$t missing: the scenarios copy the host's into the guest (apt-get install stress-ng fio, or .ci/run deps)"; done
fi

qemu_setup
OUT=${WOLF_QEMU_OUT:-$CACHE/runs/diagnose-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
read -r -a mods <<<"fuse loop $(qemu_modules amd64)"
qemu_kernel "$SERIES" amd64 "${mods[@]}"
grep -q '^CONFIG_CFS_BANDWIDTH=y' "$KDIR/config" || die "$KPKG: no CONFIG_CFS_BANDWIDTH"
log "kernel $KPKG $KVER, logs in $OUT"

ROOT=$OUT/rootfs
qemu_rootfs "$ROOT" amd64
# copy_with_libs ROOT BIN...: the host's binaries with every shared library
# ldd lists for them, at the same paths (the guest's C library is bookworm's,
# as the host's).
copy_with_libs() {
	local root=$1 b p l
	shift
	for b in "$@"; do
		p=$(command -v "$b")
		install -D -m 755 "$p" "$root/usr/bin/$(basename "$p")"
		ldd "$p" | awk '/=> \//{print $3} /^[ \t]*\//{print $1}' | sort -u | while read -r l; do
			install -D -m 755 "$(readlink -f "$l")" "$root$l"
		done
	done
}
if [[ -n $SCENARIOS ]]; then
	log "building the scenario suite (static) and copying stress-ng and fio with their libraries"
	(cd "$REPO" && CGO_ENABLED=0 go build -trimpath -o "$ROOT/bin/scenarios" ./scripts/scenarios) || die "go build ./scripts/scenarios failed"
	copy_with_libs "$ROOT" stress-ng fio
fi
cat >"$OUT/tasks.sh" <<TASKS
LABS="$LABS"
POD="$POD"
SCENARIOS="$SCENARIOS"
SCENARIO_RUNS="$SCENARIO_RUNS"
SCEN_REV="$(git -C "$REPO" describe --always --dirty 2>/dev/null || echo unknown)"
TASKS
cat >>"$OUT/tasks.sh" <<'TASKS'
{ uname -a; cat /sys/fs/cgroup/cgroup.subtree_control; ls -l /dev/fuse; cat /tmp/insmod.err; } >/tmp/env.out 2>&1
emit env 0 /tmp/env.out
for l in $LABS; do
	d=10s
	[ "$l" = ps-hang-fuse ] && d=5s
	note "$l start uptime=$(up)s"
	wolf lab run $l --duration 120s >/tmp/$l-lab.out 2>/tmp/$l-lab.err &
	lab=$!
	wait_for /tmp/$l-lab.out 'offender pid' 120 $lab
	sleep 2
	note "$l doctor uptime=$(up)s"
	WOLF_FACTS_OUT=/tmp/$l-facts.json wolf doctor --duration $d --format json >/tmp/$l-doctor.json 2>/tmp/$l-doctor.err; rc=$?
	emit $l-doctor $rc /tmp/$l-doctor.json
	# The typed facts, to replay a wrong diagnosis (internal/diagnose/testdata).
	[ -e /tmp/$l-facts.json ] && emit $l-facts 0 /tmp/$l-facts.json
	emit $l-doctor-stderr $rc /tmp/$l-doctor.err
	stop $lab
	emit $l-lab 0 /tmp/$l-lab.out
	emit $l-lab-stderr 0 /tmp/$l-lab.err
done
if [ "$POD" = 1 ]; then
	# A pod's container as the kubelet's systemd driver and containerd's
	# CRI plugin make it: cgroup and OCI bundle (see the header).
	note "pod start uptime=$(up)s"
	uid=8f1c2d3e-4a5b-6c7d-8e9f-0a1b2c3d4e5f
	id=be7701a021ff5b1c8bf2d9bd4a0c3a8e5e2d3f1a9c0b8d7e6f5a4b3c2d1e0f9a
	k=/sys/fs/cgroup/kubepods.slice
	b=$k/kubepods-burstable.slice
	p=$b/kubepods-burstable-pod$(echo $uid | tr - _).slice
	c=$p/cri-containerd-$id.scope
	mkdir -p $c
	for d in $k $b $p; do echo +cpu >$d/cgroup.subtree_control; echo +memory >$d/cgroup.subtree_control; done
	echo "10000 100000" >$c/cpu.max
	bundle=/run/containerd/io.containerd.runtime.v2.task/k8s.io/$id
	mkdir -p $bundle
	cat >$bundle/config.json <<SPEC
{"ociVersion":"1.1.0","annotations":{"io.kubernetes.cri.container-type":"container","io.kubernetes.cri.sandbox-id":"3f2a1b9c0d1e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f90","io.kubernetes.cri.sandbox-name":"clickhouse-0","io.kubernetes.cri.sandbox-namespace":"prod","io.kubernetes.cri.sandbox-uid":"$uid","io.kubernetes.cri.container-name":"server","io.kubernetes.cri.image-name":"docker.io/clickhouse/clickhouse-server:24.3"},"linux":{"cgroupsPath":"kubepods-burstable-pod$(echo $uid | tr - _).slice:cri-containerd:$id"}}
SPEC
	sh -c "echo \$\$ >$c/cgroup.procs; exec sh -c 'while :; do :; done'" &
	spin=$!
	sleep 3
	{ cat $c/cgroup.procs; cat $c/cpu.max; cat $c/cpu.stat; } >/tmp/pod-env.out 2>&1
	emit pod-env 0 /tmp/pod-env.out
	wolf doctor --duration 10s --format json >/tmp/pod-doctor.json 2>/tmp/pod-doctor.err; rc=$?
	emit pod-doctor $rc /tmp/pod-doctor.json
	emit pod-doctor-stderr $rc /tmp/pod-doctor.err
	wolf doctor --duration 5s --pod clickhouse-0.prod >/tmp/pod-doctor-pod.txt 2>&1; rc=$?
	emit pod-doctor-pod $rc /tmp/pod-doctor-pod.txt
	kill -KILL $spin 2>/dev/null; wait $spin 2>/dev/null
	note "pod done uptime=$(up)s"
fi
if [ -n "$SCENARIOS" ]; then
	note "scenarios start uptime=$(up)s"
	mkdir -p /tmp/scen
	scenarios -wolf /bin/wolf -only "$(echo $SCENARIOS | tr ' ' ,)" -runs "$SCENARIO_RUNS" -keep /tmp/scen -out /tmp/scen/table -scratch /var/tmp -ci \
		-reproduce "WOLF_QEMU_LABS= WOLF_QEMU_POD=0 WOLF_QEMU_SCENARIOS='$SCENARIOS' WOLF_QEMU_SCENARIO_RUNS=$SCENARIO_RUNS scripts/qemu/diagnose-on-debian.sh (wolf built from $SCEN_REV; Debian $(uname -r) under qemu, 2 vCPUs, 2 GiB)" >/tmp/scen.out 2>&1; rc=$?
	note "scenarios done rc=$rc uptime=$(up)s"
	emit scenarios $rc /tmp/scen.out
	emit scenarios-table 0 /tmp/scen/table.md
	emit scenarios-json 0 /tmp/scen/table.json
	# Each run's doctor JSON and typed facts, to tell a wrong first item's why.
	for f in /tmp/scen/*.facts.json; do
		[ -e "$f" ] || continue
		r=${f##*/}; r=${r%.facts.json}
		emit "scen-$r-facts" 0 "$f"
		emit "scen-$r-doctor" 0 "/tmp/scen/$r.json"
	done
fi
TASKS
qemu_init "$ROOT" "$(qemu_datadev amd64)" "$OUT/tasks.sh"
qemu_initramfs "$ROOT" "$OUT/initrd.gz"
rm -rf "$ROOT"
qemu_boot amd64 "$OUT/initrd.gz" "$OUT" "$TIMEOUT"
rm -f "$OUT/initrd.gz"
qemu_sections "$OUT"

PASS=0 FAIL=0
result() {
	printf '%-4s %-48s %s\n' "$1" "$2" "$3"
	case $1 in PASS) PASS=$((PASS + 1)) ;; FAIL) FAIL=$((FAIL + 1)) ;; esac
}
check() {
	local name=$1 detail=$2
	shift 2
	if "$@"; then result PASS "$name" "$detail"; else result FAIL "$name" "$detail"; fi
}
# jqd FILE FILTER: FILTER on the first diagnosis of FILE is true.
jqd() { jq -e "(.diagnoses[0] // {}) | $2" "$1" >/dev/null 2>&1; }

check "vm booted, ran, powered off" "qemu rc=$QRC" bash -c "[[ $QRC -eq 0 ]] && grep -q '^@@WOLF-NOTE done' '$OUT/data.txt'"
check "kernel log clean" "" bash -c "! grep -qE 'BUG:|Oops|Kernel panic|soft lockup|WARNING: CPU' '$OUT/console.log'"
check "cgroup v2 with cpu and memory" "$(sed -n 2p "$OUT/env.out" 2>/dev/null)" bash -c "sed -n 2p '$OUT/env.out' | grep -q cpu && sed -n 2p '$OUT/env.out' | grep -q memory"

for l in $LABS; do
	j=$OUT/$l-doctor.out
	p=$(grep -m1 '^offender pid' "$OUT/$l-lab.out" 2>/dev/null | sed -E 's/^offender pid ([0-9]+), victims \[([0-9 ]*)\].*/\1 \2/' || true)
	if [[ -z "$p" ]]; then
		result FAIL "$l: lab started" "$(head -c 300 "$OUT/$l-lab-stderr.out" 2>/dev/null)"
		continue
	fi
	off=${p%% *} vic=${p#* }
	if ! jq -e .diagnoses "$j" >/dev/null 2>&1; then
		result FAIL "$l: doctor ran" "$(head -c 300 "$OUT/$l-doctor-stderr.out" 2>/dev/null)"
		continue
	fi
	case $l in
	cpu-quota-lock)
		want='^diagnose\\.cpu-quota$'
		# The cgroup at the root; its quota and the share of periods it
		# was throttled in on a hop.
		nums='(.root.cgroup // "") != "" and ([.chain[] | select(.evidence.quota_us != null and .evidence.throttled_pct != null)] | length > 0)'
		what="root cgroup; quota_us and throttled_pct on a hop"
		;;
	memcg-mmap-lock)
		# The memory-limit chain is proven on the development host (v1:
		# TestDoctorDiagnosesMemcgLimitUnderMmapLock). Here, on v2, the
		# lab's 32 threads saturate two emulated CPUs, and its reclaiming
		# holder waits for a CPU most of its hold: doctor then names the
		# saturated CPUs first, which is what the guest shows. Either
		# root passes, with the v2 cgroup read at its limit.
		want='^diagnose\\.(memcg-limit|host-cpu)$'
		nums='[.chain[] | select(.evidence.reclaim_ms != null or .evidence.reclaim_ms_total != null or .evidence.limit_bytes != null)] | length > 0'
		what="the reclaim under the lock on a hop"
		check "$l: the v2 cgroup at its memory limit" "" bash -c "jq -e '[.findings[] | select(.id == \"reclaim.memcg-pressure\" and (.evidence.cgroup | startswith(\"/wolf-lab-memchain\")) and .evidence.limit_bytes > 0)] | length > 0' '$j' >/dev/null"
		;;
	ps-hang-fuse)
		want='^diagnose\\.fuse-daemon$'
		nums='[.subjects[] | select(.role == "holder" or .role == "owner")] | length > 0'
		what="the mmap_lock's reader-owner"
		;;
	*) want='^diagnose\\.' nums=true what="" ;;
	esac
	d0=$(jq -c '.diagnoses[0] // {} | {id, title}' "$j")
	check "$l: first diagnosis $want" "$d0" jqd "$j" "(.id // \"\") | test(\"$want\")"
	# The offender is a thread (the lock's holder) or, for a lab whose
	# holder is any of its threads, the process.
	check "$l: names the offender $off" "" jqd "$j" "[.subjects[] | select(.tid == $off or .pid == $off)] | length > 0"
	for v in $vic; do
		# The lab's victim is required in the first diagnosis when it was
		# one in the window by doctor's own findings: a wait on a lock of
		# 200 ms or 1 s in all (the diagnosis's thresholds), or a hang.
		# Under emulation the lab's ps reader is sometimes barely blocked
		# in the 10 s window (its holder holds between windows), and a
		# wait already going when doctor attached is not seen at all:
		# then it is reported, not failed.
		waited="[.findings[] | .subjects[]? | select((.tid == $v or .pid == $v) and (.role == \"waiter\" or .role == \"victim\") and ((.evidence.wait_ms_max // 0) >= 200 or (.evidence.wait_ms_total // 0) >= 1000 or .evidence.blocked_s != null))] | length > 0"
		if jq -e "$waited" "$j" >/dev/null 2>&1; then
			check "$l: names victim $v" "" jqd "$j" "[.subjects[] | select(.role == \"victim\" and (.tid == $v or .pid == $v))] | length > 0"
		else
			log "$l: victim $v not checked: doctor saw it wait under 200 ms at most and 1 s in all, or not at all: $(jq -c "[.findings[] | .subjects[]? | select(.tid == $v and .role == \"waiter\") | .evidence | {wait_ms_max, wait_ms_total}]" "$j" 2>/dev/null)"
		fi
	done
	# Numbers on every hop but "held by" (a lock's owner is a fact).
	check "$l: numbers on the hops" "$what" jqd "$j" "($nums) and ([.chain[] | select(.relation != \"held_by\" and ((.evidence // {}) | length == 0))] | length == 0)"
	jq -r '.diagnoses[0].chain[]? | "      " + .relation + ": " + (.text // "")' "$j" | head -12
done
if [[ $POD == 1 ]]; then
	j=$OUT/pod-doctor.out
	want="pod clickhouse-0 (ns prod), container server"
	check "pod: doctor names the pod and container first" "$(jq -c '.diagnoses[0] // {} | {id, title}' "$j" 2>/dev/null)" \
		jqd "$j" "(.title // \"\") | contains(\"$want\")"
	check "pod: the root is the container's cgroup, v2" "" \
		jqd "$j" '.root.pod == "clickhouse-0" and .root.namespace == "prod" and .root.container == "server" and .root.qos == "burstable" and .root.runtime == "containerd" and (.root.cgroup | startswith("/kubepods.slice/"))'
	check "pod: doctor --pod puts it first" "$(grep -m1 '^DIAGNOSIS' "$OUT/pod-doctor-pod.out" 2>/dev/null)" \
		bash -c "grep -m1 -A1 '^DIAGNOSIS' '$OUT/pod-doctor-pod.out' | tr -s ' \n' ' ' | grep -qF '$want'"
fi
if [[ -n $SCENARIOS ]]; then
	# The suite's own judgement; -ci fails only on the v2 scenarios that
	# scripts/scenarios/required.txt requires. Every run is shown.
	grep -E '^(PASS|FAIL) |^     |^scenarios: (first|required)' "$OUT/scenarios.out" 2>/dev/null | sed 's/^/      /' || true
	check "scenarios under cgroup v2: the required ones right" "$SCENARIOS" bash -c "[[ \$(cat '$OUT/scenarios.rc' 2>/dev/null) == 0 ]]"
fi
log "$PASS passed, $FAIL failed; logs in $OUT"
[[ $FAIL -eq 0 ]]
