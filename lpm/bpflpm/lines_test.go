package bpflpm

import (
	"container/list"
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/wolf-investigator/wolf/internal/testutil"
	"github.com/wolf-investigator/wolf/lpm/realtable"
)

// steps replays a lookup (image.walk) and returns, per dependent step,
// the words it reads: a step's reads need the one before it (a packed
// node is two steps: its marks, then the run they index).
func (im *image) steps(k key, levels int) [][]uint64 {
	out, _ := im.stepKinds(k, levels)
	return out
}

// The kinds of step stepKinds reports.
const (
	stepRoot   = iota // the root word
	stepDirect        // a direct node's entry (the directory included)
	stepMarks         // a packed node's mark word
	stepRun           // the packed node's run word the marks index
	stepWMarks        // a wide node's mark and count words
	stepWRun          // the wide node's run word
	stepList          // a list's words, up to the entry that matches
	stepKindCount
)

var stepNames = [stepKindCount]string{"root", "direct", "packed marks", "packed run", "wide marks", "wide run", "list"}

// stepKinds is steps with the kind of each step.
func (im *image) stepKinds(k key, levels int) ([][]uint64, []int) {
	var out [][]uint64
	kinds := []int{stepRoot}
	hi, lo := k.hi, k.lo
	out = append(out, []uint64{0})
	e := im.load(0)
	for range levels {
		if e&ptrFlag == 0 {
			return out, kinds
		}
		i := uint64(e&offMask) * unitWords
		s := uint(e>>strideShift) & strideMask
		switch {
		case s == wideCode:
			v := hi >> (64 - wideStride)
			hi = hi<<wideStride | lo>>(64-wideStride)
			lo <<= wideStride
			m := i + v>>5
			c := uint64(im.w[(i+8)*4+v>>5])
			x := i + wideHdr - 1 + c + uint64(bits.OnesCount32(im.load(m)&(2<<(v&31)-1)))
			out = append(out, []uint64{m, i + 8 + v>>7}, []uint64{x})
			kinds = append(kinds, stepWMarks, stepWRun)
			e = im.load(x)
		case s > packedCode:
			s -= packedCode
			v := hi >> (64 - s)
			hi = hi<<s | lo>>(64-s)
			lo <<= s
			x := i + 1 + uint64(bits.OnesCount64(im.get64(i)&(2<<v-1)))
			out = append(out, []uint64{i, i + 1}, []uint64{x})
			kinds = append(kinds, stepMarks, stepRun)
			e = im.load(x)
		case s != 0:
			i += hi >> (64 - s)
			hi = hi<<s | lo>>(64-s)
			lo <<= s
			out = append(out, []uint64{i})
			kinds = append(kinds, stepDirect)
			e = im.load(i)
		default:
			ws := []uint64{i, i + 1}
			for j := uint64(0); j < listK && j < uint64(im.load(i+1)); j++ {
				b := i + 2 + entWords*j
				ws = append(ws, b, b+1, b+2, b+3)
				rl := uint(im.load(b + 2))
				if rl-1 < 64 && (hi^im.get64(b))>>(64-rl) == 0 && im.load(b+3) != skip {
					break
				}
			}
			return append(out, ws), append(kinds, stepList)
		}
	}
	return out, kinds
}

// lru is a fully associative least-recently-used set of n lines or pages.
type lru struct {
	n int
	l *list.List
	m map[uint64]*list.Element
}

func newLRU(n int) *lru { return &lru{n: n, l: list.New(), m: map[uint64]*list.Element{}} }

// touch reports whether x was held, and holds it.
func (c *lru) touch(x uint64) bool {
	if e, ok := c.m[x]; ok {
		c.l.MoveToFront(e)
		return true
	}
	c.m[x] = c.l.PushFront(x)
	if c.l.Len() > c.n {
		b := c.l.Back()
		delete(c.m, b.Value.(uint64))
		c.l.Remove(b)
	}
	return false
}

// TestRealLines models what the bench's lookups cost in this layout:
// per lookup, the dependent steps (the root word included), the steps
// that miss a 1.5 MiB cache (what a 2 MiB L2 keeps beside the probes),
// and the 4 KiB pages that miss a 1,536-entry TLB, over a million probes
// drawn as the bench draws them, counted on the second half (warm). On
// this VM (no PMU) the five-run medians of both real tables fit roughly
// 9 ns per step below the root word plus 44 ns per missing step (IPv4:
// 2.46 steps, 0.88 missing, ~60 ns; IPv6: 5.79 and 0.32, ~65 ns), and
// layouts with fewer steps but a larger footprint (no packed nodes in
// IPv4; 8-bit direct nodes in IPv6) measured slower: docs/lpm.md. The
// limits hold today's footprint: a change that grows the misses or the
// page misses past them must be measured.
func TestRealLines(t *testing.T) {
	v4, v6 := realTables(t)
	for _, set := range []struct {
		name              string
		fam               Family
		ps                []netip.Prefix
		maxMiss, maxPages float64
	}{{"real IPv4", IPv4, v4, 0.95, 0.2}, {"real IPv6", IPv6, v6, 0.4, 0.05}} {
		tb := loadedHeapTable(t, set.fam, set.ps)
		probes := probesFrom(rand.New(rand.NewPCG(1, 2)), set.ps, 1<<20)
		m := newMissModel(len(probes))
		for pi, a := range probes {
			m.lookup(pi, tb.im.steps(keyOf(a), tb.levels))
		}
		st := tb.Stats()
		steps, miss, pages := m.perLookup()
		t.Logf("%s: %.2f dependent steps, %.2f of them missing the cache, %.2f TLB misses per lookup; %.1f MB used",
			set.name, steps, miss, pages, float64(st.BytesUsed)/1e6)
		if miss > set.maxMiss || pages > set.maxPages {
			t.Errorf("%s: %.2f missing steps and %.2f TLB misses per lookup, want at most %.2f and %.2f",
				set.name, miss, pages, set.maxMiss, set.maxPages)
		}
	}
}

