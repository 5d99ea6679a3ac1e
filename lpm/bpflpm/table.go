package bpflpm

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"sync"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Family is the address family of a table.
type Family int

// The two families. A table holds one; a program that routes both
// declares two tables.
const (
	IPv4 Family = 4
	IPv6 Family = 6
)

func (f Family) String() string {
	switch f {
	case IPv4:
		return "IPv4"
	case IPv6:
		return "IPv6"
	}
	return fmt.Sprintf("Family(%d)", int(f))
}

const (
	// Miss is what a lookup returns when no prefix matches
	// (WOLF_LPM_MISS in wolf_lpm.h).
	Miss = 1<<30 - 1
	// MaxValue is the largest value a prefix may carry: values share the
	// 32-bit entries with pointers, which take bit 31.
	MaxValue = Miss - 1

	// Levels4 and Levels6 bound the entries a lookup reads: the root,
	// the directory, a node per 4 bits below the smallest directory,
	// and a list (WOLF_LPM_LEVELS4/6).
	Levels4 = 2 + (32-minDirBits)/4 + 1
	Levels6 = 2 + (128-minDirBits)/4 + 1

	minDirBits = 8
	maxDirBits = 24
)

// Errors.
var (
	// ErrFull means the map has no room for the change (New sizes it
	// from Options). After a failed Load the table is unchanged; after a
	// failed Update or Delete the prefixes before the one that failed
	// are changed, the rest are not.
	ErrFull = errors.New("bpflpm: table full")
	// ErrClosed is returned by every method after Close.
	ErrClosed = errors.New("bpflpm: table closed")
)

// Table is one longest-prefix-match table in a BPF array map: the
// writer's side. Its methods are safe for concurrent use (they
// serialize); BPF programs look up concurrently with all of them.
type Table struct {
	mu     sync.RWMutex
	opts   Options
	width  uint
	s      uint8 // directory bits
	levels int
	closed bool

	im    image
	arena arena
	base  uint32 // the arena's first unit
	m     *ebpf.Map
	mmap  []byte

	root    *tnode // nil: the root entry is a value
	count   int    // prefixes
	hasZero bool   // whether /0 is in the table, with value zero
	zero    uint32
	// The directory's region stops being read by lookups when the root
	// becomes a list; it is rewritten only after a grace period since.
	dirRetired bool
	dirEpoch   uint64

	pending []pend   // blocks the current change stops using
	dirty   []*tnode // packed nodes whose entries changed (flushPacked)

	// Grace periods. Retired blocks are tagged with epoch; once a grace
	// period that began after epoch e has ended, safe >= e and the
	// blocks are reused.
	epoch, safe          uint64
	grace                func() error
	graceCount           int
	graceMap, graceInner *ebpf.Map
	kick, stop           chan struct{}
	reclaimer            sync.WaitGroup
}

// pend is a block that the structure stops using once the change being
// made is published.
type pend struct {
	at    uint32
	order int8
}

// MapSuffixes are the maps WOLF_LPM_TABLE(name) declares: name_words.
var MapSuffixes = []string{"words"}

// New creates the table's map, empty. It needs CAP_BPF (root).
func New(opts Options) (*Table, error) {
	if err := opts.normalize(); err != nil {
		return nil, err
	}
	t := newTable(opts)
	p := "lpm4_words"
	if opts.Family == IPv6 {
		p = "lpm6_words"
	}
	// Not BPF_F_RDONLY_PROG: the kernel refuses writable mmaps of such maps.
	spec := &ebpf.MapSpec{Name: p, Type: ebpf.Array, KeySize: 4, ValueSize: uint32(opts.Words) * 4, MaxEntries: 1, Flags: unix.BPF_F_MMAPABLE}
	fail := func(err error) (*Table, error) {
		t.release()
		return nil, err
	}
	var err error
	if t.m, err = ebpf.NewMap(spec); err != nil {
		if errors.Is(err, unix.E2BIG) {
			// Older kernels (5.10 among them) cap an array map's value at
			// KMALLOC_MAX_SIZE, 4 MiB on x86-64; the whole table is one value.
			err = fmt.Errorf("%w (a %d-byte map value: older kernels, 5.10 among them, cap it at 4 MiB)", err, spec.ValueSize)
		}
		return fail(fmt.Errorf("bpflpm: create the words map: %w", err))
	}
	if t.mmap, err = mmapMap(t.m); err != nil {
		return fail(fmt.Errorf("bpflpm: mmap the words map: %w", err))
	}
	t.im.w = t.mmap[:opts.Words*4]
	inner := &ebpf.MapSpec{Name: "wolf_lpm_gp_in", Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1}
	if t.graceInner, err = ebpf.NewMap(inner); err != nil {
		return fail(fmt.Errorf("bpflpm: create grace-period map: %w", err))
	}
	if t.graceMap, err = ebpf.NewMap(&ebpf.MapSpec{Name: "wolf_lpm_gp", Type: ebpf.ArrayOfMaps, KeySize: 4, ValueSize: 4, MaxEntries: 1, InnerMap: inner}); err != nil {
		return fail(fmt.Errorf("bpflpm: create grace-period map: %w", err))
	}
	t.grace = t.kernelGrace
	t.im.store(0, Miss)
	t.kick, t.stop = make(chan struct{}, 1), make(chan struct{})
	t.reclaimer.Add(1)
	go t.reclaim()
	return t, nil
}

