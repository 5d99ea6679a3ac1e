// Package outfile checks wolf's output paths before a run and writes
// reports so that they are never half there.
//
// Checks come first: a run of minutes that cannot save what it found is a
// run thrown away, so every path a command will write (--output, --folded,
// --pprof, watch's --output, a directory of incidents) is checked before
// any work starts: the directory exists and is one, a file can be created
// in it (probed with an unnamed O_TMPFILE file, which leaves nothing
// behind, or a named one removed at once where the file system has no
// O_TMPFILE), an existing file is writable (access(2), which also says
// "read-only file system" and, for immutable files, "operation not
// permitted", even to root), its file system is not full, and a directory
// is not given where a file is wanted. Nothing is created by a check.
//
// Reports are written atomically: into an unnamed temporary file in the
// destination's directory, flushed to disk, linked under a temporary name
// and renamed over the destination, then the directory is flushed. A crash
// or kill -9 at any moment leaves the old file or the new one, never half
// of one, and (except between link and rename, microseconds) no temporary
// file either. An existing file keeps its permissions and, when wolf runs
// as root, its owner; a symlink is followed, and the file it points to is
// replaced, not the link.
//
// Not everything is a file that can be replaced. A character device
// (/dev/null, a terminal), a FIFO, and the /proc links to open descriptors
// (/dev/stdout, /dev/fd/N, /proc/self/fd/N) are written in place, the last
// ones appending, since the descriptor may be a shell's `>>`: a report may
// go there. Names derived from a path (--folded writes NAME.PROFILE.folded
// beside NAME) are refused beside such a path: /dev/full.x.folded would be
// a regular file in /dev. Block devices and sockets are refused.
package outfile

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Target is a checked destination for one file written at the end of a
// run.
type Target struct {
	path    string      // as given
	real    string      // symlinks resolved: what the rename replaces
	inPlace bool        // device, FIFO or /proc link: opened and written, not renamed
	append  bool        // in place, appending (a regular file behind a /proc link)
	exists  bool        // a regular file is there now
	mode    fs.FileMode // its permissions, kept
	uid     int
	gid     int
}

// Path is the destination as given.
func (t *Target) Path() string { return t.path }

// InPlace says whether the destination is written in place (a device, a
// FIFO, a descriptor's /proc link) rather than replaced atomically.
func (t *Target) InPlace() bool { return t.inPlace }

// File checks that path can take one file written whole at the end of a
// run, and returns where and how it will be written.
func File(path string) (*Target, error) {
	if path == "" {
		return nil, errors.New("empty file name")
	}
	t := &Target{path: path}
	st, err := os.Stat(path)
	if err == nil {
		if err := refuseKernelFS(path); err != nil {
			return nil, err
		}
	}
	if err == nil && procLink(path) {
		return t, t.checkInPlace()
	}
	switch {
	case err == nil && st.IsDir():
		return nil, fmt.Errorf("%s: is a directory", path)
	case err == nil && st.Mode().IsRegular():
		if err := unix.Access(path, unix.W_OK); err != nil {
			return nil, fmt.Errorf("%s: not writable: %w", path, err)
		}
		real, err := filepath.EvalSymlinks(path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		t.real, t.exists, t.mode = real, true, st.Mode().Perm()
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			t.uid, t.gid = int(sys.Uid), int(sys.Gid)
		}
		return t, checkCreate(filepath.Dir(real))
	case err == nil:
		if err := refuseSpecial(path, st.Mode()); err != nil {
			return nil, err
		}
		return t, t.checkInPlace()
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR):
		if l, lerr := os.Lstat(path); lerr == nil && l.Mode()&fs.ModeSymlink != 0 {
			dest, _ := os.Readlink(path)
			return nil, fmt.Errorf("%s: a symbolic link to %s, which does not exist", path, dest)
		}
		dir, err := existingDir(path)
		if err != nil {
			return nil, err
		}
		t.real, t.mode = filepath.Join(dir, filepath.Base(path)), 0o644
		return t, checkCreate(dir)
	default:
		return nil, pathErr(path, err)
	}
}

