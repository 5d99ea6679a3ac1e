package sysstat

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// CPUTimes is one cpu line of /proc/stat, in USER_HZ ticks. User and
// Nice include the time spent running guests (Guest, GuestNice), as the
// kernel accounts them; the analysis takes them out, as mpstat does.
type CPUTimes struct {
	User, Nice, System, Idle, IOWait, IRQ, SoftIRQ, Steal, Guest, GuestNice uint64
}

// total is every tick of the CPU once (the guest ticks are already in
// User and Nice).
func (c CPUTimes) total() uint64 {
	return c.User + c.Nice + c.System + c.Idle + c.IOWait + c.IRQ + c.SoftIRQ + c.Steal
}

// Stat is what the checklist takes from /proc/stat.
type Stat struct {
	Total CPUTimes
	CPUs  map[int]CPUTimes // by CPU number; only online CPUs are listed
	// ProcsRunning counts runnable tasks (running or waiting for a CPU,
	// the reader included); ProcsBlocked counts tasks waiting for I/O.
	ProcsRunning, ProcsBlocked int
}

// ParseStat parses /proc/stat (proc(5)).
func ParseStat(b []byte) (*Stat, error) {
	s := &Stat{CPUs: map[int]CPUTimes{}}
	var sawTotal bool
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20) // the intr line is long
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		switch {
		case f[0] == "cpu":
			t, err := parseCPUTimes(f[1:])
			if err != nil {
				return nil, fmt.Errorf("/proc/stat cpu line: %w", err)
			}
			s.Total, sawTotal = t, true
		case strings.HasPrefix(f[0], "cpu"):
			n, err := strconv.Atoi(f[0][3:])
			if err != nil {
				continue
			}
			t, err := parseCPUTimes(f[1:])
			if err != nil {
				return nil, fmt.Errorf("/proc/stat %s line: %w", f[0], err)
			}
			s.CPUs[n] = t
		case f[0] == "procs_running":
			s.ProcsRunning, _ = strconv.Atoi(f[1])
		case f[0] == "procs_blocked":
			s.ProcsBlocked, _ = strconv.Atoi(f[1])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("/proc/stat: %w", err)
	}
	if !sawTotal {
		return nil, fmt.Errorf("/proc/stat: no cpu line")
	}
	return s, nil
}

func parseCPUTimes(f []string) (CPUTimes, error) {
	// Older kernels have fewer columns (steal since 2.6.11, guest since
	// 2.6.24, guest_nice since 2.6.33); missing ones stay zero.
	var v [10]uint64
	if len(f) < 4 {
		return CPUTimes{}, fmt.Errorf("%d columns, want at least 4", len(f))
	}
	for i := 0; i < len(f) && i < len(v); i++ {
		n, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			return CPUTimes{}, fmt.Errorf("column %d: %w", i+1, err)
		}
		v[i] = n
	}
	return CPUTimes{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9]}, nil
}

// LoadAvg is /proc/loadavg.
type LoadAvg struct {
	Load1, Load5, Load15 float64
	Runnable, Threads    int // "1/113": runnable scheduling entities / all threads
}

// ParseLoadAvg parses /proc/loadavg: "1.19 1.87 6.42 1/113 26610".
func ParseLoadAvg(b []byte) (*LoadAvg, error) {
	f := strings.Fields(string(b))
	if len(f) < 4 {
		return nil, fmt.Errorf("/proc/loadavg: %d fields, want 5", len(f))
	}
	var l LoadAvg
	var err error
	for i, p := range []*float64{&l.Load1, &l.Load5, &l.Load15} {
		if *p, err = strconv.ParseFloat(f[i], 64); err != nil {
			return nil, fmt.Errorf("/proc/loadavg: %w", err)
		}
	}
	if r, t, ok := strings.Cut(f[3], "/"); ok {
		l.Runnable, _ = strconv.Atoi(r)
		l.Threads, _ = strconv.Atoi(t)
	}
	return &l, nil
}

// ParseKeyValues parses files of "Key: value [kB]" lines (/proc/meminfo,
// values in kB) and "key value" lines (/proc/vmstat). Lines that do not
// parse are skipped.
func ParseKeyValues(b []byte) map[string]uint64 {
	m := map[string]uint64{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			continue
		}
		m[strings.TrimSuffix(f[0], ":")] = v
	}
	return m
}

// PSI is one /proc/pressure file. Full is absent from the cpu file on
// kernels before 5.13 (and reads all zero at the system level since).
type PSI struct {
	SomeAvg10, SomeAvg60, FullAvg10, FullAvg60 float64
	SomeTotalUs, FullTotalUs                   uint64
	HasFull                                    bool
}

