#!/usr/bin/env bash
# Checks the release's Debian packages: lintian accepts them (no error, no
# warning), and each installs into a throwaway Debian bookworm root and
# goes again without a trace. Nothing on this host changes: the root is a
# minimal bookworm (mmdebstrap, cached as a tarball), unpacked into a
# temporary directory and entered with chroot inside a private mount
# namespace, so its /proc, /sys and /dev mounts vanish with it.
#
# In the root, from the installed package: wolf version, wolf check and
# wolf doctor (the amd64 binary on this kernel), the man pages through
# man, bash completion through bash-completion, then remove and purge.
# The arm64 package is installed too (dpkg --add-architecture) and its
# binary runs wolf version under qemu-user, when qemu-aarch64-static is
# here; BPF itself is not emulated by qemu-user.
# Exit 0 pass, 1 fail, 2 cannot run.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

need_root "chroot, mounts and dpkg in the throwaway root"
need_tool lintian "apt-get install lintian"
need_tool jq "apt-get install jq"
need_tool unshare "util-linux"
deb_amd64=$(artifact "wolf_${DEB_VERSION}-1_amd64.deb")
deb_arm64=$(artifact "wolf_${DEB_VERSION}-1_arm64.deb")

say "lintian $deb_amd64 $deb_arm64"
lintian --fail-on error,warning "$deb_amd64" "$deb_arm64" || fail "lintian"

# The root: Debian bookworm, minbase plus what the checks use.
rootfs=$CACHE/bookworm-minbase.tar
if [ ! -f "$rootfs" ] || [ "${WOLF_RELEASE_REFRESH:-0}" = 1 ]; then
	say "bootstrapping Debian bookworm into $rootfs (about a minute)"
	include=bash-completion,man-db
	rm -rf "$rootfs.new"
	if command -v mmdebstrap >/dev/null; then
		# --format: the name ends in .new, from which mmdebstrap would
		# guess a directory.
		mmdebstrap --quiet --variant=minbase --include=$include --mode=root --format=tar bookworm "$rootfs.new" http://deb.debian.org/debian ||
			setup_error "mmdebstrap bookworm failed"
	elif command -v debootstrap >/dev/null; then
		d=$(mktemp -d /tmp/wolf-debootstrap.XXXXXX)
		debootstrap --variant=minbase --include=$include bookworm "$d" http://deb.debian.org/debian >/dev/null ||
			setup_error "debootstrap bookworm failed"
		tar -C "$d" -cf "$rootfs.new" .
		rm -rf "$d"
	else
		setup_error "needs mmdebstrap or debootstrap (apt-get install mmdebstrap)"
	fi
	rm -rf "$rootfs"
	mv "$rootfs.new" "$rootfs"
fi

