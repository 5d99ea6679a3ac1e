// Package realtable loads a real Internet routing table for tests and
// benchmarks: the ~1.06 M tier-1 prefixes (≈902 K IPv4, ≈160 K IPv6) that
// the Go module github.com/gaissmai/bart ships as test data. The data is
// read from the Go module cache at run time and never copied into this
// repository; the module version is pinned so the table never changes
// under a benchmark.
package realtable

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Module and Version pin the table's source; File is its path inside it.
const (
	Module  = "github.com/gaissmai/bart"
	Version = "v0.30.0"
	File    = "internal/tests/testdata/prefixes.txt.gz"
)

// ErrNotInCache means the pinned module is not in the module cache.
var ErrNotInCache = errors.New("the real routing table is not in the Go module cache")

// Path finds the table in the module cache (GOMODCACHE, else GOPATH/pkg/mod).
func Path() (string, error) {
	var roots []string
	if c := os.Getenv("GOMODCACHE"); c != "" {
		roots = append(roots, c)
	}
	if out, err := exec.Command("go", "env", "GOMODCACHE").Output(); err == nil {
		if c := strings.TrimSpace(string(out)); c != "" {
			roots = append(roots, c)
		}
	}
	if home, err := os.UserHomeDir(); err == nil {
		roots = append(roots, filepath.Join(home, "go", "pkg", "mod"))
	}
	for _, root := range roots {
		p := filepath.Join(root, Module+"@"+Version, File)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w (looked in %s); fetch it with: go mod download %s@%s", ErrNotInCache, strings.Join(roots, ", "), Module, Version)
}

// Load reads every prefix of the table, IPv4 and IPv6, in file order.
func Load() ([]netip.Prefix, error) {
	p, err := Path()
	if err != nil {
		return nil, err
	}
	return LoadFile(p)
}

// LoadFile reads a gzip-compressed file of one prefix per line.
func LoadFile(path string) ([]netip.Prefix, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("realtable: %w", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("realtable: %s: %w", path, err)
	}
	defer zr.Close()
	var out []netip.Prefix
	sc := bufio.NewScanner(zr)
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		pfx, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("realtable: %s:%d: %w", path, line, err)
		}
		out = append(out, pfx.Masked())
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("realtable: read %s: %w", path, err)
	}
	return out, nil
}

// Split returns the IPv4 and IPv6 prefixes of ps.
func Split(ps []netip.Prefix) (v4, v6 []netip.Prefix) {
	for _, p := range ps {
		if p.Addr().Is4() {
			v4 = append(v4, p)
		} else {
			v6 = append(v6, p)
		}
	}
	return v4, v6
}
