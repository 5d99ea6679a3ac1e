#!/usr/bin/env bash
# Builds the release twice and compares every artifact byte for byte: once
# in this checkout, once in a fresh clone of HEAD at another path with a
# Go build cache of its own, never the first build's, so that neither the
# build directory nor a shared cache can make the two agree. The clone
# holds only what is committed: the tree must be clean. Exit 0 identical,
# 1 different, 2 cannot run.
#
# The clone's cache is kept between runs ($CACHE/gocache-clone): Go's
# cache is keyed by every input of a step, so an entry from an earlier
# run is reused only for the same inputs, and it was made by an earlier,
# independent build; empty, the second build took 4 to 11 minutes of a
# 45-minute CI. WOLF_REPRO_EMPTY_CACHE=1 starts it from an empty cache.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
	setup_error "uncommitted changes; the second build is a clone of HEAD: commit first"
fi
tmp=$(mktemp -d /tmp/wolf-repro.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

say "build 1: make release in $ROOT"
start=$SECONDS
make -s release DIST="$DIST" >"$tmp/build1.log" 2>&1 || { tail -30 "$tmp/build1.log"; fail "make release"; }
say "build 1: $((SECONDS - start)) s"

gocache=$CACHE/gocache-clone
if [ "${WOLF_REPRO_EMPTY_CACHE:-}" = 1 ]; then
	gocache=$tmp/gocache
fi
if [ "$gocache" -ef "$(go env GOCACHE)" ]; then
	setup_error "the clone's build cache $gocache is the first build's"
fi
say "build 2: make release in a clone at $tmp/wolf, build cache $gocache (not the first build's)"
start=$SECONDS
git clone -q "$ROOT" "$tmp/wolf"
git -C "$tmp/wolf" checkout -q --detach "$(git rev-parse HEAD)"
GOCACHE=$gocache make -s -C "$tmp/wolf" release >"$tmp/build2.log" 2>&1 || { tail -30 "$tmp/build2.log"; fail "make release in the clone"; }
say "build 2: $((SECONDS - start)) s"

a=$(cd "$DIST" && find . -maxdepth 1 -type f | sort)
b=$(cd "$tmp/wolf/dist" && find . -maxdepth 1 -type f | sort)
[ "$a" = "$b" ] || fail "the two builds made different files: $(diff <(echo "$a") <(echo "$b") | tr '\n' ' ')"
differ=0
for f in $a; do
	if cmp -s "$DIST/$f" "$tmp/wolf/dist/$f"; then
		say "identical  $(sha256sum "$DIST/$f" | cut -c1-16)  ${f#./}"
	else
		echo "$(basename "$0"): DIFFERENT ${f#./}" >&2
		differ=1
	fi
done
[ $differ = 0 ] || fail "the two builds differ"
say "ok: $(echo "$a" | wc -l) artifacts byte-identical"
