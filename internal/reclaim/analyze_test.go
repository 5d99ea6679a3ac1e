package reclaim

import (
	"strings"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/finding/findingtest"
	"github.com/wolf-investigator/wolf/internal/hist"
	"github.com/wolf-investigator/wolf/internal/memcg"
)

const gib = 1 << 30

// seedSnapshot is "The case of the vanishing CPU"'s pod, in the numbers the post gives: a 4 GiB
// cgroup at its limit (failcnt climbing, no OOM kill), the ClickHouse
// server at 3000% %system with 90 page faults in 10 s, reclaim calls of 1-4
// s, and the worst one scanning 1,093,267 pages to free 32 (529,093 kept,
// 564,142 activated).
func seedSnapshot() *Snapshot {
	window := 10 * time.Second
	var dur hist.Log2
	for _, d := range []time.Duration{3199515681, 3799726515, 2800475796, 3799783134, 903085555, 795982877, 1796359224, 2499699344} {
		dur.Add(uint64(d))
	}
	r := Reclaim{
		Scanned: 1093267 + 4000, Reclaimed: 32 + 10, FileScanned: 1097267,
		RefKeep: 529093, ActivateFile: 564142,
		MaxCallScanned: 1093267,
		Worst:          &Call{TID: 874761, PID: 874011, Comm: "Fetch", Kind: "memcg", Duration: 3799783134 * time.Nanosecond, Scanned: 1093267, Reclaimed: 32},
		InFlight:       []Call{{TID: 2398050, PID: 874011, Comm: "r_memory", Kind: "memcg", Duration: 230 * time.Second, Scanned: 900000, Reclaimed: 3, InFlight: true}},
	}
	r.Calls[kindMemcg] = uint64(dur.Count)
	r.Time[kindMemcg] = time.Duration(dur.Sum)
	r.CPU[kindMemcg] = 300 * time.Millisecond
	r.Max[kindMemcg] = time.Duration(dur.Max)
	r.Durations[kindMemcg] = dur
	before := &memcg.State{Version: 1, LimitHits: 31}
	return &Snapshot{
		Window: window,
		Cgroups: []*Cgroup{{
			ID: 7, Path: "/kubepods/burstable/pod-ch",
			Before: before,
			State: &memcg.State{Version: 1, Path: "/kubepods/burstable/pod-ch", LimitBytes: 4 * gib, EffectiveLimitBytes: 4 * gib, UsageBytes: 4 * gib, LimitHits: 47,
				Stat: map[string]uint64{"inactive_file": 2411884544, "active_file": 1589776384, "inactive_anon": 128729088}},
			Reclaim: r,
			Procs: []Proc{{PID: 874011, Comm: "clickhouse-serv", Threads: 1200, StatKnown: true, UserPct: 0, SysPct: 3000, Faults: 90,
				Calls: 8, InReclaim: 250 * time.Second, MaxReclaim: 230 * time.Second, Scanned: 1993267, Reclaimed: 35}},
		}},
		System: System{MGLRU: MGLRU{State: MGLRUOff, Raw: "0x0000"}},
	}
}

