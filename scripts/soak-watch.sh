#!/usr/bin/env bash
# Soak test for `wolf watch`: runs it for MINUTES (default 10) with every
# investigator on INTERVAL windows (default 10s: six times the default
# rounds per minute, so leaks show sooner) on the host's own load, or with
# LAB=fuse-rwsem (any `wolf lab list` name) keeping a pathology in place,
# samples wolf's RSS and CPU every 10 s, and compares the first minute with
# the last. Needs root. Usage:
#   sudo [LAB=fuse-rwsem] [WOLF=/path/to/wolf] scripts/soak-watch.sh [MINUTES] [INTERVAL]
# A lab makes findings for other tests on a shared machine: on one, leave
# LAB unset (the default).
# Prints one line per sample, then a summary; exits 1 if RSS or CPU grew by
# more than 25% between the first and the last minute.
set -euo pipefail
minutes=${1:-10}
interval=${2:-10s}
cd "$(dirname "$0")/.."
dir=$(mktemp -d /tmp/wolf-soak.XXXXXX)
wolf=${WOLF:-$dir/wolf}
[ -n "${WOLF:-}" ] || go build -o "$wolf" ./cmd/wolf
port=$((20000 + RANDOM % 20000))

# Other wolf tests on this machine count loaded BPF programs and measure
# overhead: hold their machine-wide lock (testutil.Exclusive's) throughout.
exec 9>/tmp/wolf-tests.lock
echo "# waiting for /tmp/wolf-tests.lock" >&2
flock 9

lab_pid= watch_pid=
cleanup() {
	[ -n "$watch_pid" ] && kill -INT "$watch_pid" 2>/dev/null && wait "$watch_pid" 2>/dev/null || true
	[ -n "$lab_pid" ] && kill -INT "$lab_pid" 2>/dev/null && wait "$lab_pid" 2>/dev/null || true
}
trap cleanup EXIT

if [ -n "${LAB:-}" ]; then
	"$wolf" lab run "$LAB" --duration "$((minutes * 60 + 120))s" >"$dir/lab.txt" 2>&1 &
	lab_pid=$!
	sleep 3
fi
"$wolf" watch --interval "$interval" --listen "127.0.0.1:$port" --output "$dir/events.jsonl" 2>"$dir/watch.err" &
watch_pid=$!

hz=$(getconf CLK_TCK)
samples=$((minutes * 6))
echo "# t_s rss_kib cpu_s (wolf watch pid $watch_pid, interval $interval, lab ${LAB:-none}, metrics 127.0.0.1:$port, files in $dir)"
: >"$dir/samples.txt"
for i in $(seq 1 "$samples"); do
	sleep 10
	kill -0 "$watch_pid" 2>/dev/null || { echo "wolf watch died; see $dir/watch.err" >&2; exit 1; }
	rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$watch_pid/status")
	# utime and stime are fields 14 and 15 of /proc/PID/stat (comm has no spaces here).
	ticks=$(awk '{print $14 + $15}' "/proc/$watch_pid/stat")
	cpu=$(awk -v t="$ticks" -v hz="$hz" 'BEGIN {printf "%.2f", t / hz}')
	echo "$((i * 10)) $rss $cpu" | tee -a "$dir/samples.txt"
done
curl -fsS "http://127.0.0.1:$port/metrics" >"$dir/metrics.txt" || true

awk -v n="$samples" '
	{ t[NR] = $1; rss[NR] = $2; cpu[NR] = $3 }
	END {
		# First minute: samples 1..6 (CPU from 0 to 60 s); last: the final 6.
		for (i = 1; i <= 6; i++) { r1 += rss[i]; r2 += rss[n - 6 + i] }
		r1 /= 6; r2 /= 6
		c1 = cpu[6]; c2 = cpu[n] - cpu[n - 6]
		printf "rss_kib first_min_mean %.0f last_min_mean %.0f change %+.1f%%\n", r1, r2, 100 * (r2 - r1) / r1
		printf "cpu_pct_of_one_cpu first_min %.2f last_min %.2f overall %.2f\n", 100 * c1 / 60, 100 * c2 / 60, 100 * cpu[n] / t[n]
		bad = (r2 > 1.25 * r1) || (c2 > 1.25 * c1 + 0.3)
		print (bad ? "verdict: GROWING" : "verdict: flat")
		exit bad
	}' "$dir/samples.txt"
echo "windows: $(grep -c . "$dir/events.jsonl" || true) event lines; errors: $(grep -c '"event":"error"' "$dir/events.jsonl" || true)"
grep -E '^wolf_(hung_tasks|collector_runs_total|collector_errors_total|events_dropped_total)' "$dir/metrics.txt" || true
