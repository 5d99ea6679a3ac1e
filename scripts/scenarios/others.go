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
	ppid     int
	comm     string
	ticks    uint64 // utime + stime, in clock ticks
	children uint64 // cutime + cstime: its exited, reaped children's
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
	// After the comm: state(0) ppid(1) ... utime(11) stime(12) cutime(13)
	// cstime(14).
	if len(f) < 15 {
		return 0, procCPU{}, false
	}
	ppid, _ := strconv.Atoi(string(f[1]))
	n := func(i int) uint64 { v, _ := strconv.ParseUint(string(f[i]), 10, 64); return v }
	return pid, procCPU{ppid: ppid, comm: string(b[open+1 : end]), ticks: n(11) + n(12), children: n(13) + n(14)}, true
}

// clockTicks is USER_HZ: 100 on every Linux architecture wolf runs on.
const clockTicks = 100

// othersBusy lists the processes that used at least 10% of one CPU
// between a and b (secs apart) and are not descendants of self: the
// runner's workloads, labs and doctor are its descendants, anything else
// is someone else's. The busiest first, at most 4. A process counts its
// children that exited and were reaped in the window (a build's go
// command and its compile and vet tasks, each gone before b): the CPU
// doctor names as "compile (N tasks that exited)" shows here on the
// parent still alive. A child's CPU from before a comes with it, so a
// long-lived child's parent can read high: it is a flag of outside
// load, not a measurement. A process born in the window counts whole.
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
		pid    int
		comm   string
		pct    float64
		reaped bool // most of it was exited children's
	}
	var us []use
	for pid, pb := range b {
		pa := a[pid] // zero for a process born in the window
		if pb.ticks < pa.ticks || pb.children < pa.children || ours(pid) {
			continue
		}
		own, kids := pb.ticks-pa.ticks, pb.children-pa.children
		pct := float64(own+kids) / clockTicks / secs * 100
		if pct >= 10 {
			us = append(us, use{pid, pb.comm, pct, kids > own})
		}
	}
	sort.Slice(us, func(i, j int) bool { return us[i].pct > us[j].pct })
	var out []string
	for i, u := range us {
		if i == 4 {
			break
		}
		s := fmt.Sprintf("%s (pid %d) %.0f%%", u.comm, u.pid, u.pct)
		if u.reaped {
			s += " (mostly exited children)"
		}
		out = append(out, s)
	}
	return out
}
