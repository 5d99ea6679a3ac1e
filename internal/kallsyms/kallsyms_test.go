package kallsyms

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/testutil"
)

// synthetic is a small kallsyms file in the kernel's order (not sorted:
// modules and BPF programs come last but may sit anywhere).
const synthetic = `ffffffff81000000 T _text
ffffffff81000000 T _stext
ffffffff81000000 T startup_64
ffffffff81000100 t __pfx_do_thing
ffffffff81000110 t do_thing
ffffffff81000200 T schedule
ffffffff81000200 W schedule_weak_alias
ffffffff81000300 t helper
ffffffff81000300 t helper
ffffffff81000400 T _etext
ffffffff82000000 D __start_rodata
ffffffff83000000 D rtnl_mutex
ffffffff83000020 d static_lock
ffffffff83000040 B __bss_start
ffffffff83000040 b some_bss_var
ffffffff83100000 B _end
ffffffffc0001000 t ext4_read	[ext4]
ffffffffc0001100 T ext4_write	[ext4]
ffffffffc0002000 t bpf_prog_6deef7357e7b4530_on_switch	[bpf]
`

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func loadSynthetic(t *testing.T) *Table {
	t.Helper()
	tab, err := LoadFiles(context.Background(), writeFile(t, "kallsyms", synthetic), "")
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

func TestSymbolize(t *testing.T) {
	tab := loadSynthetic(t)
	tests := []struct {
		addr uint64
		want string
	}{
		{0xffffffff81000000, "startup_64+0x0"}, // real name preferred over _text/_stext
		{0xffffffff81000105, "__pfx_do_thing+0x5"},
		{0xffffffff8100012f, "do_thing+0x1f"},
		{0xffffffff81000205, "schedule+0x5"}, // global preferred over weak alias
		{0xffffffff81000310, "helper+0x10"},
		{0xffffffff81000400, "0xffffffff81000400"}, // _etext: past the code
		{0xffffffff81000500, "0xffffffff81000500"},
		{0xffffffff82000010, "0xffffffff82000010"}, // after a section marker
		{0xffffffff83000000, "rtnl_mutex+0x0"},
		{0xffffffff83000028, "static_lock+0x8"},
		{0xffffffff83000048, "some_bss_var+0x8"},
		{0xffffffff83100000, "0xffffffff83100000"}, // _end
		{0xffffffffc0001010, "ext4_read+0x10 [ext4]"},
		{0xffffffffc0001120, "ext4_write+0x20 [ext4]"},
		{0xffffffffc0002004, "bpf_prog_6deef7357e7b4530_on_switch+0x4 [bpf]"},
		{0xffffffffc0002000 + maxTailOffset + 1, "0xffffffffc0012001"}, // far past the last symbol
		{0x1000, "0x1000"},                                             // below everything
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%#x", tt.addr), func(t *testing.T) {
			if got := tab.Symbolize(tt.addr); got != tt.want {
				t.Errorf("Symbolize(%#x) = %q, want %q", tt.addr, got, tt.want)
			}
		})
	}
}

func TestLookup(t *testing.T) {
	tab := loadSynthetic(t)
	tests := []struct {
		name string
		want uint64
		ok   bool
	}{
		{"rtnl_mutex", 0xffffffff83000000, true},
		{"static_lock", 0xffffffff83000020, true},
		{"schedule", 0xffffffff81000200, true},
		{"ext4_write", 0xffffffffc0001100, true},
		{"helper", 0xffffffff81000300, true},
		{"no_such_symbol", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tab.Lookup(tt.name)
			if got != tt.want || ok != tt.ok {
				t.Errorf("Lookup(%q) = %#x, %v; want %#x, %v", tt.name, got, ok, tt.want, tt.ok)
			}
		})
	}
	if n := len(tab.All("helper")); n != 2 {
		t.Errorf("All(helper) = %d symbols, want 2", n)
	}
	if !tab.HasDataSymbols() || tab.DataSymbolsNote() != "" {
		t.Errorf("HasDataSymbols = %v, note %q; want true and empty", tab.HasDataSymbols(), tab.DataSymbolsNote())
	}
}

