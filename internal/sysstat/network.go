// The network area: sar -n DEV,EDEV,TCP,ETCP.

package sysstat

import (
	"fmt"
	"strings"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/human"
)

func (a *analysis) network() {
	if a.w.Last.Net == nil && len(a.w.Last.SNMP) == 0 {
		a.unavailable("network", "/proc/net/dev and /proc/net/snmp unreadable")
		return
	}
	prev := map[string]NetDev{}
	for _, d := range a.w.First.Net {
		prev[d.Name] = d
	}
	var rxKB, txKB, errs, drops float64
	var bad []map[string]any
	var badSubjects []string
	for _, b := range a.w.Last.Net {
		f, ok := prev[b.Name]
		if !ok {
			continue
		}
		if b.Name != "lo" {
			rxKB += sub(b.RxBytes, f.RxBytes) / 1024
			txKB += sub(b.TxBytes, f.TxBytes) / 1024
		}
		e := map[string]float64{
			"rx_errs": sub(b.RxErrs, f.RxErrs), "tx_errs": sub(b.TxErrs, f.TxErrs),
			"rx_fifo": sub(b.RxFifo, f.RxFifo), "tx_fifo": sub(b.TxFifo, f.TxFifo),
			"rx_frame": sub(b.RxFrame, f.RxFrame), "tx_carrier": sub(b.TxCarrier, f.TxCarrier), "tx_colls": sub(b.TxColls, f.TxColls),
		}
		d := sub(b.RxDrop, f.RxDrop) + sub(b.TxDrop, f.TxDrop)
		var ne float64
		for _, x := range e {
			ne += x
		}
		errs += ne
		drops += d
		if ne > 0 || d > 0 {
			m := map[string]any{"interface": b.Name, "rx_drop": sub(b.RxDrop, f.RxDrop), "tx_drop": sub(b.TxDrop, f.TxDrop)}
			for k, x := range e {
				m[k] = x
			}
			bad = append(bad, m)
			badSubjects = append(badSubjects, fmt.Sprintf("%s: %d errors, %d drops", b.Name, int64(ne), int64(d)))
		}
	}
	s0, s1 := a.w.First.SNMP, a.w.Last.SNMP
	d := func(k string) float64 {
		x0, ok0 := s0[k]
		x1, ok1 := s1[k]
		if !ok0 || !ok1 || x1 < x0 {
			return 0
		}
		return float64(x1 - x0)
	}
	outSegs, retrans := d("Tcp.OutSegs"), d("Tcp.RetransSegs")
	retransPct := 0.0
	if outSegs > 0 {
		retransPct = 100 * retrans / outSegs
	}
	listen := d("TcpExt.ListenOverflows") + d("TcpExt.ListenDrops")
	backlog := d("TcpExt.TCPBacklogDrop")
	collapsed := d("TcpExt.TCPRcvCollapsed")
	pruned := d("TcpExt.PruneCalled")
	udpRcvbuf := d("Udp.RcvbufErrors") + d("Udp6.RcvbufErrors")
	v := map[string]any{
		"rx_kb_per_s": human.Round(a.rate(rxKB), 1), "tx_kb_per_s": human.Round(a.rate(txKB), 1),
		"if_errors": int64(errs), "if_drops": int64(drops), "interfaces_with_errors": bad,
		"tcp_out_segs_per_s": human.Round(a.rate(outSegs), 1), "tcp_retrans_per_s": human.Round(a.rate(retrans), 2), "tcp_retrans_pct": human.Round(retransPct, 2),
		"listen_overflows_drops": int64(listen), "tcp_backlog_drops": int64(backlog),
		"tcp_rcv_collapsed": int64(collapsed), "tcp_prune_called": int64(pruned), "udp_rcvbuf_errors": int64(udpRcvbuf),
	}
	if bad == nil {
		v["interfaces_with_errors"] = []map[string]any{}
	}
	summary := fmt.Sprintf("rx %s tx %s kB/s, errors %d drops %d, tcp retrans %s/s (%s)",
		human.Number(a.rate(rxKB)), human.Number(a.rate(txKB)), int64(errs), int64(drops), human.Number(a.rate(retrans)), human.Percent(retransPct))
	for _, c := range []struct {
		n    float64
		what string
	}{{listen, "listen drops"}, {backlog, "backlog drops"}, {collapsed + pruned, "rcv collapses"}, {udpRcvbuf, "udp rcvbuf errors"}} {
		if c.n > 0 {
			summary += fmt.Sprintf(", %s %d", c.what, int64(c.n))
		}
	}
	var fs []finding.Finding
	if errs > 0 || a.rate(drops) >= netDropsWarnPerS {
		fs = append(fs, finding.Finding{
			ID:        "system.net-errors",
			Severity:  finding.Warning,
			Title:     fmt.Sprintf("Network interfaces: %d errors, %d drops in %.0f s", int64(errs), int64(drops), a.dt),
			Summary:   strings.Join(badSubjects, "; ") + ".",
			Mechanism: "Interface errors (CRC, frame, FIFO overruns, carrier losses) are lost packets the sender must retransmit; drops are packets the driver or the stack had no room for. Either shows up as latency and retransmits.",
			Evidence:  map[string]any{"if_errors": int64(errs), "if_drops": int64(drops), "drops_per_s": human.Round(a.rate(drops), 1), "interfaces": bad},
			Remediation: []string{
				"ip -s -s link; ethtool -S IFACE: which counter grows",
				"rx fifo/drops: larger rings (ethtool -G), spread receive (RSS/RPS); wolf softirq if NET_RX is slow",
			},
		})
	}
	if a.rate(retrans) >= tcpRetransWarnPerS && retransPct >= tcpRetransWarnPct {
		fs = append(fs, finding.Finding{
			ID:          "system.tcp-retransmits",
			Severity:    finding.Warning,
			Title:       fmt.Sprintf("TCP retransmitting %s segments/s (%s of sent)", human.Number(a.rate(retrans)), human.Percent(retransPct)),
			Summary:     "Segments were lost or acknowledged late: each retransmission costs the flow at least a round trip, and timeouts cost 200 ms or more.",
			Mechanism:   "TCP retransmits when duplicate ACKs or a timeout say a segment was lost. Loss comes from the network, from drops on either host, or from receivers too slow to ACK.",
			Evidence:    map[string]any{"tcp_retrans_per_s": human.Round(a.rate(retrans), 2), "tcp_retrans_pct": human.Round(retransPct, 2), "tcp_out_segs_per_s": human.Round(a.rate(outSegs), 1)},
			Remediation: []string{"ss -ti: which connections retransmit (retrans:, rto:)", "check interface errors and drops on both ends"},
		})
	}
	if listen > 0 {
		fs = append(fs, finding.Finding{
			ID:          "system.tcp-listen-drops",
			Severity:    finding.Warning,
			Title:       fmt.Sprintf("%d connection attempts dropped at a full listen queue", int64(listen)),
			Summary:     "A listening socket's accept queue was full: new connections were dropped and their clients wait for a SYN retransmit (1 s, then 3 s, …).",
			Mechanism:   "Completed connections wait in the accept queue until the application calls accept(). When it is full (backlog, capped by net.core.somaxconn) the kernel drops the handshake.",
			Evidence:    map[string]any{"listen_overflows_drops": int64(listen)},
			Remediation: []string{"ss -ltn: Recv-Q against Send-Q (the backlog) per listener", "accept faster (more acceptor threads) or raise the backlog and net.core.somaxconn"},
		})
	}
	if backlog > 0 {
		fs = append(fs, finding.Finding{
			ID:          "system.tcp-backlog-drops",
			Severity:    finding.Warning,
			Title:       fmt.Sprintf("%d TCP segments dropped at a full socket backlog", int64(backlog)),
			Summary:     "Segments arrived while the application held the socket lock and its backlog was full; they were dropped and will be retransmitted.",
			Mechanism:   "While a task owns a socket, softirq queues incoming segments on its backlog, bounded by the receive and send buffers. A task holding the lock long (or tiny buffers) makes it overflow.",
			Evidence:    map[string]any{"tcp_backlog_drops": int64(backlog)},
			Remediation: []string{"raise net.ipv4.tcp_rmem / the socket's SO_RCVBUF", "wolf softirq --duration 10s"},
		})
	}
	if a.rate(collapsed+pruned) >= tcpCollapseWarnPerS {
		fs = append(fs, finding.Finding{
			ID:          "system.tcp-collapse",
			Severity:    finding.Warning,
			Title:       fmt.Sprintf("TCP receive queues collapsed or pruned %s times/s", human.Number(a.rate(collapsed+pruned))),
			Summary:     "Sockets ran out of receive buffer and the kernel copied their queued data into compact buffers, in softirq context.",
			Mechanism:   "When a socket's queued data overruns its rcvbuf, tcp_prune_queue collapses the queue by copying every skb. On a long queue that copy stalls NET_RX processing for milliseconds (Cloudflare's \"The story of one latency spike\": 23 ms).",
			Evidence:    map[string]any{"tcp_rcv_collapsed": int64(collapsed), "tcp_prune_called": int64(pruned)},
			Remediation: []string{"wolf softirq --duration 10s: NET_RX stall lengths and their cause", "read faster, or raise tcp_rmem so the queue fits; check tcp_adv_win_scale"},
		})
	}
	if udpRcvbuf > 0 {
		fs = append(fs, finding.Finding{
			ID:          "system.udp-drops",
			Severity:    finding.Warning,
			Title:       fmt.Sprintf("%d UDP datagrams dropped at full receive buffers", int64(udpRcvbuf)),
			Summary:     "A UDP socket's receive buffer was full, so arriving datagrams were dropped: the application reads too slowly for its buffer.",
			Mechanism:   "UDP has no flow control: a datagram that does not fit in the socket's rcvbuf is dropped and counted in RcvbufErrors.",
			Evidence:    map[string]any{"udp_rcvbuf_errors": int64(udpRcvbuf)},
			Remediation: []string{"ss -uamn: which socket's Recv-Q is full (drops in skmem d)", "raise SO_RCVBUF / net.core.rmem_max, or read faster"},
		})
	}
	a.check("network", summary, v, fs...)
}
