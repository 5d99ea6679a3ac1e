package render

import (
	"fmt"
	"io"
	"strings"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/human"
)

// Log2Histogram draws a log2 histogram the way SystemTap's @hist_log
// prints one: a row per power of two, a bar, the count.
func Log2Histogram(w io.Writer, h finding.Histogram) {
	var labels []string
	for _, k := range []string{"vector", "cpu", "func"} {
		if v, ok := h.Labels[k]; ok {
			labels = append(labels, k+"="+v)
		}
	}
	fmt.Fprintf(w, "\n%s {%s}: count %d, sum %.0f %s, max %.1f %s\n", h.Name, strings.Join(labels, ","), h.Count, h.Sum, h.Unit, h.Max, h.Unit)
	if len(h.Buckets) == 0 {
		return
	}
	counts := make([]uint64, len(h.Buckets))
	var prev, top uint64
	for i, b := range h.Buckets {
		counts[i] = b.Count - prev
		prev = b.Count
		top = max(top, counts[i])
	}
	const width = 50
	fmt.Fprintf(w, "%14s |%s count\n", "<= "+h.Unit, strings.Repeat("-", width))
	for i, b := range h.Buckets {
		bar := 0
		if top > 0 {
			bar = int((counts[i]*width + top - 1) / top)
		}
		fmt.Fprintf(w, "%14s |%-*s %d\n", human.Number(b.LE), width, strings.Repeat("@", bar), counts[i])
	}
}