func TestExtent(t *testing.T) {
	tab := loadSynthetic(t)
	tests := []struct {
		name   string
		lo, hi uint64
		ok     bool
	}{
		{"do_thing", 0xffffffff81000110, 0xffffffff81000200, true},
		{"schedule", 0xffffffff81000200, 0xffffffff81000300, true}, // its alias shares its address
		{"ext4_read", 0xffffffffc0001000, 0xffffffffc0001100, true},
		{"ext4_write", 0, 0, false}, // the next symbol is another object's
		{"no_such_symbol", 0, 0, false},
	}
	for _, tt := range tests {
		lo, hi, ok := tab.Extent(tt.name)
		if lo != tt.lo || hi != tt.hi || ok != tt.ok {
			t.Errorf("Extent(%q) = %#x, %#x, %v; want %#x, %#x, %v", tt.name, lo, hi, ok, tt.lo, tt.hi, tt.ok)
		}
	}
}

func TestSymbolizeStack(t *testing.T) {
	tab := loadSynthetic(t)
	tests := []struct {
		name  string
		stack []uint64
		want  []string
	}{
		{"empty", nil, []string{}},
		{"stops at zero", []uint64{0xffffffff81000205, 0xffffffff81000111, 0, 0xffffffff81000205}, []string{"schedule+0x5", "do_thing+0x1"}},
		{"unknown frame kept", []uint64{0xdead, 0xffffffff81000205}, []string{"0xdead", "schedule+0x5"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tab.SymbolizeStack(tt.stack)
			if strings.Join(got, "|") != strings.Join(tt.want, "|") || len(got) != len(tt.want) {
				t.Errorf("SymbolizeStack = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		wantErr error
		substr  string
	}{
		{"restricted", "0000000000000000 T _text\n0000000000000000 T schedule\n", ErrRestricted, "all 2 addresses are zero"},
		{"empty", "", nil, "holds no symbols"},
		{"garbage only", "not a symbol line\n", nil, "holds no symbols"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadFiles(context.Background(), writeFile(t, "kallsyms", tt.body), "")
			if err == nil {
				t.Fatal("no error")
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("error %v does not wrap %v", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.substr) {
				t.Errorf("error %q does not mention %q", err, tt.substr)
			}
		})
	}
	if _, err := LoadFiles(context.Background(), filepath.Join(t.TempDir(), "missing"), ""); err == nil {
		t.Error("missing file: no error")
	}
}

// A kernel without CONFIG_KALLSYMS_ALL plus a System.map: data symbols are
// merged at the KASLR-shifted address.
func TestSystemMapMerge(t *testing.T) {
	live := `ffffffff9a000000 T _text
ffffffff9a000200 T schedule
ffffffff9a000400 T _etext
ffffffff9b000000 D __start_rodata
`
	sysmap := `ffffffff81000000 T _text
ffffffff81000200 T schedule
ffffffff81000400 T _etext
ffffffff83000000 d rtnl_mutex
ffffffff83000040 b some_bss_var
`
	kpath := writeFile(t, "kallsyms", live)
	onlyText, err := LoadFiles(context.Background(), kpath, "")
	if err != nil {
		t.Fatal(err)
	}
	if onlyText.HasDataSymbols() || !strings.Contains(onlyText.DataSymbolsNote(), "CONFIG_KALLSYMS_ALL") {
		t.Errorf("text-only table: HasDataSymbols=%v note=%q", onlyText.HasDataSymbols(), onlyText.DataSymbolsNote())
	}
	if got := onlyText.Symbolize(0xffffffff9b000010); got != "0xffffffff9b000010" {
		t.Errorf("data address without data symbols = %q, want a bare address", got)
	}

	tab, err := LoadFiles(context.Background(), kpath, writeFile(t, "System.map", sysmap))
	if err != nil {
		t.Fatal(err)
	}
	const slide = 0xffffffff9a000000 - 0xffffffff81000000
	tests := []struct {
		addr uint64
		want string
	}{
		{0xffffffff83000000 + slide, "rtnl_mutex+0x0"},
		{0xffffffff83000048 + slide, "some_bss_var+0x8"},
		{0xffffffff9a000203, "schedule+0x3"},
	}
	for _, tt := range tests {
		if got := tab.Symbolize(tt.addr); got != tt.want {
			t.Errorf("Symbolize(%#x) = %q, want %q", tt.addr, got, tt.want)
		}
	}
	if !strings.Contains(tab.Source(), "System.map") {
		t.Errorf("Source %q does not mention the System.map", tab.Source())
	}

	mismatched := strings.Replace(sysmap, "ffffffff81000400 T _etext", "ffffffff81000800 T _etext", 1)
	if _, err := LoadFiles(context.Background(), kpath, writeFile(t, "System.map", mismatched)); err == nil ||
		!strings.Contains(err.Error(), "does not match") {
		t.Errorf("mismatched System.map: err = %v, want a mismatch error", err)
	}
}

func TestLoadCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := LoadFiles(ctx, writeFile(t, "kallsyms", synthetic), ""); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled load: err = %v, want context.Canceled", err)
	}
}

func TestRealKernel(t *testing.T) {
	testutil.RequireRoot(t)
	start := time.Now()
	tab, err := Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("loaded %d symbols from %s in %v (data symbols: %v %s)", tab.Len(), tab.Source(), took, tab.HasDataSymbols(), tab.DataSymbolsNote())
	sched, ok := tab.Lookup("schedule")
	if !ok {
		t.Fatal("schedule not found")
	}
	if got := tab.Symbolize(sched + 5); got != "schedule+0x5" {
		t.Errorf("Symbolize(schedule+5) = %q", got)
	}
	addr, ok := tab.Lookup("rtnl_mutex")
	if tab.HasDataSymbols() {
		if !ok {
			t.Fatal("rtnl_mutex not found although data symbols are listed")
		}
		if got := tab.Symbolize(addr); got != "rtnl_mutex+0x0" {
			t.Errorf("Symbolize(&rtnl_mutex) = %q", got)
		}
		return
	}
	// CONFIG_KALLSYMS_ALL unset and no System.map: the lock cannot be named,
	// and the table must say why rather than misname data addresses.
	if ok {
		t.Errorf("rtnl_mutex found at %#x although the table has no data symbols", addr)
	}
	if !strings.Contains(tab.DataSymbolsNote(), "CONFIG_KALLSYMS_ALL") {
		t.Errorf("DataSymbolsNote = %q, want it to name CONFIG_KALLSYMS_ALL", tab.DataSymbolsNote())
	}
	if once, ok := tab.Lookup("__start_once"); ok { // a marker inside .data
		if got := tab.Symbolize(once + 0x40); !strings.HasPrefix(got, "0x") {
			t.Errorf("address in .data symbolized as %q, want a bare address", got)
		}
	}
}

func BenchmarkSymbolize(b *testing.B) {
	var sb strings.Builder
	for i := 0; i < 250000; i++ {
		fmt.Fprintf(&sb, "%016x t fn_%d\n", 0xffffffff81000000+uint64(i)*64, i)
	}
	p := filepath.Join(b.TempDir(), "kallsyms")
	if err := os.WriteFile(p, []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	tab, err := LoadFiles(context.Background(), p, "")
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_, _, _ = tab.Find(0xffffffff81000000 + uint64(i%250000)*64 + 7)
	}
}

// BenchmarkLoad measures loading this machine's /proc/kallsyms.
func BenchmarkLoad(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root for real addresses")
	}
	for b.Loop() {
		if _, err := Load(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}

func TestCacheSharesOneRead(t *testing.T) {
	want, wantErr := Load(context.Background())
	ctx := WithCache(context.Background())

	// A caller whose context is cancelled does not poison the cache.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := Load(cctx); err == nil {
		t.Fatal("Load with a cancelled context: no error")
	}

	t1, err1 := Load(ctx)
	t2, err2 := Load(ctx)
	if (err1 == nil) != (wantErr == nil) {
		t.Fatalf("cached Load: %v, uncached: %v", err1, wantErr)
	}
	if err1 != nil {
		if err2 == nil || err2.Error() != err1.Error() {
			t.Fatalf("second cached Load: %v, first: %v", err2, err1)
		}
		return
	}
	if t1 != t2 {
		t.Fatal("two Loads of one cache read the table twice")
	}
	// BPF programs come and go (other tests, other tools): compare the
	// kernel's own symbols.
	if a, b := vmlinuxSyms(t1), vmlinuxSyms(want); a != b {
		t.Fatalf("cached table holds %d vmlinux symbols, a fresh read %d", a, b)
	}
	other, _ := Load(WithCache(context.Background()))
	if other == t1 {
		t.Fatal("two caches share a table")
	}
}

func vmlinuxSyms(t *Table) int {
	n := 0
	for _, s := range t.syms {
		if s.Module == "" {
			n++
		}
	}
	return n
}