// missModel replays lookups' dependent steps (the words each reads)
// through a 3 MiB cache of 64-byte lines and a 1536-entry TLB of 4 KiB
// pages, both LRU; the first half of the probes warms them.
type missModel struct {
	cache, tlb         *lru
	warm, measured     int
	steps, miss, pages int
	byKind             [stepKindCount][3]int // steps, missing, TLB misses
}

func newMissModel(probes int) *missModel {
	return &missModel{cache: newLRU(3 << 19 / 64), tlb: newLRU(1536), warm: probes / 2, measured: probes - probes/2}
}

// lookup replays probe pi's steps.
func (m *missModel) lookup(pi int, steps [][]uint64) { m.lookupKinds(pi, steps, nil) }

// lookupKinds is lookup that also counts, per kind of step (kinds[i] is
// step i's), the measured steps, those that missed the cache and the
// TLB misses.
func (m *missModel) lookupKinds(pi int, steps [][]uint64, kinds []int) {
	for si, st := range steps {
		missed, paged := false, 0
		for _, w := range st {
			if !m.cache.touch(w / 16) {
				missed = true
			}
			if !m.tlb.touch(w/1024) && pi >= m.warm {
				paged++
			}
		}
		if pi < m.warm {
			continue
		}
		m.steps++
		m.pages += paged
		if missed {
			m.miss++
		}
		if kinds != nil {
			k := &m.byKind[kinds[si]]
			k[0]++
			k[2] += paged
			if missed {
				k[1]++
			}
		}
	}
}

// perLookup is the dependent steps, the steps that missed the cache and
// the TLB misses, each per measured lookup.
func (m *missModel) perLookup() (steps, miss, pages float64) {
	n := float64(m.measured)
	return float64(m.steps) / n, float64(m.miss) / n, float64(m.pages) / n
}

// stepInsns is what each kind of step costs in BPF instructions on the
// level loop's path through it, counted in bench_bpfel.o's wolf_probe4
// (IPv4, [0]) and wolf_probe6 (IPv6, [1]) with llvm-objdump -d, an
// ld_imm64 as two: a level's head (pointer test, offset, stride) and
// tail (advance, loop bound) are 21 (IPv4) or 20 (IPv6); a direct node
// adds 10 (IPv4: no low address half to shift) or 15, a packed node 43
// or 48 (bounds check, the mask, the SWAR popcount), a wide node 51; a
// list is 25 or 26 plus 19 or 17 per entry compared (stepListEntry). The
// root's map lookup is common to every lookup and left out. Before the
// wide nodes' 32-bit mark words and the bounds checks hoisted out of the
// loop (2026-11-29): head and tail 22, direct +16, packed +54, wide +68,
// list 28 plus 21 per entry.
var stepInsns = [2][stepKindCount]int{
	{stepDirect: 31, stepMarks: 34, stepRun: 30, stepList: 25},
	{stepDirect: 35, stepMarks: 38, stepRun: 30, stepWMarks: 41, stepWRun: 30, stepList: 26},
}

// stepListEntry is what each list entry compared adds, per family.
var stepListEntry = [2]int{19, 17}

