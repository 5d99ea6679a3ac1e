# shellcheck shell=sh
# The kernel matrix's steps, run inside the guest by /init (scripts/qemu/lib.sh
# defines emit, note, wait_for, links, stop and up) or on the host itself by
# `scripts/matrix/run --host` (which defines them the same way). Every
# output is emitted as a frame NAME with wolf's exit status; the host side
# (scripts/matrix/table) classifies them.
#
# Settings come from /etc/matrix.env (or the environment on the host):
#   STEPS        which steps: env check doctor investigators labs (default all)
#   DURATION     each investigator's --duration (default 10s)
#   DOCTOR_RUNS  idle doctor runs (default 3)
#   INVESTIGATORS, LABS  subsets (default: every one below)
[ -r /etc/matrix.env ] && . /etc/matrix.env
STEPS=${STEPS:-env check doctor investigators labs}
DURATION=${DURATION:-10s}
DOCTOR_RUNS=${DOCTOR_RUNS:-3}
INVESTIGATORS=${INVESTIGATORS:-hung locks reclaim sched softirq io bpf}
# LAB:INVESTIGATOR:ORDER. ORDER "lab" starts the lab first and wolf once the
# lab is up; "wolf" starts wolf first and the lab once wolf is attached (the
# hung labs: a lock is known from the wait's start, which wolf must see).
ALL_LABS="fuse-rwsem:hung:wolf fuse-mutex:hung:wolf coredump:hung:lab mmap-lock:locks:wolf mmap-lock-reclaim:locks:lab memcg-stress:reclaim:lab sched-bounce:sched:lab sched-affinity:sched:lab sched-pinned:sched:lab tcp-collapse:softirq:lab io-throttle:io:lab dirty-throttle:io:lab slow-device:io:lab hot-uprobe:bpf:lab"
LABS=${LABS:-$ALL_LABS}
W=${WOLF:-wolf}
T=${MATRIX_TMP:-/tmp/matrix}
mkdir -p "$T"

# excl_begin/excl_end bracket what must not run beside another engineer's
# lab on a shared host (the host row defines them; the guest is alone).
type excl_begin >/dev/null 2>&1 || excl_begin() { :; }
type excl_end >/dev/null 2>&1 || excl_end() { :; }

has_step() { case " $STEPS " in *" $1 "*) return 0 ;; esac; return 1; }

if has_step env; then
	{
		echo "uname: $(uname -a)"
		echo "nproc: $(nproc)"
		echo "btf: $(ls -l /sys/kernel/btf/vmlinux 2>&1)"
		[ -s /tmp/insmod.err ] && sed 's/^/insmod: /' /tmp/insmod.err
		echo "/dev/fuse: $(ls -l /dev/fuse 2>&1)"
		echo "cgroup2: $(cat /sys/fs/cgroup/cgroup.controllers 2>&1)"
		for tp in sched/sched_switch lock/contention_begin mmap_lock/mmap_lock_start_locking vmscan/mm_vmscan_throttled skb/kfree_skb block/block_io_start writeback/balance_dirty_pages jbd2/jbd2_run_stats; do
			if [ -d /sys/kernel/tracing/events/$tp ]; then echo "tracepoint $tp: yes"; else echo "tracepoint $tp: no"; fi
		done
	} >"$T/env.out" 2>&1
	emit env 0 "$T/env.out"
fi

if has_step check; then
	note "check uptime=$(up)s"
	$W check --format json >"$T/check.json" 2>"$T/check.err"; rc=$?
	emit check $rc "$T/check.json"
	emit check.stderr $rc "$T/check.err"
	$W check >"$T/check.txt" 2>&1; rc=$?
	emit check.text $rc "$T/check.txt"
fi

if has_step doctor; then
	i=1
	while [ $i -le "$DOCTOR_RUNS" ]; do
		note "doctor $i uptime=$(up)s"
		excl_begin
		$W doctor --duration "$DURATION" --format json >"$T/doctor.json" 2>"$T/doctor.err"; rc=$?
		excl_end
		emit doctor-$i $rc "$T/doctor.json"
		emit doctor-$i.stderr $rc "$T/doctor.err"
		i=$((i + 1))
	done
