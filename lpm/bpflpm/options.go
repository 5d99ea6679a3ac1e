package bpflpm

import (
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
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
