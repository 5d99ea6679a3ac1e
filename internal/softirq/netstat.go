package softirq

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// TCPCounters are the TcpExt counters that tell a receive queue was
// pruned or collapsed (include/uapi/linux/snmp.h), in the order evidence
// lists them.
var TCPCounters = []string{"PruneCalled", "TCPRcvCollapsed", "RcvPruned", "OfoPruned", "TCPRcvQDrop", "TCPOFODrop", "TCPBacklogDrop", "TCPZeroWindowDrop"}

// ParseNetstat reads /proc/net/netstat (or /proc/net/snmp): pairs of lines,
// a header "TcpExt: Name Name …" then "TcpExt: 1 2 …". It returns
// "TcpExt.Name" → value. Malformed pairs are skipped.
func ParseNetstat(b []byte) map[string]int64 {
	out := map[string]int64{}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for i := 0; i+1 < len(lines); i += 2 {
		names, values := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(names) == 0 || len(names) != len(values) || names[0] != values[0] {
			continue
		}
		prefix := strings.TrimSuffix(names[0], ":")
		for j := 1; j < len(names); j++ {
			v, err := strconv.ParseInt(values[j], 10, 64)
			if err != nil {
				continue
			}
			out[prefix+"."+names[j]] = v
		}
	}
	return out
}

// Netns is one network namespace's TcpExt counters, read through a task in it.
type Netns struct {
	Inode   uint64
	PID     int // a process in the namespace (thread group id)
	TID     int // the thread the counters were read through
	Comm    string
	Counter map[string]int64
}

// NetnsDelta is how one namespace's counters moved during the window.
type NetnsDelta struct {
	Inode uint64           `json:"netns"`
	PID   int              `json:"pid"`
	Comm  string           `json:"comm"`
	Delta map[string]int64 `json:"delta"` // only counters that moved
}

// netnsScanner finds every network namespace that has a task in it and
// reads its counters. Reading /proc/PID/task/TID/net/netstat resolves the
// namespace of that task and takes no mmap_lock; namespaces without any
// task (only a bind mount in /run/netns) are not seen.
type netnsScanner struct {
	proc    string        // "/proc"
	timeout time.Duration // the whole scan; a stuck /proc ends it early
	maxTask int
}

func defaultScanner() netnsScanner {
	return netnsScanner{proc: "/proc", timeout: 3 * time.Second, maxTask: 200000}
}

// scan returns namespaces by inode. It is bounded in time: when the
// timeout passes it returns what it has with an error.
func (s netnsScanner) scan(ctx context.Context) (map[uint64]*Netns, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	type result struct {
		m   map[uint64]*Netns
		err error
	}
	done := make(chan result, 1)
	go func() {
		m, err := s.scanSync(ctx)
		done <- result{m, err}
	}()
	select {
	case r := <-done:
		return r.m, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("reading network namespaces' counters: %w", ctx.Err())
	}
}

func (s netnsScanner) scanSync(ctx context.Context) (map[uint64]*Netns, error) {
	out := map[uint64]*Netns{}
	pids, err := os.ReadDir(s.proc)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", s.proc, err)
	}
	seen := 0
	for _, pe := range pids {
		pid, err := strconv.Atoi(pe.Name())
		if err != nil {
			continue
		}
		tids, err := os.ReadDir(filepath.Join(s.proc, pe.Name(), "task"))
		if err != nil {
			continue // exited
		}
		for _, te := range tids {
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			if seen++; seen > s.maxTask {
				return out, nil
			}
			tid, err := strconv.Atoi(te.Name())
			if err != nil {
				continue
			}
			dir := filepath.Join(s.proc, pe.Name(), "task", te.Name())
			inode, ok := nsInode(filepath.Join(dir, "ns", "net"))
			if !ok || out[inode] != nil {
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, "net", "netstat"))
			if err != nil {
				continue
			}
			comm, _ := os.ReadFile(filepath.Join(s.proc, pe.Name(), "comm"))
			out[inode] = &Netns{Inode: inode, PID: pid, TID: tid, Comm: strings.TrimSpace(string(comm)), Counter: ParseNetstat(b)}
		}
	}
	return out, nil
}

// reread reads the same namespaces again, through the same tasks.
func (s netnsScanner) reread(ctx context.Context, before map[uint64]*Netns) map[uint64]*Netns {
	after := map[uint64]*Netns{}
	for inode, n := range before {
		if ctx.Err() != nil {
			break
		}
		dir := filepath.Join(s.proc, strconv.Itoa(n.PID), "task", strconv.Itoa(n.TID))
		if got, ok := nsInode(filepath.Join(dir, "ns", "net")); !ok || got != inode {
			continue // the task left or exited; its namespace may be gone
		}
		b, err := os.ReadFile(filepath.Join(dir, "net", "netstat"))
		if err != nil {
			continue
		}
		c := *n
		c.Counter = ParseNetstat(b)
		after[inode] = &c
	}
	return after
}

// nsInode reads a namespace link, "net:[4026531840]".
func nsInode(link string) (uint64, bool) {
	target, err := os.Readlink(link)
	if err != nil {
		return 0, false
	}
	_, rest, ok := strings.Cut(target, "[")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimSuffix(rest, "]"), 10, 64)
	return n, err == nil
}

