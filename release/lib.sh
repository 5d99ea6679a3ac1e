# Shared by the release/check-*.sh scripts (sourced, not run).

# The repository root; every script runs from there.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

DIST=${DIST:-dist}
VERSION=${VERSION:-$(release/version.sh)}
DEB_VERSION=${DEB_VERSION:-$(echo "$VERSION" | sed 's/-/+/; s/-/./g')}
IMAGE_REPO=${IMAGE_REPO:-ghcr.io/wolf-investigator/wolf}

# What the checks download (a Debian root, Kubernetes schemas) is kept
# here, never in the repository: WOLF_RELEASE_CACHE, else
# $XDG_CACHE_HOME/wolf-release, else /var/cache/wolf-release for root.
if [ -n "${WOLF_RELEASE_CACHE:-}" ]; then
	CACHE=$WOLF_RELEASE_CACHE
elif [ -n "${XDG_CACHE_HOME:-}" ]; then
	CACHE=$XDG_CACHE_HOME/wolf-release
elif [ "$(id -u)" = 0 ]; then
	CACHE=/var/cache/wolf-release
else
	CACHE=$HOME/.cache/wolf-release
fi
mkdir -p "$CACHE"

say() { echo "$(basename "$0"): $*"; }
fail() {
	echo "$(basename "$0"): FAIL: $*" >&2
	exit 1
}
# setup_error: the machine lacks what the check needs (exit 2, like the qemu scripts).
setup_error() {
	echo "$(basename "$0"): cannot run: $*" >&2
	exit 2
}
need_root() { [ "$(id -u)" = 0 ] || setup_error "needs root ($1)"; }
need_tool() { command -v "$1" >/dev/null || setup_error "needs $1 ($2)"; }

# artifact NAME: the path of a release artifact, which must exist.
artifact() {
	[ -f "$DIST/$1" ] || setup_error "$DIST/$1 is missing: run make release first"
	echo "$DIST/$1"
}
