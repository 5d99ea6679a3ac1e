package memchain

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/lab/labproc"
	"github.com/wolf-investigator/wolf/internal/memcg"
	"github.com/wolf-investigator/wolf/internal/testutil"
)

func TestConfigChecks(t *testing.T) {
	for _, c := range []Config{{LimitMB: 400, FileMB: 384}, {PopulateThreads: 20, PopulateMB: 8}, {FileThreads: 200}} {
		if _, err := NewWithConfig(c).Start(context.Background(), lab.Options{}); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

// A smaller variant than the default: the cgroup reaches its limit, the
// reader reads, and Close leaves neither process nor cgroup.
func TestLabHitsItsLimitAndCleansUp(t *testing.T) {
	testutil.RequireRoot(t)
	_, _, err := labproc.Hierarchy(context.Background(), "memory", 0)
	testutil.Require(t, err == nil, fmt.Sprintf("needs the memory cgroup controller: %v", err))
	testutil.Exclusive(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	l := NewWithConfig(Config{LimitMB: 128, FileMB: 256, FileThreads: 8, PopulateThreads: 4, PopulateMB: 4})
	inst, err := l.Start(ctx, lab.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	in := inst.(*Instance)
	defer in.Close()
	cg := in.Cgroup()
	st, err := memcg.Hierarchy{Version: cg.Version, Mount: cg.Root}.ReadCounters(cg.Path)
	if err != nil || st.LimitHits == 0 {
		t.Errorf("limit hits %d: %v", st.LimitHits, err)
	}
	if got := len(in.Threads("r_file")) + len(in.Threads("r_memory")); got != 12 {
		t.Errorf("%d threads", got)
	}
	err = lab.WaitFor(ctx, 20*time.Second, "the reader's first report", func() (bool, error) {
		n, _ := in.ReaderStats()
		return n > 0, nil
	})
	if err != nil {
		t.Error(err)
	}
	pid, reader := in.PID(), in.Reader()
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	if labproc.TaskState(pid) != 0 || labproc.TaskState(reader) != 0 {
		t.Errorf("child %c, reader %c", labproc.TaskState(pid), labproc.TaskState(reader))
	}
	if _, err := os.Stat(cg.Dir()); !os.IsNotExist(err) {
		t.Errorf("cgroup %s left: %v", cg.Dir(), err)
	}
}
