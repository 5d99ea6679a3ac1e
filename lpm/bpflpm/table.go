package bpflpm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
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

// Options configure New.
type Options struct {
	Family Family
	// MaxPrefixes sizes the maps. Room is reserved for two tables of this
	// size, because Load builds the new table beside the live one. The
	// bound is really on the structure the prefixes need, not on their
	// count: the defaults fit routing tables and dense sets (IPv4: 0.5
	// node records and 3 leaf words per prefix, IPv6: 1 and 6); Stats
	// shows what a table uses; set Nodes and Leaves for unusual sets, such
	// as scattered long IPv6 prefixes.
	MaxPrefixes int
	// DirBits fixes how many leading address bits the first,
	// direct-indexed level resolves (8..24). Zero lets every Load choose,
	// up to MaxDirBits (see chooseDirBits).
	DirBits int
	// MaxDirBits bounds the automatic choice; the directory takes
	// 2 × 4 × 2^MaxDirBits bytes (two generations). Zero derives it from
	// MaxPrefixes: 14 for small tables up to 20 from about 512 K prefixes.
	MaxDirBits int
	// Nodes (24-byte records) and Leaves (4-byte words) override the
	// capacities derived from MaxPrefixes; each map is at most 512 MiB
	// (the verifier's bound on a variable offset into a map value).
	Nodes, Leaves int
}

func (o *Options) normalize() error {
	switch o.Family {
	case IPv4, IPv6:
	default:
		return fmt.Errorf("bpflpm: family must be IPv4 or IPv6, got %v", o.Family)
	}
	if o.MaxPrefixes < 0 || o.Nodes < 0 || o.Leaves < 0 {
		return errors.New("bpflpm: negative capacity")
	}
	if o.DirBits != 0 {
		if o.DirBits < minDirBits || o.DirBits > maxDirBits {
			return fmt.Errorf("bpflpm: DirBits must be %d..%d, got %d", minDirBits, maxDirBits, o.DirBits)
		}
		o.MaxDirBits = o.DirBits
	}
	if o.MaxDirBits == 0 {
		o.MaxDirBits = min(max(bits.Len(uint(o.MaxPrefixes))+1, 14), 20)
	}
	if o.MaxDirBits < minDirBits || o.MaxDirBits > maxDirBits {
		return fmt.Errorf("bpflpm: MaxDirBits must be %d..%d, got %d", minDirBits, maxDirBits, o.MaxDirBits)
	}
	// Room for two tables (Load builds the new one beside the live one)
	// at what real tables need, plus slack for the copies updates make
	// before a grace period frees what they replaced. Measured needs
	// (Stats): IPv4 routing table 0.07 records and 1.3 leaf words per
	// prefix, dense /32 sets 0.02 and 1.03, the IPv6 table 0.44 and 1.2.
	p := o.MaxPrefixes
	nodes, leaves := p/2, 3*p
	if o.Family == IPv6 {
		nodes, leaves = p, 6*p
	}
	// The slack is what a burst of updates retires while a grace period
	// (~10 ms) is under way: 16 Ki records and 64 Ki leaf words (640
	// KiB) from about 400 prefixes on. Smaller tables get less, down to a
	// quarter below 100 prefixes: their maps take ~310 KiB instead of 800
	// (128 of them the directory), and a burst of changes waits for a
	// grace period sooner.
	if o.Nodes == 0 {
		o.Nodes = nodes + min(16384, max(4096, 40*p))
	}
	if o.Leaves == 0 {
		o.Leaves = leaves + min(65536, max(16384, 160*p))
	}
	if uint64(o.Nodes)*recordSize > maxMapBytes || (uint64(o.Leaves)+chunkWords)*4 > maxMapBytes {
		return fmt.Errorf("bpflpm: capacity too large: %d records and %d leaf words, at most %d and %d",
			o.Nodes, o.Leaves, maxMapBytes/recordSize, maxMapBytes/4-chunkWords)
	}
	o.Leaves = (o.Leaves + chunkWords - 1) / chunkWords * chunkWords
	return nil
}

