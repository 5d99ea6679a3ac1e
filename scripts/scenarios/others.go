package main

// What else ran on the machine during doctor's window: the machine is
// shared, and a run judged while someone else's lab or build kept the CPUs
// busy says so in the table rather than passing for a clean measurement.

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
)

type procCPU struct {
	ppid  int
	comm  string
	ticks uint64 // utime + stime, in clock ticks
}

// snapCPU reads every process's CPU time from /proc/PID/stat.
func snapCPU() map[int]procCPU {
	out := map[int]procCPU{}
	ds, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, d := range ds {
		b, err := os.ReadFile(d)
		if err != nil {
			continue
		}
		pid, p, ok := parseStat(b)
		if ok {
			out[pid] = p
		}
	}
	return out
}

// parseStat reads pid, comm, ppid, utime and stime of a /proc/PID/stat line.
func parseStat(b []byte) (int, procCPU, bool) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return 0, procCPU{}, false
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return 0, procCPU{}, false
	}
	f := bytes.Fields(b[end+1:])
	// After the comm: state(0) ppid(1) ... utime(11) stime(12).
	if len(f) < 13 {
		return 0, procCPU{}, false
	}
	ppid, _ := strconv.Atoi(string(f[1]))
	u, _ := strconv.ParseUint(string(f[11]), 10, 64)
	s, _ := strconv.ParseUint(string(f[12]), 10, 64)
	return pid, procCPU{ppid: ppid, comm: string(b[open+1 : end]), ticks: u + s}, true
}

// clockTicks is USER_HZ: 100 on every Linux architecture wolf runs on.
const clockTicks = 100

// othersBusy lists the processes that used at least 10% of one CPU
// between a and b (secs apart) and are not descendants of self: the
// runner's workloads, labs and doctor are its descendants, anything else
// is someone else's. The busiest first, at most 4.
func othersBusy(a, b map[int]procCPU, secs float64, self int) []string {
	ours := func(pid int) bool {
		for i := 0; i < 64 && pid > 1; i++ {
			if pid == self {
				return true
			}
			p, ok := b[pid]
			if !ok {
				return false
			}
			pid = p.ppid
		}
		return false
	}
	type use struct {
		pid  int
		comm string
		pct  float64
	}
	var us []use
	for pid, pb := range b {
		pa, ok := a[pid]
		if !ok || pb.ticks < pa.ticks || ours(pid) {
			continue
		}
		pct := float64(pb.ticks-pa.ticks) / clockTicks / secs * 100
		if pct >= 10 {
			us = append(us, use{pid, pb.comm, pct})
		}
	}
	sort.Slice(us, func(i, j int) bool { return us[i].pct > us[j].pct })
	var out []string
	for i, u := range us {
		if i == 4 {
			break
		}
		out = append(out, fmt.Sprintf("%s (pid %d) %.0f%%", u.comm, u.pid, u.pct))
	}
	return out
}
