# wolf's build, release and test entry points. `make help` lists them.
#
# make release builds, from a clean clone, everything a sick host can be
# given: static binaries for linux/amd64 and linux/arm64, their SHA-256
# checksums, Debian packages and an OCI image archive, all in dist/, all
# byte-identical from one build to the next (release/README.md says how).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
.DELETE_ON_ERROR:

# The Go toolchain go.mod names: the go command fetches it from the module
# proxy when the local one differs, so every release is built by the same
# compiler.
GO_VERSION := $(shell sed -n 's/^go //p' go.mod)
export GOTOOLCHAIN := go$(GO_VERSION)
# Pinned tools (nfpm, kubeconform, staticcheck) from tools/go.mod.
TOOL := go tool -modfile=$(CURDIR)/tools/go.mod

# Build information comes from git, never from the clock: the build date
# is the commit's date, so a rebuild of the same commit is identical.
VERSION := $(shell release/version.sh)
COMMIT := $(shell git rev-parse HEAD)
export SOURCE_DATE_EPOCH := $(shell git log -1 --format=%ct HEAD)
DATE := $(shell date -u -d @$(SOURCE_DATE_EPOCH) +%Y-%m-%dT%H:%M:%SZ)
# Debian orders 1.2.3+5.gHASH after 1.2.3; git describe's hyphens would not.
DEB_VERSION := $(shell echo '$(VERSION)' | sed 's/-/+/; s/-/./g')
IMAGE_REPO ?= ghcr.io/wolf-investigator/wolf

DIST ?= dist
WORK := $(DIST)/work
ARCHES := amd64 arm64
BUILDINFO := github.com/wolf-investigator/wolf/internal/buildinfo
LDFLAGS := -s -w -X $(BUILDINFO).version=$(VERSION) -X $(BUILDINFO).commit=$(COMMIT) -X $(BUILDINFO).date=$(DATE)
# -trimpath: no build directory in the binary; -buildvcs=false: the -X
# values say it all, and a worktree and a clone of one commit stamp alike.
GOBUILD := CGO_ENABLED=0 GOOS=linux GOAMD64=v1 GOARM64=v8.0 go build -trimpath -buildvcs=false -mod=readonly -ldflags '$(LDFLAGS)'

.PHONY: help release binaries man completions debs image manifest checksums release-check \
	generate lint unit live bench

help:
	@echo 'make release        dist/: binaries (linux amd64, arm64), SHA256SUMS, .deb packages, OCI image'
	@echo 'make release-check  release twice and compare; lintian; manifest schema; install the .deb in a'
	@echo '                    throwaway Debian root; run the image (needs root, network to Debian mirrors)'
	@echo 'make generate       go generate ./... (BPF objects and bindings; needs clang, llvm, libbpf-dev)'
	@echo 'make lint           gofmt, go vet, staticcheck, clang-format (when .clang-format exists)'
	@echo 'make unit           go test -short ./... (no root, BPF or lab)'
	@echo 'make live           the full suite as root, capability skips turned into failures'
	@echo 'make bench          the benchmarks'
	@echo 'version $(VERSION), Debian $(DEB_VERSION), commit date $(DATE)'

## Release ---------------------------------------------------------------

release:
	rm -rf $(DIST)
	$(MAKE) --no-print-directory binaries man completions
	$(MAKE) --no-print-directory debs image manifest
	$(MAKE) --no-print-directory checksums
	@ls -l $(DIST)

binaries:
	mkdir -p $(DIST)
	$(foreach a,$(ARCHES),GOARCH=$(a) $(GOBUILD) -o $(DIST)/wolf-linux-$(a) ./cmd/wolf;)

