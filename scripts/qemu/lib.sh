# shellcheck shell=bash
# Shared pieces of wolf's qemu runs (sourced, not run): a private apt that
# downloads Debian's kernels and a few userland packages without installing
# anything, the extraction of vmlinuz, config and modules from a kernel
# package, a busybox initramfs with a static wolf, and the boot itself.
# Used by scripts/matrix/run (the kernel matrix) and hung-on-debian-6.1.sh.
#
# The caller sets LOG_TAG (a word for the log lines) and calls qemu_setup
# first. Everything downloaded or built lives under $CACHE, never in the repo.
#
# Environment:
#   WOLF_QEMU_CACHE    cache dir (default: $XDG_CACHE_HOME/wolf-qemu if set,
#                      else /var/cache/wolf-qemu when root, else ~/.cache/wolf-qemu)
#   WOLF_QEMU_REFRESH=1  apt-get update even if the private package lists are fresh
#   WOLF_QEMU_ACCEL    qemu -accel (default tcg,thread=single; see README.md)

QEMU_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$QEMU_LIB_DIR/../.." && pwd)
T0=${T0:-$(date +%s)}
LOG_TAG=${LOG_TAG:-qemu}

log() { printf '[%s %4ds] %s\n' "$LOG_TAG" "$(($(date +%s) - T0))" "$*" >&2; }
die() { log "SETUP ERROR: $*"; exit 2; }

