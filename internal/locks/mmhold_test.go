package locks

import (
	"runtime"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/testutil"
)

// A thread that takes the same mmap_lock again in the same mode without a
// release in between lost the last hold's release (its program attached
// after the acquire's): the hold begins anew, counted, rather than going
// on across the thread's sleep between (khugepaged's 10 s between scans,
// a critical 10 s "hold" on an idle host). A write hold taken again for
// reading is mmap_write_downgrade: that hold goes on. The acquire program
// runs through BPF_PROG_TEST_RUN with the tracepoint's arguments.
func TestMmReacquireAfterLostRelease(t *testing.T) {
	testutil.RequireRoot(t)
	spec, err := loadLocks()
	if err != nil {
		t.Fatal(err)
	}
	var objs struct {
		Acquired *ebpf.Program `ebpf:"on_mm_acquired"`
		Threads  *ebpf.Map     `ebpf:"mm_threads"`
		Stats    *ebpf.Map     `ebpf:"stats"`
	}
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		t.Fatalf("load: %v", err)
	}
	defer objs.Acquired.Close()
	defer objs.Threads.Close()
	defer objs.Stats.Close()
	runtime.LockOSThread() // the program keys its state by the running thread
	defer runtime.UnlockOSThread()
	tid := uint32(unix.Gettid())
	const mm = 0xffff888012345000 // never dereferenced but through probe reads
	acquire := func(write bool) {
		t.Helper()
		w := uint64(0)
		if write {
			w = 1
		}
		// mm, write, success (the arguments without memcg_path: the
		// program's default, mmap_has_memcg_path false).
		if _, err := objs.Acquired.Run(&ebpf.RunOptions{Context: []uint64{mm, w, 1}}); err != nil {
			t.Fatalf("run: %v", err)
		}
	}
	start := func() uint64 {
		t.Helper()
		var th locksMmThread
		if err := objs.Threads.Lookup(tid, &th); err != nil {
			t.Fatalf("mm_threads[%d]: %v", tid, err)
		}
		return th.HoldStartNs
	}
	lost := func() uint64 {
		t.Helper()
		var per []uint64
		if err := objs.Stats.Lookup(uint32(locksStatIndexSTAT_MM_LOST_RELEASE), &per); err != nil {
			t.Fatal(err)
		}
		var n uint64
		for _, v := range per {
			n += v
		}
		return n
	}

	acquire(false)
	first := start()
	if first == 0 {
		t.Fatal("no hold began")
	}
	acquire(false) // the release between was not seen
	if s := start(); s == first || lost() != 1 {
		t.Errorf("a read hold taken again: start %d (first %d), %d lost releases counted; want a new hold and 1", s, first, lost())
	}
	acquire(true) // the same, for writing
	w := start()
	if lost() != 2 {
		t.Errorf("%d lost releases counted, want 2", lost())
	}
	acquire(false) // mmap_write_downgrade
	if s := start(); s != w || lost() != 2 {
		t.Errorf("a downgrade: start %d (the write hold's %d), %d lost releases; want the hold to go on, 2", s, w, lost())
	}
}
