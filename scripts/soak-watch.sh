#!/usr/bin/env bash
# Cost and soak of `wolf watch` with its defaults, side by side with a
# reference build (by default the windowed watch that loaded, attached and
# detached every investigator every window). Both run at the same time on
# the same host, so the host's own noise (this machine is shared) falls on
# both alike, for MINUTES (default 30) per phase:
#   idle  the host's own load only;
#   lab   labs running in turn (LABS, default: fuse-rwsem for 20 s, whose
#         hang opens incidents, then memcg-stress, sched-bounce and
#         tcp-collapse for 60 s each, over and over). No lab stall
#         outlives 60 s.
# Every 10 s it samples each wolf's CPU time and RSS and the host's load
# and CPU use, then prints per phase and per build: CPU as a share of one
# CPU (overall, first and last 5 minutes), RSS (first and last 5 minutes,
# change), and the host's load beside them, and checks the targets: the
# new watch at most 1% of one CPU idle, RSS flat within ±10%.
#
# The new build runs as deployed (deploy/: --incidents, --output); the
# reference with its own defaults and --output.
#
# Needs root. Usage:
#   sudo [REF=git-rev] [WOLF=new-binary] [WOLF_REF=ref-binary] [LABS="name:dur …"] \
#        scripts/soak-watch.sh [MINUTES] [PHASES]
# PHASES is "idle lab" (default), "idle" or "lab". Files (samples, event
# lines, incidents, metrics) stay in a /tmp/wolf-soak.* directory.
set -euo pipefail
minutes=${1:-30}
phases=${2:-idle lab}
# The last commit of the windowed watch: every window loaded, attached and
# detached its programs.
ref=${REF:-9185493}
labs=${LABS:-fuse-rwsem:20s memcg-stress:60s sched-bounce:60s tcp-collapse:60s}
cd "$(dirname "$0")/.."
dir=$(mktemp -d /tmp/wolf-soak.XXXXXX)
new=${WOLF:-$dir/wolf-new}
old=${WOLF_REF:-$dir/wolf-ref}
[ -n "${WOLF:-}" ] || go build -o "$new" ./cmd/wolf
if [ -z "${WOLF_REF:-}" ]; then
	mkdir "$dir/ref"
	git archive "$ref" | tar -x -C "$dir/ref"
	(cd "$dir/ref" && go build -o "$old" ./cmd/wolf)
	rm -rf "$dir/ref"
fi

# Other wolf tests on this machine count loaded BPF programs and measure
# overhead: each phase holds their machine-wide lock (testutil.Exclusive's)
# and lets it go between phases, so they are held up one phase at a time.
exec 9>/tmp/wolf-tests.lock

pids=() lab_loop=
cleanup() {
	[ -n "$lab_loop" ] && kill "$lab_loop" 2>/dev/null && wait "$lab_loop" 2>/dev/null || true
	for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
}
trap cleanup EXIT

hz=$(getconf CLK_TCK)
ncpu=$(nproc)
cpu_s() { awk -v hz="$hz" '{printf "%.2f", ($14 + $15) / hz}' "/proc/$1/stat"; }
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
# Host CPU: busy and steal jiffies, and all, from the first line of /proc/stat.
host_cpu() { awk '/^cpu / {all = 0; for (i = 2; i <= NF; i++) all += $i; print all - $5 - $6, $9, all}' /proc/stat; }

# The labs in turn until killed; a kill ends the running lab cleanly
# (SIGINT: it releases its stall and cleans up) before the loop exits.
run_lab_loop() {
	local lp=
	trap '[ -n "$lp" ] && kill -INT "$lp" 2>/dev/null; wait "$lp" 2>/dev/null; exit 0' TERM
	while :; do
		for l in $labs; do
			"$new" lab run "${l%%:*}" --duration "${l##*:}" >>"$dir/labs.txt" 2>&1 &
			lp=$!
			wait "$lp" || true
			lp=
			sleep 5
		done
	done
}