tmp=$(mktemp -d /tmp/wolf-deb.XXXXXX)
root=$tmp/root
cleanup() {
	# The mounts live only in the namespace that made them; refuse to
	# delete if one is visible here all the same.
	if findmnt -rn -o TARGET | grep -q "^$root"; then
		echo "$(basename "$0"): mounts left under $root; not deleting it" >&2
		return
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
mkdir "$root"
tar -C "$root" -xf "$rootfs"
cp "$deb_amd64" "$root/tmp/wolf_amd64.deb"
cp "$deb_arm64" "$root/tmp/wolf_arm64.deb"
qemu=$(command -v qemu-aarch64-static || true)
[ -n "$qemu" ] && cp "$qemu" "$root/tmp/qemu-aarch64-static"

# What runs inside the root. Results the host checks land in /tmp/out.
cat >"$root/tmp/check.sh" <<'INNER'
set -euo pipefail
export PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C.UTF-8 MANPAGER=cat
out=/tmp/out
mkdir -p $out
# Every file outside /var (dpkg's and man-db's state) and /tmp, before.
files() { find / -xdev \( -path /tmp -o -path /var \) -prune -o -print | sort; }
files >$out/before.list

echo "in root: dpkg -i wolf_amd64.deb"
dpkg -i /tmp/wolf_amd64.deb >$out/dpkg-install.log
dpkg-query -W -f='${Status} ${Version} ${Architecture}\n' wolf >$out/status
dpkg -L wolf >$out/files

echo "in root: wolf version, wolf check, wolf doctor"
/usr/bin/wolf version --format json >$out/version.json
wolf check >$out/check.txt 2>&1 || echo "wolf check exit $?" >>$out/errors
wolf doctor --duration 3s --format json >$out/doctor.json 2>$out/doctor.err || echo "wolf doctor exit $?" >>$out/errors

echo "in root: man wolf-doctor, bash completion"
man -w wolf-doctor >$out/man-path
man wolf-doctor >$out/man-doctor.txt 2>$out/man.err
bash -c '
	source /usr/share/bash-completion/bash_completion
	_completion_loader wolf
	COMP_WORDS=(wolf doc) COMP_CWORD=1 COMP_LINE="wolf doc" COMP_POINT=8
	__start_wolf wolf doc wolf
	printf "%s\n" "${COMPREPLY[@]}"
' >$out/completion.txt 2>&1

echo "in root: dpkg -r wolf, dpkg -P wolf"
dpkg -r wolf >/dev/null
[ ! -e /usr/bin/wolf ] || echo "/usr/bin/wolf left after dpkg -r" >>$out/errors
dpkg -P wolf >/dev/null 2>&1 # after -r nothing is left to purge: dpkg says so
files >$out/after.list

if [ -x /tmp/qemu-aarch64-static ]; then
	echo "in root: dpkg -i wolf_arm64.deb, wolf version under qemu-user, dpkg -P"
	dpkg --add-architecture arm64
	dpkg -i /tmp/wolf_arm64.deb >/dev/null
	dpkg-query -W -f='${Status} ${Version} ${Architecture}\n' wolf:arm64 >$out/status-arm64
	/tmp/qemu-aarch64-static /usr/bin/wolf version --format json >$out/version-arm64.json
	dpkg -P wolf:arm64 >/dev/null
	dpkg --remove-architecture arm64
	files >$out/after-arm64.list
fi
INNER

say "installing and removing in a throwaway bookworm root ($root)"
unshare --mount --propagation private -- bash -euo pipefail -c '
	root=$1
	mount -t proc proc "$root/proc"
	mount --rbind /sys "$root/sys"
	mount --rbind /dev "$root/dev"
	chroot "$root" /bin/bash /tmp/check.sh
' _ "$root" || fail "the checks in the root stopped (see above)"

out=$root/tmp/out
[ ! -s "$out/errors" ] || fail "$(cat "$out/errors")"
read -r st1 st2 st3 ver arch <"$out/status"
[ "$st1 $st2 $st3" = "install ok installed" ] && [ "$ver" = "$DEB_VERSION-1" ] && [ "$arch" = amd64 ] ||
	fail "dpkg status: $(cat "$out/status")"
for f in /usr/bin/wolf /lib/systemd/system/wolf-watch.service /usr/share/wolf/prometheus/wolf-rules.yml \
	/usr/share/man/man1/wolf.1.gz /usr/share/man/man1/wolf-doctor.1.gz /usr/share/bash-completion/completions/wolf \
	/usr/share/zsh/vendor-completions/_wolf /usr/share/fish/vendor_completions.d/wolf.fish /usr/share/doc/wolf/copyright; do
	grep -qx "$f" "$out/files" || fail "the package does not install $f"
done
commit=$(git rev-parse HEAD)
[ "$(jq -r .version "$out/version.json")" = "$VERSION" ] || fail "installed wolf version: $(jq -c '{version}' "$out/version.json"), want $VERSION"
[ "$(jq -r .commit "$out/version.json")" = "$commit" ] || fail "installed wolf commit $(jq -r .commit "$out/version.json"), want $commit"
[ "$(jq '.bpf_objects | length' "$out/version.json")" -gt 0 ] || fail "installed wolf lists no BPF objects"
grep -q '^ *yes ' "$out/check.txt" || fail "wolf check found nothing it can do: $(head -5 "$out/check.txt")"
jq -e '(.errors // []) == [] and (.findings | type) == "array"' "$out/doctor.json" >/dev/null ||
	fail "wolf doctor from the package: errors $(jq -c .errors "$out/doctor.json")"
[ "$(cat "$out/man-path")" = /usr/share/man/man1/wolf-doctor.1.gz ] || fail "man -w wolf-doctor: $(cat "$out/man-path")"
grep -q 'wolf-doctor - ' "$out/man-doctor.txt" && [ ! -s "$out/man.err" ] || fail "man wolf-doctor: $(cat "$out/man.err")"
grep -qx doctor "$out/completion.txt" || fail "bash completion of 'wolf doc': $(cat "$out/completion.txt")"
diff "$out/before.list" "$out/after.list" >"$tmp/left" || fail "files left or lost after dpkg -P: $(head -20 "$tmp/left")"
say "amd64: installed ($(wc -l <"$out/files") paths), wolf version/check/doctor ran, man and completion work, purged without a trace"
if [ -f "$out/version-arm64.json" ]; then
	[ "$(jq -r .platform "$out/version-arm64.json")" = linux/arm64 ] && [ "$(jq -r .version "$out/version-arm64.json")" = "$VERSION" ] ||
		fail "arm64 wolf version: $(jq -c '{version, platform}' "$out/version-arm64.json")"
	diff "$out/before.list" "$out/after-arm64.list" >"$tmp/left" || fail "files left after purging wolf:arm64: $(head -20 "$tmp/left")"
	say "arm64: installed, wolf version ran under qemu-user ($(jq -r .platform "$out/version-arm64.json")), purged without a trace"
else
	say "arm64: qemu-aarch64-static missing (apt-get install qemu-user-static): its binary was not run"
fi
say "ok"
