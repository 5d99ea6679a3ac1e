package priority

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// threadNice reads a thread's nice value from /proc (field 19 of stat).
func threadNice(t *testing.T, tid string) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%s/stat", tid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	n, err := strconv.Atoi(f[16])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSetEveryThread raises the nice value (which needs no privilege) and
// checks every thread has it, those made before Set and those made after.
func TestSetEveryThread(t *testing.T) {
	before, err := Nice()
	if err != nil {
		t.Fatal(err)
	}
	if before >= 19 {
		t.Skipf("already at nice %d", before)
	}
	// Threads of our own, locked, before Set.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			<-stop
		}()
	}
	want := before + 1
	if err := Set(want); err != nil {
		t.Fatal(err)
	}
	// And one made after.
	after := make(chan int)
	go func() {
		runtime.LockOSThread() // a new thread: the goroutine ends locked
		n, _ := Nice()
		after <- n
	}()
	if n := <-after; n != want {
		t.Errorf("a thread made after Set: nice %d, want %d", n, want)
	}
	ents, _ := os.ReadDir("/proc/self/task")
	for _, e := range ents {
		if n := threadNice(t, e.Name()); n != want {
			t.Errorf("thread %s: nice %d, want %d", e.Name(), n, want)
		}
	}
	close(stop)
	wg.Wait()
	if err := Set(30); err == nil {
		t.Error("Set(30) accepted")
	}
}

// TestLowerNeedsPrivilege: lowering the nice value below the current one
// needs CAP_SYS_NICE; without it Set says so.
func TestLowerNeedsPrivilege(t *testing.T) {
	if os.Geteuid() == 0 {
		n, _ := Nice()
		if err := Set(-20); err != nil {
			t.Errorf("root: Set(-20): %v", err)
		}
		if got, _ := Nice(); got != -20 {
			t.Errorf("nice %d after Set(-20)", got)
		}
		if err := Set(n); err != nil {
			t.Error(err)
		}
		return
	}
	if err := Set(-20); err == nil {
		t.Error("Set(-20) without privilege: no error")
	}
}
