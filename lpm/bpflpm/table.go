package bpflpm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
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
	// directory's 32-bit entries with pointers, which take bits 30 and 31.
	MaxValue = Miss - 1

	// Levels4 and Levels6 bound the nodes a lookup visits below the
	// directory, for the smallest DirBits allowed (WOLF_LPM_LEVELS4/6).
	Levels4 = (32 - minDirBits + stride - 1) / stride
	Levels6 = (128 - minDirBits + stride - 1) / stride

	minDirBits = 8
	maxDirBits = 24
)

// Errors.
var (
	// ErrFull means the maps have no room for the change (New sizes them
	// from Options). After a failed Load the table is unchanged; after a
	// failed Update or Delete each directory slot shows the table before
	// or after the change, and the next Update, Delete or Sync publishes
	// the rest once there is room.
	ErrFull = errors.New("bpflpm: table full")
	// ErrClosed is returned by every method after Close.
	ErrClosed = errors.New("bpflpm: table closed")
)

// programs look up concurrently with all of them.
type Table struct {
	mu     sync.RWMutex
	opts   Options
	width  uint
	maxS   uint // directory generation g starts at entry g << maxS
	levels int

	sh            *shadow
	nodesA, leafA arena
	im            image
	gen           uint32 // active directory generation
	seq           uint32 // Loads so far, kept in the root word for debugging
	pending       []pend
	plans         []*plan // free plans, for reuse
	closed        bool
	maps          map[string]*ebpf.Map // "root", "dir", "nodes", "leaves"
	mmaps         [][]byte

	// inlineRewrites counts inline leaves rewritten in place in a live
	// record (tests check that the path is exercised).
	inlineRewrites int

	// Grace periods. Retired blocks are tagged with epoch; once a grace
	// period that began after epoch e has ended, safe >= e and the
	// blocks are reused. flipEpoch is the epoch of the last root switch:
	// the directory switched away from is rewritten only when safe has
	// passed it.
	epoch, safe, flipEpoch uint64
	grace                  func() error
	graceCount             int
	graceMap, graceInner   *ebpf.Map
	kick, stop             chan struct{}
	reclaimer              sync.WaitGroup
}

// pend is a block the structure stops using at the end of a commit.
type pend struct {
	nodes bool
	at, n uint32
}

// MapSuffixes are the maps WOLF_LPM_TABLE(name) declares: name_root,
// name_dir, name_nodes and name_leaves.
var MapSuffixes = []string{"root", "dir", "nodes", "leaves"}

// New creates the table's maps, empty. It needs CAP_BPF (root).
func New(opts Options) (*Table, error) {
	if err := opts.normalize(); err != nil {
		return nil, err
	}
	t := newTable(opts)
	specs := t.mapSpecs()
	t.maps = map[string]*ebpf.Map{}
	fail := func(err error) (*Table, error) {
		t.release()
		return nil, err
	}
	for _, name := range MapSuffixes {
		m, err := ebpf.NewMap(specs[name])
		if err != nil {
			return fail(fmt.Errorf("bpflpm: create %s map: %w", name, err))
		}
		t.maps[name] = m
		b, err := mmapMap(m)
		if err != nil {
			return fail(fmt.Errorf("bpflpm: mmap %s map: %w", name, err))
		}
		t.mmaps = append(t.mmaps, b)
		switch name {
		case "root":
			t.im.root = b
		case "dir":
			t.im.dir = b
		case "nodes":
			t.im.nodes = b
		case "leaves":
			t.im.leaves = b
		}
	}
	inner := &ebpf.MapSpec{Name: "wolf_lpm_gp_in", Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1}
	var err error
	if t.graceInner, err = ebpf.NewMap(inner); err != nil {
		return fail(fmt.Errorf("bpflpm: create grace-period map: %w", err))
	}
	if t.graceMap, err = ebpf.NewMap(&ebpf.MapSpec{Name: "wolf_lpm_gp", Type: ebpf.ArrayOfMaps, KeySize: 4, ValueSize: 4, MaxEntries: 1, InnerMap: inner}); err != nil {
		return fail(fmt.Errorf("bpflpm: create grace-period map: %w", err))
	}
	t.grace = t.kernelGrace
	t.publishEmpty()
	t.kick, t.stop = make(chan struct{}, 1), make(chan struct{})
	t.reclaimer.Add(1)
	go t.reclaim()
	return t, nil
}

// newTable sets up everything but the memory.
func newTable(opts Options) *Table {
	t := &Table{opts: opts, maxS: uint(opts.MaxDirBits), width: 32, levels: Levels4, epoch: 1}
	if opts.Family == IPv6 {
		t.width, t.levels = 128, Levels6
	}
	t.nodesA = newArena(uint32(opts.Nodes))
	t.leafA = newArena(uint32(opts.Leaves / 2))
	t.sh = newShadow(t.width, t.maxS, t.retire)
	return t
}

