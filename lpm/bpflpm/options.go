package bpflpm

import (
	"errors"
	"fmt"
	"math/bits"
)

// Options configure New.
type Options struct {
	Family Family
	// MaxPrefixes sizes the map: the directory, room for the nodes below
	// it twice over (a Load that replaces a whole table writes the new
	// nodes before it frees the old ones; one that changes a few
	// directory entries reuses the others' nodes), and slack for the
	// blocks updates retire while a grace period is under way. The bound
	// is really on the structure the prefixes need, not on their count:
	// IPv4 gets 2 words per prefix (measured: 2.0 for the real IPv4
	// table, 1.25 for dense /32 sets), IPv6 7 (measured 6 for the real
	// IPv6 table). Set Words for unusual sets, such as scattered /32s
	// (up to 8 words each). Stats shows what a table uses.
	MaxPrefixes int
	// DirBits fixes how many leading address bits the directory, the
	// first level, resolves (8..24). Zero derives it from MaxPrefixes
	// (chooseDirBits): at most 18 bits for IPv4 (1 MiB) and 16 for IPv6.
	// A 24-bit one (64 MiB) answers nearly every lookup of a routing
	// table in one read but was not faster (docs/lpm.md). A narrower one
	// than the derived width gets four times the room for nodes (unless
	// Words is set).
	DirBits int
	// Words overrides the map's size, in 32-bit words (at most 2^27, the
	// verifier's bound on a variable offset into a map value).
	Words int
}

func (o *Options) normalize() error {
	switch o.Family {
	case IPv4, IPv6:
	default:
		return fmt.Errorf("bpflpm: family must be IPv4 or IPv6, got %v", o.Family)
	}
	if o.MaxPrefixes < 0 || o.Words < 0 {
		return errors.New("bpflpm: negative capacity")
	}
	derived := chooseDirBits(o.Family, o.MaxPrefixes)
	if o.DirBits == 0 {
		o.DirBits = derived
	}
	if o.DirBits < minDirBits || o.DirBits > maxDirBits {
		return fmt.Errorf("bpflpm: DirBits must be %d..%d, got %d", minDirBits, maxDirBits, o.DirBits)
	}
	fixed := uint64(headerUnits+padUnits)*unitWords + 1<<o.DirBits
	if o.Words == 0 {
		p := uint64(o.MaxPrefixes)
		per := uint64(4) // words per prefix
		if o.Family == IPv6 {
			per = 14
		}
		if o.DirBits < derived {
			// A narrower directory than the table's size calls for
			// leaves more prefixes to nodes: the real IPv4 table
			// needs 3.6 to 5 words each below 16 to 20 bits.
			per *= 4
		}
		// Slack: what a burst of updates retires during a grace period
		// (~10 ms), at least a few of the largest blocks.
		slack := min(max(p/8, 4096), 1<<18)
		o.Words = int(fixed + per*p + slack)
	}
	// Whole units, and room for a few nodes.
	o.Words = (o.Words + 1) &^ 1
	if uint64(o.Words) < fixed+minArenaWords {
		o.Words = int(fixed + minArenaWords)
	}
	if uint64(o.Words)*4 > maxMapBytes {
		return fmt.Errorf("bpflpm: capacity too large: %d words, at most %d", o.Words, maxMapBytes/4)
	}
	return nil
}

// minArenaWords is the least room below the directory: a few lists.
const minArenaWords = 256

// chooseDirBits derives the directory's width from the table's size: the
// widest directory (fewest levels below it) that costs at most 80 bytes
// per prefix, from 8 bits up to 18 for IPv4 (1 MiB: wider ones missed
// the caches and the TLB more than the node read they save, measured
// side by side up to 24) and 16 for IPv6, whose prefixes lie far below
// any directory.
func chooseDirBits(f Family, maxPrefixes int) int {
	s := bits.Len64(uint64(maxPrefixes)*20) - 1
	top := 18
	if f == IPv6 {
		top = 16
	}
	return min(max(s, minDirBits), top)
}