// ParsePSI parses a /proc/pressure file:
//
//	some avg10=3.28 avg60=10.20 avg300=9.96 total=4168044491
//	full avg10=0.00 avg60=0.00 avg300=0.00 total=0
func ParsePSI(b []byte) (*PSI, error) {
	var p PSI
	var sawSome bool
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		var avg10, avg60 float64
		var total uint64
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			var err error
			switch k {
			case "avg10":
				avg10, err = strconv.ParseFloat(v, 64)
			case "avg60":
				avg60, err = strconv.ParseFloat(v, 64)
			case "total":
				total, err = strconv.ParseUint(v, 10, 64)
			}
			if err != nil {
				return nil, fmt.Errorf("pressure %s: %w", k, err)
			}
		}
		switch f[0] {
		case "some":
			p.SomeAvg10, p.SomeAvg60, p.SomeTotalUs, sawSome = avg10, avg60, total, true
		case "full":
			p.FullAvg10, p.FullAvg60, p.FullTotalUs, p.HasFull = avg10, avg60, total, true
		}
	}
	if !sawSome {
		return nil, fmt.Errorf("pressure: no \"some\" line")
	}
	return &p, nil
}

// DiskStat is one line of /proc/diskstats (Documentation/admin-guide/
// iostats.rst). Times are in milliseconds; sectors are 512 bytes whatever
// the device's own sector size.
type DiskStat struct {
	Major, Minor                                          int
	Name                                                  string
	Reads, ReadsMerged, SectorsRead, ReadMs               uint64
	Writes, WritesMerged, SectorsWritten, WriteMs         uint64
	InFlight, IOMs, WeightedMs                            uint64
	Discards, DiscardsMerged, SectorsDiscarded, DiscardMs uint64
	Flushes, FlushMs                                      uint64
}

// ParseDiskstats parses /proc/diskstats. Kernels before 4.18 have no
// discard columns and before 5.5 no flush columns; those stay zero.
func ParseDiskstats(b []byte) ([]DiskStat, error) {
	var out []DiskStat
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 14 {
			continue
		}
		var d DiskStat
		var err error
		if d.Major, err = strconv.Atoi(f[0]); err != nil {
			return nil, fmt.Errorf("/proc/diskstats major %q: %w", f[0], err)
		}
		d.Minor, _ = strconv.Atoi(f[1])
		d.Name = f[2]
		fields := []*uint64{&d.Reads, &d.ReadsMerged, &d.SectorsRead, &d.ReadMs,
			&d.Writes, &d.WritesMerged, &d.SectorsWritten, &d.WriteMs,
			&d.InFlight, &d.IOMs, &d.WeightedMs,
			&d.Discards, &d.DiscardsMerged, &d.SectorsDiscarded, &d.DiscardMs,
			&d.Flushes, &d.FlushMs}
		for i, p := range fields {
			if 3+i >= len(f) {
				break
			}
			if *p, err = strconv.ParseUint(f[3+i], 10, 64); err != nil {
				return nil, fmt.Errorf("/proc/diskstats %s column %d: %w", d.Name, 4+i, err)
			}
		}
		out = append(out, d)
	}
	return out, nil
}

// NetDev is one interface of /proc/net/dev.
type NetDev struct {
	Name                                                           string
	RxBytes, RxPackets, RxErrs, RxDrop, RxFifo, RxFrame            uint64
	TxBytes, TxPackets, TxErrs, TxDrop, TxFifo, TxColls, TxCarrier uint64
}

// ParseNetDev parses /proc/net/dev (two header lines, then
// "  eth0: rx-bytes rx-packets errs drop fifo frame compressed multicast
// tx-bytes tx-packets errs drop fifo colls carrier compressed").
func ParseNetDev(b []byte) ([]NetDev, error) {
	var out []NetDev
	for _, line := range strings.Split(string(b), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || strings.Contains(name, "|") {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 16 {
			continue
		}
		var v [16]uint64
		for i := range v {
			n, err := strconv.ParseUint(f[i], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("/proc/net/dev %s column %d: %w", strings.TrimSpace(name), i+1, err)
			}
			v[i] = n
		}
		out = append(out, NetDev{
			Name:    strings.TrimSpace(name),
			RxBytes: v[0], RxPackets: v[1], RxErrs: v[2], RxDrop: v[3], RxFifo: v[4], RxFrame: v[5],
			TxBytes: v[8], TxPackets: v[9], TxErrs: v[10], TxDrop: v[11], TxFifo: v[12], TxColls: v[13], TxCarrier: v[14],
		})
	}
	return out, nil
}

// ParseSNMP parses /proc/net/snmp and /proc/net/netstat: pairs of lines,
// a header "Tcp: RtoAlgorithm RtoMin ..." and the values "Tcp: 1 200 ...".
// The result is keyed "Tcp.RetransSegs", "TcpExt.ListenOverflows", … and
// may be merged across both files.
func ParseSNMP(b []byte, into map[string]int64) error {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for i := 0; i+1 < len(lines); i += 2 {
		h, v := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(h) == 0 || len(v) == 0 || h[0] != v[0] {
			return fmt.Errorf("snmp: header %q and values %q do not pair", firstField(h), firstField(v))
		}
		proto := strings.TrimSuffix(h[0], ":")
		for j := 1; j < len(h) && j < len(v); j++ {
			n, err := strconv.ParseInt(v[j], 10, 64)
			if err != nil {
				continue
			}
			into[proto+"."+h[j]] = n
		}
	}
	return nil
}

func firstField(f []string) string {
	if len(f) == 0 {
		return ""
	}
	return f[0]
}
