package sysstat

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/testutil"
)

// burn keeps n goroutines, each locked to its own OS thread, busy; the
// function it returns stops them and says how many loops they ran.
func burn(n int) (stop func() int64) {
	var spins atomic.Int64
	var wg sync.WaitGroup
	done := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var x int64
			for {
				select {
				case <-done:
					spins.Add(x)
					return
				default:
				}
				for range 100000 {
					x++
				}
			}
		}()
	}
	return func() int64 {
		close(done)
		wg.Wait()
		return spins.Load()
	}
}

// procStatCPUs is a second, independent reader of /proc/stat's cpuN lines
// (ticks busy and total per CPU), to check the sampler's arithmetic.
func procStatCPUs(t *testing.T) map[string][2]float64 {
	t.Helper()
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][2]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || !strings.HasPrefix(f[0], "cpu") {
			continue
		}
		var total, idle float64
		for i, s := range f[1:9] { // user nice system idle iowait irq softirq steal
			v, _ := strconv.ParseFloat(s, 64)
			total += v
			if i == 3 || i == 4 {
				idle += v
			}
		}
		out[f[0]] = [2]float64{total - idle, total}
	}
	return out
}

func TestLiveCPUBurnerShowsInCPUArea(t *testing.T) {
	testutil.Exclusive(t)
	ctx := context.Background()
	cpus := runtime.NumCPU()
	before := procStatCPUs(t)
	var ru0, ru1 syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru0); err != nil {
		t.Fatal(err)
	}
	s := Start(ctx, Options{Kmsg: "-"})
	stopBurners := burn(cpus)
	// vmstat, where installed, is the reference: its second line covers
	// the same two seconds.
	var vm *exec.Cmd
	var vmOut strings.Builder
	if path, err := exec.LookPath("vmstat"); err == nil {
		vm = exec.Command(path, "2", "2")
		vm.Stdout = &vmOut
		if err := vm.Start(); err != nil {
			vm = nil
		}
	}
	time.Sleep(2 * time.Second)
	res := s.Stop(ctx)
	after := procStatCPUs(t)
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru1); err != nil {
		t.Fatal(err)
	}
	spins := stopBurners()
	if vm != nil {
		_ = vm.Wait()
	}
	if spins == 0 {
		t.Fatal("the burners never ran")
	}
	var cpu finding.Check
	for _, c := range res.Checks {
		if c.Area == "cpu" {
			cpu = c
		}
	}
	t.Logf("cpu: %s", cpu.Summary)
	usr := cpu.Values["usr_pct"].(float64) + cpu.Values["nice_pct"].(float64)
	// The burners' own user time is a floor for the machine's: other
	// engineers' work may add to it (or push sys up), never take it away.
	ours := 100 * tvSeconds(ru1.Utime, ru0.Utime) / (res.WindowS * float64(cpus))
	t.Logf("usr %.1f%% of the machine; this process's user time alone is %.1f%%", usr, ours)
	if usr < 0.9*ours-2 {
		t.Errorf("machine usr %.1f%% is below this process's own user time %.1f%%", usr, ours)
	}
	if usr < 40 {
		t.Errorf("with %d burners the machine's usr is %.1f%%, want >= 40%%", cpus, usr)
	}
	// The burners are this process's: wolf's own work. The CPUs were
	// saturated by it alone, which the area says, and no warning blames
	// the host for it (TestLiveCPUBurnersElsewhereSaturate: other
	// processes' burners do make one).
	for _, f := range res.Findings {
		if f.ID == "system.cpu-saturated" {
			t.Errorf("system.cpu-saturated with only this process burning: %s", f.Title)
		}
	}
	if self, _ := cpu.Values["wolf_busy_pct"].(float64); self < 0.9*ours-2 || !strings.Contains(cpu.Summary, "wolf's own work") {
		t.Errorf("cpu area: wolf_busy_pct %v, summary %q; want at least this process's %.1f%% and said", cpu.Values["wolf_busy_pct"], cpu.Summary, ours)
	}
	// Per-CPU busy share against the independent reader: the two reads
	// are microseconds apart at each end, a tick or two at most.
	for _, pc := range cpu.Values["per_cpu"].([]map[string]any) {
		id := fmt.Sprintf("cpu%d", pc["cpu"].(int))
		b, a := before[id], after[id]
		ref := 100 * (a[0] - b[0]) / (a[1] - b[1])
		got := 100 - pc["idle_pct"].(float64) - pc["iowait_pct"].(float64)
		t.Logf("%s busy %.1f%% (independent read %.1f%%)", id, got, ref)
		if d := got - ref; d > 5 || d < -5 {
			t.Errorf("%s busy %.1f%%, independent read of /proc/stat says %.1f%%", id, got, ref)
		}
	}
	if vm != nil {
		lines := strings.Split(strings.TrimSpace(vmOut.String()), "\n")
		f := strings.Fields(lines[len(lines)-1])
		// procps vmstat: r b swpd free buff cache si so bi bo in cs us sy id wa st [gu]
		if len(f) >= 17 {
			us, _ := strconv.ParseFloat(f[12], 64)
			sy, _ := strconv.ParseFloat(f[13], 64)
			mine := usr + cpu.Values["sys_pct"].(float64)
			t.Logf("vmstat us+sy %.0f%%, wolf usr+sys %.1f%%", us+sy, mine)
			if d := mine - (us + sy); d > 10 || d < -10 {
				t.Errorf("wolf usr+sys %.1f%% vs vmstat us+sy %.0f%%", mine, us+sy)
			}
		}
	}
}

