package reclaim

import (
	"os"

	"github.com/wolf-investigator/wolf/internal/fact"
	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/human"
	"github.com/wolf-investigator/wolf/internal/memcg"
)

// ConcludeFacts is Conclude and the window's facts for the diagnosis
// stage, from the same snapshot: per memory cgroup whether it sat at its
// limit (a saturation with its numbers and processes), each process's
// time in reclaim (a wait on the limit, or on the host's memory for
// direct reclaim), the CPU its reclaim burned (used for the limit), and
// the pages it read back after the limit evicted them (refaults).
func ConcludeFacts(s *Snapshot) ([]finding.Finding, *fact.Set) {
	fs := Conclude(s)
	return fs, s.facts(fs)
}

// pageSize is the size of the pages refaults count.
var pageSize = float64(os.Getpagesize())

func (s *Snapshot) facts(fs []finding.Finding) *fact.Set {
	set := &fact.Set{Window: s.Window}
	var direct *finding.Finding
	for i := range fs {
		if fs[i].ID == "reclaim.direct" {
			direct = &fs[i]
		}
	}
	for _, c := range s.Cgroups {
		c.Window = s.Window
		if c.Path == "" {
			continue // a removed cgroup: nothing to join on
		}
		f := s.refs[c]
		ref := func() (string, string) {
			if f == nil {
				return "", ""
			}
			return f.ID, f.Title
		}
		id, title := ref()
		mk := fact.MemoryKey(c.Path)
		set.Resource(fact.Resource{Kind: fact.Memory, Key: mk, Name: "memory cgroup " + c.Path, Cgroup: c.Path, CgroupID: c.ID, CPU: -1})
		r := &c.Reclaim
		memcgTime := r.memcgTime()
		directTime := r.Time[kindDirect] + r.Time[kindNode]
		if st := c.State; st != nil {
			x := fact.Saturation{On: mk, Used: float64(st.UsageBytes), Unit: "bytes", Finding: id, FindingTitle: title,
				AtLimit: c.atLimit() && r.memcgCalls() > 0,
				Numbers: map[string]float64{"usage_bytes": float64(st.UsageBytes), "reclaim_s_total": human.Round(memcgTime.Seconds(), 3),
					"reclaim_cpu_s_total": human.Round((r.CPU[kindMemcg] + r.CPU[kindSoftlimit]).Seconds(), 3)}}
			if st.EffectiveLimitBytes != memcg.Unlimited && st.EffectiveLimitBytes > 0 {
				x.Limit = float64(st.EffectiveLimitBytes)
				x.Level = float64(st.UsageBytes) / x.Limit
				x.Numbers["limit_bytes"] = x.Limit
			}
			if n, ok := c.limitHits(); ok {
				x.Numbers["limit_hits"] = float64(n)
			}
			if e := r.Efficiency(); e >= 0 {
				x.Numbers["efficiency_pct"] = human.Round(e, 2)
			}
			if c.Before != nil {
				x.Numbers["oom_kills"] = float64(c.oomKills())
			}
			if ref, ok := c.refaults(); ok && s.Window > 0 {
				x.Numbers["refaults_per_s"] = human.Round(float64(ref)/s.Window.Seconds(), 1)
				set.Usage = append(set.Usage, fact.Usage{On: mk, By: fact.Task{MemCgroup: c.Path}, Amount: float64(ref) * pageSize, Unit: "bytes",
					Activity: fact.ActivityRefault, Finding: id, FindingTitle: title})
			}
			if steal, ok := c.statDelta("pgsteal"); ok {
				x.Numbers["evicted_bytes"] = float64(steal) * pageSize
			} else if r.Reclaimed > 0 && memcgTime >= directTime {
				// v1's memory.stat has no pgsteal. A cgroup at its limit
				// is reclaimed by its own tasks' charges, and the pages
				// their calls freed, counted here over the same window as
				// its refaults, are its evictions: without them the share
				// of its misses that were refaults is unknown wherever its
				// reads reach no device (the holes of a sparse file).
				x.Numbers["evicted_bytes"] = float64(r.Reclaimed) * pageSize
			}
			// The same counters since the cgroup began: shadows dropped
			// before the window hide re-reads in it too, and only the
			// cgroup's lifetime says what share of its evictions lost theirs.
			c.lifetimeNumbers(x.Numbers)
			if nodes, ok := c.statDelta("workingset_nodereclaim"); ok {
				x.Numbers["dropped_shadow_nodes"] = float64(nodes)
				if lost := c.shadowlessRereads(); lost > 0 {
					x.Numbers["shadowless_reread_bytes"] = float64(lost) * pageSize
					set.Usage = append(set.Usage, fact.Usage{On: mk, By: fact.Task{MemCgroup: c.Path}, Amount: float64(lost) * pageSize, Unit: "bytes",
						Activity: fact.ActivityShadowlessReread, Finding: id, FindingTitle: title})
				}
			}
			if s.Rereads {
				x.Numbers["evicted_reread_bytes"] = float64(c.Rereads) * pageSize
				if c.Rereads > 0 {
					set.Usage = append(set.Usage, fact.Usage{On: mk, By: fact.Task{MemCgroup: c.Path}, Amount: float64(c.Rereads) * pageSize, Unit: "bytes",
						Activity: fact.ActivityEvictedReread, Finding: id, FindingTitle: title})
				}
			}
			if s.Samples.Hz > 0 && c.CPU.Busy > 0 {
				x.Numbers["cpu_samples"] = float64(c.CPU.Busy)
				x.Numbers["kernel_cpu_pct"] = human.Round(100*float64(c.CPU.Kernel)/float64(c.CPU.Busy), 1)
				if s.Samples.Classified {
					x.Numbers["miss_path_cpu_pct"] = human.Round(100*float64(c.CPU.Miss)/float64(c.CPU.Busy), 1)
					x.Numbers["reclaim_cpu_pct"] = human.Round(100*float64(c.CPU.Reclaim)/float64(c.CPU.Busy), 1)
				}
			}
			for _, p := range c.Procs {
				x.Members = append(x.Members, p.PID)
			}
			if f != nil && f.Severity >= finding.Warning {
				x.Remediation = f.Remediation
			}
			set.Saturations = append(set.Saturations, x)
		}
		// Whose reclaim it was: the cgroup's limit, or the host's memory
		// when its tasks reclaimed for the host (direct reclaim).
		on, wid, wtitle := mk, id, title
		if directTime > memcgTime {
			on = fact.MemoryKey("/")
			set.Resource(fact.Resource{Kind: fact.Memory, Key: on, Name: "the host's memory", Cgroup: "/", CPU: -1})
			wid, wtitle = "", ""
			if direct != nil {
				wid, wtitle = direct.ID, direct.Title
			}
		}
		// The CPU its tasks spent in the page-cache miss path (sampled;
		// reclaim's own CPU is the per-process usage below): BusyShare is of
		// every task's samples in the same window, so that the engine
		// can take it of the CPUs' busy time whatever window that was
		// measured over. How much of it the limit caused (the misses
		// that were refaults) is the engine's join with the reads.
		if s.Samples.Hz > 0 && s.Samples.Classified && c.CPU.Miss > 0 && s.Samples.Busy > 0 {
			set.Usage = append(set.Usage, fact.Usage{On: fact.HostCPUKey(), By: fact.Task{MemCgroup: c.Path},
				Amount: float64(c.CPU.Miss) / float64(s.Samples.Hz), Unit: "cpu_s", BusyShare: float64(c.CPU.Miss) / float64(s.Samples.Busy),
				Activity: fact.ActivityMissPath, For: on, Finding: wid, FindingTitle: wtitle})
		}
		for _, p := range c.Procs {
			t := fact.Task{PID: p.PID, Comm: p.Comm, MemCgroup: c.Path}
			if p.InReclaim > 0 {
				set.Waits = append(set.Waits, fact.Wait{Task: t, Kind: fact.WaitReclaim, On: on, Total: p.InReclaim, Max: p.MaxReclaim,
					Count: int(p.Calls), Finding: wid, FindingTitle: wtitle})
			}
			if p.ReclaimCPU > 0 {
				set.Usage = append(set.Usage, fact.Usage{On: fact.HostCPUKey(), By: t, Amount: p.ReclaimCPU.Seconds(), Unit: "cpu_s",
					Activity: "reclaim", For: on, Threads: p.Threads, Finding: wid, FindingTitle: wtitle})
			}
		}
	}
	return set
}

