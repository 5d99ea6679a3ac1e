#!/usr/bin/env bash
# What each investigator costs `wolf watch` per window: runs
# `wolf watch --investigators NAME --interval I` for SECONDS (default 60)
# at two window lengths (5s and 20s by default) and prints wolf's CPU time
# per window and per second. CPU per window = fixed + rate * window: the
# fixed part is concluding a window (reading and analysing the maps; the
# programs stay attached, loaded once for the whole run, which the first
# window carries); the rate part is what watching costs (hung's task
# walks, draining ring buffers). scripts/soak-watch.sh measures watch as
# a whole with its defaults, beside the windowed reference. Needs root.
# Usage:
#   sudo [WOLF=/path/to/wolf] scripts/watch-cost.sh [SECONDS] [SHORT] [LONG]
set -euo pipefail
secs=${1:-60}
short=${2:-5}
long=${3:-20}
cd "$(dirname "$0")/.."
dir=$(mktemp -d /tmp/wolf-cost.XXXXXX)
wolf=${WOLF:-$dir/wolf}
[ -n "${WOLF:-}" ] || go build -o "$wolf" ./cmd/wolf
exec 9>/tmp/wolf-tests.lock # other wolf tests count loaded programs: take their lock
flock 9
hz=$(getconf CLK_TCK)
pid=
trap '[ -n "$pid" ] && kill -INT "$pid" 2>/dev/null; true' EXIT
printf "%-8s %9s %8s %12s %12s %10s %10s\n" investigator window_s windows cpu_s_per_win cpu_pct fixed_cpu_s rate_cpu_pct
for inv in hung locks reclaim sched softirq; do
	declare -A per
	for w in "$short" "$long"; do
		"$wolf" watch --investigators "$inv" --interval "${w}s" --hung-interval "${w}s" --listen 127.0.0.1:0 >"$dir/$inv-$w.jsonl" 2>"$dir/$inv-$w.err" &
		pid=$!
		sleep "$secs"
		ticks=$(awk '{print $14 + $15}' "/proc/$pid/stat")
		kill -INT "$pid"; wait "$pid" || true; pid=
		# Windows run back to back: SECONDS hold SECONDS/w of them.
		n=$(awk -v s="$secs" -v w="$w" 'BEGIN {printf "%.2f", s / w}')
		per[$w]=$(awk -v t="$ticks" -v hz="$hz" -v n="$n" 'BEGIN {printf "%.4f", t / hz / n}')
		printf "%-8s %9s %8s %12s %12.2f\n" "$inv" "$w" "$n" "${per[$w]}" "$(awk -v t="$ticks" -v hz="$hz" -v s="$secs" 'BEGIN {print 100 * t / hz / s}')"
	done
	awk -v a="${per[$short]}" -v b="${per[$long]}" -v s="$short" -v l="$long" -v inv="$inv" 'BEGIN {
		rate = (b - a) / (l - s); if (rate < 0) rate = 0
		fixed = a - rate * s; if (fixed < 0) fixed = 0
		printf "%-8s %9s %8s %12s %12s %10.3f %10.2f\n", inv, "fit", "", "", "", fixed, 100 * rate }'
	unset per
done