// chooseDirBits picks the directory width for a set of prefixes. A
// lookup costs roughly one dependent memory read per node level below the
// directory, and a prefix of length l > s needs ceil((l-s)/6) of them; a
// wider directory saves levels but is itself more likely to miss the
// caches. So the choice minimizes the expected number of node levels per
// prefix (lookups from announced space weigh prefixes alike) plus 0.05
// per MiB of directory. That picks 18 for the real IPv4 table (most
// prefixes are /24: one level) and for the real IPv6 one (with
// MaxDirBits derived from its size), 20 for a million dense /32s (two
// levels instead of three) and 14 for small dense sets.
func chooseDirBits(ps []netip.Prefix, maxBits int) int {
	var hist [129]int
	for _, p := range ps {
		hist[p.Bits()]++
	}
	n := max(len(ps), 1)
	best, bestCost := maxBits, 0.0
	for s := maxBits; s >= minDirBits; s-- {
		levels := 0
		for l, c := range hist {
			if l > s {
				levels += c * ((l - s + stride - 1) / stride)
			}
		}
		cost := float64(levels)/float64(n) + 0.05*float64(uint64(4)<<s)/(1<<20)
		if s == maxBits || cost < bestCost {
			best, bestCost = s, cost
		}
	}
	return best
}

// Table is one longest-prefix-match table in BPF array maps: the writer's
// side. Its methods are safe for concurrent use (they serialize); BPF
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

// kernelGrace waits for a grace period of the kind that covers every BPF
// program running now: replacing an element of a map-of-maps from user
// space makes the kernel wait for all running non-sleepable BPF programs
// (maybe_wait_bpf_programs: synchronize_rcu) before the syscall returns.
func (t *Table) kernelGrace() error {
	if err := t.graceMap.Put(uint32(0), t.graceInner); err != nil {
		return fmt.Errorf("bpflpm: wait for a grace period: %w", err)
	}
	return nil
}

// sync waits until no lookup can still see anything retired so far, then
// makes that space reusable. The caller holds t.mu.
func (t *Table) sync() error {
	e := t.epoch
	t.epoch++
	if err := t.grace(); err != nil {
		return err
	}
	t.graceCount++
	t.markSafe(e)
	return nil
}

func (t *Table) markSafe(e uint64) {
	if e > t.safe {
		t.safe = e
	}
	t.nodesA.reclaim(t.safe)
	t.leafA.reclaim(t.safe)
}

// reclaim runs grace periods in the background when retired space builds
// up, so that updates rarely wait for one (an RCU grace period takes
// milliseconds).
func (t *Table) reclaim() {
	defer t.reclaimer.Done()
	for {
		select {
		case <-t.stop:
			return
		case <-t.kick:
		}
		t.mu.Lock()
		e := t.epoch
		t.epoch++
		t.mu.Unlock()
		err := t.grace()
		t.mu.Lock()
		if err == nil && !t.closed {
			t.graceCount++
			t.markSafe(e)
		}
		t.mu.Unlock()
	}
}

// maybeReclaim asks the background reclaimer for a grace period once a
// sixteenth of either map waits in limbo.
func (t *Table) maybeReclaim() {
	if t.kick == nil {
		return
	}
	if t.nodesA.inLimbo*16 > uint64(t.nodesA.cap) || t.leafA.inLimbo*16 > uint64(t.leafA.cap) {
		select {
		case t.kick <- struct{}{}:
		default:
		}
	}
}

// Sync waits for one grace period, reclaims the space of everything
// retired so far, and retries publishing what an Update or Delete could
// not for lack of space. Updates reclaim on their own when they run out
// of free blocks; call it to bound memory held in limbo after a burst.
func (t *Table) Sync() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	if err := t.sync(); err != nil {
		return err
	}
	return t.commit()
}

func (t *Table) retire(nodes bool, at, n uint32) {
	if at != noBlock && n > 0 {
		t.pending = append(t.pending, pend{nodes, at, n})
	}
}

// flushRetired moves the blocks the last commit replaced into limbo: from
// here on no new lookup can reach them.
func (t *Table) flushRetired() {
	for _, p := range t.pending {
		if p.nodes {
			t.nodesA.retire(p.at, p.n, t.epoch)
		} else {
			t.leafA.retire(p.at, p.n, t.epoch)
		}
	}
	t.pending = t.pending[:0]
	t.maybeReclaim()
}

func (t *Table) alloc(nodes bool, n uint32) (uint32, error) {
	a := &t.leafA
	if nodes {
		a = &t.nodesA
	}
	if at, ok := a.alloc(n); ok {
		return at, nil
	}
	if t.nodesA.inLimbo+t.leafA.inLimbo > 0 {
		if err := t.sync(); err != nil {
			return 0, err
		}
		if at, ok := a.alloc(n); ok {
			return at, nil
		}
	}
	return 0, ErrFull
}

