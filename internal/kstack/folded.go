package kstack

import (
	"strconv"
	"strings"
)

// FoldedStack is a stack in the folded format of flame graph tools
// (stackcollapse's output, read by flamegraph.pl, speedscope, inferno…):
// names outermost first, separated by ';'. The format's separators inside a
// name become '_', since a comm or a cgroup path in a synthetic frame may
// hold anything.
func FoldedStack(names []string) string {
	clean := make([]string, len(names))
	for i, n := range names {
		clean[i] = strings.Map(func(r rune) rune {
			switch r {
			case ';', '\n', '\r':
				return '_'
			}
			return r
		}, n)
	}
	return strings.Join(clean, ";")
}

// FoldedLine is one line of the folded format: the stack, a space, and
// its value (a count of samples or tasks, or nanoseconds).
func FoldedLine(names []string, value uint64) string {
	return FoldedStack(names) + " " + strconv.FormatUint(value, 10)
}
