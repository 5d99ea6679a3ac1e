package kconfig

import (
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wolf-investigator/wolf/internal/testutil"
)

const sample = `#
# Automatically generated file; DO NOT EDIT.
#
CONFIG_CC_VERSION_TEXT="gcc (GCC) 14.2 \"x\""
CONFIG_BPF_SYSCALL=y
CONFIG_FUSE_FS=m
# CONFIG_KPROBES is not set
CONFIG_DEFAULT_HUNG_TASK_TIMEOUT=120
CONFIG_LOCALVERSION=""
`

func TestGet(t *testing.T) {
	c, err := Parse(strings.NewReader(sample), "sample")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		value   string
		known   bool
		enabled bool
	}{
		{"CONFIG_BPF_SYSCALL", "y", true, true},
		{"BPF_SYSCALL", "y", true, true},
		{"CONFIG_FUSE_FS", "m", true, true},
		{"CONFIG_KPROBES", "n", true, false},
		{"CONFIG_DEFAULT_HUNG_TASK_TIMEOUT", "120", true, false},
		{"CONFIG_CC_VERSION_TEXT", `gcc (GCC) 14.2 "x"`, true, false},
		{"CONFIG_LOCALVERSION", "", true, false},
		{"CONFIG_NOT_THERE", "", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, known := c.Get(tt.name)
			if v != tt.value || known != tt.known {
				t.Errorf("Get = %q, %v; want %q, %v", v, known, tt.value, tt.known)
			}
			if e := c.Enabled(tt.name); e != tt.enabled {
				t.Errorf("Enabled = %v, want %v", e, tt.enabled)
			}
		})
	}
	for name, want := range map[string]string{
		"KPROBES":        "CONFIG_KPROBES is not set in this kernel (sample)",
		"CONFIG_FUSE_FS": "CONFIG_FUSE_FS=m in this kernel (sample)",
		"CONFIG_NOPE":    "CONFIG_NOPE is absent from this kernel's config (sample), so it is not set",
	} {
		if got := c.Describe(name); got != want {
			t.Errorf("Describe(%s) = %q, want %q", name, got, want)
		}
	}
}

func TestLoadFrom(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "config-plain")
	if err := os.WriteFile(plain, []byte(sample), 0o644); err != nil {
		t.Fatal(err)
	}
	gz := filepath.Join(dir, "config.gz")
	f, err := os.Create(gz)
	if err != nil {
		t.Fatal(err)
	}
	w := gzip.NewWriter(f)
	w.Write([]byte(strings.Replace(sample, "CONFIG_FUSE_FS=m", "CONFIG_FUSE_FS=y", 1)))
	w.Close()
	f.Close()
	notConfig := filepath.Join(dir, "not-a-config")
	os.WriteFile(notConfig, []byte("hello\n"), 0o644)
	missing := filepath.Join(dir, "missing")

	tests := []struct {
		name    string
		paths   []string
		source  string
		fuse    string
		wantErr error
	}{
		{"gzip first", []string{gz, plain}, gz, "y", nil},
		{"skips missing", []string{missing, plain}, plain, "m", nil},
		{"none", []string{missing}, "", "", ErrNotFound},
		{"unparsable stops", []string{notConfig, plain}, "", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := LoadFrom(tt.paths...)
			if tt.source == "" {
				if err == nil {
					t.Fatal("no error")
				}
				if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
					t.Errorf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Source() != tt.source {
				t.Errorf("Source = %q, want %q", c.Source(), tt.source)
			}
			if v, _ := c.Get("FUSE_FS"); v != tt.fuse {
				t.Errorf("FUSE_FS = %q, want %q", v, tt.fuse)
			}
		})
	}
}

// On the machine itself: a config is found and agrees with the kernel
// (BTF is there because /sys/kernel/btf/vmlinux is).
func TestLoadRunning(t *testing.T) {
	c, err := Load()
	_, btfErr := os.Stat("/sys/kernel/btf/vmlinux")
	testutil.Require(t, !errors.Is(err, ErrNotFound), "this kernel publishes no build config")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("config from %s; %s", c.Source(), c.Describe("KPROBES"))
	if btfErr == nil && !c.Enabled("CONFIG_DEBUG_INFO_BTF") {
		t.Errorf("kernel has BTF but %s", c.Describe("DEBUG_INFO_BTF"))
	}
	if !c.Enabled("BPF_SYSCALL") {
		t.Errorf("%s", c.Describe("BPF_SYSCALL"))
	}
}
