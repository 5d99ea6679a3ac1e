//go:build !linux

package outfile

import (
	"errors"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// openTmpfile: only Linux has unnamed files; the caller falls back to a
// named temporary file.
func openTmpfile(string, fs.FileMode) (int, error) { return -1, unix.EOPNOTSUPP }

// linkTemp is never reached without openTmpfile.
func linkTemp(*os.File, string) error { return errors.New("unnamed files need Linux") }

// kernelFSOf: the kernel file systems refused are Linux's.
func kernelFSOf(string) string { return "" }
