// Stack profiles as flame graphs.

package render

import (
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/human"
)

const (
	flameW        = 1200
	flameRowH     = 17
	flameMaxNodes = 20000 // beyond this the smallest frames are left out
	flameMinRectW = 0.3   // narrower rectangles are not drawn
	flameCharW    = 6.6   // 11px monospace
)

type htmlProfile struct {
	ID      string
	Name    string
	Unit    string
	Labels  string
	Total   string // with its unit
	CPUTime string
	Stacks  int
	Omitted int
	W, H    int
	Rects   []flameRect
	Data    flameData
}

type flameRect struct {
	X, Y, W string
	TextX   string
	TextY   string
	Fill    string
	Label   string
	Title   string
}

// flameData is what the page's script zooms and searches: the merged
// tree, one column per property, nodes in depth-first order (a node's
// descendants follow it), each with its offset X within the root.
type flameData struct {
	Unit   string   `json:"unit"`
	Total  uint64   `json:"total"`
	Names  []string `json:"n"`
	Values []uint64 `json:"v"`
	X      []uint64 `json:"x"`
	Depth  []int    `json:"d"`
	Hue    []int    `json:"h"`
}

type flameNode struct {
	name     string
	value    uint64
	children map[string]*flameNode
}

func newHTMLProfile(i int, p *finding.Profile) htmlProfile {
	out := htmlProfile{ID: fmt.Sprintf("flame-%d", i+1), Name: p.Name, Unit: p.Unit, Labels: labelText(p.Labels),
		Total: valueText(p.Total(), p.Unit), Stacks: len(p.Stacks), W: flameW}
	if p.Unit == "samples" && p.PeriodNs > 0 {
		out.CPUTime = human.Number(float64(p.Total())*float64(p.PeriodNs)/1e9) + " s"
	}
	root := &flameNode{name: "all", children: map[string]*flameNode{}}
	for _, s := range p.Stacks {
		if s.Value == 0 {
			continue
		}
		root.value += s.Value
		cur := root
		for _, fr := range s.Frames {
			c := cur.children[fr]
			if c == nil {
				c = &flameNode{name: fr, children: map[string]*flameNode{}}
				cur.children[fr] = c
			}
			c.value += s.Value
			cur = c
		}
	}
	// Leave out the smallest frames when there are too many to draw:
	// a frame is never larger than its parent, so a value threshold cuts
	// whole subtrees and the tree stays a tree.
	var values []uint64
	var collect func(n *flameNode)
	collect = func(n *flameNode) {
		values = append(values, n.value)
		for _, c := range n.children {
			collect(c)
		}
	}
	collect(root)
	threshold := uint64(1)
	if len(values) > flameMaxNodes {
		sort.Slice(values, func(a, b int) bool { return values[a] > values[b] })
		threshold = values[flameMaxNodes-1] + 1
	}
	d := &out.Data
	d.Unit, d.Total = p.Unit, root.value
	var walk func(n *flameNode, x uint64, depth int)
	walk = func(n *flameNode, x uint64, depth int) {
		if n.value < threshold && depth > 0 {
			out.Omitted++
			return
		}
		d.Names = append(d.Names, n.name)
		d.Values = append(d.Values, n.value)
		d.X = append(d.X, x)
		d.Depth = append(d.Depth, depth)
		d.Hue = append(d.Hue, frameHue(n.name))
		names := make([]string, 0, len(n.children))
		for k := range n.children {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			c := n.children[k]
			walk(c, x, depth+1)
			x += c.value
		}
	}
	walk(root, 0, 0)
	if root.value == 0 {
		out.H = flameRowH
		return out
	}
	// The graph is as tall as its deepest frame wide enough to draw
	// (zooming in, the script makes room for deeper ones).
	drawnDepth := 0
	for j := range d.Names {
		if float64(d.Values[j])/float64(root.value)*flameW >= flameMinRectW {
			drawnDepth = max(drawnDepth, d.Depth[j])
		}
	}
	out.H = (drawnDepth + 1) * flameRowH
	// The server draws the whole graph, so that it shows without script;
	// the script redraws it on zoom and search.
	for j := range d.Names {
		w := float64(d.Values[j]) / float64(root.value) * flameW
		if w < flameMinRectW {
			continue
		}
		x := float64(d.X[j]) / float64(root.value) * flameW
		y := float64(out.H - (d.Depth[j]+1)*flameRowH)
		out.Rects = append(out.Rects, flameRect{
			X: f1(x), Y: f1(y), W: f1(w), TextX: f1(x + 3), TextY: f1(y + 12),
			Fill:  fmt.Sprintf("hsl(%d,75%%,62%%)", d.Hue[j]),
			Label: fitLabel(d.Names[j], w),
			Title: fmt.Sprintf("%s: %s (%.1f%%)", d.Names[j], valueText(d.Values[j], p.Unit), 100*float64(d.Values[j])/float64(root.value)),
		})
	}
	return out
}

// valueText prints a profile's value in its unit, nanoseconds as time.
// report.js's valueText prints alike when it redraws.
func valueText(v uint64, unit string) string {
	if unit == "ns" {
		return human.DurationPrecise(time.Duration(v))
	}
	return strconv.FormatUint(v, 10) + " " + unit
}

// fitLabel cuts a frame name to what a rectangle w units wide shows; the
// script does the same when it redraws.
func fitLabel(name string, w float64) string {
	n := int((w - 6) / flameCharW)
	r := []rune(name)
	switch {
	case n < 3:
		return ""
	case len(r) <= n:
		return name
	}
	return string(r[:n-1]) + "…"
}

// frameHue gives a frame a stable warm colour (red to yellow), so that the
// same function has the same colour in every graph of the report.
func frameHue(name string) int {
	h := fnv.New32a()
	h.Write([]byte(name))
	return int(h.Sum32() % 55)
}
