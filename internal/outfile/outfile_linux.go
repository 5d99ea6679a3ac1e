package outfile

import (
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// openTmpfile opens an unnamed file in dir (O_TMPFILE): one a crash leaves
// nothing of.
func openTmpfile(dir string, mode fs.FileMode) (int, error) {
	return unix.Open(dir, unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, uint32(mode))
}

// linkTemp gives the unnamed file f the name name.
func linkTemp(f *os.File, name string) error {
	fd := int(f.Fd())
	// AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; the /proc link does not.
	err := unix.Linkat(fd, "", unix.AT_FDCWD, name, unix.AT_EMPTY_PATH)
	if err == nil {
		return nil
	}
	if err2 := unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), unix.AT_FDCWD, name, unix.AT_SYMLINK_FOLLOW); err2 != nil {
		return fmt.Errorf("link %s: %w", name, err2)
	}
	return nil
}

// kernelFS names the file systems whose files are the kernel's knobs and
// views: a report written there would be a write to a sysctl or a cgroup
// setting, never a file.
var kernelFS = map[int64]string{
	unix.PROC_SUPER_MAGIC:    "procfs",
	unix.SYSFS_MAGIC:         "sysfs",
	unix.CGROUP_SUPER_MAGIC:  "cgroupfs",
	unix.CGROUP2_SUPER_MAGIC: "cgroup2",
	unix.DEBUGFS_MAGIC:       "debugfs",
	unix.TRACEFS_MAGIC:       "tracefs",
	unix.SECURITYFS_MAGIC:    "securityfs",
	unix.BPF_FS_MAGIC:        "bpffs",
	unix.PSTOREFS_MAGIC:      "pstore",
	unix.EFIVARFS_MAGIC:      "efivarfs",
	0x62656570:               "configfs",
}

// kernelFSOf names the kernel file system path is on, or "".
func kernelFSOf(path string) string {
	var s unix.Statfs_t
	if err := unix.Statfs(path, &s); err != nil {
		return ""
	}
	return kernelFS[int64(s.Type)]
}
