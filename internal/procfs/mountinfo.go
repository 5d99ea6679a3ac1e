package procfs

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Mount is one line of /proc/PID/mountinfo (proc(5)):
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//	ID Pa Dev  Root  Point Options   optional - FSType Source SuperOptions
//
// The optional fields (shared:N, master:N, ...) are not kept.
type Mount struct {
	ID, Parent   int
	Dev          string // "major:minor": st_dev of the files on the mount
	Root         string // the directory of the filesystem mounted here
	Point        string // the mount point, relative to the reader's root
	Options      []string
	FSType       string // "type" or "type.subtype" (fuse.sshfs)
	Source       string // filesystem specific; "none" or empty when there is none
	SuperOptions []string
}

// maxMountinfoLine bounds one line of mountinfo (the per-mount options can
// be long, e.g. overlayfs lowerdir lists).
const maxMountinfoLine = 1 << 20

// Mounts returns the mounts seen by process pid, from /proc/PID/mountinfo;
// pid 0 means the calling process (/proc/self). Reading mountinfo takes the
// mount namespace's lock, which a stuck mount or unmount can hold, so the
// read runs with the reader's timeout. It is streamed rather than read
// whole, so hosts with very many mounts are not cut off at a size limit.
func (r Reader) Mounts(ctx context.Context, pid int) ([]Mount, error) {
	path := filepath.Join(r.root(), "self", "mountinfo")
	if pid != 0 {
		path = r.path(pid, 0, "mountinfo")
	}
	mounts, err := withTimeout(ctx, r, "reading "+path, func() ([]Mount, error) {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return ParseMountinfo(f)
	})
	if err != nil {
		return mounts, fmt.Errorf("procfs: mountinfo: %w", err)
	}
	return mounts, nil
}

// ParseMountinfo parses /proc/PID/mountinfo. The octal escapes the kernel
// writes for space, tab, newline and backslash (\040, \011, \012, \134) are
// undone in Root, Point and Source. Lines too short to hold every field up
// to the super options, or whose ids are not numbers, are skipped. On a read
// error (or a line over 1 MiB) it returns the mounts parsed so far with the
// error.
func ParseMountinfo(r io.Reader) ([]Mount, error) {
	var out []Mount
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxMountinfoLine)
	for sc.Scan() {
		if m, ok := parseMountLine(sc.Text()); ok {
			out = append(out, m)
		}
	}
	return out, sc.Err()
}

func parseMountLine(line string) (Mount, bool) {
	// Paths cannot hold a raw space (it is escaped), and the optional
	// fields are never "-", so the first " - " is the separator.
	pre, post, ok := strings.Cut(line, " - ")
	if !ok {
		return Mount{}, false
	}
	f := strings.Fields(pre)
	// The kernel separates with single spaces; splitting the second half
	// on them keeps an empty source ("- tmpfs  rw") in its place.
	pf := strings.Split(strings.TrimSpace(post), " ")
	if len(f) < 6 || len(pf) < 3 || pf[0] == "" {
		return Mount{}, false
	}
	id, err1 := strconv.Atoi(f[0])
	parent, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil {
		return Mount{}, false
	}
	return Mount{
		ID:           id,
		Parent:       parent,
		Dev:          f[2],
		Root:         unescapeOctal(f[3]),
		Point:        unescapeOctal(f[4]),
		Options:      strings.Split(f[5], ","),
		FSType:       pf[0],
		Source:       unescapeOctal(pf[1]),
		SuperOptions: strings.Split(pf[2], ","),
	}, true
}

// unescapeOctal undoes the kernel's \ooo escapes (one byte each, so the
// first digit is 0-3). Anything else is left as it is.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctalByte(s[i+1:i+4]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctalByte(s string) bool {
	return len(s) == 3 && s[0] >= '0' && s[0] <= '3' &&
		s[1] >= '0' && s[1] <= '7' && s[2] >= '0' && s[2] <= '7'
}
