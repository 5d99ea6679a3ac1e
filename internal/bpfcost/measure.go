package bpfcost

import (
	"runtime"
	"sort"
)

// Measure turns the snapshot's two samples into costs, most expensive
// first (run time plus estimated trap cost).
func Measure(s *Snapshot) []Cost { return measure(s, DefaultThresholds.TrapNs) }

// probeSite is one probed instruction of a file.
type probeSite struct {
	file string
	off  uint64
}

// trapsPerRun is how many traps each run of p costs: one per uprobe; a
// uretprobe pays the entry trap unless a uprobe on the same instruction
// already does (the breakpoint is shared), plus its return: a trap before
// 6.11, a plain syscall from the trampoline on x86-64 since (the
// uretprobe syscall), which is not counted.
func trapsPerRun(p *Program, entries map[probeSite]bool, returnTraps float64) float64 {
	var n float64
	for _, a := range p.Attach {
		switch a.Kind {
		case KindUprobe, KindUprobeMulti:
			n++
		case KindUretprobe:
			n += returnTraps
			if !entries[probeSite{a.File, a.Offset}] {
				n++
			}
		}
	}
	return n
}

// returnTraps is what a uretprobe's return costs, in traps, on kernel.
func returnTraps(kernel string) float64 {
	if runtime.GOARCH == "amd64" && kernelAtLeast(kernel, 6, 11) {
		return 0
	}
	return 1
}

func measure(s *Snapshot, trapNs float64) []Cost {
	if trapNs <= 0 {
		trapNs = UprobeTrapNs
	}
	entries := map[probeSite]bool{}
	for _, p := range s.Programs {
		for _, a := range p.Attach {
			if a.Kind == KindUprobe {
				entries[probeSite{a.File, a.Offset}] = true
			}
		}
	}
	rt := returnTraps(s.Kernel)
	secs := s.Window.Seconds()
	if secs <= 0 {
		secs = 1
	}
	ncpu := max(s.NumCPU, 1)
	var out []Cost
	for _, p := range s.Programs {
		if s.PID != 0 && !heldBy(&p, s.PID) {
			continue
		}
		a, ok := s.After[p.ID]
		if !ok {
			continue
		}
		b := s.Before[p.ID] // zero when loaded during the window
		c := Cost{Program: p}
		if a.Runs >= b.Runs && a.RunNs >= b.RunNs {
			c.Runs, c.RunNs = a.Runs-b.Runs, a.RunNs-b.RunNs
		}
		if a.Misses >= b.Misses {
			c.Misses = a.Misses - b.Misses
		}
		c.RunsPerS = float64(c.Runs) / secs
		if c.Runs > 0 {
			c.AvgNs = float64(c.RunNs) / float64(c.Runs)
		}
		c.OneCPUPct = float64(c.RunNs) / 1e9 / secs * 100
		c.CPUPct = c.OneCPUPct / float64(ncpu)
		c.Traps = trapsPerRun(&p, entries, rt)
		c.TrapPct = c.RunsPerS * c.Traps * trapNs / 1e9 * 100
		out = append(out, c)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if ti, tj := out[i].TotalOneCPUPct(), out[j].TotalOneCPUPct(); ti != tj {
			return ti > tj
		}
		if out[i].RunsPerS != out[j].RunsPerS {
			return out[i].RunsPerS > out[j].RunsPerS
		}
		return out[i].ID < out[j].ID
	})
	return out
}

func heldBy(p *Program, pid int) bool {
	for _, o := range p.Owners {
		if o.PID == pid {
			return true
		}
	}
	return false
}
