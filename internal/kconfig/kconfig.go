// Package kconfig reads the build configuration of the running kernel.
//
// What wolf can do depends on how the kernel was built (CONFIG_KPROBES,
// CONFIG_DETECT_HUNG_TASK, CONFIG_SCHED_MC, CONFIG_PSI_DEFAULT_DISABLED...),
// and a finding or `wolf check` line must be able to say "CONFIG_KPROBES is
// not set in this kernel (/proc/config.gz)" rather than a bare errno. This
// package finds the config where distributions keep it and answers lookups.
package kconfig

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrNotFound: none of the places a kernel config is kept holds one.
var ErrNotFound = errors.New("kernel build config not found")

// Config is a parsed kernel .config. It is immutable and safe for
// concurrent use.
type Config struct {
	values map[string]string // CONFIG_X -> "y", "m", "n" (for "is not set"), a number or an unquoted string
	source string
}

// Paths returns the places Load looks, in order, for kernel release
// release: /proc/config.gz (CONFIG_IKCONFIG_PROC), /boot/config-RELEASE,
// /lib/modules/RELEASE/build/.config.
func Paths(release string) []string {
	return []string{
		"/proc/config.gz",
		"/boot/config-" + release,
		"/lib/modules/" + release + "/build/.config",
	}
}

// Load reads the running kernel's config from the first of Paths that
// exists.
func Load() (*Config, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return nil, fmt.Errorf("kconfig: uname: %w", err)
	}
	return LoadFrom(Paths(unix.ByteSliceToString(u.Release[:]))...)
}

// LoadFrom reads the first of paths that exists; names ending in .gz are
// gunzipped. A path that exists but cannot be parsed is an error, not a
// reason to try the next one: the next may describe another kernel.
func LoadFrom(paths ...string) (*Config, error) {
	for _, p := range paths {
		c, err := loadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("kconfig: %w", err)
		}
		return c, nil
	}
	return nil, fmt.Errorf("kconfig: %w (looked in %s)", ErrNotFound, strings.Join(paths, ", "))
}

func loadFile(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		gz, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		defer gz.Close()
		r = gz
	}
	c, err := Parse(r, path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Parse reads a .config from r; source names it for Source.
func Parse(r io.Reader, source string) (*Config, error) {
	c := &Config{values: map[string]string{}, source: source}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if name, ok := strings.CutPrefix(line, "# "); ok {
			if n, ok := strings.CutSuffix(name, " is not set"); ok && strings.HasPrefix(n, "CONFIG_") {
				c.values[n] = "n"
			}
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		if !ok || !strings.HasPrefix(name, "CONFIG_") {
			continue
		}
		if len(value) >= 2 && value[0] == '"' && value[len(value)-1] == '"' {
			value = strings.ReplaceAll(value[1:len(value)-1], `\"`, `"`)
		}
		c.values[name] = value
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(c.values) == 0 {
		return nil, errors.New("no CONFIG_ lines: not a kernel config")
	}
	return c, nil
}

// Source is the file the config was read from.
func (c *Config) Source() string { return c.source }

func canonical(name string) string {
	if strings.HasPrefix(name, "CONFIG_") {
		return name
	}
	return "CONFIG_" + name
}

// Get returns the value of an option ("CONFIG_KPROBES" or "KPROBES"):
// "y", "m", "n" for "# CONFIG_X is not set", a number, or a string without
// its quotes. known is false when the config does not mention the option at
// all, which for a kernel config also means it is not set (its
// dependencies were not met).
func (c *Config) Get(name string) (value string, known bool) {
	v, ok := c.values[canonical(name)]
	return v, ok
}

// Enabled reports whether an option is built in (y) or a module (m).
func (c *Config) Enabled(name string) bool {
	v := c.values[canonical(name)]
	return v == "y" || v == "m"
}

// Describe says in plain words how an option is set, naming the source, for
// reports: "CONFIG_KPROBES is not set in this kernel (/proc/config.gz)".
func (c *Config) Describe(name string) string {
	name = canonical(name)
	v, ok := c.values[name]
	switch {
	case !ok:
		return fmt.Sprintf("%s is absent from this kernel's config (%s), so it is not set", name, c.source)
	case v == "n":
		return fmt.Sprintf("%s is not set in this kernel (%s)", name, c.source)
	}
	return fmt.Sprintf("%s=%s in this kernel (%s)", name, v, c.source)
}