for phase in $phases; do
	echo "# phase $phase: waiting for /tmp/wolf-tests.lock" >&2
	flock 9
	port_new=$((20000 + RANDOM % 20000))
	port_old=$((port_new + 1))
	if [ "$phase" = lab ]; then
		run_lab_loop &
		lab_loop=$!
	fi
	"$new" watch --listen "127.0.0.1:$port_new" --output "$dir/$phase-new.jsonl" --incidents "$dir/$phase-incidents" 2>"$dir/$phase-new.err" &
	pid_new=$!
	"$old" watch --listen "127.0.0.1:$port_old" --output "$dir/$phase-ref.jsonl" 2>"$dir/$phase-ref.err" &
	pid_old=$!
	pids=("$pid_new" "$pid_old")
	echo "# phase $phase: new pid $pid_new (:$port_new), reference $ref pid $pid_old (:$port_old), $minutes min, files in $dir"
	echo "# t_s new_cpu_s new_rss_kib ref_cpu_s ref_rss_kib load1 host_busy_pct host_steal_pct"
	: >"$dir/$phase.samples"
	read -r b0 s0 a0 < <(host_cpu)
	for i in $(seq 1 $((minutes * 6))); do
		sleep 10
		for p in "$pid_new" "$pid_old"; do
			kill -0 "$p" 2>/dev/null || { echo "wolf watch $p died; see $dir/$phase-*.err" >&2; exit 1; }
		done
		read -r b1 s1 a1 < <(host_cpu)
		busy=$(awk -v b="$((b1 - b0))" -v a="$((a1 - a0))" 'BEGIN {printf "%.1f", a ? 100 * b / a : 0}')
		steal=$(awk -v s="$((s1 - s0))" -v a="$((a1 - a0))" 'BEGIN {printf "%.1f", a ? 100 * s / a : 0}')
		b0=$b1 s0=$s1 a0=$a1
		echo "$((i * 10)) $(cpu_s "$pid_new") $(rss_kib "$pid_new") $(cpu_s "$pid_old") $(rss_kib "$pid_old") $(cut -d' ' -f1 /proc/loadavg) $busy $steal" | tee -a "$dir/$phase.samples"
	done
	curl -fsS "http://127.0.0.1:$port_new/metrics" >"$dir/$phase-new.metrics" || true
	curl -fsS "http://127.0.0.1:$port_old/metrics" >"$dir/$phase-ref.metrics" || true
	if [ -n "$lab_loop" ]; then
		kill "$lab_loop" 2>/dev/null || true
		wait "$lab_loop" 2>/dev/null || true
		lab_loop=
	fi
	cleanup

	awk -v phase="$phase" -v ncpu="$ncpu" '
		{ t[NR] = $1; nc[NR] = $2; nr[NR] = $3; rc[NR] = $4; rr[NR] = $5; load += $6; busy += $7; steal += $8 }
		function report(name, c, r,   k, i, r1, r2, ch) {
			# First and last five minutes (a third of the run if shorter).
			k = int(NR / 3); if (k > 30) k = 30; if (k < 1) k = 1
			for (i = 1; i <= k; i++) { r1 += r[i]; r2 += r[NR - k + i] }
			r1 /= k; r2 /= k; ch = 100 * (r2 - r1) / r1
			printf "%-5s %-4s cpu_pct_of_one_cpu overall %.2f first %.2f last %.2f | rss_mib first %.1f last %.1f change %+.1f%%\n", phase, name,
				100 * c[NR] / t[NR], 100 * c[k] / t[k], 100 * (c[NR] - c[NR - k]) / (t[NR] - t[NR - k]), r1 / 1024, r2 / 1024, ch
			return ch
		}
		END {
			chn = report("new", nc, nr)
			report("ref", rc, rr)
			printf "%-5s host: load1 mean %.2f on %d CPUs, busy %.1f%% of all CPUs, steal %.1f%% (other engineers and tests)\n", phase, load / NR, ncpu, busy / NR, steal / NR
			cpu = 100 * nc[NR] / t[NR]
			if (phase == "idle") printf "%-5s target new <= 1%% of one CPU: %s (%.2f%%)\n", phase, (cpu <= 1 ? "met" : "NOT met"), cpu
			printf "%-5s target new RSS flat within 10%%: %s (%+.1f%%)\n", phase, (chn <= 10 && chn >= -10 ? "met" : "NOT met"), chn
		}' "$dir/$phase.samples" | tee -a "$dir/summary.txt"
	echo "$phase new: $(grep -c . "$dir/$phase-new.jsonl" || true) event lines, $(grep -c '"event":"error"' "$dir/$phase-new.jsonl" || true) errors, $(find "$dir/$phase-incidents" -name incident.json 2>/dev/null | wc -l) incidents" | tee -a "$dir/summary.txt"
	echo "$phase ref: $(grep -c . "$dir/$phase-ref.jsonl" || true) event lines, $(grep -c '"event":"error"' "$dir/$phase-ref.jsonl" || true) errors" | tee -a "$dir/summary.txt"
	grep -E '^wolf_(collector_runs_total|collector_errors_total|events_dropped_total|incidents_written_total|output_errors_total)' "$dir/$phase-new.metrics" >>"$dir/summary.txt" || true
	flock -u 9
done
echo "# summary in $dir/summary.txt"
