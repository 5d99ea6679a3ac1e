package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"
)

// OCI media types (image-spec v1.1).
const (
	mediaIndex    = "application/vnd.oci.image.index.v1+json"
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayerGz  = "application/vnd.oci.image.layer.v1.tar+gzip"
	annotRefName  = "org.opencontainers.image.ref.name"
)

// file is one entry of the image's single layer.
type file struct {
	path string // absolute in the image, e.g. /usr/bin/wolf
	mode int64  // permission bits; a directory when dir is set
	dir  bool
	data []byte
}

// platformImage is the image for one architecture.
type platformImage struct {
	arch    string // GOARCH: amd64, arm64
	variant string // arm64: v8
	files   []file
}

// imageConfig is what every platform's image shares.
type imageConfig struct {
	ref        string // full reference, e.g. ghcr.io/wolf-investigator/wolf:1.2.3
	created    time.Time
	entrypoint []string
	cmd        []string
	env        []string
	labels     map[string]string
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *platform         `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Variant      string `json:"variant,omitempty"`
}

type index struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType"`
	Manifests     []descriptor      `json:"manifests"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

type manifest struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType"`
	Config        descriptor        `json:"config"`
	Layers        []descriptor      `json:"layers"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

type runConfig struct {
	Entrypoint []string          `json:"Entrypoint,omitempty"`
	Cmd        []string          `json:"Cmd,omitempty"`
	Env        []string          `json:"Env,omitempty"`
	Labels     map[string]string `json:"Labels,omitempty"`
	WorkingDir string            `json:"WorkingDir,omitempty"`
}

type history struct {
	Created   string `json:"created"`
	CreatedBy string `json:"created_by"`
}

type configFile struct {
	Created      string    `json:"created"`
	Architecture string    `json:"architecture"`
	Variant      string    `json:"variant,omitempty"`
	OS           string    `json:"os"`
	Config       runConfig `json:"config"`
	RootFS       struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
	History []history `json:"history"`
}

// layout collects the blobs of an OCI image layout by digest.
type layout struct {
	blobs map[string][]byte
}

func (l *layout) add(media string, b []byte) descriptor {
	sum := sha256.Sum256(b)
	d := "sha256:" + hex.EncodeToString(sum[:])
	l.blobs[d] = b
	return descriptor{MediaType: media, Digest: d, Size: int64(len(b))}
}

func (l *layout) addJSON(media string, v any) (descriptor, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return descriptor{}, fmt.Errorf("encoding %s: %w", media, err)
	}
	return l.add(media, b), nil
}

// writeArchive writes an OCI image layout holding one multi-platform image
// (an index of one manifest per platform) as a tar archive, the form
// `podman load`, `skopeo copy oci-archive:` and registries' tooling read.
//
// Everything in it is a function of its inputs: entries sorted, owners
// root, every timestamp cfg.created, gzip without a name or time. Two
// builds of one commit are byte-identical.
func writeArchive(w io.Writer, cfg imageConfig, images []platformImage) error {
	l := &layout{blobs: map[string][]byte{}}
	var platforms []descriptor
	for _, img := range images {
		layerTar, err := layerTar(img.files, cfg.created)
		if err != nil {
			return fmt.Errorf("%s layer: %w", img.arch, err)
		}
		diffSum := sha256.Sum256(layerTar)
		gz, err := gzipBytes(layerTar)
		if err != nil {
			return fmt.Errorf("%s layer: %w", img.arch, err)
		}
		layer := l.add(mediaLayerGz, gz)

		var c configFile
		c.Created = cfg.created.UTC().Format(time.RFC3339)
		c.Architecture, c.Variant, c.OS = img.arch, img.variant, "linux"
		c.Config = runConfig{Entrypoint: cfg.entrypoint, Cmd: cfg.cmd, Env: cfg.env, Labels: cfg.labels, WorkingDir: "/"}
		c.RootFS.Type = "layers"
		c.RootFS.DiffIDs = []string{"sha256:" + hex.EncodeToString(diffSum[:])}
		c.History = []history{{Created: c.Created, CreatedBy: "make image (release/ociimage): static wolf binary, no base image"}}
		conf, err := l.addJSON(mediaConfig, c)
		if err != nil {
			return err
		}
		m, err := l.addJSON(mediaManifest, manifest{SchemaVersion: 2, MediaType: mediaManifest, Config: conf, Layers: []descriptor{layer}})
		if err != nil {
			return err
		}
		m.Platform = &platform{Architecture: img.arch, OS: "linux", Variant: img.variant}
		platforms = append(platforms, m)
	}
	// index.json names one image index (the multi-platform image) under
	// the reference; tools pick the platform they run on from it.
	multi, err := l.addJSON(mediaIndex, index{SchemaVersion: 2, MediaType: mediaIndex, Manifests: platforms})
	if err != nil {
		return err
	}
	multi.Annotations = map[string]string{annotRefName: cfg.ref}
	top, err := json.Marshal(index{SchemaVersion: 2, MediaType: mediaIndex, Manifests: []descriptor{multi}})
	if err != nil {
		return err
	}

	// The archive: directories first, blobs by digest, then index.json
	// and oci-layout.
	type entry struct {
		name string
		mode int64
		data []byte // nil for a directory
	}
	entries := []entry{{"blobs/", 0o755, nil}, {"blobs/sha256/", 0o755, nil}}
	digests := make([]string, 0, len(l.blobs))
	for d := range l.blobs {
		digests = append(digests, d)
	}
	sort.Strings(digests)
	for _, d := range digests {
		entries = append(entries, entry{"blobs/sha256/" + strings.TrimPrefix(d, "sha256:"), 0o644, l.blobs[d]})
	}
	entries = append(entries, entry{"index.json", 0o644, top}, entry{"oci-layout", 0o644, []byte(`{"imageLayoutVersion":"1.0.0"}`)})
	tw := tar.NewWriter(w)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Size: int64(len(e.data)), ModTime: cfg.created, Typeflag: tar.TypeReg, Format: tar.FormatUSTAR}
		if e.data == nil {
			h.Typeflag = tar.TypeDir
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("writing %s: %w", e.name, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return fmt.Errorf("writing %s: %w", e.name, err)
		}
	}
	return tw.Close()
}

// layerTar is the layer's uncompressed tar: every parent directory has an
// entry of its own, entries are sorted, owners root.
func layerTar(files []file, mtime time.Time) ([]byte, error) {
	all := map[string]file{}
	for _, f := range files {
		p := strings.TrimPrefix(path.Clean(f.path), "/")
		if p == "" || p == "." || strings.HasPrefix(p, "..") {
			return nil, fmt.Errorf("bad path %q", f.path)
		}
		if _, dup := all[p]; dup {
			return nil, fmt.Errorf("%s given twice", f.path)
		}
		all[p] = f
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if _, ok := all[d]; !ok {
				all[d] = file{path: "/" + d, mode: 0o755, dir: true}
			}
		}
	}
	names := make([]string, 0, len(all))
	for p := range all {
		names = append(names, p)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range names {
		f := all[p]
		h := &tar.Header{Name: p, Mode: f.mode, ModTime: mtime, Typeflag: tar.TypeReg, Size: int64(len(f.data)), Format: tar.FormatUSTAR}
		if f.dir {
			h.Name, h.Typeflag, h.Size = p+"/", tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if !f.dir {
			if _, err := tw.Write(f.data); err != nil {
				return nil, fmt.Errorf("%s: %w", p, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func gzipBytes(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