// newTable sets up everything but the memory.
func newTable(opts Options) *Table {
	t := &Table{opts: opts, width: 32, levels: Levels4, s: uint8(opts.DirBits), epoch: 1}
	if opts.Family == IPv6 {
		t.width, t.levels = 128, Levels6
	}
	t.base = headerUnits + 1<<(t.s-1)
	t.arena = newArena(uint32(opts.Words/unitWords) - t.base - padUnits)
	return t
}

// newHeapTable is a table in Go memory, for tests of everything but BPF.
func newHeapTable(opts Options) (*Table, error) {
	if err := opts.normalize(); err != nil {
		return nil, err
	}
	t := newTable(opts)
	t.im.w = make([]byte, opts.Words*4)
	t.grace = func() error { return nil }
	t.im.store(0, Miss)
	return t, nil
}

// mmapMap maps an array map's values: elements of round_up(value_size, 8)
// bytes, back to back, as the kernel lays out a BPF_F_MMAPABLE array.
func mmapMap(m *ebpf.Map) ([]byte, error) {
	elem := (uint64(m.ValueSize()) + 7) &^ 7
	size := elem * uint64(m.MaxEntries())
	page := uint64(os.Getpagesize())
	size = (size + page - 1) &^ (page - 1)
	return unix.Mmap(m.FD(), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
}

// Bind makes a collection that declares WOLF_LPM_TABLE(name) use this
// table: it sizes name's map spec like the table's map, sets name_cap in
// the collection's .rodata and adds the map to opts.MapReplacements. Load
// the collection with those options.
func (t *Table) Bind(spec *ebpf.CollectionSpec, name string, opts *ebpf.CollectionOptions) error {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		return ErrClosed
	}
	if t.m == nil {
		return errors.New("bpflpm: a table in Go memory cannot be bound")
	}
	if opts.MapReplacements == nil {
		opts.MapReplacements = map[string]*ebpf.Map{}
	}
	ms, ok := spec.Maps[name+"_words"]
	if !ok {
		return fmt.Errorf("bpflpm: the collection has no map %s_words: declare WOLF_LPM_TABLE(%s)", name, name)
	}
	ms.MaxEntries, ms.ValueSize = t.m.MaxEntries(), t.m.ValueSize()
	opts.MapReplacements[name+"_words"] = t.m
	v, ok := spec.Variables[name+"_cap"]
	if !ok {
		return fmt.Errorf("bpflpm: the collection has no variable %s_cap: declare WOLF_LPM_TABLE(%s)", name, name)
	}
	if err := v.Set(uint32(t.opts.Words)); err != nil {
		return fmt.Errorf("bpflpm: set %s_cap: %w", name, err)
	}
	return nil
}

// Cap returns how many words the map holds, which a caller that wires
// the map up itself (Maps) must set as the program's name_cap before
// load, as Bind does: lookups never index past it.
func (t *Table) Cap() uint32 { return uint32(t.opts.Words) }

// Maps returns the table's map by suffix ("words"), for callers that wire
// it up themselves (see Cap).
func (t *Table) Maps() map[string]*ebpf.Map {
	if t.m == nil {
		return map[string]*ebpf.Map{}
	}
	return map[string]*ebpf.Map{"words": t.m}
}

// Family returns the table's address family.
func (t *Table) Family() Family { return t.opts.Family }

