package cpuquota

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/lab/labproc"
	"github.com/wolf-investigator/wolf/internal/testutil"
)

func TestConfigChecks(t *testing.T) {
	for _, c := range []Config{{QuotaUs: 200000, PeriodUs: 100000}, {Spinners: 100}, {RegionMB: 4096}} {
		if _, err := NewWithConfig(c).Start(context.Background(), lab.Options{}); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

// A smaller variant: the cgroup is throttled (Start waits for it), its
// quota is what was asked, and Close leaves neither process nor cgroup.
func TestLabThrottlesAndCleansUp(t *testing.T) {
	testutil.RequireRoot(t)
	_, _, err := labproc.Hierarchy(context.Background(), "cpu", 0)
	testutil.Require(t, err == nil, fmt.Sprintf("needs the cpu cgroup controller: %v", err))
	testutil.Exclusive(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	inst, err := NewWithConfig(Config{QuotaUs: 10000, PeriodUs: 50000, Spinners: 4, RegionMB: 64}).Start(ctx, lab.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	in := inst.(*Instance)
	defer in.Close()
	cg := in.Cgroup()
	file, want := "cpu.cfs_quota_us", "10000\n"
	if cg.Version == 2 {
		file, want = "cpu.max", "10000 50000\n"
	}
	if b, err := os.ReadFile(cg.Dir() + "/" + file); err != nil || string(b) != want {
		t.Errorf("%s = %q (%v)", file, b, err)
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
