package reclaim

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/memcg"
)

// fillCgroup makes the reclaim of a test: a memory cgroup limited to
// 16 MiB and a 64 MiB file on disk; fill reads the file from a process in
// the cgroup, whose page cache then reclaims itself at the limit (memcg
// reclaim of clean file pages, in that process's context).
func fillCgroup(t *testing.T, h memcg.Hierarchy) (path string, fill func()) {
	t.Helper()
	path = "/wolf-reclaim-windows-" + strconv.Itoa(os.Getpid())
	dir := h.Dir(path)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("create cgroup: %v", err)
	}
	t.Cleanup(func() {
		// The cgroup empties when its last process is reaped; retry
		// briefly for the kernel to notice.
		for i := 0; i < 50; i++ {
			if err := os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("cgroup %s left behind", dir)
	})
	limit := [][2]string{{"memory.limit_in_bytes", "16777216"}, {"memory.swappiness", "0"}}
	if h.Version == 2 {
		limit = [][2]string{{"memory.max", "16777216"}, {"memory.swap.max", "0"}}
	}
	for _, w := range limit {
		if err := os.WriteFile(filepath.Join(dir, w[0]), []byte(w[1]), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("set %s: %v", w[0], err)
		}
	}
	// On disk, not tmpfs: clean file pages reclaim without swap.
	fdir, err := os.MkdirTemp("/var/tmp", "wolf-reclaim-windows-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(fdir) })
	file := filepath.Join(fdir, "data")
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	for range 64 {
		if _, err := f.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	fill = func() {
		t.Helper()
		// Out of the page cache first, so that reading charges it anew.
		if fd, err := unix.Open(file, unix.O_RDONLY, 0); err == nil {
			_ = unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED)
			unix.Close(fd)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", `echo $$ > "$1/cgroup.procs" && exec cat "$2" > /dev/null`, "sh", dir, file)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("read the file in the cgroup: %v: %s", err, out)
		}
	}
	return path, fill
}

// vmPages are the host's pages scanned and reclaimed by the inactive-list
// shrinker, every kind of reclaim and cgroup: /proc/vmstat's pgscan_anon
// and pgscan_file count each lru_shrink_inactive batch (classic LRU).
func vmPages() counters {
	v := readVMStat()
	return counters{v["pgscan_anon"] + v["pgscan_file"], v["pgsteal_anon"] + v["pgsteal_file"]}
}

// One session, three windows: a process in a cgroup of the test's reclaims
// in the first and third, nothing in the second. Each window's pages,
// every cgroup's together, lie between the kernel's own counts over the
// window's inner and outer edges (read just after and just before each
// Collect): the windows add up to the kernel's count, none lost, none
// twice; the test's cgroup reclaims in the busy windows only, so the quiet
// one does not repeat the first.
func TestLiveWindows(t *testing.T) {
	h := gate(t)
	if _, err := os.Stat("/proc/vmstat"); err != nil {
		t.Skip("no /proc/vmstat")
	}
	if ReadMGLRU().State == MGLRUOn {
		t.Skip("MGLRU is on: pgscan counts pages differently from the shrink_inactive tracepoint")
	}
	path, fill := fillCgroup(t, h)
	var snaps []*Snapshot
	iv := New()
	iv.snapshot = func(s *Snapshot) { snaps = append(snaps, s) }
	outer0 := vmPages()
	s, err := iv.Start(context.Background(), investigator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	inner0 := vmPages()

	prevInner, prevOuter := inner0, outer0
	var ours []uint64
	var total, kernelInner, kernelOuter uint64
	for i, busy := range []bool{true, false, true} {
		if busy {
			fill()
		} else {
			time.Sleep(300 * time.Millisecond)
		}
		before := vmPages()
		if _, err := s.Collect(context.Background()); err != nil {
			t.Fatal(err)
		}
		after := vmPages()
		snap := snaps[len(snaps)-1]
		var all counters
		var mine *Cgroup
		for _, c := range snap.Cgroups {
			all.scanned += c.Reclaim.Scanned
			all.reclaimed += c.Reclaim.Reclaimed
			if c.Path == path {
				mine = c
			}
		}
		inner := counters{before.scanned - prevInner.scanned, before.reclaimed - prevInner.reclaimed}
		outer := counters{after.scanned - prevOuter.scanned, after.reclaimed - prevOuter.reclaimed}
		var myScanned, myCalls uint64
		if mine != nil {
			myScanned, myCalls = mine.Reclaim.Scanned, mine.Reclaim.Calls[kindMemcg]
		}
		t.Logf("window %d (reclaim %v): wolf %d/%d pages scanned/reclaimed (%d scanned in %d memcg calls in %s); kernel %d..%d / %d..%d",
			i+1, busy, all.scanned, all.reclaimed, myScanned, myCalls, path, inner.scanned, outer.scanned, inner.reclaimed, outer.reclaimed)
		if all.scanned < inner.scanned || all.scanned > outer.scanned || all.reclaimed < inner.reclaimed || all.reclaimed > outer.reclaimed {
			t.Errorf("window %d: wolf counted %d/%d pages, the kernel %d..%d / %d..%d over the window's edges",
				i+1, all.scanned, all.reclaimed, inner.scanned, outer.scanned, inner.reclaimed, outer.reclaimed)
		}
		if busy && (myScanned < 4096 || myCalls == 0) {
			t.Errorf("window %d: the test's cgroup scanned %d pages in %d calls; reading 64 MiB under a 16 MiB limit reclaims more", i+1, myScanned, myCalls)
		}
		if !busy && (myScanned != 0 || myCalls != 0) {
			t.Errorf("window %d: nothing reclaimed in the test's cgroup, yet wolf counts %d pages in %d calls: it repeats the first window", i+1, myScanned, myCalls)
		}
		ours = append(ours, myScanned)
		total += all.scanned
		kernelInner += inner.scanned
		kernelOuter += outer.scanned
		prevInner, prevOuter = after, before
	}
	t.Logf("session: wolf %d pages scanned (the test's cgroup %v); kernel %d..%d", total, ours, kernelInner, kernelOuter)
}
