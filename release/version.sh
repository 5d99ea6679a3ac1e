#!/bin/sh
# Prints the version of a wolf built from this checkout, as git describe
# gives it from the nearest vX.Y.Z tag: 1.2.3 on the tag, 1.2.3-5-gHASH
# five commits later; 0.0.0-N-gHASH (N commits in all) before the first
# tag; -dirty appended when tracked files have uncommitted changes. The
# Makefile embeds it in the binary and derives the Debian version from it.
set -eu
cd "$(dirname "$0")/.."
if v=$(git describe --tags --match 'v[0-9]*' --abbrev=12 --dirty 2>/dev/null); then
	echo "${v#v}"
	exit 0
fi
n=$(git rev-list --count HEAD)
h=$(git rev-parse --short=12 HEAD)
dirty=
git update-index -q --refresh >/dev/null 2>&1 || true
git diff-index --quiet HEAD -- || dirty=-dirty
echo "0.0.0-$n-g$h$dirty"