func (n *node) record() record {
	if n.inline {
		return record{leafvec: n.leafvec, inline: true, leaves: n.inl}
	}
	r := record{vector: n.vector, leafvec: n.leafvec}
	// Unused fields are zero: base1 must never look like inlineFlag.
	if n.leafAt != noBlock {
		r.base0 = n.leafAt + leafHeader(n.root)
	}
	if n.kidsAt != noBlock {
		r.base1 = n.kidsAt
	}
	return r
}

// leafHeader is where the leaves start in a node's leaf block, in __u32s:
// after the copy of leafvec in a root's block, at once in the others.
func leafHeader(root bool) uint32 {
	if root {
		return 2
	}
	return 0
}

// leafBlock is the size, in the leaf arena's 8-byte units, of a block of
// n leaves (after the 8-byte leafvec for a root).
func leafBlock(n uint32, root bool) uint32 { return (leafHeader(root) + n + 1) / 2 }

// inlineable says whether a node with this vector and nl runs keeps its
// leaves in its record.
func inlineable(vector uint64, nl uint32) bool { return vector == 0 && nl <= inlineMax }

// A commit writes what changed in a slot's subtree in two phases, so
// that running out of space never leaves half of a change behind: plan
// decides, for every dirty node, what it will write and allocates the
// blocks (nothing is visible to lookups yet, and on failure the blocks
// are released at once); apply then writes and publishes and cannot
// fail.
//
// Changes are published in place whenever a lookup then reads the old
// value or the new one, both right for one of the two tables:
//   - leaf values, when the node keeps its leafvec and leaf count: every
//     version of the node indexes its leaves the same way, and a lookup
//     reads one leaf (in the leaf block, or in the record if inline);
//   - base1, when the node's children's records moved to a new block but
//     its vector and leaves did not change: one aligned 4-byte store, and
//     the old block stays valid until a grace period has passed.
//
// A new vector or new leaves need a new record, hence a copy of the
// parent's block of children (at most 64 records), whose own base1 then
// changes in place: an update copies one block of records and one leaf
// block at most, never a whole path. Changing a value rewrites a leaf.
type plan struct {
	leaves   [fanout]uint32
	nl       uint32
	lv       uint64
	inPlace  bool   // rewrite leaf values where they are
	inline   bool   // the leaves go in the record
	leafAt   uint32 // new leaf block (when !inPlace), noBlock if none
	moveKids bool   // write the children's records to kidsAt
	kidsAt   uint32
	newRec   bool // the parent must write a new record for this node
}

// planNode plans n and its dirty descendants and reports whether n needs
// a new record. planned collects the nodes it planned.
func (t *Table) planNode(n *node, planned *[]*node) (bool, error) {
	p := t.newPlan()
	n.plan = p
	*planned = append(*planned, n)
	p.moveKids = n.kidsShape || (n.kidsAt == noBlock && len(n.kids) > 0)
	for _, k := range n.kids {
		if k.dirty {
			c, err := t.planNode(k, planned)
			if err != nil {
				return false, err
			}
			p.moveKids = p.moveKids || c
		}
	}
	var v [fanout]uint32
	n.vals(&v)
	for i := uint32(0); i < fanout; i++ {
		if n.vector>>i&1 != 0 {
			continue
		}
		if p.nl == 0 || v[i] != p.leaves[p.nl-1] {
			p.lv |= 1 << i
			p.leaves[p.nl] = v[i]
			p.nl++
		}
	}
	p.newRec = n.kidsShape || n.recAt == noBlock
	p.inline = inlineable(n.vector, p.nl)
	same := p.lv == n.leafvec && p.nl == n.nleaves
	switch {
	case p.inline:
		// In place only in a record lookups can reach; otherwise the
		// parent (or commitSlot) writes a new one.
		p.inPlace = n.inline && same && n.recAt != noBlock
		p.newRec = p.newRec || !p.inPlace
	case n.leafAt != noBlock && same:
		p.inPlace = true
	case p.nl > 0:
		at, err := t.alloc(false, leafBlock(p.nl, n.root))
		if err != nil {
			return false, err
		}
		p.leafAt = at * 2 // the arena counts pairs of __u32s
		p.newRec = true
	case n.leafAt != noBlock || n.inline:
		p.newRec = true // no leaves any more
	}
	if p.moveKids && len(n.kids) > 0 {
		at, err := t.alloc(true, uint32(len(n.kids)))
		if err != nil {
			return false, err
		}
		p.kidsAt = at
	}
	return p.newRec, nil
}

