// Command ociimage builds wolf's container image without pulling anything:
// an OCI image layout, written as a tar archive, whose one layer holds the
// static wolf binary (no base image: wolf needs no libc, shell or
// certificates) and an empty /tmp. One image per architecture, under one
// multi-platform index, so `podman load` and `skopeo copy` pick the host's.
//
//	go run ./release/ociimage -o dist/wolf-oci-image.tar \
//	    -ref ghcr.io/wolf-investigator/wolf:1.2.3 -created 2026-11-25T13:15:00Z \
//	    -binary amd64=dist/wolf-linux-amd64 -binary arm64=dist/wolf-linux-arm64 \
//	    -label org.opencontainers.image.revision=COMMIT
//
// The Makefile's image target runs it; the archive is byte-identical for
// identical inputs.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// repeated collects a flag given several times as key=value.
type repeated map[string]string

func (r repeated) String() string { return fmt.Sprint(map[string]string(r)) }

func (r repeated) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not key=value", s)
	}
	if _, dup := r[k]; dup {
		return fmt.Errorf("%s given twice", k)
	}
	r[k] = v
	return nil
}

// variants are the OCI platform variants of the architectures wolf ships.
var variants = map[string]string{"amd64": "", "arm64": "v8"}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "ociimage: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("ociimage", flag.ContinueOnError)
	out := fs.String("o", "", "write the archive to `FILE`")
	ref := fs.String("ref", "", "the image reference, e.g. ghcr.io/wolf-investigator/wolf:1.2.3")
	created := fs.String("created", "", "creation time, RFC 3339 (the commit's date, for reproducible builds)")
	binaries, labels := repeated{}, repeated{}
	fs.Var(binaries, "binary", "`ARCH=PATH` of a static linux wolf binary (repeat per architecture)")
	fs.Var(labels, "label", "`KEY=VALUE` image label (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || *ref == "" || *created == "" || len(binaries) == 0 {
		return errors.New("-o, -ref, -created and at least one -binary are required")
	}
	when, err := time.Parse(time.RFC3339, *created)
	if err != nil {
		return fmt.Errorf("-created: %w", err)
	}
	archs := make([]string, 0, len(binaries))
	for a := range binaries {
		if _, ok := variants[a]; !ok {
			return fmt.Errorf("-binary %s: wolf ships amd64 and arm64", a)
		}
		archs = append(archs, a)
	}
	sort.Strings(archs)
	var images []platformImage
	for _, a := range archs {
		bin, err := os.ReadFile(binaries[a])
		if err != nil {
			return err
		}
		images = append(images, platformImage{arch: a, variant: variants[a], files: []file{
			{path: "/usr/bin/wolf", mode: 0o755, data: bin},
			// Labs and the coredump handler write under /tmp.
			{path: "/tmp", mode: 0o1777, dir: true},
		}})
	}
	cfg := imageConfig{
		ref:        *ref,
		created:    when,
		entrypoint: []string{"/usr/bin/wolf"},
		cmd:        []string{"doctor"},
		env:        []string{"PATH=/usr/bin"},
		labels:     labels,
	}
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(*out), ".ociimage-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	bw := bufio.NewWriter(f)
	if err := writeArchive(bw, cfg, images); err != nil {
		f.Close()
		return err
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), *out)
}