// statDelta is memory.stat's counter k over the window (false when
// either reading lacks it, or it went back: the cgroup was made anew).
func (c *Cgroup) statDelta(k string) (uint64, bool) {
	if c.State == nil || c.Before == nil {
		return 0, false
	}
	a, ok1 := c.Before.Stat[k]
	b, ok2 := c.State.Stat[k]
	if !ok1 || !ok2 || b < a {
		return 0, false
	}
	return b - a, true
}

// lifetimeNumbers puts memory.stat's cumulative eviction, refault and
// dropped-shadow counters (since the cgroup began, v2 only) into nums.
func (c *Cgroup) lifetimeNumbers(nums map[string]float64) {
	if c.State == nil {
		return
	}
	if v, ok := c.State.Stat["pgsteal"]; ok {
		nums["lifetime_evicted_bytes"] = float64(v) * pageSize
	}
	if v, ok := c.State.Stat["workingset_nodereclaim"]; ok {
		nums["lifetime_dropped_shadow_nodes"] = float64(v)
	}
	if v, ok := c.lifetimeRefaults(); ok {
		nums["lifetime_refault_bytes"] = float64(v) * pageSize
	}
}

// refaultKeys are memory.stat's file refault counter: workingset_refault_file,
// or workingset_refault on v1 before 5.9 and older v2 kernels.
var refaultKeys = [...]string{"workingset_refault_file", "workingset_refault"}