// Close unmaps and closes the map. BPF programs that use it keep it alive
// (and keep working) until they are unloaded.
func (t *Table) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	t.closed = true
	if t.stop != nil {
		close(t.stop)
		// The reclaimer takes the lock after a grace period.
		t.mu.Unlock()
		t.reclaimer.Wait()
		t.mu.Lock()
	}
	return t.release()
}

func (t *Table) release() error {
	var errs []error
	if t.mmap != nil {
		if err := unix.Munmap(t.mmap); err != nil {
			errs = append(errs, err)
		}
	}
	t.mmap, t.im = nil, image{}
	for _, m := range []*ebpf.Map{t.m, t.graceMap, t.graceInner} {
		if m != nil {
			errs = append(errs, m.Close())
		}
	}
	t.m, t.graceMap, t.graceInner = nil, nil, nil
	t.root = nil
	return errors.Join(errs...)
}

func (t *Table) check(ps []netip.Prefix, vs []uint32) error {
	if vs != nil && len(ps) != len(vs) {
		return fmt.Errorf("bpflpm: %d prefixes but %d values", len(ps), len(vs))
	}
	for i, p := range ps {
		if !p.IsValid() {
			return fmt.Errorf("bpflpm: invalid prefix at index %d", i)
		}
		if p.Addr().Is4() != (t.opts.Family == IPv4) {
			return fmt.Errorf("bpflpm: %v is not an %v prefix", p, t.opts.Family)
		}
		if vs != nil && vs[i] > MaxValue {
			return fmt.Errorf("bpflpm: value %d of %v is above MaxValue (%d)", vs[i], p, MaxValue)
		}
	}
	return nil
}

func maskedKey(p netip.Prefix) (key, uint8) {
	l := uint8(p.Bits())
	return keyOf(p.Addr()).masked(uint(l)), l
}

// Load replaces the whole table with prefixes[i] → values[i] (a later
// duplicate wins). It writes the new table's nodes into free blocks while
// lookups keep using the old ones, then switches each directory entry
// with one store (or, while the table fits a list, the root word): a
// lookup sees the old table or the new one. A directory entry whose
// prefixes did not change keeps its nodes. The old nodes' space is
// reused after a grace period (see the package doc). On ErrFull nothing
// changed.
func (t *Table) Load(prefixes []netip.Prefix, values []uint32) error {
	if err := t.check(prefixes, values); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	ps, hasZero, zero := t.sorted(prefixes, values)
	old := t.root
	var n *tnode
	var err error
	switch {
	case len(ps) == 0:
	case fitsList(ps, 0):
		n, err = t.build(ps, key{}, 0, zero)
	default:
		n, err = t.buildDir(ps, old, zero)
	}
	if err != nil {
		return err
	}
	t.root, t.hasZero, t.zero, t.count = n, hasZero, zero, len(ps)
	if hasZero {
		t.count++
	}
	t.im.store(0, t.rootEntry())
	switch {
	case old == nil:
	case old.order >= 0: // a list
		t.retireNode(old)
	case n == nil || n.isList(): // the directory goes
		t.retireTree(old)
	}
	t.flushRetired()
	return nil
}

// sorted returns the prefixes but /0, masked, in address order then
// length order, a later duplicate winning, and the value of /0 if there
// is one.
func (t *Table) sorted(prefixes []netip.Prefix, values []uint32) (ps []bp, hasZero bool, zero uint32) {
	zero = Miss
	ps = make([]bp, 0, len(prefixes))
	if t.opts.Family == IPv4 && len(prefixes) < 1<<26 {
		// Address, length and index in one word: a plain integer sort.
		ks := make([]uint64, len(prefixes))
		for i, p := range prefixes {
			k, l := maskedKey(p)
			ks[i] = k.hi | uint64(l)<<26 | uint64(i)
		}
		slices.Sort(ks)
		for j, x := range ks {
			if j+1 < len(ks) && ks[j+1]>>26 == x>>26 {
				continue // a later duplicate follows
			}
			i := x & (1<<26 - 1)
			if l := uint8(x >> 26 & 63); l > 0 {
				ps = append(ps, bp{key{hi: x &^ (1<<32 - 1)}, l, values[i]})
			} else {
				hasZero, zero = true, values[i]
			}
		}
		return ps, hasZero, zero
	}
	type ip struct {
		bp
		i int
	}
	all := make([]ip, len(prefixes))
	for i, p := range prefixes {
		k, l := maskedKey(p)
		all[i] = ip{bp{k, l, values[i]}, i}
	}
	slices.SortFunc(all, func(a, b ip) int {
		if c := cmpBP(a.bp, b.bp); c != 0 {
			return c
		}
		return a.i - b.i
	})
	for j, x := range all {
		if j+1 < len(all) && cmpBP(all[j+1].bp, x.bp) == 0 {
			continue
		}
		if x.l > 0 {
			ps = append(ps, x.bp)
		} else {
			hasZero, zero = true, x.v
		}
	}
	return ps, hasZero, zero
}