func TestLiveKernelLogRecordInWindow(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.Exclusive(t) // the injected record must not reach another test's doctor
	ctx := context.Background()
	marker := fmt.Sprintf("wolf-test: checklist kernel log %d", time.Now().UnixNano())
	// A record logged before the window starts must not be reported.
	writeKmsg(t, "<3>"+marker+" before")
	s := Start(ctx, Options{Interval: 200 * time.Millisecond})
	writeKmsg(t, "<3>"+marker)
	writeKmsg(t, "<6>"+marker+" info")
	res := s.Stop(ctx)
	var f *finding.Finding
	for i := range res.Findings {
		if res.Findings[i].ID == "system.kernel-errors" {
			f = &res.Findings[i]
		}
	}
	if f == nil {
		t.Fatalf("no system.kernel-errors finding: %v; checks %+v", ids(res.Findings), res.Checks)
	}
	msgs := f.Evidence["messages"].([]string)
	var in, before, info bool
	for _, m := range msgs {
		in = in || m == "[err] "+marker
		before = before || strings.Contains(m, marker+" before")
		info = info || strings.Contains(m, marker+" info")
	}
	if !in || before || info {
		t.Errorf("messages %q: want the err record from the window only", msgs)
	}
}

func writeKmsg(t *testing.T, line string) {
	t.Helper()
	f, err := os.OpenFile("/dev/kmsg", os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(line + "\n"); err != nil {
		t.Fatal(err)
	}
}

func TestLiveDiskWritesShowOnTheDeviceUnderTmp(t *testing.T) {
	testutil.Exclusive(t)
	dir := t.TempDir()
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	major, minor := int(st.Dev>>8&0xfff), int(st.Dev&0xff|st.Dev>>12&0xfff00)
	testutil.Require(t, major != 0, fmt.Sprintf("%s is not on a block device (tmpfs?)", dir))
	ctx := context.Background()
	s := Start(ctx, Options{Kmsg: "-"})
	const size = 32 << 20
	f, err := os.Create(dir + "/data")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	for range size / len(buf) {
		if _, err := f.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	res := s.Stop(ctx)
	var name string
	for _, d := range s.first.Disks {
		if d.Major == major && d.Minor == minor {
			name = d.Name
		}
	}
	if name == "" {
		t.Fatalf("no device %d:%d in /proc/diskstats", major, minor)
	}
	var disk finding.Check
	for _, c := range res.Checks {
		if c.Area == "disk" {
			disk = c
		}
	}
	t.Logf("disk: %s", disk.Summary)
	var all []map[string]any
	all = append(all, disk.Values["disks"].([]map[string]any)...)
	if p, ok := disk.Values["partitions"].([]map[string]any); ok {
		all = append(all, p...)
	}
	for _, d := range all {
		if d["device"] != name {
			continue
		}
		kb := d["w_kb_per_s"].(float64)
		written := kb * 1024 * res.WindowS
		t.Logf("%s: %.0f kB/s written, %.1f MiB in the window", name, kb, written/(1<<20))
		if written < 0.9*size {
			t.Errorf("%s: %.1f MiB written in the window, want at least %.1f MiB", name, written/(1<<20), 0.9*size/(1<<20))
		}
		if d["w_per_s"].(float64) <= 0 {
			t.Errorf("%s: no write requests", name)
		}
		return
	}
	t.Errorf("device %s (under %s) not among the active devices: %+v", name, dir, all)
}

func TestStopAfterCancelStillReports(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s := Start(ctx, Options{Kmsg: "-"})
	time.Sleep(300 * time.Millisecond)
	cancel()
	res := s.Stop(ctx)
	if len(res.Checks) != len(Areas) {
		t.Fatalf("%d checks after cancel: %+v", len(res.Checks), res.Checks)
	}
	for _, c := range res.Checks {
		if strings.HasPrefix(c.Summary, "unavailable") {
			t.Errorf("%s unavailable after cancel: %s", c.Area, c.Summary)
		}
	}
	if again := s.Stop(ctx); len(again.Checks) != len(res.Checks) {
		t.Error("a second Stop gave another result")
	}
}

func tvSeconds(b, a syscall.Timeval) float64 {
	return float64(b.Sec-a.Sec) + float64(b.Usec-a.Usec)/1e6
}

// Burners in other processes saturate the CPUs: the checklist warns, and
// wolf's own share of the busy time is small.
func TestLiveCPUBurnersElsewhereSaturate(t *testing.T) {
	testutil.Exclusive(t)
	ctx := context.Background()
	s := Start(ctx, Options{Kmsg: "-"})
	var procs []*exec.Cmd
	for range runtime.NumCPU() {
		c := exec.Command("sh", "-c", "while :; do :; done")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, c)
	}
	t.Cleanup(func() {
		for _, c := range procs {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	})
	time.Sleep(2 * time.Second)
	res := s.Stop(ctx)
	var saturated bool
	for _, f := range res.Findings {
		saturated = saturated || f.ID == "system.cpu-saturated"
	}
	for _, c := range res.Checks {
		if c.Area == "cpu" {
			t.Logf("cpu: %s (wolf %v%%)", c.Summary, c.Values["wolf_busy_pct"])
			if self, _ := c.Values["wolf_busy_pct"].(float64); self > 10 {
				t.Errorf("wolf_busy_pct %.1f with the burners in other processes", self)
			}
		}
	}
	if !saturated {
		t.Errorf("no system.cpu-saturated finding with every CPU burning in other processes: %v", ids(res.Findings))
	}
}