// lifetimeRefaults is the cgroup's refault counter at the window's end.
func (c *Cgroup) lifetimeRefaults() (uint64, bool) {
	if c.State == nil {
		return 0, false
	}
	for _, k := range refaultKeys {
		if v, ok := c.State.Stat[k]; ok {
			return v, true
		}
	}
	return 0, false
}

// shadowEntriesPerNode is how many page-cache slots an xarray node holds
// (XA_CHUNK_SIZE): the most shadow entries a dropped node takes with it.
const shadowEntriesPerNode = 64

// shadowlessRereads estimates the pages the cgroup read back in the
// window after reclaim evicted them that the kernel did not count as
// refaults: it counts a refault only where eviction's shadow entry is
// still in the page cache, and its shadow shrinker drops whole nodes of
// them under pressure (workingset_nodereclaim), after which a re-read of
// those pages looks like a first read. Each dropped node held at most 64
// shadows; those shadows would have come back as often as the ones the
// kernel kept did, which is the share of the evictions whose shadows
// stayed that it counted as refaults (every evicted page of a file read
// round and round; none of a file streamed once). In a steady thrash the
// shadows dropped in a window stand for the uncounted re-reads in it.
// A window that dropped none can still re-read pages whose shadows went
// before it (a file read through once, then read at random): the
// cgroup's lifetime counters say what share of its evictions lost their
// shadows, and the window's refaults are the rest's re-reads. 0 without
// the counters (v1) or without refaults.
func (c *Cgroup) shadowlessRereads() uint64 {
	refaults, ok := c.refaults()
	if !ok || refaults == 0 {
		return 0
	}
	if nodes, ok := c.statDelta("workingset_nodereclaim"); ok && nodes > 0 {
		steal, ok := c.statDelta("pgsteal")
		if !ok {
			return 0
		}
		dropped := nodes * shadowEntriesPerNode
		kept := max(refaults, steal-min(steal, dropped))
		return dropped * refaults / kept
	}
	nodes, ok1 := c.State.Stat["workingset_nodereclaim"]
	steal, ok2 := c.State.Stat["pgsteal"]
	if !ok1 || !ok2 || nodes == 0 || steal == 0 {
		return 0
	}
	// The lifetime's refaults bound its kept shadows from below, as the
	// window's do above.
	lifeRefaults := refaults
	if v, ok := c.lifetimeRefaults(); ok {
		lifeRefaults = max(refaults, v)
	}
	dropped := min(steal, nodes*shadowEntriesPerNode)
	kept := max(lifeRefaults, steal-dropped)
	return refaults * dropped / kept
}

// refaults are the file pages the cgroup read back in the window after
// reclaim had evicted them (refaultKeys).
func (c *Cgroup) refaults() (uint64, bool) {
	if c.State == nil || c.Before == nil {
		return 0, false
	}
	for _, k := range refaultKeys {
		a, ok1 := c.Before.Stat[k]
		b, ok2 := c.State.Stat[k]
		if ok1 && ok2 {
			if b < a {
				return 0, false
			}
			return b - a, true
		}
	}
	return 0, false
}