// Derived checks that files named after path (NAME.PROFILE.folded beside
// NAME) can be created: path must be a file name in a directory wolf can
// create files in, not a directory, device, FIFO or /proc link.
func Derived(path string) error {
	if path == "" {
		return errors.New("empty file name")
	}
	why := ""
	if procLink(path) {
		why = "a link to an open descriptor"
	} else if st, err := os.Stat(path); err == nil && st.IsDir() {
		why = "a directory"
	} else if err == nil && !st.Mode().IsRegular() {
		why = "a " + kind(st.Mode())
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, unix.ENOTDIR) {
		return pathErr(path, err)
	}
	if why != "" {
		return fmt.Errorf("%s: is %s; wolf writes files named after it beside it (NAME.PROFILE.folded), so give a file name in a directory", path, why)
	}
	dir, err := existingDir(path)
	if err != nil {
		return err
	}
	return checkCreate(dir)
}

// Stream checks that path can be opened for appending (wolf watch
// --output): an existing regular file, device or FIFO it may write, or a
// new file in a directory it can create files in. It creates nothing.
func Stream(path string) error {
	if path == "" {
		return errors.New("empty file name")
	}
	st, err := os.Stat(path)
	switch {
	case err == nil && st.IsDir():
		return fmt.Errorf("%s: is a directory", path)
	case err == nil:
		if err := refuseSpecial(path, st.Mode()); err != nil {
			return err
		}
		if err := refuseKernelFS(path); err != nil {
			return err
		}
		if err := unix.Access(path, unix.W_OK); err != nil {
			return fmt.Errorf("%s: not writable: %w", path, err)
		}
		if st.Mode().IsRegular() {
			return checkSpace(filepath.Dir(path))
		}
		return nil
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR):
		if l, lerr := os.Lstat(path); lerr == nil && l.Mode()&fs.ModeSymlink != 0 {
			dest, _ := os.Readlink(path)
			return fmt.Errorf("%s: a symbolic link to %s, which does not exist", path, dest)
		}
		dir, err := existingDir(path)
		if err != nil {
			return err
		}
		return checkCreate(dir)
	default:
		return pathErr(path, err)
	}
}

// Dir checks that dir is an existing directory wolf can create files in.
func Dir(dir string) error {
	if dir == "" {
		return errors.New("empty directory name")
	}
	st, err := os.Stat(dir)
	if err != nil {
		return pathErr(dir, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%s: not a directory", dir)
	}
	return checkCreate(dir)
}

// DirOrNew checks a directory wolf writes files into and creates if
// need be (wolf watch --incidents): an existing directory it can create
// files in, or a new one whose parent exists and takes it. It creates
// nothing.
func DirOrNew(dir string) error {
	if dir == "" {
		return errors.New("empty directory name")
	}
	st, err := os.Stat(dir)
	switch {
	case err == nil && !st.IsDir():
		return fmt.Errorf("%s: not a directory", dir)
	case err == nil:
		return checkCreate(dir)
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR):
		parent, err := existingDir(filepath.Clean(dir))
		if err != nil {
			return err
		}
		return checkCreate(parent)
	default:
		return pathErr(dir, err)
	}
}

// Write writes what fill produces to the target: atomically for a file,
// in place for a device, FIFO or /proc link. On error nothing at the
// destination has changed (for a file).
func (t *Target) Write(fill func(io.Writer) error) error {
	if t.inPlace {
		return t.writeInPlace(fill)
	}
	return t.writeAtomic(fill)
}

// WriteFile checks path with File and writes it: for files whose names are
// known only after the run (--folded's).
func WriteFile(path string, fill func(io.Writer) error) error {
	t, err := File(path)
	if err != nil {
		return err
	}
	return t.Write(fill)
}

