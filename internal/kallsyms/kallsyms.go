// Package kallsyms names kernel addresses. Stacks from bpf_get_stackid, the
// lock addresses reported by lock:contention_begin and the wchan of a stuck
// task are bare numbers; a finding a person can act on says
// "rtnl_mutex" and "schedule+0x5". This package loads the kernel's symbol
// table once (/proc/kallsyms, ~120-250k symbols) into a sorted slice and
// answers address→name by binary search and name→address by a lazily built
// index, so investigators can symbolize hot streams of addresses cheaply.
//
// Kernels built without CONFIG_KALLSYMS_ALL list only functions in
// /proc/kallsyms; data symbols (mutexes, semaphores) are then missing.
// Load merges a matching System.map when one is installed, correcting for
// the KASLR slide, and otherwise says so through DataSymbolsNote so a report
// can explain why a lock address is shown as a number.
package kallsyms

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wolf-investigator/wolf/internal/pace"
)

// DefaultPath is where the running kernel publishes its symbols.
const DefaultPath = "/proc/kallsyms"

// ErrRestricted is returned when every address in the symbol table reads as
// zero: kernel.kptr_restrict (or a lack of CAP_SYSLOG) hides them.
var ErrRestricted = errors.New("kernel symbol addresses are hidden")

// maxTailOffset bounds how far past the last symbol of a module (or of the
// whole table) an address may lie and still be named after it. Past that it
// is more likely an unrelated address than a very long function.
const maxTailOffset = 0x10000

// Symbol is one line of /proc/kallsyms or System.map.
type Symbol struct {
	Addr   uint64
	Type   byte   // the nm type letter: T/t text, D/d data, B/b bss, R/r rodata, W/w weak, A/a absolute
	Name   string // e.g. "schedule"
	Module string // "" for vmlinux, else the module ("bpf" for BPF programs)
}

// Global reports whether the symbol is visible outside its object file
// (upper-case type letter).
func (s Symbol) Global() bool { return s.Type >= 'A' && s.Type <= 'Z' }

// IsData reports whether the symbol names data (data, bss or read-only
// data) rather than code.
func (s Symbol) IsData() bool {
	switch s.Type | 0x20 { // lower-case
	case 'd', 'b', 'r', 'g', 's', 'v':
		return true
	}
	return false
}

// Table is an immutable, sorted kernel symbol table. It is safe for
// concurrent use.
type Table struct {
	syms   []Symbol // sorted by Addr; among equal addresses the preferred name is last
	source string
	data   int    // data symbols that are not linker section markers
	note   string // why data symbols are missing, when they are

	indexOnce sync.Once
	byName    map[string]int32 // name -> index of the preferred symbol with that name
}

// Load reads the running kernel's symbols from /proc/kallsyms. When the
// kernel lists no data symbols (CONFIG_KALLSYMS_ALL unset) it merges
// /boot/System.map-$(uname -r) or /lib/modules/$(uname -r)/build/System.map
// if one exists and matches the running kernel. Run as root: otherwise the
// kernel shows every address as zero and Load returns ErrRestricted.
//
// When ctx carries a Cache (WithCache), the table is read once for every
// caller of that context: the investigators of one doctor each need it,
// and each read costs tens of milliseconds of CPU and megabytes of heap.
func Load(ctx context.Context) (*Table, error) {
	if c, ok := ctx.Value(cacheKey{}).(*Cache); ok {
		return c.load(ctx)
	}
	return load(ctx)
}

func load(ctx context.Context) (*Table, error) {
	t, err := LoadFiles(ctx, DefaultPath, "")
	if err != nil {
		return nil, err
	}
	if t.HasDataSymbols() {
		return t, nil
	}
	var tried []string
	if release := kernelRelease(); release != "" {
		for _, p := range []string{
			"/boot/System.map-" + release,
			"/lib/modules/" + release + "/build/System.map",
		} {
			if _, err := os.Stat(p); err != nil {
				tried = append(tried, p)
				continue
			}
			if err := t.mergeSystemMap(ctx, p); err != nil {
				t.note = fmt.Sprintf("%s lists no data symbols (kernel built without CONFIG_KALLSYMS_ALL) and %v", DefaultPath, err)
				return t, nil
			}
			return t, nil
		}
	}
	t.note = fmt.Sprintf("%s lists no data symbols (kernel built without CONFIG_KALLSYMS_ALL), so lock and variable addresses such as rtnl_mutex cannot be named; no System.map found (tried %s)",
		DefaultPath, strings.Join(tried, ", "))
	return t, nil
}

