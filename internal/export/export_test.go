package export

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/wolf-investigator/wolf/internal/finding"
)

func fixture() []finding.Profile {
	return []finding.Profile{
		{Name: "mmap_lock_profile", Unit: "samples", PeriodNs: 10101010, Stacks: []finding.StackCount{
			{Frames: []string{"stress (pid 7)", "[mmap_lock write]", "do_madvise+0x12", "zap_pte_range+0x1f"}, Value: 30},
			{Frames: []string{"stress (pid 7)", "[mmap_lock write]", "do_madvise+0x40", "zap_pte_range+0x2"}, Value: 12},
			{Frames: []string{"a;b\nc", "f+0x1 [ext4]"}, Value: 1},
		}},
		{Name: "lock_wait_stacks", Unit: "ns", Labels: map[string]string{"investigator": "locks"}, Stacks: []finding.StackCount{
			{Frames: []string{"i_rwsem (rwsem:W)", "ksys_write", "down_write"}, Value: 5_000_000},
		}},
	}
}

func TestFoldedMergesByFunction(t *testing.T) {
	p := fixture()[0]
	var b bytes.Buffer
	if err := Folded(&b, &p); err != nil {
		t.Fatal(err)
	}
	want := "stress (pid 7);[mmap_lock write];do_madvise;zap_pte_range 42\n" +
		"a_b_c;f [ext4] 1\n"
	if b.String() != want {
		t.Errorf("folded:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestFoldedPath(t *testing.T) {
	for _, c := range []struct{ base, want string }{
		{"/tmp/x.folded", "/tmp/x.net_rx_stacks.folded"},
		{"out", "out.net_rx_stacks.folded"},
		{"a.b/out.txt", "a.b/out.net_rx_stacks.txt"},
	} {
		if got := FoldedPath(c.base, "net_rx_stacks"); got != c.want {
			t.Errorf("FoldedPath(%q) = %q, want %q", c.base, got, c.want)
		}
	}
}

func TestPProfRoundTrip(t *testing.T) {
	var b bytes.Buffer
	start := time.Unix(1700000000, 0)
	if err := PProf(&b, fixture(), start, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(bytes.NewReader(b.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.SampleType) != 2 || p.SampleType[0].Type != "mmap_lock_profile" || p.SampleType[1].Unit != "nanoseconds" {
		t.Fatalf("sample types: %v", p.SampleType)
	}
	if p.Period != 10101010 || p.DurationNanos != 3e9 || p.TimeNanos != start.UnixNano() {
		t.Errorf("period %d duration %d time %d", p.Period, p.DurationNanos, p.TimeNanos)
	}
	var samples, waited int64
	for _, s := range p.Sample {
		samples += s.Value[0]
		waited += s.Value[1]
		if leaf := s.Location[0].Line[0].Function.Name; s.Value[1] > 0 && leaf != "down_write" {
			t.Errorf("leaf of the wait stack is %q, want down_write (pprof lists leaf first)", leaf)
		}
	}
	if samples != 43 || waited != 5_000_000 {
		t.Errorf("totals %d samples, %d ns; want 43, 5000000", samples, waited)
	}
}

// go tool pprof, the reference reader, loads the file and prints the
// stacks' functions.
func TestGoToolPProfReadsIt(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go not on PATH")
	}
	path := filepath.Join(t.TempDir(), "wolf.pb.gz")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := PProf(f, fixture(), time.Now(), time.Second); err != nil {
		t.Fatal(err)
	}
	f.Close()
	out, err := exec.Command(gobin, "tool", "pprof", "-top", "-sample_index=lock_wait_stacks", path).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "down_write") || !strings.Contains(string(out), "5ms") {
		t.Errorf("go tool pprof -top lacks the wait stack:\n%s", out)
	}
}
