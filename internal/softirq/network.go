package softirq

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/human"
)

func pruneFinding(s *Snapshot, explained bool) (finding.Finding, bool) {
	if explained {
		return finding.Finding{}, false
	}
	tcp := SumDeltas(s.Netns)
	prunes := tcp["PruneCalled"] + tcp["TCPRcvCollapsed"]
	dropped := tcp["RcvPruned"] + tcp["OfoPruned"] + tcp["TCPRcvQDrop"]
	if prunes+dropped == 0 {
		return finding.Finding{}, false
	}
	ev := map[string]any{"window_s": s.Window.Seconds()}
	for _, k := range TCPCounters {
		if v, ok := tcp[k]; ok {
			ev[counterKey(k)] = v
		}
	}
	h := s.Merged(true, vecNetRX)
	ev["net_rx_max_us"] = us(time.Duration(h.Max))
	ev["net_rx_p99_us"] = us(time.Duration(h.Quantile(0.99)))
	if s.Settings.TCPRmem[2] > 0 {
		ev["tcp_rmem_max_bytes"] = s.Settings.TCPRmem[2]
	}
	where := ""
	if len(s.Netns) > 0 {
		n := s.Netns[0]
		ev["netns"], ev["netns_pid"], ev["netns_comm"] = n.Inode, n.PID, n.Comm
		where = fmt.Sprintf(" in network namespace %d (%s, pid %d)", n.Inode, n.Comm, n.PID)
	}
	f := finding.Finding{
		ID:           "softirq.tcp-prune",
		Investigator: "softirq",
		Severity:     finding.Info,
		Title:        fmt.Sprintf("TCP pruned receive queues %d times%s; NET_RX stayed under %s (max %s)", tcp["PruneCalled"], where, human.Duration(s.Threshold), human.Duration(time.Duration(h.Max))),
		Summary:      fmt.Sprintf("TcpExt counters moved in %s: PruneCalled +%d, TCPRcvCollapsed +%d. Sockets outgrew their receive buffers and TCP compacted their queues; with larger buffers each collapse takes longer.", human.Duration(s.Window), tcp["PruneCalled"], tcp["TCPRcvCollapsed"]),
		Mechanism:    collapseMechanism(s.Settings),
		Evidence:     ev,
		Remediation:  collapseRemedies(s)[1:],
		References:   []string{storyRef},
	}
	if dropped > 0 {
		f.Severity = finding.Warning
		f.Title = fmt.Sprintf("TCP dropped received packets because receive buffers were full%s (RcvPruned +%d, OfoPruned +%d, TCPRcvQDrop +%d)", where, tcp["RcvPruned"], tcp["OfoPruned"], tcp["TCPRcvQDrop"])
		f.Summary += " Collapsing did not free enough memory, so packets were dropped and the senders must retransmit them."
	}
	return f, true
}

// budgetFinding: net_rx_action ran out of budget (time_squeeze).
func budgetFinding(s *Snapshot) (finding.Finding, bool) {
	var squeeze, dropped uint64
	var cpus []string
	for _, c := range s.Softnet {
		squeeze += c.TimeSqueeze
		dropped += c.Dropped
		if c.TimeSqueeze > 0 || c.Dropped > 0 {
			cpus = append(cpus, fmt.Sprintf("cpu%d: squeezed %d, dropped %d", c.CPU, c.TimeSqueeze, c.Dropped))
		}
	}
	if squeeze == 0 && dropped == 0 {
		return finding.Finding{}, false
	}
	perS := float64(squeeze) / max(s.Window.Seconds(), 0.001)
	ev := map[string]any{
		"time_squeeze":          squeeze,
		"time_squeeze_per_s":    human.Round(perS, 2),
		"backlog_drops":         dropped,
		"per_cpu":               cpus,
		"netdev_budget":         s.Settings.NetdevBudget,
		"netdev_budget_usecs":   s.Settings.NetdevBudgetUsecs,
		"netdev_max_backlog":    s.Settings.MaxBacklog,
		"window_s":              s.Window.Seconds(),
		"devices_full_polls":    napiSummary(s.NAPI),
		"net_rx_max_us":         us(time.Duration(s.Merged(true, vecNetRX).Max)),
		"full_budget_polls_pct": human.Round(fullShare(s.NAPI), 2),
	}
	f := finding.Finding{
		ID:           "softirq.net-rx-budget",
		Investigator: "softirq",
		Severity:     finding.Info,
		Title:        fmt.Sprintf("NET_RX ran out of budget %d times (%.0f/s; netdev_budget=%d, netdev_budget_usecs=%d)", squeeze, perS, s.Settings.NetdevBudget, s.Settings.NetdevBudgetUsecs),
		Summary:      fmt.Sprintf("net_rx_action stopped with packets left %d times in %s (/proc/net/softnet_stat time_squeeze) and handed the rest to ksoftirqd.", squeeze, human.Duration(s.Window)),
		Mechanism:    "net_rx_action polls NAPI instances until it has handled net.core.netdev_budget packets or net.core.netdev_budget_usecs have passed, then re-raises itself; the rest waits, in ksoftirqd when this repeats. Frequent squeezes mean a CPU receives more than one softirq run can handle.",
		Evidence:     ev,
		Remediation: []string{
			"Spread receive work: more RSS queues (ethtool -L DEV combined N) or RPS (/sys/class/net/DEV/queues/rx-*/rps_cpus).",
			"If the CPU has room, let each run do more: sysctl -w net.core.netdev_budget=600 net.core.netdev_budget_usecs=4000 (longer runs delay everything else on that CPU).",
		},
		References: []string{"https://www.kernel.org/doc/html/latest/admin-guide/sysctl/net.html"},
	}
	if dropped > 0 {
		f.Severity = finding.Warning
		f.Title = fmt.Sprintf("Packets dropped at the CPU backlog (%d) while NET_RX ran out of budget %d times", dropped, squeeze)
		f.Summary += fmt.Sprintf(" %d packets were dropped because a CPU's input backlog was full (net.core.netdev_max_backlog=%d).", dropped, s.Settings.MaxBacklog)
		f.Remediation = append(f.Remediation, "Raise the backlog: sysctl -w net.core.netdev_max_backlog=10000, and spread RPS so one CPU's backlog fills less.")
	}
	return f, true
}

