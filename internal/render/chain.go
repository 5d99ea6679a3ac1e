package render

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/wolf-investigator/wolf/internal/finding"
)

// htmlDiagnosis is one diagnosis for the page: its chain drawn as boxes
// (the victims on top, the root at the bottom) joined by arrows named by
// their relation, the hops in words, and the findings it explains.
type htmlDiagnosis struct {
	*finding.Diagnosis
	Anchor   string
	Sev      string
	Chain    chainSVG
	Hops     []htmlHop
	Findings []htmlFinding // the findings it explains, folded under it
	Refs     []htmlRef
}

type htmlHop struct {
	N         int
	Relation  string
	Text      string
	Mechanism string
	Likely    bool
	Evidence  *evNode
}

// chainSVG is the chain's drawing: positioned boxes and arrows.
type chainSVG struct {
	W, H  int
	Nodes []chainNode
	Edges []chainEdge
}

type chainNode struct {
	X, Y, W, H   int
	Role         string
	Line1, Line2 string
	Title        string // the whole text, as a tooltip
	Root         bool
}

type chainEdge struct {
	X1, Y1, X2, Y2 int
	LX, LY         int // where the label goes
	Label          string
	Likely         bool
}

const (
	nodeW, nodeH = 230, 44
	gapX, gapY   = 18, 46
	chainMargin  = 10
	maxPerLevel  = 4
)

// subjectKey identifies a subject within one chain.
func subjectKey(s finding.Subject) string {
	return fmt.Sprintf("%s|%d|%d|%s|%s|%s", s.Role, s.PID, s.TID, s.Lock, s.Cgroup, s.Comm)
}

func subjectLines(s finding.Subject) (string, string) {
	var l1 string
	switch {
	case s.Role == finding.RoleLock:
		l1 = s.Lock
	case s.Role == finding.RoleCgroup && s.Label != "":
		l1 = s.Label
	case s.Role == finding.RoleCgroup:
		l1 = "cgroup " + s.Cgroup
	case s.PID != 0 && s.TID != 0 && s.TID != s.PID:
		l1 = fmt.Sprintf("%s (pid %d, tid %d)", s.Comm, s.PID, s.TID)
	case s.PID != 0:
		l1 = fmt.Sprintf("%s (pid %d)", s.Comm, s.PID)
	default:
		l1 = s.Comm
	}
	l2 := s.Role
	if s.Detail != "" {
		l2 = s.Detail
	}
	return l1, l2
}

// clip shortens a label to what a box holds.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// newChainSVG lays the chain out by depth: a hop's target sits one level
// below its source; the victims, which nothing leads to, are the top row.
func newChainSVG(d *finding.Diagnosis) chainSVG {
	level := map[string]int{}
	var order []string
	subj := map[string]finding.Subject{}
	add := func(s finding.Subject) string {
		k := subjectKey(s)
		if _, ok := subj[k]; !ok {
			subj[k] = s
			order = append(order, k)
		}
		return k
	}
	type edge struct {
		from, to string
		rel      string
		likely   bool
	}
	var edges []edge
	for _, h := range d.Chain {
		f, t := add(h.From), add(h.To)
		edges = append(edges, edge{f, t, string(h.Relation), h.Likely})
	}
	// Longest path from a source: hops run victims to root, so a few
	// relaxation passes settle it.
	for range len(order) {
		changed := false
		for _, e := range edges {
			if level[e.to] < level[e.from]+1 {
				level[e.to] = level[e.from] + 1
				changed = true
			}
		}
		if !changed {
			break
		}
	}
	rows := map[int][]string{}
	maxLevel := 0
	for _, k := range order {
		l := level[k]
		if len(rows[l]) >= maxPerLevel && l == 0 {
			continue // more victims than fit: the hops list has them all
		}
		rows[l] = append(rows[l], k)
		maxLevel = max(maxLevel, l)
	}
	widest := 1
	for _, r := range rows {
		widest = max(widest, len(r))
	}
	c := chainSVG{W: 2*chainMargin + widest*nodeW + (widest-1)*gapX, H: 2*chainMargin + (maxLevel+1)*nodeH + maxLevel*gapY}
	pos := map[string]chainNode{}
	rootKey := subjectKey(d.Root)
	for l := 0; l <= maxLevel; l++ {
		r := rows[l]
		rowW := len(r)*nodeW + (len(r)-1)*gapX
		x0 := (c.W - rowW) / 2
		for i, k := range r {
			s := subj[k]
			l1, l2 := subjectLines(s)
			n := chainNode{X: x0 + i*(nodeW+gapX), Y: chainMargin + l*(nodeH+gapY), W: nodeW, H: nodeH, Role: s.Role,
				Line1: clip(l1, 30), Line2: clip(l2, 36), Title: l1 + ": " + l2, Root: k == rootKey}
			pos[k] = n
			c.Nodes = append(c.Nodes, n)
		}
	}
	for _, e := range edges {
		a, okA := pos[e.from]
		b, okB := pos[e.to]
		if !okA || !okB {
			continue
		}
		ce := chainEdge{X1: a.X + a.W/2, Y1: a.Y + a.H, X2: b.X + b.W/2, Y2: b.Y, Label: strings.ReplaceAll(e.rel, "_", " "), Likely: e.likely}
		ce.LX, ce.LY = (ce.X1+ce.X2)/2+4, (ce.Y1+ce.Y2)/2+4
		c.Edges = append(c.Edges, ce)
	}
	return c
}

func newHTMLDiagnosis(i int, d *finding.Diagnosis, folded []htmlFinding) htmlDiagnosis {
	h := htmlDiagnosis{Diagnosis: d, Anchor: "diagnosis-" + strconv.Itoa(i+1), Sev: d.Severity.String(), Chain: newChainSVG(d), Findings: folded}
	for j, hop := range d.Chain {
		h.Hops = append(h.Hops, htmlHop{N: j + 1, Relation: strings.ReplaceAll(string(hop.Relation), "_", " "), Text: hop.Text,
			Mechanism: hop.Mechanism, Likely: hop.Likely, Evidence: evidenceNode(hop.Evidence)})
	}
	for _, ref := range d.References {
		hr := htmlRef{Text: ref}
		if strings.HasPrefix(ref, "https://") || strings.HasPrefix(ref, "http://") {
			hr.URL = ref
		}
		h.Refs = append(h.Refs, hr)
	}
	return h
}