// TestRealProfile says where real-table lookups lose against the dense
// table: per kind of step, how many a lookup takes, how many of those
// miss the modelled cache (missModel) and the TLB, and the BPF
// instructions the walk executes (stepInsns), for the bench's three
// sets as it probes them (dense: random keys among a million /32s).
func TestRealProfile(t *testing.T) {
	v4, v6 := realTables(t)
	const n = 1 << 20
	dense := make([]netip.Prefix, n)
	for i := range dense {
		dense[i] = netip.PrefixFrom(denseAddr(i), 32)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	denseProbes := make([]netip.Addr, n)
	for i := range denseProbes {
		denseProbes[i] = denseAddr(rng.IntN(len(dense)))
	}
	for _, set := range []struct {
		name   string
		fam    Family
		ps     []netip.Prefix
		probes []netip.Addr
	}{
		{"dense 1M", IPv4, dense, denseProbes},
		{"real IPv4", IPv4, v4, probesFrom(rand.New(rand.NewPCG(1, 2)), v4, n)},
		{"real IPv6", IPv6, v6, probesFrom(rand.New(rand.NewPCG(1, 2)), v6, n)},
	} {
		tb := loadedHeapTable(t, set.fam, set.ps)
		m := newMissModel(len(set.probes))
		insns, listEnts := 0, 0
		for pi, a := range set.probes {
			st, kinds := tb.im.stepKinds(keyOf(a), tb.levels)
			m.lookupKinds(pi, st, kinds)
			if pi < m.warm {
				continue
			}
			fi := 0
			if set.fam == IPv6 {
				fi = 1
			}
			for si, k := range kinds {
				insns += stepInsns[fi][k]
				if k == stepList {
					e := (len(st[si]) - 2) / entWords
					insns += stepListEntry[fi] * e
					listEnts += e
				}
			}
		}
		steps, miss, pages := m.perLookup()
		mn := float64(m.measured)
		t.Logf("%s (%d prefixes, %.1f MB used, %d-bit directory): %.2f steps, %.2f missing, %.2f TLB misses, ~%.0f BPF instructions per lookup",
			set.name, len(set.ps), float64(tb.Stats().BytesUsed)/1e6, tb.s, steps, miss, pages, float64(insns)/mn)
		for k, c := range m.byKind {
			if c[0] == 0 {
				continue
			}
			t.Logf("  %-12s %.3f per lookup, %.3f missing (%.0f%%), %.3f TLB misses", stepNames[k],
				float64(c[0])/mn, float64(c[1])/mn, 100*float64(c[1])/float64(c[0]), float64(c[2])/mn)
		}
		if listEnts > 0 {
			t.Logf("  list entries compared: %.2f per lookup", float64(listEnts)/mn)
		}
	}
}

// realTables are the real IPv4 and IPv6 tables the model runs on; a
// short run, a run under the race detector (the model has no goroutines
// to race, and runs ten times slower), or a tree without them, skips.
func realTables(t *testing.T) (v4, v6 []netip.Prefix) {
	t.Helper()
	if testing.Short() {
		t.Skip("a million modelled lookups per table")
	}
	if testutil.RaceEnabled {
		t.Skip("a million modelled lookups per table, and nothing concurrent for the race detector")
	}
	all, err := realtable.Load()
	if err != nil {
		t.Skip(err)
	}
	return realtable.Split(all)
}

// dirMarksSteps rewrites a lookup's steps (stepKinds) for a directory of
// 16-byte entries that carry, beside the entry, the mark word of the
// packed node it points at: the directory step reads its entry's four
// words, in a region of their own past the image, and a packed node
// below it is one step, its run word.
func dirMarksSteps(im *image, st [][]uint64, kinds []int) ([][]uint64, []int) {
	if len(st) < 2 || kinds[1] != stepDirect {
		return st, kinds
	}
	dir := uint64(im.load(0)&offMask) * unitWords
	const far = 1 << 34
	e := far + 4*(st[1][0]-dir)
	out := [][]uint64{st[0], {e, e + 1, e + 2, e + 3}}
	ks := []int{stepRoot, stepDirect}
	rest, rk := st[2:], kinds[2:]
	if len(rk) > 0 && rk[0] == stepMarks {
		rest, rk = rest[1:], rk[1:]
	}
	return append(out, rest...), append(ks, rk...)
}

// TestRealLinesDirMarks models a directory whose 16-byte entries carry
// the mark word of the packed node below them (real IPv4, the default
// 18-bit directory: below 18 bits the directory's children are direct
// nodes), against today's 4-byte entries. It saves the mark step, but
// the miss moves to the run word (the marks and the first runs share a
// line today), and the 4 MiB directory misses the cache and the TLB
// more: 2026-11-29, 2.97 steps, 1.07 missing, 0.43 TLB misses against
// 3.46, 0.88 and 0.12. So it was not built; the test keeps the model
// and holds it to that.
func TestRealLinesDirMarks(t *testing.T) {
	v4, _ := realTables(t)
	tb := loadedHeapTable(t, IPv4, v4)
	probes := probesFrom(rand.New(rand.NewPCG(1, 2)), v4, 1<<20)
	var got [2][3]float64
	for x, marks := range []bool{false, true} {
		m := newMissModel(len(probes))
		for pi, a := range probes {
			st, kinds := tb.im.stepKinds(keyOf(a), tb.levels)
			if marks {
				st, kinds = dirMarksSteps(&tb.im, st, kinds)
			}
			m.lookupKinds(pi, st, kinds)
		}
		steps, miss, pages := m.perLookup()
		got[x] = [3]float64{steps, miss, pages}
		t.Logf("%d-bit directory, marks in it %v: %.2f steps, %.2f missing, %.2f TLB misses", tb.s, marks, steps, miss, pages)
	}
	if got[1][0] >= got[0][0] || got[1][1] <= got[0][1] || got[1][2] <= got[0][2] {
		t.Errorf("marks in the directory: %.2f steps, %.2f missing, %.2f TLB misses against %.2f, %.2f, %.2f: the model changed, look again",
			got[1][0], got[1][1], got[1][2], got[0][0], got[0][1], got[0][2])
	}
}