# qemu_setup: CACHE, ACCEL, the host tools. Exits 2 when a tool is missing
# and cannot be installed.
qemu_setup() {
	if [[ -n "${WOLF_QEMU_CACHE:-}" ]]; then
		CACHE=$WOLF_QEMU_CACHE
	elif [[ -n "${XDG_CACHE_HOME:-}" ]]; then
		CACHE=$XDG_CACHE_HOME/wolf-qemu
	elif [[ $(id -u) -eq 0 ]]; then
		CACHE=/var/cache/wolf-qemu
	else
		CACHE=$HOME/.cache/wolf-qemu
	fi
	case "$CACHE/" in "$REPO"/*) echo "cache dir $CACHE is inside the repo; pick another (WOLF_QEMU_CACHE)" >&2; exit 2 ;; esac
	mkdir -p "$CACHE/debs" "$CACHE/kernels" "$CACHE/userland"
	# Single-threaded TCG: qemu 7.2's multi-threaded TCG (the default for
	# -smp 2) mishandles the kernel's cross-CPU code patching (text_poke_bp,
	# as kprobe, fentry and tracepoint attach/detach do): seen here as an
	# oops jumping to 0x0 at vfs_read and as a CPU stuck in
	# text_poke_bp_batch's IPI, both within a few dozen `wolf check`s; none
	# in 40 with thread=single. Both vCPUs still run, interleaved on one
	# host thread.
	ACCEL=${WOLF_QEMU_ACCEL:-tcg,thread=single}
	local need=()
	for t in dpkg-deb apt-get gzip; do command -v $t >/dev/null || die "$t is missing (a Debian-like host is needed to unpack kernels)"; done
	command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
	command -v qemu-system-aarch64 >/dev/null || need+=(qemu-system-arm)
	command -v cpio >/dev/null || busybox cpio --help >/dev/null 2>&1 || need+=(cpio)
	command -v zstd >/dev/null || need+=(zstd)
	if ((${#need[@]})); then
		[[ $(id -u) -eq 0 ]] || die "missing ${need[*]}: install them (apt-get install ${need[*]})"
		log "apt-get install ${need[*]} (the host's apt: these are tools, not kernels)"
		apt-get update -qq >/dev/null 2>&1 || true
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >"$CACHE/apt-install.log" 2>&1 ||
			{ tail -20 "$CACHE/apt-install.log" >&2; die "apt-get install ${need[*]} failed"; }
	fi
}

# ---------------------------------------------------------------- private apt
# The kernels come from Debian's archive through an apt of our own: its
# sources list, package lists, cache and (empty) dpkg status live in
# $CACHE/apt, so the host's apt configuration, package state and
# architectures are never touched (arm64 packages are downloadable without
# `dpkg --add-architecture`). Releases: bullseye (5.10), bookworm (6.1;
# 6.12 in bookworm-security), bookworm-backports (6.12).
QEMU_KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
QEMU_MIRROR=${WOLF_QEMU_MIRROR:-http://deb.debian.org}

qemu_apt_config() {
	local d=$CACHE/apt
	mkdir -p "$d/lists/partial" "$d/cache/archives/partial" "$d/none"
	[[ -f $QEMU_KEYRING ]] || die "$QEMU_KEYRING is missing (apt-get install debian-archive-keyring)"
	: >"$d/status"
	cat >"$d/sources.list" <<EOF
deb [signed-by=$QEMU_KEYRING] $QEMU_MIRROR/debian bullseye main
deb [signed-by=$QEMU_KEYRING] $QEMU_MIRROR/debian-security bullseye-security main
deb [signed-by=$QEMU_KEYRING] $QEMU_MIRROR/debian bookworm main
deb [signed-by=$QEMU_KEYRING] $QEMU_MIRROR/debian-security bookworm-security main
deb [signed-by=$QEMU_KEYRING] $QEMU_MIRROR/debian bookworm-backports main
EOF
	cat >"$d/apt.conf" <<EOF
Dir::Etc::SourceList "$d/sources.list";
Dir::Etc::SourceParts "$d/none";
Dir::Etc::Preferences "$d/none/preferences";
Dir::Etc::PreferencesParts "$d/none";
Dir::State "$d";
Dir::State::Lists "$d/lists";
Dir::State::Status "$d/status";
Dir::Cache "$d/cache";
APT::Architecture "amd64";
APT::Architectures { "amd64"; "arm64"; };
Acquire::Languages "none";
EOF
}

# qapt CMD ARGS: apt-get or apt-cache with the private configuration.
qapt() { APT_CONFIG=$CACHE/apt/apt.conf "$@"; }

QEMU_APT_UPDATED=0
# qemu_apt_update: refresh the private package lists when they are older
# than a day (or WOLF_QEMU_REFRESH=1).
qemu_apt_update() {
	[[ $QEMU_APT_UPDATED -eq 1 ]] && return 0
	qemu_apt_config
	local stamp=$CACHE/apt/updated
	if [[ "${WOLF_QEMU_REFRESH:-0}" != 1 && -n $(find "$stamp" -mmin -1440 2>/dev/null) ]]; then
		QEMU_APT_UPDATED=1
		return 0
	fi
	log "apt-get update (private lists in $CACHE/apt)"
	qapt apt-get update -qq >"$CACHE/apt/update.log" 2>&1 || { tail -20 "$CACHE/apt/update.log" >&2; die "apt-get update (private) failed"; }
	touch "$stamp"
	QEMU_APT_UPDATED=1
}

# qemu_download PKG[:ARCH]: the .deb's path (downloaded once into $CACHE/debs).
qemu_download() {
	local spec=$1 name=${1%%:*} arch=amd64 deb
	[[ $spec == *:* ]] && arch=${spec#*:}
	qemu_apt_update
	local ver
	ver=$(qapt apt-cache show "$name:$arch" 2>/dev/null | sed -n 's/^Version: //p' | sort -V | tail -1)
	[[ -n $ver ]] || die "apt knows no $name for $arch"
	deb=$CACHE/debs/${name}_${ver//:/%3a}_${arch}.deb
	if [[ ! -s $deb ]]; then
		log "apt-get download $name:$arch ($ver)"
		(cd "$CACHE/debs" && qapt apt-get download -qq "$name:$arch=$ver" >"$CACHE/debs/download.log" 2>&1) ||
			{ cat "$CACHE/debs/download.log" >&2; die "apt-get download $name:$arch failed"; }
	fi
	[[ -s $deb ]] || deb=$(ls -1 "$CACHE/debs/${name}_"*"_${arch}.deb" 2>/dev/null | sort -V | tail -1)
	[[ -s $deb ]] || die "download of $name:$arch left no .deb in $CACHE/debs"
	echo "$deb"
}

# qemu_pick_kernel SERIES ARCH: the newest Debian kernel package of a series
# ("5.10", "6.1", "6.12") for arch (amd64, arm64), the plain flavour,
# unsigned (the signed one only wraps it).
qemu_pick_kernel() {
	local series=$1 arch=$2 re
	qemu_apt_update
	case $series in
	5.10 | 6.1) re="^linux-image-${series//./\\.}\\.0-[0-9]+-${arch}-unsigned\$" ;;
	*) re="^linux-image-${series//./\\.}\\.[0-9]+(\\+deb[0-9]+|\\+bpo)?-${arch}-unsigned\$" ;;
	esac
	qapt apt-cache search --names-only "$re" | awk '{print $1}' | grep -E "$re" | sort -V | tail -1
}

# qemu_kernel SERIES ARCH [MODULE...]: KDIR with vmlinuz (or Image), config,
# version, modules.load (the modules asked for and what they depend on, in
# load order) and the modules themselves, from the newest package of the
# series. Cached per package; WOLF_QEMU_REFRESH=1 re-picks the newest.
qemu_kernel() {
	local series=$1 arch=$2; shift 2
	local current=$CACHE/kernels/current-$series-$arch pkg
	if [[ "${WOLF_QEMU_REFRESH:-0}" != 1 && -s $current ]]; then
		pkg=$(cat "$current")
	else
		pkg=$(qemu_pick_kernel "$series" "$arch")
		[[ -n $pkg ]] || die "apt knows no linux-image-$series* package for $arch"
	fi
	KPKG=$pkg
	KDIR=$CACHE/kernels/$pkg
	local want_mods="$*"
	if [[ -s $KDIR/done && "$(cat "$KDIR/done")" == "mods: $want_mods" ]]; then
		echo "$pkg" >"$current"
		KVER=$(cat "$KDIR/version")
		return 0
	fi
	local deb
	deb=$(qemu_download "$pkg:$arch")
	log "extracting the kernel, its config and modules ($want_mods) from $(basename "$deb")"
	rm -rf "$KDIR" && mkdir -p "$KDIR/x"
	dpkg-deb -c "$deb" | awk '{print $NF}' | grep -E '\.ko(\.xz|\.zst)?$' >"$KDIR/modules.list" || true
	# Resolve the modules' dependencies from their .modinfo "depends=".
	local want=("$@") mods=() seen=" " m path f deps d
	while ((${#want[@]})); do
		m=${want[0]}; want=("${want[@]:1}")
		[[ $seen == *" $m "* ]] && continue
		seen+="$m "
		path=$(grep -E "/${m//_/[-_]}\.ko(\.xz|\.zst)?$" "$KDIR/modules.list" | head -1) || true
		# Not a module: built in (=y) or absent; the guest's checks say which.
		[[ -n $path ]] || continue
		dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$KDIR/x" "$path"
		f=$KDIR/x/${path#./}
		case "$f" in *.xz) xz -d "$f"; f=${f%.xz} ;; *.zst) zstd -qd --rm "$f"; f=${f%.zst} ;; esac
		mods=("$f" "${mods[@]}") # dependencies load first
		deps=$(tr '\0' '\n' <"$f" | sed -n 's/^depends=//p' | head -1 | tr ',' ' ')
		for d in $deps; do want+=("$d"); done
	done
	dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$KDIR/x" --wildcards './boot/vmlinuz-*' './boot/config-*'
	cp "$KDIR"/x/boot/vmlinuz-* "$KDIR/vmlinuz"
	cp "$KDIR"/x/boot/config-* "$KDIR/config"
	# Deduplicate, keeping the first (earliest-loaded) position.
	printf '%s\n' "${mods[@]}" | awk 'NF && !seen[$0]++' >"$KDIR/modules.load"
	dpkg-deb -f "$deb" Version >"$KDIR/version"
	echo "mods: $want_mods" >"$KDIR/done"
	echo "$pkg" >"$current"
	KVER=$(cat "$KDIR/version")
}

# qemu_deb_extract PKG ARCH DEST PATH...: extract PATHs (globs) of a
# Debian package into DEST.
qemu_deb_extract() {
	local pkg=$1 arch=$2 dest=$3 deb; shift 3
	deb=$(qemu_download "$pkg:$arch")
	mkdir -p "$dest"
	dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$dest" --wildcards "$@"
}

# qemu_userland ARCH: $CACHE/userland/ARCH with Debian bookworm's static
# busybox, dash (the labs run /bin/sh, as on a Debian host), flock(1) (the
# coredump lab's handler) and yes(1) (the hot-uprobe lab) with the C
# library they load.
qemu_userland() {
	local arch=$1 d=$CACHE/userland/$1
	if [[ -s $d/done ]]; then USERLAND=$d; return 0; fi
	rm -rf "$d" && mkdir -p "$d"
	qemu_deb_extract busybox-static "$arch" "$d" './bin/busybox'
	qemu_deb_extract dash "$arch" "$d" './bin/dash'
	qemu_deb_extract util-linux "$arch" "$d" './usr/bin/flock'
	# coreutils' yes: the hot-uprobe lab probes libc's write() in it.
	qemu_deb_extract coreutils "$arch" "$d" './usr/bin/yes'
	qemu_deb_extract libc6 "$arch" "$d" './lib*/*'
	echo ok >"$d/done"
	USERLAND=$d
}

