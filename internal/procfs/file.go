package procfs

import (
	"context"
	"os"
)

// ReadFile reads one small kernel file by absolute path (/proc/stat,
// /proc/pressure/io, a /sys attribute) with the reader's timeout and under
// the same bound on stuck reads as every other read here. System-wide
// files rarely block, but the host wolf runs on is sick by assumption.
func (r Reader) ReadFile(ctx context.Context, path string) ([]byte, error) {
	return r.read(ctx, path)
}

// ReadDirNames lists the entry names of a directory (e.g. /sys/block) with
// the reader's timeout.
func (r Reader) ReadDirNames(ctx context.Context, dir string) ([]string, error) {
	return withTimeout(ctx, r, "listing "+dir, func() ([]string, error) {
		return readDirNames(dir)
	})
}

func readDirNames(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	return names, nil
}
