package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// buildArchive runs the command on two small files standing in for the
// binaries and returns the archive's bytes.
func buildArchive(t *testing.T) []byte {
	t.Helper()
	dir := t.TempDir()
	for arch, body := range map[string]string{"amd64": "amd64 wolf", "arm64": "arm64 wolf"} {
		if err := os.WriteFile(filepath.Join(dir, arch), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "out", "image.tar")
	err := run([]string{"-o", out, "-ref", "example.org/wolf:1.2.3", "-created", "2026-11-25T13:15:00Z",
		"-binary", "arm64=" + filepath.Join(dir, "arm64"), "-binary", "amd64=" + filepath.Join(dir, "amd64"),
		"-label", "org.opencontainers.image.version=1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func untar(t *testing.T, b []byte) (map[string][]byte, map[string]*tar.Header) {
	t.Helper()
	files, headers := map[string][]byte{}, map[string]*tar.Header{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, headers
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name], headers[h.Name] = data, h
	}
}

// TestArchiveIsAValidLayout follows the layout from index.json to each
// platform's layer and checks every digest, size and the image's contents.
func TestArchiveIsAValidLayout(t *testing.T) {
	files, _ := untar(t, buildArchive(t))
	if string(files["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Fatalf("oci-layout = %q", files["oci-layout"])
	}
	blob := func(d descriptor) []byte {
		t.Helper()
		b, ok := files["blobs/sha256/"+strings.TrimPrefix(d.Digest, "sha256:")]
		if !ok {
			t.Fatalf("blob %s missing", d.Digest)
		}
		sum := sha256.Sum256(b)
		if "sha256:"+hex.EncodeToString(sum[:]) != d.Digest || int64(len(b)) != d.Size {
			t.Fatalf("blob %s: digest or size (%d, want %d) wrong", d.Digest, len(b), d.Size)
		}
		return b
	}
	var top index
	if err := json.Unmarshal(files["index.json"], &top); err != nil {
		t.Fatal(err)
	}
	if len(top.Manifests) != 1 || top.Manifests[0].MediaType != mediaIndex || top.Manifests[0].Annotations[annotRefName] != "example.org/wolf:1.2.3" {
		t.Fatalf("index.json: %+v", top)
	}
	var multi index
	if err := json.Unmarshal(blob(top.Manifests[0]), &multi); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, md := range multi.Manifests {
		if md.Platform == nil || md.MediaType != mediaManifest {
			t.Fatalf("platform manifest descriptor %+v", md)
		}
		arch := md.Platform.Architecture
		seen[arch] = true
		var m manifest
		if err := json.Unmarshal(blob(md), &m); err != nil {
			t.Fatal(err)
		}
		var c configFile
		if err := json.Unmarshal(blob(m.Config), &c); err != nil {
			t.Fatal(err)
		}
		if c.Architecture != arch || c.OS != "linux" || strings.Join(c.Config.Entrypoint, " ") != "/usr/bin/wolf" || c.Created != "2026-11-25T13:15:00Z" || c.Config.Labels["org.opencontainers.image.version"] != "1.2.3" {
			t.Errorf("%s config: %+v", arch, c)
		}
		if len(m.Layers) != 1 || m.Layers[0].MediaType != mediaLayerGz {
			t.Fatalf("%s layers: %+v", arch, m.Layers)
		}
		zr, err := gzip.NewReader(bytes.NewReader(blob(m.Layers[0])))
		if err != nil {
			t.Fatal(err)
		}
		layer, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(layer)
		if len(c.RootFS.DiffIDs) != 1 || c.RootFS.DiffIDs[0] != "sha256:"+hex.EncodeToString(sum[:]) {
			t.Errorf("%s diff_ids %v do not match the layer", arch, c.RootFS.DiffIDs)
		}
		lf, lh := untar(t, layer)
		if string(lf["usr/bin/wolf"]) != arch+" wolf" || lh["usr/bin/wolf"].Mode != 0o755 {
			t.Errorf("%s: usr/bin/wolf = %q mode %o", arch, lf["usr/bin/wolf"], lh["usr/bin/wolf"].Mode)
		}
		for _, d := range []string{"usr/", "usr/bin/", "tmp/"} {
			if h, ok := lh[d]; !ok || h.Typeflag != tar.TypeDir {
				t.Errorf("%s: layer lacks directory %s", arch, d)
			}
		}
		if h := lh["tmp/"]; h != nil && h.Mode != 0o1777 {
			t.Errorf("%s: /tmp mode %o, want 1777", arch, h.Mode)
		}
	}
	if !seen["amd64"] || !seen["arm64"] || len(seen) != 2 {
		t.Errorf("platforms %v, want amd64 and arm64", seen)
	}
}

func TestArchiveIsReproducible(t *testing.T) {
	a, b := buildArchive(t), buildArchive(t)
	if !bytes.Equal(a, b) {
		t.Fatal("two builds from the same inputs differ")
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"-o", "x", "-ref", "r", "-created", "yesterday", "-binary", "amd64=/bin/true"},
		{"-o", "x", "-ref", "r", "-created", "2026-11-25T13:15:00Z", "-binary", "riscv64=/bin/true"},
		{"-o", "x", "-ref", "r", "-created", "2026-11-25T13:15:00Z", "-binary", "amd64"},
	} {
		if err := run(args); err == nil {
			t.Errorf("ociimage %v: no error", args)
		}
	}
}