func (t *Target) checkInPlace() error {
	st, err := os.Stat(t.path)
	if err != nil {
		return pathErr(t.path, err)
	}
	if st.IsDir() {
		return fmt.Errorf("%s: is a directory", t.path)
	}
	if err := refuseSpecial(t.path, st.Mode()); err != nil {
		return err
	}
	if err := unix.Access(t.path, unix.W_OK); err != nil {
		return fmt.Errorf("%s: not writable: %w", t.path, err)
	}
	t.inPlace = true
	t.append = st.Mode().IsRegular()
	return nil
}

func (t *Target) writeInPlace(fill func(io.Writer) error) error {
	flags := os.O_WRONLY
	if t.append {
		flags |= os.O_APPEND
	}
	f, err := os.OpenFile(t.path, flags, 0)
	if err != nil {
		return fmt.Errorf("write %s: %w", t.path, unwrapPath(err))
	}
	w := bufio.NewWriterSize(f, 64<<10)
	err = fill(w)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", t.path, unwrapPath(err))
	}
	return nil
}

func (t *Target) writeAtomic(fill func(io.Writer) error) (err error) {
	dir, base := filepath.Dir(t.real), filepath.Base(t.real)
	tmpName := filepath.Join(dir, "."+base+".wolf-"+randomHex())
	// An unnamed file first: a crash while it is written leaves nothing.
	f, named, err := createTemp(dir, tmpName, t.mode)
	if err != nil {
		return fmt.Errorf("write %s: %w", t.path, err)
	}
	linked := named
	defer func() {
		if f != nil {
			f.Close()
		}
		if err != nil && linked {
			os.Remove(tmpName)
		}
	}()
	w := bufio.NewWriterSize(f, 64<<10)
	if err := fill(w); err != nil {
		return fmt.Errorf("write %s: %w", t.path, err)
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write %s: %w", t.path, err)
	}
	if t.exists {
		// The replacement keeps what the old file had: umask applied
		// to a new file, not to one being rewritten.
		if err := f.Chmod(t.mode); err != nil {
			return fmt.Errorf("write %s: keep its permissions: %w", t.path, err)
		}
		if os.Geteuid() == 0 {
			if err := f.Chown(t.uid, t.gid); err != nil {
				return fmt.Errorf("write %s: keep its owner: %w", t.path, err)
			}
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("write %s: flush: %w", t.path, err)
	}
	if !named {
		if err := linkTemp(f, tmpName); err != nil {
			return fmt.Errorf("write %s: %w", t.path, err)
		}
		linked = true
	}
	if err := f.Close(); err != nil {
		f = nil
		return fmt.Errorf("write %s: %w", t.path, err)
	}
	f = nil
	if err := os.Rename(tmpName, t.real); err != nil {
		return fmt.Errorf("write %s: %w", t.path, err)
	}
	linked = false
	syncDir(dir)
	return nil
}

// createTemp opens an unnamed file in dir (O_TMPFILE) or, where the file
// system has none, the file name; named says which.
func createTemp(dir, name string, mode fs.FileMode) (f *os.File, named bool, err error) {
	fd, err := openTmpfile(dir, mode)
	if err == nil {
		return os.NewFile(uintptr(fd), name), false, nil
	}
	if !noTmpfile(err) {
		return nil, false, err
	}
	f, err = os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	return f, true, err
}

func noTmpfile(err error) bool {
	return errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EINVAL)
}

