package softirq

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/wolf-investigator/wolf/internal/human"
	"github.com/wolf-investigator/wolf/internal/kstack"
)

type Stack struct {
	Frames []string // innermost first, "func+0x1f"
	Count  uint64
}

// Funcs are the frames' function names, innermost first.
func (s Stack) Funcs() []string {
	out := make([]string, len(s.Frames))
	for i, f := range s.Frames {
		out[i] = kstack.Func(f)
	}
	return out
}

// Folded is the stack as flame-graph tools fold it: outermost first, ';'
// between functions, then the count.
func (s Stack) Folded() string {
	f := s.Funcs()
	slices.Reverse(f)
	return kstack.FoldedLine(f, s.Count)
}

const (
	causeCollapse  = "tcp-collapse"
	causeNetfilter = "netfilter"
	causeUnknown   = "unknown"
)

// collapseFuncs are the functions TCP prunes a receive queue in.
var collapseFuncs = map[string]bool{
	"tcp_collapse": true, "tcp_collapse_ofo_queue": true, "tcp_prune_queue": true,
	"tcp_prune_ofo_queue": true, "tcp_collapse_one": true,
}

var netfilterFuncs = map[string]bool{
	"nf_hook_slow": true, "nft_do_chain": true, "ipt_do_table": true, "ip6t_do_table": true,
	"nf_conntrack_in": true,
}

// attribution says where sampled NET_RX time went.
type attribution struct {
	Source  string // "stall" (samples in runs over the threshold) or "net_rx"
	Samples uint64
	// Share of samples with a collapse or netfilter function on the stack.
	Collapse, Netfilter float64
	Self                []funcShare // innermost functions, most sampled first
	Top                 *Stack
	Folded              []string
}

type funcShare struct {
	Func  string
	Share float64
}

func attribute(stacks []Stack, source string) attribution {
	a := attribution{Source: source}
	var collapse, netfilter uint64
	self := map[string]uint64{}
	for i := range stacks {
		st := &stacks[i]
		a.Samples += st.Count
		fs := st.Funcs()
		if len(fs) > 0 {
			self[fs[0]] += st.Count
		}
		hasC, hasN := false, false
		for _, f := range fs {
			hasC = hasC || collapseFuncs[f]
			hasN = hasN || netfilterFuncs[f]
		}
		if hasC {
			collapse += st.Count
		}
		if hasN {
			netfilter += st.Count
		}
		if a.Top == nil || st.Count > a.Top.Count {
			a.Top = st
		}
	}
	if a.Samples == 0 {
		return a
	}
	a.Collapse = float64(collapse) / float64(a.Samples)
	a.Netfilter = float64(netfilter) / float64(a.Samples)
	for f, n := range self {
		a.Self = append(a.Self, funcShare{f, float64(n) / float64(a.Samples)})
	}
	sort.Slice(a.Self, func(i, j int) bool {
		if a.Self[i].Share != a.Self[j].Share {
			return a.Self[i].Share > a.Self[j].Share
		}
		return a.Self[i].Func < a.Self[j].Func
	})
	sorted := append([]Stack(nil), stacks...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Count > sorted[j].Count })
	for i := 0; i < len(sorted) && i < 5; i++ {
		a.Folded = append(a.Folded, sorted[i].Folded())
	}
	return a
}

func (a attribution) selfSummary(n int) string {
	var parts []string
	for i := 0; i < len(a.Self) && i < n; i++ {
		parts = append(parts, fmt.Sprintf("%s %s", a.Self[i].Func, human.Percent(100*a.Self[i].Share)))
	}
	return strings.Join(parts, ", ")
}