// ReadTimeout bounds a Load that must not hold its caller up for long:
// 10 s, stretched on a slow machine (under qemu without KVM, parsing the
// table beside the other investigators' verifiers took longer than 10 s)
// but kept under a minute.
func ReadTimeout() time.Duration {
	return min(pace.Scaled(10*time.Second), 45*time.Second)
}

// Cache holds the running kernel's table for the callers of Load that
// share a context. The table is immutable, so sharing it is safe; the
// symbols of modules and BPF programs loaded after the first read are
// missing from it, which is why it is scoped to one run, not the process.
type Cache struct {
	mu  sync.Mutex
	t   *Table
	err error
}

type cacheKey struct{}

// WithCache returns a context whose Load calls share one read of
// /proc/kallsyms.
func WithCache(ctx context.Context) context.Context {
	return context.WithValue(ctx, cacheKey{}, &Cache{})
}

func (c *Cache) load(ctx context.Context) (*Table, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.t != nil || c.err != nil {
		return c.t, c.err
	}
	t, err := load(ctx)
	// A cancelled caller's error is its own: the next caller reads again.
	if err != nil && ctx.Err() != nil {
		return nil, err
	}
	c.t, c.err = t, err
	return t, err
}

// LoadFiles reads a kallsyms-format file and, when systemMap is not empty,
// merges the data symbols of that System.map (adjusted by the KASLR slide
// computed from _text). It is Load without the search, for tests and
// offline analysis of saved files.
func LoadFiles(ctx context.Context, kallsymsPath, systemMap string) (*Table, error) {
	f, err := os.Open(kallsymsPath)
	if err != nil {
		return nil, fmt.Errorf("kallsyms: %w", err)
	}
	defer f.Close()
	syms, err := parse(ctx, f, true)
	if err != nil {
		return nil, fmt.Errorf("kallsyms: reading %s: %w", kallsymsPath, err)
	}
	if len(syms) == 0 {
		return nil, fmt.Errorf("kallsyms: %s holds no symbols", kallsymsPath)
	}
	if allZero(syms) {
		return nil, fmt.Errorf("kallsyms: %s: all %d addresses are zero (kernel.kptr_restrict=%s; run as root with CAP_SYSLOG, and kptr_restrict must be below 2): %w",
			kallsymsPath, len(syms), readTrim("/proc/sys/kernel/kptr_restrict"), ErrRestricted)
	}
	t := &Table{syms: syms, source: kallsymsPath}
	t.finish()
	if !t.HasDataSymbols() {
		t.note = fmt.Sprintf("%s lists no data symbols (kernel built without CONFIG_KALLSYMS_ALL)", kallsymsPath)
	}
	if systemMap != "" {
		if err := t.mergeSystemMap(ctx, systemMap); err != nil {
			return nil, fmt.Errorf("kallsyms: %w", err)
		}
	}
	return t, nil
}

// mergeSystemMap adds the data symbols of a System.map. The map holds
// link-time addresses; the running kernel is shifted by KASLR, so the slide
// is computed from _text and checked against a second symbol before anything
// is merged. Only called before the table is shared.
func (t *Table) mergeSystemMap(ctx context.Context, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("the System.map: %w", err)
	}
	defer f.Close()
	m, err := parse(ctx, f, false)
	if err != nil {
		return fmt.Errorf("the System.map %s: %w", path, err)
	}
	slide, err := t.slideFrom(m)
	if err != nil {
		return fmt.Errorf("the System.map %s does not match the running kernel: %w", path, err)
	}
	added := 0
	for _, s := range m {
		if !s.IsData() || isMarker(s.Name) {
			continue
		}
		s.Addr += slide
		t.syms = append(t.syms, s)
		added++
	}
	if added == 0 {
		return fmt.Errorf("the System.map %s holds no data symbols", path)
	}
	t.finish()
	t.source += " + " + path
	t.note = ""
	return nil
}

// slideFrom returns how far the running kernel is shifted from the
// addresses in m, verified on two anchors.
func (t *Table) slideFrom(m []Symbol) (uint64, error) {
	find := func(syms []Symbol, name string) (uint64, bool) {
		for _, s := range syms {
			if s.Name == name && s.Module == "" {
				return s.Addr, true
			}
		}
		return 0, false
	}
	live, ok1 := find(t.syms, "_text")
	link, ok2 := find(m, "_text")
	if !ok1 || !ok2 {
		return 0, errors.New("_text missing")
	}
	slide := live - link
	checked := false
	for _, anchor := range []string{"_etext", "schedule", "_sinittext"} {
		a, ok1 := find(t.syms, anchor)
		b, ok2 := find(m, anchor)
		if !ok1 || !ok2 {
			continue
		}
		if a-b != slide {
			return 0, fmt.Errorf("%s is at %#x live but %#x+%#x in the map", anchor, a, b, slide)
		}
		checked = true
	}
	if !checked {
		return 0, errors.New("no second anchor symbol to verify the KASLR slide")
	}
	return slide, nil
}