// newHeapTable is a table in Go memory, for tests of everything but BPF.
func newHeapTable(opts Options) (*Table, error) {
	if err := opts.normalize(); err != nil {
		return nil, err
	}
	t := newTable(opts)
	t.im = image{
		root:   make([]byte, 8),
		dir:    make([]byte, 2<<t.maxS*4),
		nodes:  make([]byte, opts.Nodes*recordSize),
		leaves: make([]byte, opts.Leaves*4),
	}
	t.grace = func() error { return nil }
	t.publishEmpty()
	return t, nil
}

// publishEmpty makes both directory generations all-miss.
func (t *Table) publishEmpty() {
	for i := uint32(0); i < 2<<t.maxS; i++ {
		t.im.storeDir(i, Miss)
	}
	t.im.storeRoot(t.rootWord())
}

// rootWord is what lookups read first: the generation (bit 0), the
// directory width of the table in it (bits 8..12), where generations
// start (bits 16..20), and a Load counter (bits 24..31).
func (t *Table) rootWord() uint32 {
	return t.gen | uint32(t.sh.s)<<8 | uint32(t.maxS)<<16 | (t.seq&0xff)<<24
}

func (t *Table) mapSpecs() map[string]*ebpf.MapSpec {
	// Not BPF_F_RDONLY_PROG: the kernel refuses writable mmaps of such maps.
	flags := uint32(unix.BPF_F_MMAPABLE)
	p := "lpm4_"
	if t.opts.Family == IPv6 {
		p = "lpm6_"
	}
	// One element each: the whole directory, all records, all leaves
	// (see WOLF_LPM_TABLE).
	caps := t.caps()
	return map[string]*ebpf.MapSpec{
		"root":   {Name: p + "root", Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1, Flags: flags},
		"dir":    {Name: p + "dir", Type: ebpf.Array, KeySize: 4, ValueSize: 4 * caps["dir"], MaxEntries: 1, Flags: flags},
		"nodes":  {Name: p + "nodes", Type: ebpf.Array, KeySize: 4, ValueSize: recordSize * caps["nodes"], MaxEntries: 1, Flags: flags},
		"leaves": {Name: p + "leaves", Type: ebpf.Array, KeySize: 4, ValueSize: 4 * caps["leaves"], MaxEntries: 1, Flags: flags},
	}
}

// caps are what the dir, nodes and leaves maps' values hold: directory
// words (both generations), records, leaf words. Bind hands them to the
// BPF side as name_dir_cap, name_nodes_cap and name_leaves_cap.
func (t *Table) caps() map[string]uint32 {
	return map[string]uint32{"dir": 2 << t.maxS, "nodes": uint32(t.opts.Nodes), "leaves": uint32(t.opts.Leaves)}
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
// table: it sizes name's map specs like the table's maps, sets name's caps
// in the collection's .rodata and adds the maps to opts.MapReplacements.
// Load the collection with those options.
func (t *Table) Bind(spec *ebpf.CollectionSpec, name string, opts *ebpf.CollectionOptions) error {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		return ErrClosed
	}
	if t.maps == nil {
		return errors.New("bpflpm: a table in Go memory cannot be bound")
	}
	if opts.MapReplacements == nil {
		opts.MapReplacements = map[string]*ebpf.Map{}
	}
	for _, suffix := range MapSuffixes {
		ms, ok := spec.Maps[name+"_"+suffix]
		if !ok {
			return fmt.Errorf("bpflpm: the collection has no map %s_%s: declare WOLF_LPM_TABLE(%s)", name, suffix, name)
		}
		m := t.maps[suffix]
		ms.MaxEntries, ms.ValueSize = m.MaxEntries(), m.ValueSize()
		opts.MapReplacements[name+"_"+suffix] = m
	}
	for what, c := range t.caps() {
		v, ok := spec.Variables[name+"_"+what+"_cap"]
		if !ok {
			return fmt.Errorf("bpflpm: the collection has no variable %s_%s_cap: declare WOLF_LPM_TABLE(%s)", name, what, name)
		}
		if err := v.Set(c); err != nil {
			return fmt.Errorf("bpflpm: set %s_%s_cap: %w", name, what, err)
		}
	}
	return nil
}

// Caps returns what the dir, nodes and leaves maps hold, which a caller
// that wires the maps up itself (Maps) must set as the program's
// name_dir_cap, name_nodes_cap and name_leaves_cap before load, as Bind
// does: lookups never index past them.
func (t *Table) Caps() (dirWords, records, leafWords uint32) {
	c := t.caps()
	return c["dir"], c["nodes"], c["leaves"]
}

// Maps returns the table's maps by suffix ("root", "dir", "nodes",
// "leaves"), for callers that wire them up themselves (see Caps).
func (t *Table) Maps() map[string]*ebpf.Map {
	out := map[string]*ebpf.Map{}
	for k, v := range t.maps {
		out[k] = v
	}
	return out
}

// Family returns the table's address family.
func (t *Table) Family() Family { return t.opts.Family }

// Close unmaps and closes the maps. BPF programs that use them keep them
// alive (and keep working) until they are unloaded.
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
	for _, b := range t.mmaps {
		if err := unix.Munmap(b); err != nil {
			errs = append(errs, err)
		}
	}
	t.mmaps = nil
	t.im = image{}
	for _, m := range t.maps {
		errs = append(errs, m.Close())
	}
	t.maps = nil
	for _, m := range []*ebpf.Map{t.graceMap, t.graceInner} {
		if m != nil {
			errs = append(errs, m.Close())
		}
	}
	t.graceMap, t.graceInner = nil, nil
	t.sh = nil
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