// Update inserts or replaces prefixes[i] → values[i], in order. Each
// change is published with one aligned store per entry it rewrites, into
// entries no lookup reads two of, or by one store of a pointer to a new
// block: a lookup sees each prefix before or after its change (see the
// package doc). On ErrFull the prefixes before the one that did not fit
// are changed, and the rest are not.
func (t *Table) Update(prefixes []netip.Prefix, values []uint32) error {
	if err := t.check(prefixes, values); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	for i, p := range prefixes {
		k, l := maskedKey(p)
		err := t.insert(k, l, values[i])
		if err == nil {
			err = t.flushPacked()
		}
		// Each change is published on its own: what it replaced can
		// go to limbo now, and be reused within the batch.
		t.flushRetired()
		if err != nil {
			return err
		}
	}
	return nil
}

// Delete removes prefixes and returns how many were present. It
// publishes like Update: the entries a prefix owned go back to the next
// shorter prefix, in place (in a packed node too: runs that merge keep
// their words), except in a packed node where it splits a run, which
// is rewritten; if that finds no room (ErrFull), the prefix is
// gone from the table's copy and the next change or Sync publishes it.
// A node left empty stays in place while the map has room to spare
// (adding its prefixes back is then a store, not a new block); Sync
// drops such nodes.
func (t *Table) Delete(prefixes []netip.Prefix) (int, error) {
	if err := t.check(prefixes, nil); err != nil {
		return 0, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return 0, ErrClosed
	}
	n := 0
	for _, p := range prefixes {
		k, l := maskedKey(p)
		if t.remove(k, l) {
			n++
		}
		err := t.flushPacked()
		t.flushRetired()
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Lookup returns the value of the longest prefix that contains a, running
// the same algorithm as the BPF side over the same memory.
func (t *Table) Lookup(a netip.Addr) (uint32, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed || a.Is4() != (t.opts.Family == IPv4) {
		return Miss, false
	}
	v := t.im.lookup(keyOf(a), t.levels)
	return v, v != Miss
}

// Len returns the number of prefixes in the table.
func (t *Table) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.count
}

// Stats describes the table's memory.
type Stats struct {
	Prefixes int
	// Directs, Packed and Lists count the nodes below the root; Depth is
	// the most entries a lookup reads (the root word included).
	Directs, Packed, Lists, Depth int
	// BytesUsed is the live structure: the header, the directory if the
	// root is one, and the blocks of the nodes. BytesAllocated is the
	// map's whole value. BytesInLimbo waits for a grace period.
	BytesUsed, BytesAllocated, BytesInLimbo uint64
	// GracePeriods counts the waits for lookups to leave retired memory.
	GracePeriods int
	// DirBits is the directory's width (used once the table outgrows a
	// list).
	DirBits int
}

// Stats returns the table's current size.
func (t *Table) Stats() Stats {
	t.mu.RLock()
	defer t.mu.RUnlock()
	st := Stats{
		Prefixes:       t.count,
		BytesAllocated: uint64(t.opts.Words) * 4,
		BytesInLimbo:   t.arena.inLimbo * 8,
		GracePeriods:   t.graceCount,
		DirBits:        int(t.s),
		Depth:          1,
	}
	if t.root != nil {
		st.Depth = 2
	}
	used := uint64(headerUnits) + t.arena.live
	var walk func(n *tnode, d int)
	walk = func(n *tnode, d int) {
		st.Depth = max(st.Depth, d)
		switch {
		case n.isList():
			st.Lists++
		case n.packed:
			st.Packed++
		default:
			st.Directs++
		}
		for _, c := range n.kids.all() {
			walk(c, d+1)
		}
	}
	if r := t.root; r != nil {
		if r.order < 0 {
			used += 1 << (t.s - 1)
		}
		for _, c := range r.kids.all() {
			walk(c, 3)
		}
	}
	st.BytesUsed = used * 8
	return st
}
