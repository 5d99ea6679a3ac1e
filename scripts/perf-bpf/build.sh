#!/usr/bin/env bash
# Build `perf` with its BPF skeletons (BUILD_BPF_SKEL=1) from Debian's own
# kernel source package, for `perf lock contention -b`: Debian's linux-perf
# is built without them, so its `perf lock contention` can only record every
# lock event to a file (tracepoint mode), not aggregate in the kernel the
# way wolf does. The cost benchmark (internal/costbench/storm) runs wolf
# beside the perf this script builds.
#
# What it does:
#   1. installs the build's dependencies with apt-get (flex, bison, libdw,
#      libtraceevent, ... : only those missing);
#   2. downloads the linux-source-X.Y package matching the installed
#      linux-perf (or WOLF_PERF_SERIES) with `apt-get download`, into the
#      cache, and unpacks its source tarball there;
#   3. `make -C tools/perf BUILD_BPF_SKEL=1` (clang, bpftool's bootstrap
#      from the same tree), output in $CACHE/perf-X.Y/perf;
#   4. checks the result: the lock contention skeleton was generated (perf
#      6.1's --build-options does not list skeletons yet).
# A build already in the cache is reused (WOLF_PERF_REFRESH=1 rebuilds).
# Prints the path of the perf binary on its last line.
#
# Exit status: 0 built (or cached), 1 the build failed (its log's tail is
# printed), 2 a setup problem (not root, no network, no such package).
#
# Environment:
#   WOLF_PERF_CACHE    cache directory (default /var/cache/wolf-perf as root)
#   WOLF_PERF_SERIES   kernel series of the source package (default: the
#                      installed linux-perf's, else 6.1)
#   WOLF_PERF_REFRESH  1: download and build again even if cached
set -euo pipefail

log() { printf 'perf-bpf: %s\n' "$*" >&2; }
die() {
	log "$2"
	exit "$1"
}

[[ $(id -u) -eq 0 ]] || die 2 "run as root (apt-get, and the cache under /var/cache)"
CACHE=${WOLF_PERF_CACHE:-/var/cache/wolf-perf}
mkdir -p "$CACHE"

series=${WOLF_PERF_SERIES:-}
if [[ -z $series ]]; then
	v=$(dpkg-query -W -f '${Version}' linux-perf 2>/dev/null || true)
	series=$(sed -E 's/^([0-9]+\.[0-9]+).*/\1/' <<<"$v")
	[[ -n $series ]] || series=6.1
fi
SRC=$CACHE/linux-source-$series
OUT=$CACHE/perf-$series
PERF=$OUT/perf

SKEL=$OUT/util/bpf_skel/lock_contention.skel.h
if [[ ${WOLF_PERF_REFRESH:-0} != 1 && -x $PERF && -s $SKEL ]]; then
	log "cached: $PERF"
	echo "$PERF"
	exit 0
fi

# The build's dependencies: what tools/perf/Makefile.config needs for the
# features the benchmark uses (BPF skeletons need clang, libelf and zlib
# for bpftool's bootstrap; libtraceevent for the lock tracepoints' fields).
deps=(flex bison libelf-dev libdw-dev zlib1g-dev libtraceevent-dev libcap-dev
	libzstd-dev liblzma-dev libssl-dev pkg-config clang llvm python3 make gcc xz-utils)
missing=()
for d in "${deps[@]}"; do
	dpkg-query -W -f '${Status}' "$d" 2>/dev/null | grep -q 'ok installed' || missing+=("$d")
done
if ((${#missing[@]})); then
	log "installing: ${missing[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >"$CACHE/apt.log" 2>&1 ||
		die 2 "apt-get install ${missing[*]} failed (network? see $CACHE/apt.log)"
fi

if [[ ${WOLF_PERF_REFRESH:-0} == 1 || ! -d $SRC/tools/perf ]]; then
	pkg=linux-source-$series
	apt-cache show "$pkg" >/dev/null 2>&1 || die 2 "no package $pkg in this system's apt sources"
	rm -rf "$CACHE/deb" "$SRC"
	mkdir -p "$CACHE/deb"
	log "downloading $pkg"
	(cd "$CACHE/deb" && apt-get download "$pkg" >"$CACHE/download.log" 2>&1) ||
		die 2 "apt-get download $pkg failed (network? see $CACHE/download.log)"
	deb=$(ls "$CACHE"/deb/"$pkg"_*.deb | head -1)
	dpkg-deb -x "$deb" "$CACHE/deb/root"
	tarball=$(ls "$CACHE"/deb/root/usr/src/linux-source-"$series".tar.* | head -1)
	[[ -f $tarball ]] || die 2 "$deb holds no source tarball"
	log "unpacking $(basename "$tarball")"
	mkdir -p "$SRC"
	tar -xf "$tarball" -C "$SRC" --strip-components=1
	rm -rf "$CACHE/deb"
fi

rm -rf "$OUT"
mkdir -p "$OUT"
log "building perf $series with BUILD_BPF_SKEL=1 (log: $OUT/build.log)"
# One job: the machine is shared with builds and tests; NO_JEVENTS and the
# like keep the build short (the benchmark uses perf lock only).
if ! make -C "$SRC/tools/perf" O="$OUT" BUILD_BPF_SKEL=1 NO_LIBPYTHON=1 NO_LIBPERL=1 \
	NO_GTK2=1 NO_SLANG=1 NO_JVMTI=1 NO_LIBBABELTRACE=1 NO_DEMANGLE=1 \
	-j"$(nproc)" >"$OUT/build.log" 2>&1; then
	tail -30 "$OUT/build.log" >&2
	die 1 "perf build failed: $OUT/build.log"
fi
[[ -x $PERF && -s $SKEL ]] ||
	die 1 "$PERF was built without the lock contention BPF skeleton: see $OUT/build.log"
log "built $PERF"
echo "$PERF"