// Load replaces the whole table with prefixes[i] → values[i] (a later
// duplicate wins). It builds the new table in free blocks and a second
// directory while lookups keep using the old one, then switches the root
// word: each lookup sees the old table or the new one. The old table's
// space is reused only after a grace period (see the package doc).
func (t *Table) Load(prefixes []netip.Prefix, values []uint32) error {
	if err := t.check(prefixes, values); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	// The directory about to be overwritten was active before the last
	// switch: a lookup that read the root word then may still be in it.
	if t.safe < t.flipEpoch {
		if err := t.sync(); err != nil {
			return err
		}
	}
	s := uint(t.opts.DirBits)
	if s == 0 {
		s = uint(chooseDirBits(prefixes, int(t.maxS)))
	}
	nsh := newShadow(t.width, s, t.retire)
	for i, p := range prefixes {
		nsh.insert(keyOf(p.Addr()), uint(p.Bits()), values[i], true)
	}
	nsh.finish()
	g := t.gen ^ 1
	// Nobody reads this generation's directory: plain stores.
	dir := t.im.dir[uint64(g)<<t.maxS*4:]
	for slot := uint32(0); slot < 1<<s; slot++ {
		e := nsh.dirDef[slot]
		if nsh.slots[slot] != nil {
			var err error
			if e, err = t.commitSlot(nsh, slot); err != nil {
				// Nothing of the new table was published: its
				// blocks are free again at once.
				t.releaseShadow(nsh)
				return err
			}
		}
		binary.NativeEndian.PutUint32(dir[slot*4:], e)
	}
	nsh.dirtyList, nsh.dirtySlot = nil, make([]bool, 1<<s)
	old := t.sh
	t.sh = nsh
	t.gen = g
	t.seq++
	t.im.storeRoot(t.rootWord())
	t.flipEpoch = t.epoch
	old.retire = t.retire
	old.dropAll()
	t.flushRetired()
	return nil
}

// releaseShadow frees every block placed for a shadow that was never
// published.
func (t *Table) releaseShadow(sh *shadow) {
	var walk func(n *node)
	walk = func(n *node) {
		for _, k := range n.kids {
			walk(k)
		}
		t.nodesA.release(n.kidsAt, n.kidsN)
		t.nodesA.release(n.at, 1)
		if n.leafAt != noBlock {
			t.leafA.release(n.leafAt/2, leafBlock(n.nleaves, n.root))
		}
	}
	for _, r := range sh.slots {
		if r != nil {
			walk(r)
		}
	}
}

// Update inserts or replaces prefixes[i] → values[i]. It writes what
// changed into free blocks and publishes each change with one 4-byte
// atomic store (see commitSlot): a lookup sees each directory slot
// before or after the batch. On ErrFull, the slots written before the
// failure are published and the rest retried by the next Update, Delete
// or Sync.
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
		t.sh.insert(keyOf(p.Addr()), uint(p.Bits()), values[i], false)
	}
	return t.commit()
}

// Delete removes prefixes and returns how many were present. It
// publishes like Update.
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
		if t.sh.remove(keyOf(p.Addr()), uint(p.Bits())) {
			n++
		}
	}
	return n, t.commit()
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
	if t.sh == nil {
		return 0
	}
	return t.sh.n
}

// Stats describes the table's memory.
type Stats struct {
	Prefixes int
	// Nodes and Leaves are entries the live table uses (a slot root's
	// leaf block counts its leafvec as two, and blocks are rounded up to
	// pairs); NodeCap and LeafCap what the maps hold.
	Nodes, Leaves    uint64
	NodeCap, LeafCap uint64
	// BytesUsed is the live structure: one directory generation, the
	// node records and the leaves. BytesAllocated is all the maps'
	// memory: both generations and the spare capacity.
	BytesUsed, BytesAllocated uint64
	// GracePeriods counts the waits for lookups to leave retired memory.
	GracePeriods int
	// DirBits is the directory width of the live table.
	DirBits int
}

// Stats returns the table's current size.
func (t *Table) Stats() Stats {
	t.mu.RLock()
	defer t.mu.RUnlock()
	st := Stats{
		Nodes:        t.nodesA.live,
		Leaves:       2 * t.leafA.live,
		NodeCap:      uint64(t.nodesA.cap),
		LeafCap:      2 * uint64(t.leafA.cap),
		GracePeriods: t.graceCount,
	}
	if t.sh != nil {
		st.Prefixes = t.sh.n
	}
	if t.sh != nil {
		st.DirBits = int(t.sh.s)
	}
	st.BytesUsed = uint64(4)<<st.DirBits + st.Nodes*recordSize + st.Leaves*4
	st.BytesAllocated = uint64(8)<<t.maxS + st.NodeCap*recordSize + st.LeafCap*4 + 8
	return st
}
