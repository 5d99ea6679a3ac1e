#!/usr/bin/env bash
# Loads the release's OCI image archive into podman and runs wolf from it
# the way the DaemonSet in deploy/kubernetes does: privileged, in the
# host's PID, network and cgroup namespaces, read-only root, the host's
# /proc at /host/proc, /lib/modules and /boot mounted. It checks what was
# loaded (name, entry point, labels), that wolf version in the image is
# this release, and that wolf doctor runs there without an investigator
# failing. podman gets a storage directory of its own, removed afterwards:
# the host's image store is not touched.
# Exit 0 pass, 1 fail, 2 cannot run.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

need_root "a privileged container"
need_tool podman "apt-get install podman"
need_tool jq "apt-get install jq"
archive=$(artifact wolf-oci-image.tar)
ref=$IMAGE_REPO:$VERSION

tmp=$(mktemp -d /tmp/wolf-image.XXXXXX)
P=(podman --root "$tmp/storage" --runroot "$tmp/run" --tmpdir "$tmp/libpod" --network-config-dir "$tmp/networks" --storage-driver vfs
	--cgroup-manager cgroupfs --events-backend file)
# crun, podman's default runtime on Debian, exits 1 without a word on a
# host with a hybrid cgroup hierarchy (v1 controllers beside a v2 mount,
# as on this machine: "cgroups in hybrid mode not supported"); runc runs
# there. Use runc when it is installed.
if command -v runc >/dev/null; then
	P+=(--runtime runc)
fi
# netavark makes /run/containers/networks whatever the flags say; it is
# removed again (when empty) if this run made it.
made_run_dir=
[ -e /run/containers ] || made_run_dir=1
cleanup() {
	"${P[@]}" rm -af >/dev/null 2>&1 || true
	"${P[@]}" rmi -af >/dev/null 2>&1 || true
	if findmnt -rn -o TARGET | grep -q "^$tmp"; then
		echo "$(basename "$0"): mounts left under $tmp; not deleting it" >&2
		return
	fi
	rm -rf "$tmp"
	if [ -n "$made_run_dir" ]; then
		rmdir /run/containers/networks /run/containers 2>/dev/null || true
	fi
}
trap cleanup EXIT

# podman asks the runtime for nofile 1048576 and a large nproc; raising a
# limit above its hard value takes CAP_SYS_RESOURCE, which root lacks in
# some sandboxes (this machine's among them). There, ask for no more than
# the hard limits this shell has.
run_opts=()
capeff=$(awk '/^CapEff:/ {print $2}' /proc/self/status)
if (((0x$capeff >> 24) & 1)); then :; else
	run_opts+=(--ulimit "nofile=$(ulimit -Hn):$(ulimit -Hn)" --ulimit nproc=4096:4096)
fi

say "podman load -i $archive"
loaded=$("${P[@]}" load -i "$archive" 2>&1) || fail "podman load: $loaded"
grep -qx "Loaded image: $ref" <<<"$loaded" || fail "podman load: want $ref, got: $loaded"
"${P[@]}" image inspect "$ref" >"$tmp/inspect.json"
jq -e --arg c "$(git rev-parse HEAD)" '.[0] | .Architecture == "amd64" and .Os == "linux"
	and .Config.Entrypoint == ["/usr/bin/wolf"] and .Config.Labels["org.opencontainers.image.revision"] == $c' \
	"$tmp/inspect.json" >/dev/null || fail "image config: $(jq -c '.[0] | {Architecture, Os, Entrypoint: .Config.Entrypoint, Labels: .Config.Labels}' "$tmp/inspect.json")"
say "loaded $ref: $(jq -r '.[0].Size' "$tmp/inspect.json") bytes, entry point $(jq -c '.[0].Config.Entrypoint' "$tmp/inspect.json")"

say "podman run $ref version"
"${P[@]}" run --rm "${run_opts[@]}" --network=host "$ref" version --format json >"$tmp/version.json" ||
	fail "wolf version in the image"
[ "$(jq -r .version "$tmp/version.json")" = "$VERSION" ] || fail "wolf version in the image: $(jq -r .version "$tmp/version.json"), want $VERSION"

# The DaemonSet's settings, as podman flags.
mounts=(-v /proc:/host/proc:ro)
for d in /lib/modules /boot; do
	[ -d "$d" ] && mounts+=(-v "$d:$d:ro")
done
say "podman run --privileged --pid=host --network=host --cgroupns=host --read-only $ref doctor --duration 5s"
start=$SECONDS
rc=0
timeout 120 "${P[@]}" run --rm "${run_opts[@]}" --privileged --pid=host --network=host --cgroupns=host --read-only \
	"${mounts[@]}" "$ref" doctor --duration 5s --format json >"$tmp/doctor.json" 2>"$tmp/doctor.err" || rc=$?
[ $rc = 0 ] || fail "wolf doctor in the image: exit $rc: $(tail -5 "$tmp/doctor.err")"
jq -e '(.errors // []) == [] and (.findings | type) == "array"' "$tmp/doctor.json" >/dev/null ||
	fail "wolf doctor in the image: errors $(jq -c .errors "$tmp/doctor.json")"
say "wolf doctor ran in the image in $((SECONDS - start)) s: $(jq '.findings | length' "$tmp/doctor.json") findings, no investigator failed"
say "ok"