// NetnsDeltas subtracts, per namespace present in both, the TcpExt
// counters; namespaces where nothing moved are left out. Sorted by the
// collapse and prune activity, busiest first.
func NetnsDeltas(before, after map[uint64]*Netns) []NetnsDelta {
	var out []NetnsDelta
	for inode, a := range after {
		b := before[inode]
		if b == nil {
			continue
		}
		d := NetnsDelta{Inode: inode, PID: a.PID, Comm: a.Comm, Delta: map[string]int64{}}
		for _, name := range TCPCounters {
			k := "TcpExt." + name
			if v := a.Counter[k] - b.Counter[k]; v > 0 {
				d.Delta[name] = v
			}
		}
		if len(d.Delta) > 0 {
			out = append(out, d)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		wi, wj := pruneWeight(out[i].Delta), pruneWeight(out[j].Delta)
		if wi != wj {
			return wi > wj
		}
		return out[i].Inode < out[j].Inode
	})
	return out
}

func pruneWeight(d map[string]int64) int64 {
	return d["TCPRcvCollapsed"] + d["PruneCalled"] + d["RcvPruned"] + d["OfoPruned"] + d["TCPRcvQDrop"]
}

// SumDeltas adds the namespaces' deltas together.
func SumDeltas(ds []NetnsDelta) map[string]int64 {
	out := map[string]int64{}
	for _, d := range ds {
		for k, v := range d.Delta {
			out[k] += v
		}
	}
	return out
}

// Softnet is one CPU's line of /proc/net/softnet_stat.
type Softnet struct {
	CPU         int    `json:"cpu"`
	Processed   uint64 `json:"processed"`
	Dropped     uint64 `json:"dropped"`      // netdev_max_backlog overflow
	TimeSqueeze uint64 `json:"time_squeeze"` // net_rx_action out of budget or time
}

// ParseSoftnet reads /proc/net/softnet_stat: hex columns per CPU; the
// 13th column (Linux 5.10+) is the CPU number, else the line index is.
func ParseSoftnet(b []byte) ([]Softnet, error) {
	var out []Softnet
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 3 {
			return nil, fmt.Errorf("softnet_stat line %d: %d columns, want at least 3", i+1, len(f))
		}
		var v [13]uint64
		for j := 0; j < len(f) && j < len(v); j++ {
			n, err := strconv.ParseUint(f[j], 16, 64)
			if err != nil {
				return nil, fmt.Errorf("softnet_stat line %d column %d: %w", i+1, j+1, err)
			}
			v[j] = n
		}
		cpu := i
		if len(f) >= 13 {
			cpu = int(v[12])
		}
		out = append(out, Softnet{CPU: cpu, Processed: v[0], Dropped: v[1], TimeSqueeze: v[2]})
	}
	return out, nil
}

// SoftnetDeltas subtracts per CPU (CPUs missing from either side are left
// out: hotplug).
func SoftnetDeltas(before, after []Softnet) []Softnet {
	prev := map[int]Softnet{}
	for _, s := range before {
		prev[s.CPU] = s
	}
	var out []Softnet
	for _, a := range after {
		b, ok := prev[a.CPU]
		if !ok {
			continue
		}
		// The kernel keeps these as 32-bit counters: subtract modulo 2^32.
		d := func(x, y uint64) uint64 { return uint64(uint32(x - y)) }
		out = append(out, Softnet{CPU: a.CPU, Processed: d(a.Processed, b.Processed), Dropped: d(a.Dropped, b.Dropped), TimeSqueeze: d(a.TimeSqueeze, b.TimeSqueeze)})
	}
	return out
}

func readSoftnet() ([]Softnet, error) {
	b, err := os.ReadFile("/proc/net/softnet_stat")
	if err != nil {
		return nil, err
	}
	return ParseSoftnet(b)
}

// CPUTimes are the host's total and steal times from /proc/stat's "cpu"
// line, in USER_HZ ticks.
type CPUTimes struct {
	Total, Steal uint64
}

// ParseCPUTimes reads the aggregate "cpu" line of /proc/stat.
func ParseCPUTimes(b []byte) (CPUTimes, error) {
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return CPUTimes{}, fmt.Errorf("/proc/stat: first line %q is not the cpu total", line)
	}
	var t CPUTimes
	for i, s := range f[1:] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return CPUTimes{}, fmt.Errorf("/proc/stat: %w", err)
		}
		// guest and guest_nice (9th and 10th) are already in user and nice.
		if i < 8 {
			t.Total += v
		}
		if i == 7 {
			t.Steal = v
		}
	}
	return t, nil
}

// StealPct is the steal share between two readings, or -1.
func StealPct(before, after CPUTimes) float64 {
	if after.Total <= before.Total || after.Steal < before.Steal {
		return -1
	}
	return 100 * float64(after.Steal-before.Steal) / float64(after.Total-before.Total)
}

func readCPUTimes() (CPUTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return CPUTimes{}, err
	}
	return ParseCPUTimes(b)
}
