// Histograms as SVG bar charts.

package render

import (
	"fmt"
	"math"
	"strconv"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/human"
)

type htmlHist struct {
	Name, Unit, Labels string
	Count              uint64
	Sum, Mean, Max     string
	P50, P99           string
	W, H               int
	Bars               []svgBar
	YTicks             []svgTick
	Empty              bool
}

type svgBar struct {
	X, Y, W, H string
	TextX      string
	LabelY     string
	Label      string // the bucket's upper bound, on every few bars
	Title      string
}

type svgTick struct {
	Pos   string
	Label string
}

const (
	histW      = 760
	histH      = 220
	histLeft   = 56
	histBottom = 40
	histTop    = 16
)

// newHTMLHist draws a histogram as bars, one per bucket. Buckets in the
// report are cumulative (Prometheus' le): each bar is the difference.
func newHTMLHist(h *finding.Histogram) htmlHist {
	out := htmlHist{Name: h.Name, Unit: h.Unit, Labels: labelText(h.Labels), Count: h.Count,
		Sum: human.Number(h.Sum), Max: human.Number(h.Max), W: histW, H: histH}
	if h.Count > 0 {
		out.Mean = human.Number(h.Sum / float64(h.Count))
		out.P50 = quantileLE(h, 0.5)
		out.P99 = quantileLE(h, 0.99)
	}
	type bucket struct {
		le    float64
		count uint64
	}
	var bs []bucket
	var prev uint64
	for _, b := range h.Buckets {
		c := uint64(0)
		if b.Count > prev {
			c = b.Count - prev
		}
		prev = max(prev, b.Count)
		bs = append(bs, bucket{b.LE, c})
	}
	for len(bs) > 0 && bs[0].count == 0 { // the empty low end says nothing
		bs = bs[1:]
	}
	for len(bs) > 0 && bs[len(bs)-1].count == 0 {
		bs = bs[:len(bs)-1]
	}
	if len(bs) == 0 {
		out.Empty = true
		return out
	}
	var top uint64
	for _, b := range bs {
		top = max(top, b.count)
	}
	plotW := float64(histW - histLeft - 8)
	plotH := float64(histH - histTop - histBottom)
	slot := plotW / float64(len(bs))
	// Label every bar when there is room, else every few (the title of
	// each bar still tells its bounds).
	every := int(math.Ceil(36 / slot))
	for i, b := range bs {
		bh := plotH * float64(b.count) / float64(top)
		if b.count > 0 && bh < 1 {
			bh = 1
		}
		x := float64(histLeft) + float64(i)*slot
		y := float64(histTop) + plotH - bh
		lo := "0"
		if i > 0 {
			lo = human.Number(bs[i-1].le)
		} else if j := bucketIndex(h, b.le); j > 0 {
			lo = human.Number(h.Buckets[j-1].LE)
		}
		label := ""
		if i%every == 0 {
			label = leText(b.le)
		}
		out.Bars = append(out.Bars, svgBar{
			X: f1(x + 1), Y: f1(y), W: f1(math.Max(slot-2, 1)), H: f1(bh),
			TextX: f1(x + slot/2), LabelY: f1(float64(histH - histBottom + 14)),
			Label: label,
			Title: fmt.Sprintf("%s < v ≤ %s %s: %d", lo, leText(b.le), h.Unit, b.count),
		})
	}
	for _, v := range []uint64{0, top / 2, top} {
		y := float64(histTop) + plotH - plotH*float64(v)/float64(top)
		out.YTicks = append(out.YTicks, svgTick{Pos: f1(y), Label: strconv.FormatUint(v, 10)})
	}
	return out
}

func bucketIndex(h *finding.Histogram, le float64) int {
	for i, b := range h.Buckets {
		if b.LE == le {
			return i
		}
	}
	return -1
}

// leText prints a bucket bound compactly (1023 → 1023, 1048575 → 1M).
func leText(le float64) string {
	switch {
	case math.IsInf(le, 1):
		return "+Inf"
	case le >= 1e4:
		return human.Count(uint64(le))
	}
	return human.Number(le)
}

// quantileLE is an upper estimate of a quantile: the bound of the first
// bucket whose cumulative count reaches it.
func quantileLE(h *finding.Histogram, q float64) string {
	want := uint64(math.Ceil(q * float64(h.Count)))
	for _, b := range h.Buckets {
		if b.Count >= want {
			return human.Number(math.Min(b.LE, h.Max))
		}
	}
	return human.Number(h.Max)
}
