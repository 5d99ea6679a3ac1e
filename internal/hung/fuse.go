package hung

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/wolf-investigator/wolf/internal/procfs"
)

// fuseDaemons lists the processes that hold /dev/fuse open: the FUSE
// daemons, one of which is the one the chain ends at. Reading fd links
// takes no mmap_lock, but a sick host can still be slow, so the walk is
// bounded in time and its result may be partial.
func fuseDaemons(ctx context.Context, proc procfs.Reader) []Proc {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	pids, err := proc.Processes(ctx)
	if err != nil {
		return nil
	}
	root := proc.Root
	if root == "" {
		root = procfs.DefaultRoot
	}
	var out []Proc
	for _, pid := range pids {
		if ctx.Err() != nil {
			break
		}
		dir := filepath.Join(root, strconv.Itoa(pid), "fd")
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && l == "/dev/fuse" {
				comm, _ := proc.Comm(ctx, pid, pid)
				out = append(out, Proc{PID: pid, Comm: comm})
				break
			}
		}
	}
	return out
}
