package render

import (
	"strings"

	"github.com/wolf-investigator/wolf/internal/finding"
)

// checklist prints doctor's system checklist: one line per area, its
// summary wrapped under it, and the verdict at the right margin.
//
//	load       1.02 0.80 0.51 (2 CPUs); runnable 1.2 avg 3 max        ok
func (t *textWriter) checklist(cs []finding.Check) {
	if len(cs) == 0 {
		return
	}
	const areaW, verdictW = 11, 9
	width := t.o.Width - areaW - verdictW
	for _, c := range cs {
		verdict, code := "ok", "32"
		switch c.Severity {
		case finding.Critical:
			verdict, code = "CRITICAL", "1;31"
		case finding.Warning:
			verdict, code = "WARNING", "1;33"
		}
		lines := Wrap(c.Summary, width)
		if len(lines) == 0 {
			lines = []string{""}
		}
		for i, l := range lines {
			area := ""
			if i == 0 {
				area = c.Area
			}
			if i < len(lines)-1 {
				t.printf("%-*s%s\n", areaW, area, l)
				continue
			}
			pad := width - len(l) + verdictW - len(verdict)
			t.printf("%-*s%s%s%s\n", areaW, area, l, strings.Repeat(" ", max(1, pad)), t.paint(code, verdict))
		}
	}
	t.printf("\n")
}
