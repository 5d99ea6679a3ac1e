#!/usr/bin/env bash
# Prove wolf's hung-task investigator on Debian's 6.1 kernel, under qemu (TCG,
# no KVM): a kernel without task->blocker, where the pre-6.14 fallbacks of
# internal/hung/hung.bpf.c are the only way to name a lock owner.
#
# What it does (see README.md beside this file):
#   The kernel matrix's pieces (scripts/qemu/lib.sh, shared with
#   scripts/matrix/run) do the fetching, building and booting:
#   1. a private apt (in the cache dir, nothing installed) downloads the newest
#      linux-image-6.1.0-N-amd64-unsigned and the guest's userland; dpkg-deb
#      extracts vmlinuz, its config, fuse.ko and the disk's modules into a
#      cache dir OUTSIDE the repo.
#   2. go build (static) of cmd/wolf and `go test -c` of internal/hung and
#      internal/locks.
#   3. a busybox initramfs whose /init runs the rounds below and powers off.
#   4. qemu-system-x86_64 -m 2G -smp 2, under `timeout`; serial port 0 is the
#      console (WOLF_QEMU_SHOW=1 shows it live), serial port 1 carries only
#      the framed outputs the checks parse (no kernel messages interleaved).
#   Rounds inside the VM, for each lab in WOLF_QEMU_LABS (fuse-rwsem, fuse-mutex):
#     check       : wolf check (text and json): hung must be ready (degraded is fine)
#     before-LAB  : the lab first, `wolf hung --duration 5s --threshold 2s` after:
#                   victims blocked before wolf started, so without task->blocker
#                   expect hung.wait-site naming every victim (hung.lock-owner,
#                   on a kernel with task->blocker, passes too)
#     after-LAB   : `wolf hung --duration 12s` first (the lab starts once wolf
#                   holds its BPF links), the lab after: lock:contention_begin
#                   sees the waits; expect hung.lock-owner naming the lab's
#                   offender and every victim
#     tests       : internal/hung's test binary (capability skips stay skips: 6.1 lacks task->blocker)
#                   (informational; WOLF_QEMU_TESTS=require makes it a check,
#                   WOLF_QEMU_TESTS=0 skips it)
#
# Exit status: 0 when every check passes, 1 when one fails, 2 on a setup error.
#
# Environment:
#   WOLF_QEMU_CACHE       cache dir (default: $XDG_CACHE_HOME/wolf-qemu if set,
#                         else /var/cache/wolf-qemu when root, else ~/.cache/wolf-qemu)
#   WOLF_QEMU_REFRESH=1   apt-get update and re-pick the kernel even if one is cached
#   WOLF_QEMU_TESTS       1 (default): run internal/hung's tests, report only;
#                         require: their failure fails the run; 0: skip them
#   WOLF_QEMU_LABS        labs to run both rounds with (default "fuse-rwsem fuse-mutex")
#   WOLF_QEMU_SETTLE      seconds between the lab's "offender pid" line and wolf hung
#                         in the "before" round (default 3; victims are then >= 3 s in D)
#   WOLF_QEMU_TIMEOUT     hard limit for qemu, seconds (default 600)
#   WOLF_QEMU_OUT         where the run's logs go (default: $CACHE/runs/DATE)
#   WOLF_QEMU_ACCEL       qemu -accel (default tcg,thread=single; see below)
#   WOLF_QEMU_APPEND      extra kernel command line
set -euo pipefail
LOG_TAG=qemu-6.1
SELF_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$SELF_DIR/lib.sh"
qemu_setup
command -v jq >/dev/null || die "jq is missing (apt-get install jq): the checks read wolf's JSON with it"

