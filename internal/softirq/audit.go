package softirq

import (
	"context"
	"fmt"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/human"
	"github.com/wolf-investigator/wolf/internal/investigator"
	"github.com/wolf-investigator/wolf/internal/probekit"
	"github.com/wolf-investigator/wolf/internal/sysctl"
)

// RecommendedRmemMax is the tcp_rmem maximum Cloudflare settled on: a compromise
// between collapse time and throughput on long fat paths.
const RecommendedRmemMax = 4 << 20

// Requirements implements investigator.Requirer: the attach table's, and
// what the programs and --func use.
func (*Investigator) Requirements() []investigator.Requirement {
	reqs := []investigator.Requirement{
		{Feature: "raw_tracepoint", Why: "attach to the softirq, NAPI and skb tracepoints"},
		{Feature: "ringbuf", Why: "every run above the threshold, with CPU, vector, duration and time"},
	}
	reqs = append(reqs, probekit.Requirements(attachTable(DefaultSampleHz))...)
	return append(reqs,
		investigator.Requirement{Feature: "uprobes", Why: "--func BINARY:SYMBOL: latency of a user-space function", Optional: true},
		investigator.Requirement{Feature: "kprobes", Why: "--func NAME: latency of a kernel function (fentry is not used)", Optional: true},
	)
}

// Audit implements investigator.Auditor: receive-buffer and budget
// settings, read the way "The story of one latency spike" discusses them.
func (*Investigator) Audit(ctx context.Context) []finding.Finding {
	return auditSettings(ReadSettings(sysctl.ReadInt, sysctl.Read))
}

func auditSettings(s Settings) []finding.Finding {
	var out []finding.Finding
	if max := s.TCPRmem[2]; max > RecommendedRmemMax {
		out = append(out, finding.Finding{
			ID: "audit.tcp-rmem", Investigator: "audit", Severity: finding.Info,
			Title:     fmt.Sprintf("TCP receive buffers may grow to %s (net.ipv4.tcp_rmem max); collapsing a full one stalls NET_RX for milliseconds", human.Bytes(max)),
			Summary:   fmt.Sprintf("net.ipv4.tcp_rmem = %d %d %d. A socket with a slow reader and small segments fills its buffer mostly with sk_buff overhead; TCP then collapses the whole queue in softirq context. Cloudflare measured 23 ms net_rx_action runs at a 32 MiB max and settled on 4 MiB.", s.TCPRmem[0], s.TCPRmem[1], max),
			Mechanism: "Receive-buffer accounting counts each queued sk_buff's full size, not just its payload. When the queue outgrows the buffer, tcp_prune_queue calls tcp_collapse to copy the queued segments into compact buffers, all inside NET_RX: the bigger the buffer, the longer the copy.",
			Evidence:  map[string]any{"tcp_rmem_min_bytes": s.TCPRmem[0], "tcp_rmem_default_bytes": s.TCPRmem[1], "tcp_rmem_max_bytes": max, "recommended_rmem_max_bytes": RecommendedRmemMax},
			Remediation: []string{
				fmt.Sprintf("If wolf softirq shows NET_RX stalls with TCP collapse: sysctl -w net.ipv4.tcp_rmem='%d %d %d'. Large buffers help throughput on long fat paths; that is the trade-off.", s.TCPRmem[0], min(s.TCPRmem[1], RecommendedRmemMax), RecommendedRmemMax),
			},
			References: []string{storyRef},
		})
	}
	if s.NetdevBudgetUsecs > 10000 || s.NetdevBudget > 1000 {
		out = append(out, finding.Finding{
			ID: "audit.netdev-budget", Investigator: "audit", Severity: finding.Info,
			Title:       fmt.Sprintf("One NET_RX run may take %d packets or %s (net.core.netdev_budget, netdev_budget_usecs)", s.NetdevBudget, human.Duration(timeUS(s.NetdevBudgetUsecs))),
			Summary:     "A large budget lets net_rx_action keep a CPU longer before it yields to other softirqs and tasks; it raises throughput under load at the cost of latency for everything else on that CPU.",
			Evidence:    map[string]any{"netdev_budget": s.NetdevBudget, "netdev_budget_usecs": s.NetdevBudgetUsecs, "dev_weight": s.DevWeight},
			Remediation: []string{"The kernel defaults are netdev_budget=300 and netdev_budget_usecs=2 jiffies (2000 at HZ=1000, 8000 at HZ=250)."},
		})
	}
	return out
}

func timeUS(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
