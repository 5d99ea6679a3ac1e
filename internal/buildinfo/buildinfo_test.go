package buildinfo

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestFromBuild(t *testing.T) {
	vcs := &debug.BuildInfo{
		Main: debug.Module{Path: "github.com/wolf-investigator/wolf", Version: "(devel)"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "9185493abcdef0123456789abcdef0123456789a"},
			{Key: "vcs.time", Value: "2026-11-25T13:15:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	tests := []struct {
		name                 string
		bi                   *debug.BuildInfo
		ver, rev, when       string
		wantVer, wantRev     string
		wantDate, wantSource string
		wantModified         bool
	}{
		{"release overrides vcs", vcs, "1.2.3", "aaaa", "2026-01-02T03:04:05Z", "1.2.3", "aaaa", "2026-01-02T03:04:05Z", "release", true},
		{"go build in a checkout", vcs, "", "", "", "0.1.0-dev+9185493abcde.dirty", "9185493abcdef0123456789abcdef0123456789a", "2026-11-25T13:15:00Z", "vcs", true},
		{"go install pkg@version", &debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}}, "", "", "", "v1.4.0", "", "", "module", false},
		{"go run, no vcs", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "", "", "", "0.1.0-dev", "", "", "none", false},
		{"no build info", nil, "", "", "", "0.1.0-dev", "", "", "none", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := fromBuild(tt.bi, tt.ver, tt.rev, tt.when)
			if in.Version != tt.wantVer || in.Commit != tt.wantRev || in.Date != tt.wantDate || in.Source != tt.wantSource || in.Modified != tt.wantModified {
				t.Errorf("got %+v\nwant version %q commit %q date %q source %q modified %v", in, tt.wantVer, tt.wantRev, tt.wantDate, tt.wantSource, tt.wantModified)
			}
			if in.GoVersion != runtime.Version() || in.Platform != runtime.GOOS+"/"+runtime.GOARCH {
				t.Errorf("go %q platform %q", in.GoVersion, in.Platform)
			}
		})
	}
}

// TestScanObjects hides real committed objects among bytes that look like
// ELF headers (an x86-64 one, a truncated BPF one) and expects each object
// back whole: its size, its hash and the name bpf2go gave it.
func TestScanObjects(t *testing.T) {
	paths := []string{"../hung/hung_bpfel.o", "../softirq/softirq_bpfel.o", "../../lpm/bpflpm/lookup_bpfel.o"}
	var blob bytes.Buffer
	blob.WriteString("\x7fELF\x02\x01\x01\x00") // a header too short to be anything
	x86 := make([]byte, 64)
	copy(x86, "\x7fELF\x02\x01\x01")
	x86[18] = 62 // EM_X86_64: not BPF
	blob.Write(x86)
	want := map[string]Object{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		base := filepath.Base(p)
		want[base] = Object{Source: strings.TrimSuffix(base, "_bpfel.o") + ".bpf.c", File: base, Size: len(b), SHA256: hex.EncodeToString(sum[:])}
		blob.Write(b)
		blob.WriteString("padding between embedded files")
	}
	// A BPF header whose section table lies past the end: not an object.
	last, _ := os.ReadFile(paths[0])
	blob.Write(last[:len(last)/2])

	got := scanObjects(blob.Bytes())
	if len(got) != len(want) {
		t.Fatalf("found %d objects, want %d: %+v", len(got), len(want), got)
	}
	for _, o := range got {
		if w := want[o.File]; o != w {
			t.Errorf("got %+v\nwant %+v", o, w)
		}
	}
}

func TestKernelRange(t *testing.T) {
	ks := []TestedKernel{{Kernel: "6.18"}, {Kernel: "5.10"}, {Kernel: "6.1"}, {Kernel: "5.9"}}
	if got := KernelRange(ks); got != "5.9–6.18" {
		t.Errorf("KernelRange = %q, want 5.9–6.18", got)
	}
	if got := KernelRange(ks[:1]); got != "6.18" {
		t.Errorf("one kernel: %q", got)
	}
	if got := KernelRange(nil); got != "none" {
		t.Errorf("no kernel: %q", got)
	}
	if got := KernelRange(TestedKernels()); !strings.Contains(got, "6.18") {
		t.Errorf("the tested range %q leaves out this machine's 6.18", got)
	}
}

// TestedKernels is the kernel matrix in data: every row of the matrix's
// table without a failed cell is listed (major.minor and architecture),
// and nothing else is.
func TestTestedKernelsMatchTheMatrix(t *testing.T) {
	b, err := os.ReadFile("../../docs/kernels/matrix.json")
	if err != nil {
		t.Fatalf("the matrix's table: %v", err)
	}
	var table struct {
		Rows []struct {
			Kernel string `json:"kernel"`
			Arch   string `json:"arch"`
			Cells  map[string]struct {
				Status string `json:"status"`
			} `json:"cells"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(b, &table); err != nil {
		t.Fatal(err)
	}
	proven := map[string]bool{}
	for _, r := range table.Rows {
		failed := false
		for _, c := range r.Cells {
			failed = failed || c.Status == "fail"
		}
		if failed {
			continue
		}
		arch := map[string]string{"amd64": "x86_64", "arm64": "arm64"}[r.Arch]
		parts := strings.SplitN(r.Kernel, ".", 3)
		if len(parts) < 2 || arch == "" {
			t.Fatalf("matrix row %q %q", r.Kernel, r.Arch)
		}
		proven[parts[0]+"."+strings.TrimRight(parts[1], "-+abcdefghijklmnopqrstuvwxyz")+" "+arch] = true
	}
	listed := map[string]bool{}
	for _, k := range TestedKernels() {
		key := k.Kernel + " " + k.Arch
		listed[key] = true
		if !proven[key] {
			t.Errorf("TestedKernels lists %s, which the matrix does not prove", key)
		}
	}
	for key := range proven {
		if !listed[key] {
			t.Errorf("the matrix proves %s, which TestedKernels does not list", key)
		}
	}
}