# qemu_goarch ARCH: Go's name for a Debian architecture.
qemu_goarch() { case $1 in amd64) echo amd64 ;; arm64) echo arm64 ;; *) die "unknown arch $1" ;; esac; }

# qemu_rootfs ROOT ARCH: a root directory with busybox, /bin/sh (dash),
# flock, the C library, a static wolf for ARCH, and KDIR's modules (in
# /lib/modules, numbered in load order).
qemu_rootfs() {
	local root=$1 arch=$2 goarch i m
	goarch=$(qemu_goarch "$arch")
	rm -rf "$root" && mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,tmp,run,root,etc,lib/modules}
	qemu_userland "$arch"
	cp -a "$USERLAND"/. "$root"/
	rm -f "$root/done"
	ln -sf dash "$root/bin/sh"
	log "building wolf (static, $goarch) from $REPO"
	(cd "$REPO" && CGO_ENABLED=0 GOARCH=$goarch go build -trimpath -o "$root/bin/wolf" ./cmd/wolf) || die "go build ./cmd/wolf ($goarch) failed"
	i=0
	while read -r m; do
		[[ -n $m ]] || continue
		cp "$m" "$root/lib/modules/$(printf '%02d' $i)-$(basename "$m")"
		i=$((i + 1))
	done <"$KDIR/modules.load"
}

