package perfsample

import (
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/wolf-investigator/wolf/internal/testutil"
)

func TestParseCPUList(t *testing.T) {
	for in, want := range map[string][]int{
		"0":         {0},
		"0-3":       {0, 1, 2, 3},
		"0-1,4,6-7": {0, 1, 4, 6, 7},
	} {
		got, err := ParseCPUList(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseCPUList(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"x", "3-1", "1-", "0-99999999"} {
		if _, err := ParseCPUList(bad); err == nil {
			t.Errorf("ParseCPUList(%q) accepted", bad)
		}
	}
}

// A perf_event program that counts its runs in a per-CPU array: sampling
// at 1000 Hz on every CPU for 300 ms must run it, and Close must detach it;
// through links, and through the ioctl kernels before 5.15 need.
func TestAttachCountsSamples(t *testing.T) {
	t.Run("link", func(t *testing.T) { testCounts(t, true) })
	t.Run("ioctl", func(t *testing.T) { testCounts(t, false) })
}

func testCounts(t *testing.T, links bool) {
	testutil.RequireRoot(t)
	counts, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		t.Fatalf("per-CPU array map: %v", err)
	}
	defer counts.Close()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:    ebpf.PerfEvent,
		License: "GPL",
		Instructions: asm.Instructions{
			asm.StoreImm(asm.R10, -4, 0, asm.Word),
			asm.Mov.Reg(asm.R2, asm.R10),
			asm.Add.Imm(asm.R2, -4),
			asm.LoadMapPtr(asm.R1, counts.FD()),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "out"),
			asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
			asm.Add.Imm(asm.R1, 1),
			asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
			asm.Return(),
		},
	})
	if err != nil {
		t.Fatalf("perf_event program: %v", err)
	}
	defer prog.Close()

	s, err := attach(prog, 1000, links)
	if err != nil {
		t.Fatal(err)
	}
	if s.Legacy == links {
		t.Fatalf("links %v, but Legacy %v", links, s.Legacy)
	}
	// Burn CPU so the clock ticks on at least this CPU.
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
	}
	s.Close()
	var per []uint64
	if err := counts.Lookup(uint32(0), &per); err != nil {
		t.Fatal(err)
	}
	var total uint64
	for _, c := range per {
		total += c
	}
	if total < 50 {
		t.Fatalf("%d samples in 300 ms at 1000 Hz on %d CPUs", total, len(s.CPUs))
	}
	// Detached: no more runs.
	time.Sleep(50 * time.Millisecond)
	_ = counts.Lookup(uint32(0), &per)
	var after uint64
	for _, c := range per {
		after += c
	}
	time.Sleep(100 * time.Millisecond)
	_ = counts.Lookup(uint32(0), &per)
	var later uint64
	for _, c := range per {
		later += c
	}
	if later != after {
		t.Fatalf("program still runs after Close: %d then %d", after, later)
	}
	if _, err := Attach(prog, 0); err == nil {
		t.Fatal("0 Hz accepted")
	}
}