// overloadReasons are drop reasons that mean the receive path was too slow
// or too full, as opposed to packets nobody wanted.
var overloadReasons = map[string]bool{
	"CPU_BACKLOG": true, "SOCKET_RCVBUFF": true, "PROTO_MEM": true, "TCP_OFO_QUEUE_PRUNE": true,
	"TCP_OFO_DROP": true, "FULL_RING": true, "NOMEM": true, "SOCKET_BACKLOG": true, "TCP_ZEROWINDOW": true,
	"QDISC_DROP": true,
}

// dropFinding reports overload drops seen by skb:kfree_skb.
func dropFinding(s *Snapshot) (finding.Finding, bool) {
	all := map[string]int{}
	for _, m := range s.Drops {
		for r, n := range m {
			all[r] += n
		}
	}
	overload := map[string]int{}
	total := 0
	for r, n := range all {
		if overloadReasons[r] {
			overload[r] = n
			total += n
		}
	}
	if total == 0 {
		return finding.Finding{}, false
	}
	sev := finding.Info
	if total >= 100 {
		sev = finding.Warning
	}
	return finding.Finding{
		ID:           "softirq.drops",
		Investigator: "softirq",
		Severity:     sev,
		Title:        fmt.Sprintf("%d packets dropped because the receive path was full (%s)", total, topReasons(overload, 3)),
		Summary:      fmt.Sprintf("skb:kfree_skb counted %d drops for overload reasons in %s; all drops by reason: %s.", total, human.Duration(s.Window), topReasons(all, 6)),
		Mechanism:    "These reasons mean memory or queue limits on the receive path: a socket's receive buffer (SOCKET_RCVBUFF, TCP_ZEROWINDOW, TCP_OFO_*), TCP's global memory (PROTO_MEM), a CPU's input backlog (CPU_BACKLOG) or a device ring (FULL_RING).",
		Evidence: map[string]any{
			"overload_drops":     total,
			"reasons":            topReasons(all, 10),
			"drops_in_net_rx":    sumDrops(s.Drops[1]),
			"window_s":           s.Window.Seconds(),
			"tcp_rmem_max_bytes": s.Settings.TCPRmem[2],
			"netdev_max_backlog": s.Settings.MaxBacklog,
		},
		Remediation: []string{
			"See where each drop happens: perf record -e skb:kfree_skb -a -g, or dropwatch; for socket buffers, ss -tmi.",
		},
	}, true
}

func napiSummary(ns []NAPIStat) []string {
	type agg struct {
		polls, work, full uint64
	}
	by := map[string]*agg{}
	for _, n := range ns {
		a := by[n.Device]
		if a == nil {
			a = &agg{}
			by[n.Device] = a
		}
		a.polls += n.Polls
		a.work += n.Work
		a.full += n.Full
	}
	var names []string
	for d := range by {
		names = append(names, d)
	}
	sort.Slice(names, func(i, j int) bool { return by[names[i]].work > by[names[j]].work })
	var out []string
	for _, d := range names {
		a := by[d]
		out = append(out, fmt.Sprintf("%s: %d polls, %d packets, %d used the full budget", d, a.polls, a.work, a.full))
	}
	return out
}

func fullShare(ns []NAPIStat) float64 {
	var polls, full uint64
	for _, n := range ns {
		polls += n.Polls
		full += n.Full
	}
	if polls == 0 {
		return 0
	}
	return 100 * float64(full) / float64(polls)
}

func sumDrops(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func topReasons(m map[string]int, n int) string {
	type kv struct {
		k string
		v int
	}
	var all []kv
	for k, v := range m {
		all = append(all, kv{k, v})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].v != all[j].v {
			return all[i].v > all[j].v
		}
		return all[i].k < all[j].k
	})
	var parts []string
	for i := 0; i < len(all) && i < n; i++ {
		parts = append(parts, fmt.Sprintf("%s %d", all[i].k, all[i].v))
	}
	return strings.Join(parts, ", ")
}

// counterKey turns a TcpExt name into an evidence key: "TCPRcvCollapsed"
// → "tcpext_TCPRcvCollapsed" (a count over the window).
func counterKey(name string) string { return "tcpext_" + name }