# Man pages are generated from the command tree at build time, not
# committed (cmd/wolf/man_test.go says why), then gzipped without a name
# or time stamp (-n) so the packages stay reproducible.
man:
	rm -rf $(WORK)/man
	WOLF_MAN_DIR=$(abspath $(WORK)/man) go test -count=1 -buildvcs=false \
		-ldflags '-X $(BUILDINFO).version=$(VERSION)' -run '^TestManPages$$' ./cmd/wolf
	rm -f $(WORK)/man/wolf-completion-powershell.1
	gzip -9 -n $(WORK)/man/*.1

completions:
	mkdir -p $(WORK)/completions
	go build -buildvcs=false -o $(WORK)/wolf-host ./cmd/wolf
	$(WORK)/wolf-host completion bash > $(WORK)/completions/wolf.bash
	$(WORK)/wolf-host completion zsh > $(WORK)/completions/_wolf
	$(WORK)/wolf-host completion fish > $(WORK)/completions/wolf.fish

# The packaged unit runs the packaged binary: /usr/bin/wolf, where the
# unit in deploy/ (for a hand install) says /usr/local/bin/wolf.
debs:
	mkdir -p $(WORK)
	sed -e 's|/usr/local/bin/wolf|/usr/bin/wolf|g' \
		-e 's|^# /var/log/wolf/watch.jsonl. Install the binary as /usr/bin/wolf.|# /var/log/wolf/watch.jsonl. Installed by the wolf package; not enabled by default.|' \
		deploy/systemd/wolf-watch.service > $(WORK)/wolf-watch.service
	printf '%s\n' 'wolf ($(DEB_VERSION)-1) unstable; urgency=medium' '' \
		'  * Release built from commit $(COMMIT).' '' \
		' -- wolf developers <wolf-investigator@users.noreply.github.com>  $(shell date -u -R -d @$(SOURCE_DATE_EPOCH))' \
		| gzip -9 -n > $(WORK)/changelog.Debian.gz
	$(foreach a,$(ARCHES),WOLF_ARCH=$(a) WOLF_DEB_VERSION=$(DEB_VERSION) WOLF_DIST=$(abspath $(DIST)) WOLF_WORK=$(abspath $(WORK)) \
		$(TOOL) nfpm package --config release/nfpm.yaml --packager deb --target $(DIST)/wolf_$(DEB_VERSION)-1_$(a).deb;)

image:
	go run ./release/ociimage -o $(DIST)/wolf-oci-image.tar -ref $(IMAGE_REPO):$(VERSION) -created $(DATE) \
		$(foreach a,$(ARCHES),-binary $(a)=$(DIST)/wolf-linux-$(a)) \
		-label org.opencontainers.image.title=wolf \
		-label org.opencontainers.image.version=$(VERSION) \
		-label org.opencontainers.image.revision=$(COMMIT) \
		-label org.opencontainers.image.created=$(DATE) \
		-label org.opencontainers.image.source=https://github.com/wolf-investigator/wolf

# The DaemonSet with the image this release built, by its exact tag.
manifest:
	grep -q '^ *image: $(IMAGE_REPO):' deploy/kubernetes/wolf-daemonset.yaml
	sed 's|^\( *image: \)$(IMAGE_REPO):.*|\1$(IMAGE_REPO):$(VERSION)|' deploy/kubernetes/wolf-daemonset.yaml > $(DIST)/wolf-daemonset.yaml

checksums:
	cd $(DIST) && sha256sum wolf-linux-* *.deb wolf-oci-image.tar wolf-daemonset.yaml > SHA256SUMS && cat SHA256SUMS

# Builds the release twice, here and in a fresh clone elsewhere with a
# build cache of its own, and compares every artifact byte for byte; then
# checks the packages, the manifest and the image for real.
release-check:
	release/check-reproducible.sh
	release/check-deb.sh
	release/check-manifests.sh
	release/check-image.sh

## Development (issue 15's tiers) ----------------------------------------

generate:
	go generate ./...

lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change: $$unformatted" >&2; exit 1; fi
	go vet ./...
	$(TOOL) staticcheck ./...
	@if [ -f .clang-format ]; then \
		echo clang-format --dry-run --Werror '*.bpf.c' bpf/include/wolf.h; \
		clang-format --dry-run --Werror $$(git ls-files '*.bpf.c') bpf/include/wolf.h; \
	fi

unit:
	go test -short ./...

live:
	@if [ "$$(id -u)" != 0 ]; then echo 'make live runs as root (it loads BPF and runs labs)' >&2; exit 3; fi
	WOLF_REQUIRE_BPF=1 go test -count=1 ./...

bench:
	go test -run '^$$' -bench . ./...