// unplan gives back the blocks plans allocated, after a failure.
func (t *Table) unplan(planned []*node) {
	for _, n := range planned {
		if p := n.plan; p != nil {
			if p.leafAt != noBlock {
				t.leafA.release(p.leafAt/2, leafBlock(p.nl, n.root))
			}
			t.nodesA.release(p.kidsAt, uint32(len(n.kids)))
			t.plans = append(t.plans, p)
			n.plan = nil
		}
	}
}

// newPlan reuses the plans of earlier commits: a plan holds a node's 64
// leaves, and an update plans a few nodes.
func (t *Table) newPlan() *plan {
	var p *plan
	if k := len(t.plans); k > 0 {
		p, t.plans = t.plans[k-1], t.plans[:k-1]
		*p = plan{}
	} else {
		p = new(plan)
	}
	p.leafAt, p.kidsAt = noBlock, noBlock
	return p
}

// applyNode carries out the plans of n and its descendants.
func (t *Table) applyNode(n *node) {
	p := n.plan
	for _, k := range n.kids {
		if k.plan != nil {
			t.applyNode(k)
		}
	}
	switch {
	case p.inPlace && p.inline:
		for j := uint32(0); j < p.nl; j++ {
			t.im.storeInline(n.recAt, j, p.leaves[j])
		}
		t.inlineRewrites++
	case p.inPlace:
		for j := uint32(0); j < p.nl; j++ {
			t.im.storeLeaf(n.leafAt+leafHeader(n.root)+j, p.leaves[j])
		}
	default:
		if p.leafAt != noBlock {
			t.im.putLeaves(p.leafAt, p.lv, p.leaves[:p.nl], n.root)
		}
		if n.leafAt != noBlock {
			t.retire(false, n.leafAt/2, leafBlock(n.nleaves, n.root))
		}
		n.leafAt = p.leafAt
	}
	n.inline, n.nleaves, n.leafvec = p.inline, p.nl, p.lv
	n.inl = [inlineMax]uint32{}
	if p.inline {
		copy(n.inl[:], p.leaves[:p.nl])
	}
	if p.moveKids {
		for i, k := range n.kids {
			t.im.putRecord(p.kidsAt+uint32(i), k.record())
			k.recAt = p.kidsAt + uint32(i)
		}
		t.retire(true, n.kidsAt, n.kidsN)
		n.kidsAt, n.kidsN = p.kidsAt, uint32(len(n.kids))
		if !p.newRec {
			t.im.storeBase1(n.recAt, n.kidsAt)
		}
	}
	n.dirty, n.kidsShape, n.plan = false, false, nil
	if len(t.plans) < 64 {
		t.plans = append(t.plans, p)
	}
}

// commitSlot writes slot's subtree (see plan) and returns its directory
// entry. On ErrFull nothing of the slot has changed in the maps and it
// stays dirty.
func (t *Table) commitSlot(sh *shadow, slot uint32) (uint32, error) {
	r := sh.slots[slot]
	if r == nil {
		return sh.dirDef[slot], nil
	}
	if r.dirty || r.at == noBlock {
		var planned []*node
		newRec, err := t.planNode(r, &planned)
		rootAt := noBlock
		if err == nil && (newRec || r.at == noBlock) {
			rootAt, err = t.alloc(true, 1)
		}
		if err != nil {
			t.unplan(planned)
			return 0, err
		}
		t.applyNode(r)
		if rootAt != noBlock {
			t.im.putRecord(rootAt, r.record())
			t.retire(true, r.at, 1)
			r.at, r.recAt = rootAt, rootAt
		}
	}
	if r.vector == 0 && r.leafAt != noBlock && !r.inline {
		return leavesFlag | r.leafAt, nil
	}
	return nodeFlag | r.at, nil
}

// commit publishes every dirty slot of the live shadow into the active
// directory, one atomic store per slot.
func (t *Table) commit() error {
	sh := t.sh
	base := t.gen << t.maxS
	for len(sh.dirtyList) > 0 {
		slot := sh.dirtyList[0]
		e, err := t.commitSlot(sh, slot)
		if errors.Is(err, ErrFull) && len(t.pending) > 0 {
			// What the slots published so far replaced becomes
			// reusable after a grace period: wait for one and retry.
			t.flushRetired()
			if err = t.sync(); err == nil {
				e, err = t.commitSlot(sh, slot)
			}
		}
		if err != nil {
			// Slots published so far stay; this one and the rest stay
			// dirty for the next commit to retry.
			t.flushRetired()
			return err
		}
		t.im.storeDir(base|slot, e)
		sh.dirtySlot[slot] = false
		sh.dirtyList = sh.dirtyList[1:]
	}
	sh.dirtyList = nil
	t.flushRetired()
	return nil
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