// syncDir makes a rename in dir durable. Some file systems cannot fsync a
// directory; the rename has happened either way.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// checkCreate says whether a file can be created in dir, creating nothing
// that outlives the call.
func checkCreate(dir string) error {
	if name := kernelFSOf(dir); name != "" {
		return fmt.Errorf("cannot create files in %s: a kernel file system (%s), not a place for a report", dir, name)
	}
	if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
		return fmt.Errorf("cannot create files in %s: %w", dir, err)
	}
	// access(2) is not the whole truth: root passes it for /proc and /sys,
	// where nothing can be created.
	fd, err := openTmpfile(dir, 0o600)
	switch {
	case err == nil:
		unix.Close(fd)
	case noTmpfile(err):
		probe := filepath.Join(dir, ".wolf-probe-"+randomHex())
		f, err := os.OpenFile(probe, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return fmt.Errorf("cannot create files in %s: %w", dir, unwrapPath(err))
		}
		f.Close()
		os.Remove(probe)
	default:
		return fmt.Errorf("cannot create files in %s: %w", dir, err)
	}
	return checkSpace(dir)
}

// checkSpace refuses a file system with no free block at all. Blocks
// reserved for root count as free: wolf mostly runs as root.
func checkSpace(dir string) error {
	var s unix.Statfs_t
	if err := unix.Statfs(dir, &s); err != nil {
		return nil // the write will say what is wrong
	}
	if s.Blocks > 0 && s.Bfree == 0 {
		return fmt.Errorf("cannot write in %s: %w", dir, unix.ENOSPC)
	}
	return nil
}

// existingDir returns path's directory if it exists and is a directory,
// with symlinks resolved.
func existingDir(path string) (string, error) {
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%s: directory %s does not exist", path, dir)
	}
	if errors.Is(err, unix.ENOTDIR) || (err == nil && !st.IsDir()) {
		return "", fmt.Errorf("%s: %s is not a directory", path, dir)
	}
	if err != nil {
		return "", pathErr(dir, err)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", pathErr(dir, err)
	}
	return real, nil
}

// refuseSpecial refuses what no report should be written to.
func refuseSpecial(path string, m fs.FileMode) error {
	switch {
	case m&fs.ModeDevice != 0 && m&fs.ModeCharDevice == 0:
		return fmt.Errorf("%s: is a block device; wolf does not write onto disks", path)
	case m&fs.ModeSocket != 0:
		return fmt.Errorf("%s: is a socket", path)
	}
	return nil
}

func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	case m&fs.ModeNamedPipe != 0:
		return "FIFO"
	case m&fs.ModeSocket != 0:
		return "socket"
	}
	return "special file"
}

// fdLinkRE matches the /proc links to a process's open descriptors.
var fdLinkRE = regexp.MustCompile(`^/proc/(self|thread-self|[0-9]+)(/task/[0-9]+)?/fd/[0-9]+$`)

// procLink says whether path names an open descriptor through /proc
// (/dev/stdout, /dev/fd/1, /proc/self/fd/1): resolving it would name the
// file the descriptor has open, and replacing that file would not write
// to the descriptor.
func procLink(path string) bool {
	abs, err := filepath.Abs(path)
	if err != nil {
		return false
	}
	// /dev/stdout -> /proc/self/fd/1, /dev/fd -> /proc/self/fd.
	for _, p := range []string{abs, filepath.Dir(abs)} {
		if l, err := os.Lstat(p); err == nil && l.Mode()&fs.ModeSymlink != 0 {
			if dest, err := os.Readlink(p); err == nil && strings.HasPrefix(dest, "/proc/") {
				if p != abs {
					dest = filepath.Join(dest, filepath.Base(abs))
				}
				abs = dest
				break
			}
		}
	}
	return fdLinkRE.MatchString(abs)
}

// refuseKernelFS refuses a path (following symlinks) on a kernel file
// system.
func refuseKernelFS(path string) error {
	if name := kernelFSOf(path); name != "" {
		return fmt.Errorf("%s: is a kernel file (%s), not a place for a report", path, name)
	}
	return nil
}

func pathErr(path string, err error) error {
	return fmt.Errorf("%s: %w", path, unwrapPath(err))
}

// unwrapPath drops *fs.PathError's own copy of the path, which the
// messages here already carry.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func randomHex() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