# qemu_init ROOT DATADEV TASKS: /init mounts what wolf uses, loads the
# modules, defines emit/note (framed outputs on DATADEV, the data channel,
# parsed by qemu_sections) and runs TASKS (a shell file, copied to
# /tasks.sh), then powers off.
qemu_init() {
	local root=$1 datadev=$2 tasks=$3
	cp "$tasks" "$root/tasks.sh"
	cat >"$root/init" <<INIT
#!/bin/busybox sh
DATA=$datadev
INIT
	cat >>"$root/init" <<'INIT'
export PATH=/bin:/sbin:/usr/bin:/usr/sbin HOME=/root
/bin/busybox --install -s
mkdir -p /root /sys/kernel/tracing /sys/fs/bpf
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null || mount -t debugfs debugfs /sys/kernel/debug
mount -t bpf bpf /sys/fs/bpf
mkdir -p /sys/fs/cgroup && mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
# As systemd does on a host: the controllers enabled for the root's children.
for c in cpu io memory pids; do echo "+$c" >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null; done
# Modules in dependency order, retried until none loads any more (an order
# mistake costs a pass, not a module).
: >/tmp/insmod.err
pass=0
while [ $pass -lt 5 ]; do
	left=0 loaded=0
	for m in /lib/modules/*.ko; do
		[ -e "$m" ] || continue
		[ -e "$m.done" ] && continue
		if insmod "$m" 2>"/tmp/$(basename "$m").err"; then touch "$m.done"; loaded=1; else left=1; fi
	done
	[ $left = 0 ] || [ $loaded = 0 ] && break
	pass=$((pass + 1))
done
for m in /lib/modules/*.ko; do [ -e "$m" ] && [ ! -e "$m.done" ] && echo "insmod $m failed: $(cat "/tmp/$(basename "$m").err")" >>/tmp/insmod.err; done
mount -t fusectl fusectl /sys/fs/fuse/connections 2>/dev/null
# The disk qemu_boot gives: a real filesystem for what must not be tmpfs
# (memcg-stress's files: tmpfs pages cannot be reclaimed without swap).
mkdir -p /var/tmp
[ -b /dev/vda ] && mount -t ext4 /dev/vda /var/tmp 2>>/tmp/insmod.err
ip link set lo up 2>/dev/null
stty -F "$DATA" raw -echo 2>/dev/null
# Booted quiet; from here on every kernel message (an oops's or a lockup's
# full trace included) reaches the console log. The checks read DATA only.
dmesg -n 8

# emit NAME RC FILE: a framed copy on the data channel (parsed) and on the console (read).
emit() {
	{ echo "@@WOLF-BEGIN $1"; cat "$3"; echo; echo "@@WOLF-END $1 rc=$2"; } >/tmp/frame
	cat /tmp/frame >"$DATA"
	cat /tmp/frame
}
note() { echo "@@WOLF-NOTE $*" >"$DATA"; echo "== $*"; }
up() { cut -d' ' -f1 /proc/uptime; }
# wait_for FILE TEXT SECONDS PID: until TEXT is in FILE, PID exits or time is up.
wait_for() {
	n=0
	while [ $n -lt $(($3 * 10)) ]; do
		grep -q "$2" "$1" 2>/dev/null && return 0
		kill -0 "$4" 2>/dev/null || return 1
		usleep 100000; n=$((n + 1))
	done
	return 1
}
# links PID: bpf links held by PID (wolf holds its tracepoint links and iterators by fd).
links() { ls -l /proc/$1/fd 2>/dev/null | grep -cE 'bpf[-_]link|perf_event'; }
# stop PID: SIGINT, 10 s, then SIGKILL.
stop() { kill -INT "$1" 2>/dev/null; n=0; while kill -0 "$1" 2>/dev/null && [ $n -lt 100 ]; do usleep 100000; n=$((n+1)); done; kill -KILL "$1" 2>/dev/null; wait "$1" 2>/dev/null; }

note "boot uptime=$(up)s kernel=$(uname -r)"
. /tasks.sh
note "done uptime=$(up)s"
sync
poweroff -f
INIT
	chmod +x "$root/init"
}

# qemu_initramfs ROOT FILE: pack ROOT as a gzip'd newc cpio.
qemu_initramfs() {
	local cpio=(cpio)
	command -v cpio >/dev/null || cpio=(busybox cpio)
	(cd "$1" && find . | "${cpio[@]}" -o -H newc -R 0:0 2>/dev/null | gzip -1 >"$2")
	log "initramfs: $(du -h "$2" | cut -f1)"
}

# qemu_datadev ARCH: the guest's name for the data channel qemu_boot gives it.
qemu_datadev() { case $1 in amd64) echo /dev/ttyS1 ;; arm64) echo /dev/hvc0 ;; esac; }

# qemu_modules ARCH: the modules the guest needs beyond what a lab asks
# for: the data channel (arm64) and the disk (virtio-blk, ext4, and the
# crc32c ext4 loads at every mount).
qemu_modules() {
	case $1 in
	amd64) echo virtio_pci virtio_blk ext4 crc32c_generic ;;
	arm64) echo virtio_mmio virtio_console virtio_blk ext4 crc32c_generic ;;
	esac
}

# qemu_boot ARCH INITRD OUT TIMEOUT [APPEND]: boot KDIR's kernel with INITRD,
# 2 CPUs, 2 GiB and a 1 GiB ext2 disk (/dev/vda, mounted on /var/tmp),
# under `timeout`. The console goes to OUT/console.log (shown live with
# WOLF_QEMU_SHOW=1), the data channel to OUT/data.log. Sets QRC (qemu's
# exit status) and BOOT_S.
qemu_boot() {
	local arch=$1 initrd=$2 out=$3 timeout=$4 append=${5:-} tailpid=
	local console=$out/console.log data=$out/data.log disk=$out/disk.img
	: >"$console"; : >"$data"
	# ext2, mounted by the ext4 driver (no journal).
	rm -f "$disk" && truncate -s 1G "$disk" && mkfs.ext2 -q -F "$disk" || die "mkfs.ext2 $disk failed"
	local qemu args
	case $arch in
	amd64)
		qemu=qemu-system-x86_64
		args=(-m 2G -smp 2 -serial "file:$console" -serial "file:$data"
			-drive "file=$disk,format=raw,if=none,id=d0" -device virtio-blk-pci,drive=d0)
		append="console=ttyS0 $append"
		;;
	arm64)
		# -cpu max: every feature TCG emulates (pointer auth, BTI, …), as
		# on a current arm64 server; pauth-impdef: the same pointer
		# authentication with QEMU's cheap hash instead of emulated QARMA,
		# several times faster. The data channel is a virtio console
		# (hvc0): virt has one UART only in this qemu.
		qemu=qemu-system-aarch64
		args=(-M virt -cpu max,pauth-impdef=on -m 2G -smp 2 -serial "file:$console"
			-device virtio-serial-device -chardev "file,id=data,path=$data" -device virtconsole,chardev=data
			-drive "file=$disk,format=raw,if=none,id=d0" -device virtio-blk-device,drive=d0)
		append="console=ttyAMA0 $append"
		;;
	esac
	log "booting $KPKG under $qemu (TCG, no KVM; limit ${timeout}s); console: $console"
	if [[ "${WOLF_QEMU_SHOW:-0}" == 1 ]]; then
		tail -n +1 -F "$console" 2>/dev/null | sed -u 's/^/  | /' >&2 &
		tailpid=$!
	fi
	local tb
	tb=$(date +%s)
	set +e
	timeout --kill-after=10 "$timeout" "$qemu" -accel "$ACCEL" "${args[@]}" -no-reboot \
		-display none -monitor none -nic none \
		-kernel "$KDIR/vmlinuz" -initrd "$initrd" \
		-append "panic=-1 quiet softlockup_panic=1 oops=panic $append" </dev/null >"$out/qemu.log" 2>&1
	QRC=$?
	set -e
	if [[ -n $tailpid ]]; then
		sleep 0.5
		kill "$tailpid" 2>/dev/null || true
		wait "$tailpid" 2>/dev/null || true
	fi
	rm -f "$disk"
	BOOT_S=$(($(date +%s) - tb))
	log "qemu exited rc=$QRC after ${BOOT_S}s"
	[[ $QRC -eq 124 || $QRC -eq 137 ]] && log "qemu hit the ${timeout}s limit"
	[[ -s "$out/qemu.log" ]] && sed 's/^/  qemu: /' "$out/qemu.log" >&2
	return 0
}

# qemu_sections OUT: split OUT/data.log's frames into OUT/NAME.out and
# OUT/NAME.rc.
qemu_sections() {
	local out=$1
	tr -d '\r' <"$out/data.log" >"$out/data.txt"
	awk -v dir="$out" '
		/^@@WOLF-BEGIN / { name = substr($0, 14); file = dir "/" name ".out"; printf "" > file; on = 1; next }
		on && index($0, "@@WOLF-END " name " rc=") == 1 { rc = substr($0, length("@@WOLF-END " name " rc=") + 1); print rc > (dir "/" name ".rc"); close(file); close(dir "/" name ".rc"); on = 0; next }
		on { print >> file }
	' "$out/data.txt"
}