// finish sorts the table and counts data symbols.
func (t *Table) finish() {
	sort.SliceStable(t.syms, func(i, j int) bool {
		a, b := &t.syms[i], &t.syms[j]
		if a.Addr != b.Addr {
			return a.Addr < b.Addr
		}
		return rank(a) < rank(b)
	})
	t.data = 0
	for i := range t.syms {
		if t.syms[i].IsData() && !isMarker(t.syms[i].Name) {
			t.data++
		}
	}
}

// rank orders symbols sharing an address so the best name sorts last:
// markers and absolute symbols, then weak, then local, then global.
func rank(s *Symbol) int {
	switch {
	case isMarker(s.Name) || s.Type|0x20 == 'a':
		return 0
	case s.Type|0x20 == 'w' || s.Type|0x20 == 'v':
		return 1
	case !s.Global():
		return 2
	}
	return 3
}

// Source says where the symbols came from.
func (t *Table) Source() string { return t.source }

// Len is the number of symbols.
func (t *Table) Len() int { return len(t.syms) }

// HasDataSymbols reports whether data symbols (locks, variables) are known,
// so that lock addresses can be named.
func (t *Table) HasDataSymbols() bool { return t.data > 0 }

// DataSymbolsNote explains, in plain words, why data symbols are missing; it
// is empty when HasDataSymbols is true.
func (t *Table) DataSymbolsNote() string {
	if t.HasDataSymbols() {
		return ""
	}
	return t.note
}

// Lookup returns the address of the symbol called name: the global one if
// there is one, else the first local one (static variables such as
// rtnl_mutex are local). Use All when a local name may be ambiguous.
func (t *Table) Lookup(name string) (uint64, bool) {
	t.indexOnce.Do(t.buildIndex)
	i, ok := t.byName[name]
	if !ok {
		return 0, false
	}
	return t.syms[i].Addr, true
}

// Extent returns the address range [lo, hi) of the function called name
// (as Lookup picks it): from its address to the next higher symbol's of
// the same object. It reports false when there is no such symbol or no
// symbol after it bounds it.
func (t *Table) Extent(name string) (lo, hi uint64, ok bool) {
	t.indexOnce.Do(t.buildIndex)
	i, found := t.byName[name]
	if !found {
		return 0, 0, false
	}
	s := t.syms[i]
	j := sort.Search(len(t.syms), func(j int) bool { return t.syms[j].Addr > s.Addr })
	if j == len(t.syms) || t.syms[j].Module != s.Module {
		return 0, 0, false
	}
	return s.Addr, t.syms[j].Addr, true
}