fi

if has_step investigators; then
	for inv in $INVESTIGATORS; do
		note "$inv uptime=$(up)s"
		$W "$inv" --duration "$DURATION" --format json >"$T/inv.json" 2>"$T/inv.err"; rc=$?
		emit inv-$inv $rc "$T/inv.json"
		emit inv-$inv.stderr $rc "$T/inv.err"
	done
fi

# migrations PID: the kernel's count of PID's migrations (se.nr_migrations).
migrations() { awk '/nr_migrations/ {print $3; exit}' /proc/$1/sched 2>/dev/null || echo 0; }

# attached PID: until wolf (PID) holds BPF links and their count has been
# steady for a second, or 120 s, or PID exits.
attached() {
	n=0 last=-1 steady=0
	while [ $n -lt 1200 ] && kill -0 "$1" 2>/dev/null; do
		c=$(links "$1")
		if [ "$c" -gt 0 ] && [ "$c" -eq "$last" ]; then
			steady=$((steady + 1))
			[ $steady -ge 10 ] && return 0
		else
			steady=0
		fi
		last=$c
		usleep 100000; n=$((n + 1))
	done
	return 1
}

if has_step labs; then
	for spec in $LABS; do
		lab=${spec%%:*} rest=${spec#*:}
		inv=${rest%%:*} order=${rest#*:}
		r=lab-$lab
		note "$r ($inv, $order first) uptime=$(up)s"
		: >"$T/lab.out"; : >"$T/lab.err"; : >"$T/wolf.json"; : >"$T/wolf.err"
		rc=255
		excl_begin
		if [ "$order" = wolf ]; then
			# wolf's window ends (SIGTERM: it stops and reports) DURATION
			# after the lab is up, however long the lab took to start.
			$W "$inv" --duration 300s --format json >"$T/wolf.json" 2>"$T/wolf.err" &
			w=$!
			if attached $w; then
				note "$r wolf attached ($(links $w) links) uptime=$(up)s"
				$W lab run "$lab" --duration 45s >"$T/lab.out" 2>"$T/lab.err" &
				l=$!
				wait_for "$T/lab.out" 'offender pid' 240 $l && note "$r lab up uptime=$(up)s"
				sleep "${DURATION%s}"
			else
				echo "wolf did not attach" >>"$T/lab.err"
				l=
			fi
			kill -TERM $w 2>/dev/null
			wait $w; rc=$?
		else
			$W lab run "$lab" --duration 45s >"$T/lab.out" 2>"$T/lab.err" &
			l=$!
			if wait_for "$T/lab.out" 'offender pid' 300 $l; then
				note "$r lab up uptime=$(up)s"
				sleep 2
				# The kernel's own count of the lab task's migrations over
				# wolf's run: whether the pathology happened at all.
				off=$(sed -n 's/^offender pid \([0-9]*\).*/\1/p' "$T/lab.out" | head -1)
				m0=$(migrations "$off") t0=$(up)
				$W "$inv" --duration "$DURATION" --format json >"$T/wolf.json" 2>"$T/wolf.err"; rc=$?
				echo "migrations=$(($(migrations "$off") - m0)) seconds=$(awk -v a="$t0" -v b="$(up)" 'BEGIN{print b-a}')" >"$T/kernel.out"
				emit $r.kernel 0 "$T/kernel.out"
			else
				echo "lab did not start" >>"$T/wolf.err"
			fi
		fi
		[ -n "$l" ] && stop $l
		excl_end
		emit $r $rc "$T/wolf.json"
		emit $r.stderr $rc "$T/wolf.err"
		emit $r.lab 0 "$T/lab.out"
		emit $r.lab-stderr 0 "$T/lab.err"
	done
fi

dmesg >"$T/dmesg.out" 2>&1
emit dmesg 0 "$T/dmesg.out"
