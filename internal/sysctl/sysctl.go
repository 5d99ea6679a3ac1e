// Package sysctl reads and writes kernel tunables under /proc/sys by their
// sysctl(8) names. Findings quote them ("kernel.hung_task_timeout_secs is
// 120"), remediation names them, and tests lower a timeout and restore it;
// this package is the one place that maps names to files.
package sysctl

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// DefaultRoot is where the kernel exposes sysctls.
const DefaultRoot = "/proc/sys"

// FS is a sysctl tree; the zero value is /proc/sys. Tests point Root at a
// fake tree.
type FS struct {
	Root string
}

var std FS

// Read returns the value of the named sysctl from /proc/sys.
func Read(name string) (string, error) { return std.Read(name) }

// ReadInt returns the value of an integer sysctl from /proc/sys.
func ReadInt(name string) (int64, error) { return std.ReadInt(name) }

// Write sets the named sysctl in /proc/sys (root only).
func Write(name, value string) error { return std.Write(name, value) }

// Set writes value and returns a function restoring the previous value
// (for tests and labs that lower a timeout for a while).
func Set(name, value string) (restore func() error, err error) { return std.Set(name, value) }

// Path maps a sysctl name to its file. Dotted names map dots to
// directories (kernel.hung_task_timeout_secs); names holding a '/' are
// taken as paths already, the way sysctl(8) allows for components that
// contain dots (net/ipv4/conf/eth0.100/rp_filter).
func (f FS) Path(name string) (string, error) {
	root := f.Root
	if root == "" {
		root = DefaultRoot
	}
	rel := name
	if !strings.Contains(name, "/") {
		rel = strings.ReplaceAll(name, ".", "/")
	}
	rel = strings.Trim(rel, "/")
	if rel == "" || strings.Contains("/"+rel+"/", "/../") || strings.Contains("/"+rel+"/", "/./") {
		return "", fmt.Errorf("sysctl: bad name %q", name)
	}
	return filepath.Join(root, rel), nil
}

// Read returns the value of the named sysctl with surrounding whitespace
// removed (multi-value sysctls keep their inner tabs).
func (f FS) Read(name string) (string, error) {
	p, err := f.Path(name)
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return "", fmt.Errorf("sysctl %s: %w", name, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// ReadInt returns the value of an integer sysctl.
func (f FS) ReadInt(name string) (int64, error) {
	s, err := f.Read(name)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("sysctl %s: value %q is not an integer: %w", name, s, err)
	}
	return n, nil
}

// Write sets the named sysctl. The file must exist: sysctls are never
// created.
func (f FS) Write(name, value string) error {
	p, err := f.Path(name)
	if err != nil {
		return err
	}
	fh, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return fmt.Errorf("sysctl %s: %w", name, err)
	}
	_, werr := fh.WriteString(value)
	cerr := fh.Close()
	if werr != nil {
		return fmt.Errorf("sysctl %s=%q: %w", name, value, werr)
	}
	if cerr != nil {
		return fmt.Errorf("sysctl %s=%q: %w", name, value, cerr)
	}
	return nil
}

// Set writes value and returns a function that writes the previous value
// back.
func (f FS) Set(name, value string) (restore func() error, err error) {
	old, err := f.Read(name)
	if err != nil {
		return nil, err
	}
	if err := f.Write(name, value); err != nil {
		return nil, err
	}
	return func() error { return f.Write(name, old) }, nil
}