// All returns every symbol called name, in address order.
func (t *Table) All(name string) []Symbol {
	var out []Symbol
	for _, s := range t.syms {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func (t *Table) buildIndex() {
	t.byName = make(map[string]int32, len(t.syms))
	for i := range t.syms {
		s := &t.syms[i]
		j, seen := t.byName[s.Name]
		if !seen || (s.Global() && !t.syms[j].Global()) {
			t.byName[s.Name] = int32(i)
		}
	}
}

// Find returns the symbol containing addr and the offset into it. It
// reports false when addr is below every symbol, falls right after a linker
// section marker (e.g. past _etext, or in a data section of a kernel that
// lists no data symbols), or lies implausibly far past the last symbol of a
// module.
func (t *Table) Find(addr uint64) (Symbol, uint64, bool) {
	i := sort.Search(len(t.syms), func(i int) bool { return t.syms[i].Addr > addr }) - 1
	if i < 0 {
		return Symbol{}, 0, false
	}
	s := t.syms[i]
	if isMarker(s.Name) || s.Type|0x20 == 'a' {
		return Symbol{}, 0, false
	}
	off := addr - s.Addr
	if off > maxTailOffset {
		// Is there a next symbol in the same object bounding this one?
		j := i + 1
		for j < len(t.syms) && t.syms[j].Addr == s.Addr {
			j++
		}
		if j == len(t.syms) || t.syms[j].Module != s.Module {
			return Symbol{}, 0, false
		}
	}
	return s, off, true
}

// Symbolize names addr as "func+0x1f", "func+0x1f [module]" for module
// symbols, or "0xffffffff81234567" when no symbol covers it.
func (t *Table) Symbolize(addr uint64) string {
	s, off, ok := t.Find(addr)
	if !ok {
		return fmt.Sprintf("%#x", addr)
	}
	if s.Module != "" {
		return fmt.Sprintf("%s+%#x [%s]", s.Name, off, s.Module)
	}
	return fmt.Sprintf("%s+%#x", s.Name, off)
}

// SymbolizeStack symbolizes a stack as captured by bpf_get_stack or
// bpf_get_stackid, innermost frame first, stopping at the first zero
// address (the unused tail of a fixed-size stack buffer).
func (t *Table) SymbolizeStack(addrs []uint64) []string {
	out := make([]string, 0, len(addrs))
	for _, a := range addrs {
		if a == 0 {
			break
		}
		out = append(out, t.Symbolize(a))
	}
	return out
}

// markerNames are linker-generated section boundaries. An address after one
// of them and before the next real symbol belongs to no named object.
var markerNames = map[string]bool{
	"_text": true, "_stext": true, "_etext": true, "_sinittext": true, "_einittext": true,
	"_sdata": true, "_edata": true, "__bss_start": true, "__bss_stop": true, "_end": true,
	"__init_begin": true, "__init_end": true, "_sinittext_end": true, "__brk_base": true,
	"__brk_limit": true, "__per_cpu_start": true, "__per_cpu_end": true,
	"__end_of_kernel_reserve": true, "_einitdata": true, "_sinitdata": true,
}

func isMarker(name string) bool {
	return markerNames[name] || strings.HasPrefix(name, "__start_") ||
		strings.HasPrefix(name, "__stop_") || strings.HasPrefix(name, "__end_")
}

// parse reads "addr type name[\t[module]]" lines. Malformed lines are
// skipped: a symbol table is useful even when one line is odd.
func parse(ctx context.Context, r io.Reader, withModules bool) ([]Symbol, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	syms := make([]Symbol, 0, 1<<17)
	modules := map[string]string{}
	for n := 0; ; n++ {
		if n&0xfff == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull { // absurdly long line: skip it
			for err == bufio.ErrBufferFull {
				_, err = br.ReadSlice('\n')
			}
			continue
		}
		if len(line) > 0 {
			if s, ok := parseLine(line, withModules, modules); ok {
				syms = append(syms, s)
			}
		}
		if err == io.EOF {
			return syms, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func parseLine(line []byte, withModules bool, modules map[string]string) (Symbol, bool) {
	for len(line) > 0 && (line[len(line)-1] == '\n' || line[len(line)-1] == '\r') {
		line = line[:len(line)-1]
	}
	sp := indexByte(line, ' ')
	if sp <= 0 || sp+3 > len(line) || line[sp+2] != ' ' {
		return Symbol{}, false
	}
	addr, ok := parseHex(line[:sp])
	if !ok {
		return Symbol{}, false
	}
	s := Symbol{Addr: addr, Type: line[sp+1]}
	rest := line[sp+3:]
	if tab := indexByte(rest, '\t'); tab >= 0 {
		mod := rest[tab+1:]
		rest = rest[:tab]
		if withModules && len(mod) > 2 && mod[0] == '[' && mod[len(mod)-1] == ']' {
			m := mod[1 : len(mod)-1]
			name, seen := modules[string(m)]
			if !seen {
				name = string(m)
				modules[name] = name
			}
			s.Module = name
		}
	}
	if len(rest) == 0 {
		return Symbol{}, false
	}
	s.Name = string(rest)
	return s, true
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

func parseHex(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 16 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		v = v<<4 | uint64(c)
	}
	return v, true
}

func allZero(syms []Symbol) bool {
	for _, s := range syms {
		if s.Addr != 0 {
			return false
		}
	}
	return true
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// GlobalName names a kernel global from its symbolized address
// ("rtnl_mutex+0x0" gives "rtnl_mutex", "some_struct+0x8" is kept whole),
// and returns "" for addresses no symbol covers closely: heap objects,
// addresses far past a symbol, and module data, which cannot be named
// safely.
func GlobalName(symbolized string) string {
	name, off, ok := strings.Cut(symbolized, "+0x")
	if !ok || strings.Contains(off, " ") {
		return ""
	}
	v, err := strconv.ParseUint(off, 16, 64)
	if err != nil || v >= 0x100 {
		return ""
	}
	if v == 0 {
		return name
	}
	return symbolized
}
