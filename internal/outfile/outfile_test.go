package outfile

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/lab"
)

// slowWriterPart is a child of the test binary that writes half a report
// and waits to be killed (TestKill9); its argument is the report's path.
const slowWriterPart = "outfile-slow-writer"

func init() { lab.Child(slowWriterPart, slowWriter) }

func write(t *testing.T, path, content string) error {
	t.Helper()
	tg, err := File(path)
	if err != nil {
		return err
	}
	return tg.Write(func(w io.Writer) error { _, err := io.WriteString(w, content); return err })
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func wantErr(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want one saying %q", err, want)
	}
}

func TestFileRefusals(t *testing.T) {
	dir := t.TempDir()
	reg := filepath.Join(dir, "reg")
	if err := os.WriteFile(reg, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want string }{
		{"", "empty file name"},
		{"/nonexistent-wolf-dir/r.json", "directory /nonexistent-wolf-dir does not exist"},
		{dir, "is a directory"},
		{dir + "/", "is a directory"},
		{filepath.Join(reg, "r.json"), "is not a directory"},
		{"/proc/r.json", "cannot create files in /proc: a kernel file system (procfs)"},
		// Root may write these: a report would set the sysctl.
		{"/proc/sys/kernel/core_pattern", "is a kernel file (procfs)"},
		{"/proc/version", "is a kernel file (procfs)"},
		{"/sys/kernel/mm/transparent_hugepage/enabled", "is a kernel file (sysfs)"},
	} {
		_, err := File(c.path)
		wantErr(t, err, c.want)
	}
	dangling := filepath.Join(dir, "dangling")
	if err := os.Symlink(filepath.Join(dir, "nowhere", "x"), dangling); err != nil {
		t.Fatal(err)
	}
	_, err := File(dangling)
	wantErr(t, err, "which does not exist")
	wantErr(t, Stream("/proc/sys/kernel/core_pattern"), "is a kernel file (procfs)")
	wantErr(t, Stream(dangling), "which does not exist")
	if got := names(t, dir); len(got) != 2 {
		t.Errorf("checks left files behind: %v", got)
	}
}

// readOnlyDir returns a directory nothing can be created in, even by root:
// a read-only tmpfs when root, else a directory without write permission.
func readOnlyDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if os.Geteuid() != 0 {
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(dir, 0o755) })
		return dir
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_RDONLY, "size=64k"); err != nil {
		t.Skipf("mount a read-only tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

func TestReadOnly(t *testing.T) {
	ro := readOnlyDir(t)
	_, err := File(filepath.Join(ro, "r.json"))
	wantErr(t, err, "cannot create files in "+ro)
	wantErr(t, Derived(filepath.Join(ro, "x.folded")), "cannot create files in")
	wantErr(t, Stream(filepath.Join(ro, "w.jsonl")), "cannot create files in")
	wantErr(t, Dir(ro), "cannot create files in")
}

func TestReadOnlyFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "r.json")
	if err := os.WriteFile(p, []byte("old"), 0o444); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		// Root may replace a 0444 file (as cp and the shell's > do);
		// an immutable one it may not.
		if err := write(t, p, "new"); err != nil {
			t.Fatalf("root writing a 0444 file: %v", err)
		}
		if err := setImmutable(p, true); err != nil {
			t.Skipf("chattr +i on %s: %v", dir, err)
		}
		t.Cleanup(func() { setImmutable(p, false) })
		_, err := File(p)
		wantErr(t, err, "not writable: operation not permitted")
		wantErr(t, Stream(p), "not writable")
		return
	}
	_, err := File(p)
	wantErr(t, err, "not writable: permission denied")
}

// fsImmutableFl is FS_IMMUTABLE_FL (linux/fs.h), chattr's +i.
const fsImmutableFl = 0x00000010

func setImmutable(path string, on bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	flags, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if err != nil {
		return err
	}
	if on {
		flags |= fsImmutableFl
	} else {
		flags &^= fsImmutableFl
	}
	return unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, int(flags))
}

func TestFullFileSystem(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	if err := write(t, filepath.Join(dir, "before.json"), "fits"); err != nil {
		t.Fatalf("empty tmpfs: %v", err)
	}
	fill, _ := os.Create(filepath.Join(dir, "fill"))
	_, ferr := fill.Write(make([]byte, 1<<20))
	fill.Close()
	if !errors.Is(ferr, unix.ENOSPC) {
		t.Fatalf("filling the tmpfs: %v", ferr)
	}
	_, err := File(filepath.Join(dir, "r.json"))
	wantErr(t, err, "no space left on device")
	wantErr(t, Stream(filepath.Join(dir, "before.json")), "no space left on device")
}

func TestAtomicWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "r.json")
	if err := write(t, p, "one"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "one" {
		t.Fatalf("content %q", b)
	}
	// An existing file keeps its permissions.
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := write(t, p, "two"); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(p)
	if b, _ := os.ReadFile(p); string(b) != "two" || st.Mode().Perm() != 0o600 {
		t.Errorf("after rewrite: %q mode %v, want \"two\" -rw-------", b, st.Mode())
	}
	// A failing fill changes nothing and leaves nothing.
	tg, err := File(p)
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err = tg.Write(func(w io.Writer) error { io.WriteString(w, "half"); return boom })
	if !errors.Is(err, boom) {
		t.Errorf("Write returned %v, want boom", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "two" {
		t.Errorf("a failed write changed the file: %q", b)
	}
	// A symlink is followed: its target is replaced, the link stays.
	link := filepath.Join(dir, "latest.json")
	if err := os.Symlink("r.json", link); err != nil {
		t.Fatal(err)
	}
	if err := write(t, link, "three"); err != nil {
		t.Fatal(err)
	}
	if l, _ := os.Lstat(link); l.Mode()&os.ModeSymlink == 0 {
		t.Error("the symlink was replaced by a file")
	}
	if b, _ := os.ReadFile(p); string(b) != "three" {
		t.Errorf("through the symlink: %q", b)
	}
	if got := names(t, dir); strings.Join(got, " ") != "latest.json r.json" {
		t.Errorf("directory holds %v, want only latest.json r.json", got)
	}
}

func TestInPlace(t *testing.T) {
	tg, err := File("/dev/null")
	if err != nil {
		t.Fatal(err)
	}
	if !tg.InPlace() {
		t.Error("/dev/null is not written in place")
	}
	if err := tg.Write(func(w io.Writer) error { _, err := io.WriteString(w, "x"); return err }); err != nil {
		t.Error(err)
	}
	// /dev/full takes the open and fails the write: an error, not silence.
	tg, err = File("/dev/full")
	if err != nil {
		t.Fatal(err)
	}
	err = tg.Write(func(w io.Writer) error { _, err := io.WriteString(w, "x"); return err })
	if !errors.Is(err, unix.ENOSPC) {
		t.Errorf("writing /dev/full: %v, want ENOSPC", err)
	}
	// /dev/stdout names a descriptor: written in place, appending, even
	// when the descriptor is a regular file.
	if tg, err := File("/dev/stdout"); err != nil || !tg.InPlace() {
		t.Errorf("/dev/stdout: %v, in place %v", err, tg != nil && tg.InPlace())
	}
	for _, p := range []string{"/dev/full", "/dev/stdout", "/dev/fd/1", t.TempDir()} {
		wantErr(t, Derived(p), "wolf writes files named after it beside it")
	}
	if err := Derived(filepath.Join(t.TempDir(), "x.folded")); err != nil {
		t.Error(err)
	}
}

func TestDescriptorAppends(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "log")
	if err := os.WriteFile(p, []byte("earlier\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	path := fmt.Sprintf("/proc/self/fd/%d", f.Fd())
	tg, err := File(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.Write(func(w io.Writer) error { _, err := io.WriteString(w, "report\n"); return err }); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "earlier\nreport\n" {
		t.Errorf("through %s: %q, want the report appended", path, b)
	}
}

func TestFIFO(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	wantErr(t, Derived(p), "is a FIFO")
	tg, err := File(p)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() {
		f, err := os.Open(p)
		if err != nil {
			got <- err.Error()
			return
		}
		defer f.Close()
		b, _ := io.ReadAll(f)
		got <- string(b)
	}()
	if err := tg.Write(func(w io.Writer) error { _, err := io.WriteString(w, "through a pipe"); return err }); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-got:
		if s != "through a pipe" {
			t.Errorf("reader got %q", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("reader got nothing")
	}
}

func TestStreamAndDir(t *testing.T) {
	dir := t.TempDir()
	wantErr(t, Stream(dir), "is a directory")
	wantErr(t, Stream("/nonexistent-wolf-dir/w.jsonl"), "does not exist")
	wantErr(t, Stream(""), "empty file name")
	if err := Stream("/dev/null"); err != nil {
		t.Error(err)
	}
	if err := Stream(filepath.Join(dir, "w.jsonl")); err != nil {
		t.Error(err)
	}
	if err := Dir(dir); err != nil {
		t.Error(err)
	}
	wantErr(t, Dir("/nonexistent-wolf-dir"), "no such file or directory")
	wantErr(t, Dir("/dev/null"), "not a directory")
	if err := DirOrNew(dir); err != nil {
		t.Error(err)
	}
	if err := DirOrNew(filepath.Join(dir, "incidents")); err != nil {
		t.Error(err)
	}
	wantErr(t, DirOrNew("/nonexistent-wolf-dir/incidents"), "does not exist")
	wantErr(t, DirOrNew("/dev/null"), "not a directory")
	wantErr(t, DirOrNew("/sys/fs/wolf-incidents"), "kernel file system")
	wantErr(t, DirOrNew(readOnlyDir(t)), "cannot create files in")
	if got := names(t, dir); len(got) != 0 {
		t.Errorf("checks created %v", got)
	}
}

// TestKill9 kills a process in the middle of writing a report over an
// older one: the old report must be whole and alone in its directory.
func TestKill9(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "r.json")
	if err := os.WriteFile(p, []byte("old report"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := lab.ChildCommand(context.Background(), slowWriterPart, slowWriterPart, p)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line := make(chan string, 1)
	go func() { l, _ := bufio.NewReader(out).ReadString('\n'); line <- l }()
	select {
	case l := <-line:
		if l != "HALF\n" {
			t.Fatalf("helper said %q", l)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("helper did not start writing")
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if b, _ := os.ReadFile(p); string(b) != "old report" {
		t.Errorf("after kill -9 mid-write the report reads %q", b)
	}
	if got := names(t, dir); len(got) != 1 {
		t.Errorf("after kill -9 mid-write the directory holds %v", got)
	}
}

// slowWriter writes half a report to path, says so and waits to be killed.
func slowWriter(path string) error {
	tg, err := File(path)
	if err != nil {
		return err
	}
	_ = tg.Write(func(w io.Writer) error {
		io.WriteString(w, strings.Repeat("half a report ", 100000))
		w.(*bufio.Writer).Flush()
		fmt.Println("HALF")
		time.Sleep(time.Minute)
		return nil
	})
	return errors.New("not killed in a minute")
}