TIMEOUT=${WOLF_QEMU_TIMEOUT:-600}
RUN_TESTS=${WOLF_QEMU_TESTS:-1}
LABS=${WOLF_QEMU_LABS:-fuse-rwsem fuse-mutex}
SETTLE=${WOLF_QEMU_SETTLE:-3}
APPEND_EXTRA=${WOLF_QEMU_APPEND:-}
OUT=${WOLF_QEMU_OUT:-$CACHE/runs/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"

# ---------------------------------------------------------------- kernel
read -r -a mods <<<"fuse $(qemu_modules amd64)"
qemu_kernel 6.1 amd64 "${mods[@]}"
log "kernel: $KPKG $KVER; BTF: $(grep -E '^CONFIG_DEBUG_INFO_BTF=' "$KDIR/config" || echo 'CONFIG_DEBUG_INFO_BTF unset')"

# ---------------------------------------------------------------- build
ROOT=$OUT/rootfs
qemu_rootfs "$ROOT" amd64
if [[ $RUN_TESTS != 0 ]]; then
	(cd "$REPO" && CGO_ENABLED=0 go test -c -trimpath -o "$ROOT/bin/hung.test" ./internal/hung) || die "go test -c ./internal/hung failed"
	(cd "$REPO" && CGO_ENABLED=0 go test -c -trimpath -o "$ROOT/bin/locks.test" ./internal/locks) || die "go test -c ./internal/locks failed"
fi

# ---------------------------------------------------------------- /init
# lib.sh's /init mounts, loads the modules, defines emit/note/wait_for/
# links/stop/up, then runs these rounds.
TASKS=$OUT/tasks.sh
cat >"$TASKS" <<'TASKS'
{
	uname -a
	echo "btf: $(ls -l /sys/kernel/btf/vmlinux 2>&1)"
	cat /tmp/insmod.err
	echo "/dev/fuse: $(ls -l /dev/fuse 2>&1)"
	for tp in sched/sched_switch lock/contention_begin lock/contention_end sched/sched_process_hang workqueue/workqueue_execute_start; do
		if [ -d /sys/kernel/tracing/events/$tp ]; then echo "tracepoint $tp: yes"; else echo "tracepoint $tp: NO"; fi
	done
	echo "hung_task_timeout_secs=$(cat /proc/sys/kernel/hung_task_timeout_secs 2>&1)"
} >/tmp/env.out 2>&1
emit env 0 /tmp/env.out

# ---- check
wolf check >/tmp/check.txt 2>&1; rc=$?
emit check-text $rc /tmp/check.txt
wolf check --format json >/tmp/check.json 2>/tmp/check.err; rc=$?
emit check-json $rc /tmp/check.json
[ -s /tmp/check.err ] && emit check-stderr $rc /tmp/check.err

# ---- the rounds, for each lab
# before LAB: the lab first, wolf after (victims blocked before wolf started)
before() {
	r=before-$1
	note "$r start uptime=$(up)s"
	wolf lab run $1 --duration 40s >/tmp/$r-lab.out 2>/tmp/$r-lab.err &
	lab=$!
	if wait_for /tmp/$r-lab.out 'offender pid' 60 $lab; then
		sleep __SETTLE__ # victims blocked for longer than the threshold, before wolf starts
		note "$r wolf hung uptime=$(up)s"
		wolf hung --duration 5s --threshold 2s --format json >/tmp/$r-hung.json 2>/tmp/$r-hung.err; rc=$?
	else
		note "$r lab did not start"
		echo "lab did not start" >/tmp/$r-hung.err; : >/tmp/$r-hung.json; rc=255
	fi
	emit $r-hung $rc /tmp/$r-hung.json
	emit $r-hung-stderr $rc /tmp/$r-hung.err
	stop $lab
	emit $r-lab 0 /tmp/$r-lab.out
	emit $r-lab-stderr 0 /tmp/$r-lab.err
}
# after LAB: wolf first, the lab after (lock:contention_begin sees the waits)
after() {
	r=after-$1
	note "$r start uptime=$(up)s"
	wolf hung --duration 12s --threshold 2s --format json >/tmp/$r-hung.json 2>/tmp/$r-hung.err &
	w=$!
	n=0
	while [ "$(links $w)" -lt 2 ] && kill -0 $w 2>/dev/null && [ $n -lt 300 ]; do usleep 100000; n=$((n + 1)); done
	sleep 1
	note "$r wolf attached ($(links $w) bpf links) uptime=$(up)s; starting the lab"
	wolf lab run $1 --duration 40s >/tmp/$r-lab.out 2>/tmp/$r-lab.err &
	lab=$!
	wait_for /tmp/$r-lab.out 'offender pid' 60 $lab && note "$r lab up uptime=$(up)s"
	wait $w; rc=$?
	note "$r wolf hung done uptime=$(up)s"
	emit $r-hung $rc /tmp/$r-hung.json
	emit $r-hung-stderr $rc /tmp/$r-hung.err
	stop $lab
	emit $r-lab 0 /tmp/$r-lab.out
	emit $r-lab-stderr 0 /tmp/$r-lab.err
}
for l in __LABS__; do
	before $l
	after $l
done

# ---- internal/hung's tests (live ones included: root, /dev/fuse)
if [ -x /bin/hung.test ]; then
	note "tests start uptime=$(up)s"
	cd /tmp && timeout 300 /bin/hung.test -test.v -test.timeout 280s >/tmp/tests.out 2>&1; rc=$?
	emit tests $rc /tmp/tests.out
fi
# ---- internal/locks' live tests: on 6.1 the BTF-tracepoint build is
# refused (no bpf_task_from_pid before 6.2) and the raw one must work.
if [ -x /bin/locks.test ]; then
	note "locks tests start uptime=$(up)s"
	cd /tmp && timeout 200 /bin/locks.test -test.v -test.run Live -test.timeout 180s >/tmp/locks-tests.out 2>&1; rc=$?
	emit locks-tests $rc /tmp/locks-tests.out
fi

dmesg >/tmp/dmesg.out 2>&1
emit dmesg 0 /tmp/dmesg.out
note "done uptime=$(up)s"
sync
poweroff -f
TASKS
sed -i -e "s/__LABS__/$LABS/" -e "s/__SETTLE__/$SETTLE/" "$TASKS"
qemu_init "$ROOT" /dev/ttyS1 "$TASKS"
qemu_initramfs "$ROOT" "$OUT/initrd.gz"
rm -rf "$ROOT"
# Keep the logs of the last 5 runs only.
if [[ -z "${WOLF_QEMU_OUT:-}" ]]; then
	ls -1dt "$CACHE"/runs/*/ 2>/dev/null | tail -n +6 | xargs -r rm -rf
fi

# ---------------------------------------------------------------- boot
WOLF_QEMU_SHOW=${WOLF_QEMU_SHOW:-1} qemu_boot amd64 "$OUT/initrd.gz" "$OUT" "$TIMEOUT" "$APPEND_EXTRA"
rm -f "$OUT/initrd.gz"
# From here on every step is a check that reports, not a step that stops the script.
set +e
CONSOLE=$OUT/console.log

# ---------------------------------------------------------------- checks
qemu_sections "$OUT"
section_rc() { cat "$OUT/$1.rc" 2>/dev/null; }

PASS=0 FAIL=0
declare -a RESULTS
result() { # result PASS|FAIL|INFO name detail
	case $1 in PASS) PASS=$((PASS + 1)) ;; FAIL) FAIL=$((FAIL + 1)) ;; esac
	RESULTS+=("$(printf '%-4s %-34s %s' "$1" "$2" "$3")")
}
check() { local name=$1 detail=$2; shift 2; if "$@"; then result PASS "$name" "$detail"; else result FAIL "$name" "$detail"; fi; }
json_ok() { [[ -s "$1" ]] && jq -e .findings "$1" >/dev/null 2>&1; }

check "vm booted, ran, powered off" "qemu rc=$QRC, ${BOOT_S}s" \
	bash -c "[[ $QRC -eq 0 ]] && grep -q '^@@WOLF-NOTE done' '$OUT/data.txt'"
oops=$(grep -m1 -aE 'BUG:|Oops|Kernel panic|soft lockup|WARNING: CPU|Unrecoverable kprobe' "$CONSOLE" | tr -d '\r' | cut -c1-200)
check "no oops, panic or lockup" "${oops:-kernel log clean (console.log)}" test -z "$oops"
check "kernel is 6.1" "$(grep -m1 '^Linux' "$OUT/env.out" 2>/dev/null | awk '{print $3}')" grep -qE '^Linux [^ ]+ 6\.1\.' "$OUT/env.out"
check "BTF /sys/kernel/btf/vmlinux" "" grep -q '^btf: .*/sys/kernel/btf/vmlinux$' "$OUT/env.out"
check "fuse.ko loaded, /dev/fuse" "" bash -c "! grep -q '^insmod .*fuse.* failed' '$OUT/env.out' && grep -q '^/dev/fuse: c' '$OUT/env.out'"

# wolf check: hung ready (degraded allowed)
if [[ -s "$OUT/check-json.out" ]] && jq -e .investigators "$OUT/check-json.out" >/dev/null 2>&1; then
	h=$(jq -c '.investigators[] | select(.name=="hung") | {ready, degraded, missing: [.requirements[] | select(.available|not) | .feature]}' "$OUT/check-json.out")
	check "wolf check: hung ready" "$h" bash -c "jq -e '.investigators[] | select(.name==\"hung\") | .ready' '$OUT/check-json.out' >/dev/null"
else
	result FAIL "wolf check: hung ready" "no JSON (rc=$(section_rc check-json)); see check-text.out"
fi

# pids_of R ID ROLE: pids with ROLE in finding ID of round R
pids_of() { jq -r --arg id "$2" --arg role "$3" '[.findings[] | select(.id==$id) | (.subjects // [])[] | select(.role==$role) | .pid] | unique | .[]' "$OUT/$1-hung.out" | sort -n | xargs; }

round() { # round before|after LAB
	local r=$1-$2 p off vic ids id got_vic got_off any
	# The lab's line: "offender pid N, victims [A B]"
	p=$(grep -m1 '^offender pid' "$OUT/$r-lab.out" 2>/dev/null | sed -E 's/^offender pid ([0-9]+), victims \[([0-9 ]*)\].*/\1 \2/')
	if [[ -z "$p" ]]; then
		result FAIL "$r: lab started" "$(grep -m1 -E 'wolf: |error' "$OUT/$r-lab-stderr.out" 2>/dev/null | cut -c1-300)"
		return
	fi
	off=${p%% *}; vic=$(echo "${p#* }" | tr ' ' '\n' | sort -n | xargs)
	result PASS "$r: lab started" "offender $off, victims [$vic]"
	if ! json_ok "$OUT/$r-hung.out"; then
		result FAIL "$r: wolf hung ran" "rc=$(section_rc "$r-hung"), no JSON: $(head -c 300 "$OUT/$r-hung-stderr.out")"
		return
	fi
	result PASS "$r: wolf hung ran" "rc=$(section_rc "$r-hung")"
	ids=$(jq -r '[.findings[].id] | join(",")' "$OUT/$r-hung.out")
	if [[ $1 == before ]]; then
		# Without task->blocker nothing tells which lock a task that blocked
		# before wolf started waits on: hung.wait-site. A hung.lock-owner
		# (a kernel with task->blocker) is better, and is checked as such.
		id=hung.wait-site
		[[ ",$ids," != *",hung.wait-site,"* && ",$ids," == *",hung.lock-owner,"* ]] && id=hung.lock-owner
		check "$r: finding wait-site|lock-owner" "findings: ${ids:-none}" bash -c "[[ ',$ids,' == *',$id,'* ]]"
	else
		id=hung.lock-owner
		check "$r: finding lock-owner" "findings: ${ids:-none}" bash -c "[[ ',$ids,' == *',$id,'* ]]"
	fi
	got_vic=$(pids_of "$r" "$id" victim)
	check "$r: victims named" "$id victims [$got_vic], lab [$vic]" bash -c "[[ '$got_vic' == '$vic' ]]"
	if [[ $id == hung.lock-owner ]]; then
		got_off=$(pids_of "$r" "$id" offender)
		check "$r: offender named" "$id offender [$got_off], lab $off" bash -c "[[ '$got_off' == '$off' ]]"
	else
		any=$(jq -r --argjson p "$off" '[.findings[] | select((.subjects // []) | any(.pid==$p)) | .id] + [.findings[] | select(.evidence.likely_owner_pid==$p) | .id + "(likely_owner_pid)"] | unique | join(",")' "$OUT/$r-hung.out")
		result INFO "$r: offender $off in report" "${any:-not named (expected without task->blocker)}"
	fi
}
for l in $LABS; do
	round before "$l"
	round after "$l"
done

if [[ $RUN_TESTS != 0 ]]; then
	trc=$(section_rc tests)
	fails=$(grep -E '^\s*--- FAIL' "$OUT/tests.out" | sed -E 's/^\s*--- FAIL: ([^ ]+).*/\1/' | xargs)
	skips=$(grep -E '^\s*--- SKIP' "$OUT/tests.out" | sed -E 's/^\s*--- SKIP: ([^ ]+).*/\1/' | xargs)
	npass=$(grep -cE '^\s*--- PASS' "$OUT/tests.out" || true)
	detail="rc=${trc:-none}, $npass passed${fails:+, FAILED: $fails}${skips:+, skipped: $skips} (tests.out)"
	if [[ $RUN_TESTS == require ]]; then
		check "go test ./internal/hung" "$detail" bash -c "[[ '${trc:-x}' == 0 ]]"
	else
		result INFO "go test ./internal/hung" "$detail"
	fi
	lrc=$(section_rc locks-tests)
	lf="$OUT/locks-tests.out"
	fails=$(grep -E '^\s*--- FAIL' "$lf" 2>/dev/null | sed -E 's/^\s*--- FAIL: ([^ ]+).*/\1/' | xargs)
	npass=$(grep -cE '^\s*--- PASS' "$lf" 2>/dev/null || true)
	detail="rc=${lrc:-none}, $npass passed${fails:+, FAILED: $fails} (locks-tests.out)"
	if [[ $RUN_TESTS == require ]]; then
		check "go test -run Live ./internal/locks" "$detail" bash -c "[[ '${lrc:-x}' == 0 ]]"
	else
		result INFO "go test -run Live ./internal/locks" "$detail"
	fi
fi

# BPF trouble in the kernel log (verifier, BTF) is worth seeing even on success.
grep -iE 'bpf|btf|verifier|fuse' "$OUT/dmesg.out" | grep -v 'Spectre' | head -10 | sed 's/^/  dmesg: /' || true

echo
echo "=== wolf hung on $KPKG ($KVER) under qemu TCG: summary ==="
for s in "${RESULTS[@]}"; do echo "  $s"; done
for r in $(for l in $LABS; do echo "before-$l after-$l"; done); do
	if json_ok "$OUT/$r-hung.out"; then
		echo "  $r findings:"
		jq -r '.findings[] | "    \(.severity) \(.id): \(.title)"' "$OUT/$r-hung.out"
	fi
done
echo "  logs: $OUT (console.log, data.txt, *.out)"
echo "  $PASS passed, $FAIL failed, total $(($(date +%s) - T0))s (qemu ${BOOT_S}s)"
[[ $FAIL -eq 0 ]]
