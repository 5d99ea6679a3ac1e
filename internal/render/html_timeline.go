// Timelines (a task's CPU after each migration, a rate over time) as SVG step charts.

package render

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/human"
)

type htmlTimeline struct {
	Name, Unit, Labels string
	Events             int
	Dropped            uint64
	W, H               int
	Path               string
	Points             []svgPoint
	XTicks, YTicks     []svgTick
	PlotBottom         string
	PlotLeft           string
	PlotRight          string
}

type svgPoint struct {
	X, Y   string
	LabelX string
	LabelY string
	Label  string // drawn next to the point when the chart is not crowded
	Title  string
}

const (
	tlW       = 900
	tlLeft    = 56
	tlRight   = 16
	tlTop     = 16
	tlBottom  = 36
	tlRowMin  = 18 // px per distinct value, at least
	tlMaxText = 40 // label points only when there are this few
	tlMaxDots = 2000
)

// newHTMLTimeline draws a step chart: the subject's value (its CPU) from
// each event on, over the run's seconds.
func newHTMLTimeline(tl *finding.Timeline, durationS float64) htmlTimeline {
	out := htmlTimeline{Name: tl.Name, Unit: tl.Unit, Labels: labelText(tl.Labels), Events: len(tl.Events), Dropped: tl.Dropped, W: tlW}
	if len(tl.Events) == 0 {
		out.H = tlTop + tlBottom
		return out
	}
	evs := append([]finding.TimelineEvent(nil), tl.Events...)
	sort.SliceStable(evs, func(a, b int) bool { return evs[a].AtS < evs[b].AtS })
	lo, hi := evs[0].Value, evs[0].Value
	end := durationS
	for _, e := range evs {
		lo, hi = math.Min(lo, e.Value), math.Max(hi, e.Value)
		end = math.Max(end, e.AtS)
	}
	if end <= 0 {
		end = 1
	}
	if tl.Unit == "cpu" {
		lo = math.Min(lo, 0)
	}
	span := hi - lo
	if span == 0 {
		span = 1
	}
	rows := math.Min(span+1, 64)
	plotH := math.Max(120, rows*tlRowMin)
	out.H = int(plotH) + tlTop + tlBottom
	plotW := float64(tlW - tlLeft - tlRight)
	xOf := func(s float64) float64 { return tlLeft + plotW*s/end }
	yOf := func(v float64) float64 { return tlTop + plotH - plotH*(v-lo)/span }
	var p strings.Builder
	fmt.Fprintf(&p, "M%s %s", f1(xOf(evs[0].AtS)), f1(yOf(evs[0].Value)))
	for _, e := range evs[1:] {
		fmt.Fprintf(&p, "H%sV%s", f1(xOf(e.AtS)), f1(yOf(e.Value)))
	}
	fmt.Fprintf(&p, "H%s", f1(xOf(end)))
	out.Path = p.String()
	for i, e := range evs {
		if i == tlMaxDots {
			break
		}
		pt := svgPoint{X: f1(xOf(e.AtS)), Y: f1(yOf(e.Value)), LabelX: f1(xOf(e.AtS) + 4), LabelY: f1(yOf(e.Value) - 4),
			Title: fmt.Sprintf("%s s: %s %s", strconv.FormatFloat(e.AtS, 'f', 3, 64), human.Number(e.Value), tl.Unit)}
		if e.Label != "" {
			pt.Title += " (" + e.Label + ")"
		}
		if len(evs) <= tlMaxText {
			pt.Label = human.Number(e.Value)
			if e.Label != "" {
				pt.Label += " " + e.Label
			}
		}
		out.Points = append(out.Points, pt)
	}
	out.PlotBottom = f1(tlTop + plotH)
	out.PlotLeft = f1(tlLeft)
	out.PlotRight = f1(float64(tlW - tlRight))
	step := niceStep(end, 8)
	for s := 0.0; s <= end+1e-9; s += step {
		out.XTicks = append(out.XTicks, svgTick{Pos: f1(xOf(s)), Label: human.Number(s)})
	}
	ystep := math.Max(1, niceStep(span, 8))
	for v := math.Ceil(lo/ystep) * ystep; v <= hi+1e-9; v += ystep {
		out.YTicks = append(out.YTicks, svgTick{Pos: f1(yOf(v)), Label: human.Number(v)})
	}
	return out
}

// niceStep is a round tick step (1, 2 or 5 times a power of ten) giving at
// most n ticks over span.
func niceStep(span float64, n int) float64 {
	if span <= 0 {
		return 1
	}
	raw := span / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}