func TestSeedLivelockIsCritical(t *testing.T) {
	fs := Conclude(seedSnapshot())
	f := findingtest.First(fs, "reclaim.memcg-livelock")
	if f == nil {
		t.Fatalf("no livelock finding in %+v", fs)
	}
	if f.Severity != finding.Critical || f.Investigator != "reclaim" {
		t.Errorf("severity %v investigator %q", f.Severity, f.Investigator)
	}
	// human.Percent carries its % sign (the matrix showed "9.7%% efficiency").
	if !strings.Contains(f.Title, "/kubepods/burstable/pod-ch") || !strings.Contains(f.Title, "no OOM kill") || strings.Contains(f.Title, "%%") {
		t.Errorf("title %q", f.Title)
	}
	var cg, task bool
	for _, s := range f.Subjects {
		switch {
		case s.Role == finding.RoleCgroup && s.Cgroup == "/kubepods/burstable/pod-ch":
			cg = true
			if !strings.Contains(s.Detail, "limit 4096 MiB") || !strings.Contains(s.Detail, "hit its limit 16 times") {
				t.Errorf("cgroup detail %q", s.Detail)
			}
		case s.Role == finding.RoleTask && s.PID == 874011 && s.Comm == "clickhouse-serv":
			task = true
			if !strings.Contains(s.Detail, "3000% sys") || !strings.Contains(s.Detail, "90 faults") {
				t.Errorf("process detail %q", s.Detail)
			}
		}
	}
	if !cg || !task {
		t.Errorf("subjects %+v: want the cgroup and clickhouse-serv", f.Subjects)
	}
	ev := f.Evidence
	if ev["pages_scanned"] != uint64(1097267) || ev["pages_reclaimed"] != uint64(42) || ev["pages_ref_kept"] != uint64(529093) {
		t.Errorf("page evidence %v", ev)
	}
	// The longest call is the one still running: 230 s.
	if ev["max_reclaim_ms"] != 230000.0 {
		t.Errorf("max_reclaim_ms %v, want 230000 (the call in flight)", ev["max_reclaim_ms"])
	}
	if e := ev["efficiency_pct"].(float64); e >= 0.01 {
		t.Errorf("efficiency_pct %v", e)
	}
	// 19.59 s in the eight completed calls + 230 s in the one in flight.
	if total := ev["reclaim_s_total"].(float64); total < 249.5 || total > 249.7 {
		t.Errorf("reclaim_s_total %v, want 249.6", total)
	}
	for _, k := range []string{"limit_bytes", "usage_bytes", "limit_hits", "oom_kills", "sys_pct", "faults_per_s", "p99_reclaim_ms", "active_file_bytes", "inactive_file_bytes"} {
		if _, ok := ev[k]; !ok {
			t.Errorf("evidence lacks %s: %v", k, ev)
		}
	}
	if ev["oom_kills"] != uint64(0) || ev["limit_hits"] != uint64(16) {
		t.Errorf("oom_kills %v limit_hits %v", ev["oom_kills"], ev["limit_hits"])
	}
	if f.Mechanism == "" || len(f.Remediation) == 0 || !strings.Contains(f.Remediation[0], "echo y > /sys/kernel/mm/lru_gen/enabled") {
		t.Errorf("mechanism %q remediation %q", f.Mechanism, f.Remediation)
	}
}

func TestNotALivelock(t *testing.T) {
	for name, mutate := range map[string]func(*Snapshot){
		"an OOM kill ended it": func(s *Snapshot) { s.Cgroups[0].State.OOMKills = 1 },
		"reclaim frees plenty": func(s *Snapshot) { s.Cgroups[0].Reclaim.Reclaimed = 500000 },
		"tasks mostly in user space": func(s *Snapshot) {
			s.Cgroups[0].Procs[0].UserPct, s.Cgroups[0].Procs[0].SysPct = 2500, 500
		},
		"calls are short": func(s *Snapshot) {
			r := &s.Cgroups[0].Reclaim
			r.Max[kindMemcg], r.InFlight = 50*time.Millisecond, nil
			r.Worst.Duration = 50 * time.Millisecond
			r.Time[kindMemcg] = 2 * time.Second
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := seedSnapshot()
			mutate(s)
			fs := Conclude(s)
			if f := findingtest.First(fs, "reclaim.memcg-livelock"); f != nil {
				t.Fatalf("livelock found: %s", f.Title)
			}
			f := findingtest.First(fs, "reclaim.memcg-pressure")
			if f == nil || f.Severity != finding.Warning {
				t.Fatalf("want a memcg-pressure warning, got %+v", fs)
			}
			if strings.Contains(f.Title, "%%") {
				t.Errorf("title %q", f.Title)
			}
			if f.Subjects[0].Role != finding.RoleCgroup || f.Subjects[0].Cgroup != "/kubepods/burstable/pod-ch" {
				t.Errorf("subjects %+v", f.Subjects)
			}
		})
	}
}

func TestCheapReclaimIsInfo(t *testing.T) {
	s := seedSnapshot()
	c := s.Cgroups[0]
	c.Reclaim = Reclaim{Scanned: 640, Reclaimed: 600}
	c.Reclaim.Calls[kindMemcg] = 20
	c.Reclaim.Time[kindMemcg] = 20 * time.Millisecond
	c.Reclaim.Max[kindMemcg] = 2 * time.Millisecond
	c.Procs[0].SysPct = 1
	fs := Conclude(s)
	if len(fs) != 1 || fs[0].ID != "reclaim.memcg-activity" || fs[0].Severity != finding.Info {
		t.Errorf("findings %+v", fs)
	}
}

func TestHealthyHostHasNoFinding(t *testing.T) {
	s := &Snapshot{Window: 10 * time.Second, System: System{HasPSI: true, PSISome: 0.3}}
	// kswapd-free, reclaim-free host; a cgroup entry with only kswapd-free
	// scanning of its own (none) is not reported either.
	s.Cgroups = []*Cgroup{{ID: 1, Path: "/"}}
	if fs := Conclude(s); len(fs) != 0 {
		t.Errorf("findings on a healthy host: %+v", fs)
	}
	if h := s.Histograms(); len(h) != 0 {
		t.Errorf("histograms: %+v", h)
	}
}

func TestDirectThrottleKswapdPSI(t *testing.T) {
	var r Reclaim
	r.Calls[kindDirect] = 40
	r.Time[kindDirect] = 3 * time.Second
	r.Max[kindDirect] = 400 * time.Millisecond
	r.Throttled = [4]uint64{0, 12, 3, 0}
	r.ThrottledFor = 1200 * time.Millisecond
	r.Worst = &Call{TID: 9, PID: 9, Comm: "java", Kind: "direct", Duration: 400 * time.Millisecond, Scanned: 5000, Reclaimed: 4000}
	var awake hist.Log2
	awake.Add(uint64(2 * time.Second))
	s := &Snapshot{
		Window:  10 * time.Second,
		Cgroups: []*Cgroup{{ID: 1, Path: "/", Reclaim: r}},
		Kswapd:  Kswapd{Wakes: 3, Sleeps: 2, Awake: 2 * time.Second, Scanned: 100000, Reclaimed: 90000, AwakeHist: awake},
		System:  System{HasPSI: true, PSISome: 31, PSIFull: 7},
	}
	fs := Conclude(s)
	for id, sev := range map[string]finding.Severity{"reclaim.direct": finding.Warning, "reclaim.throttled": finding.Warning, "reclaim.kswapd": finding.Info, "reclaim.psi": finding.Warning} {
		f := findingtest.First(fs, id)
		if f == nil || f.Severity != sev {
			t.Errorf("%s: %+v", id, f)
		}
	}
	if f := findingtest.First(fs, "reclaim.throttled"); f != nil && (f.Evidence["throttled_isolated"] != uint64(12) || !strings.Contains(f.Title, "12 isolated")) {
		t.Errorf("throttle finding %+v", f)
	}
	// Direct reclaim alone in the root cgroup is not a cgroup-limit finding.
	for _, f := range fs {
		if strings.HasPrefix(f.ID, "reclaim.memcg") {
			t.Errorf("unexpected %s: %s", f.ID, f.Title)
		}
	}
	hs := s.Histograms()
	if len(hs) != 1 || hs[0].Name != "kswapd_awake_us" {
		t.Errorf("histograms %+v", hs)
	}
}

func TestHistograms(t *testing.T) {
	s := seedSnapshot()
	s.Cgroups[0].Reclaim.ScannedPerCall.Add(1093267)
	hs := s.Histograms()
	names := map[string]finding.Histogram{}
	for _, h := range hs {
		names[h.Name] = h
	}
	d, ok := names["reclaim_duration_us"]
	if !ok || d.Labels["kind"] != "memcg" || d.Labels["cgroup"] != "/kubepods/burstable/pod-ch" || d.Count != 8 || d.Unit != "us" {
		t.Errorf("duration histogram %+v", d)
	}
	if d.Max < 3.7e6 || d.Max > 3.9e6 {
		t.Errorf("max %v us, want ~3.8e6", d.Max)
	}
	if sc, ok := names["reclaim_scanned_pages"]; !ok || sc.Max != 1093267 {
		t.Errorf("scanned histogram %+v", sc)
	}
}

func TestScope(t *testing.T) {
	for _, c := range []struct {
		sc    scope
		path  string
		known bool
		want  bool
	}{
		{scope{}, "", false, true},
		{scope{}, "/a", true, true},
		{scope{under: "/a"}, "/a", true, true},
		{scope{under: "/a"}, "/a/b", true, true},
		{scope{under: "/a"}, "/ab", true, false},
		{scope{under: "/a"}, "", false, false},
		{scope{under: "/"}, "/x/y", true, true},
		{scope{exact: "/"}, "/x", true, false}, // --pid of a process in the root: the root only
		{scope{exact: "/"}, "/", true, true},
		{scope{under: "/a", exact: "/a/b"}, "/a/b", true, true},
		{scope{under: "/a", exact: "/a/b"}, "/a/c", true, false},
	} {
		if got := c.sc.keeps(c.path, c.known); got != c.want {
			t.Errorf("%+v.keeps(%q, %v) = %v, want %v", c.sc, c.path, c.known, got, c.want)
		}
	}
}
