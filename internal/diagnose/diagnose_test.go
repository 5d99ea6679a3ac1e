package diagnose

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/wolf-investigator/wolf/internal/finding"
)

// The fixtures are shaped as the investigators report them (the keys
// facts.go documents), trimmed to what the joins read plus some noise.

func memcgFindings() []finding.Finding {
	return []finding.Finding{
		{ID: "locks.contention", Investigator: "locks", Severity: finding.Critical, Title: "mmap_lock of memchain (pid 100): 40 s waited by 30 tasks; held by readers",
			Evidence: map[string]any{"lock": "mmap_lock of memchain (pid 100)", "lock_addr": "0xffff888100000d38", "mm_pid": 100, "wait_ns_total": uint64(40e9)},
			Subjects: []finding.Subject{
				{Role: finding.RoleOwner, Comm: "(exited)", Evidence: map[string]any{"owner": "latest_reader", "waited_ms": 30000.0}},
				{Role: finding.RoleOwner, PID: 100, TID: 111, Comm: "r_file", Evidence: map[string]any{"owner": "latest_reader", "waited_ms": 2300.0}},
				{Role: finding.RoleWaiter, PID: 100, TID: 120, Comm: "r_file", Evidence: map[string]any{"wait_ms_total": 4400.0, "wait_ms_max": 236.0, "waits": 158, "mode": "read"}},
				{Role: finding.RoleWaiter, PID: 200, TID: 200, Comm: "psreader", Evidence: map[string]any{"wait_ms_total": 9600.0, "wait_ms_max": 610.0, "waits": 16, "mode": "read"}},
				{Role: finding.RoleWaiter, PID: 100, TID: 130, Comm: "r_memory", Evidence: map[string]any{"wait_ms_total": 900.0, "wait_ms_max": 300.0, "waits": 9, "mode": "write"}},
			}},
		{ID: "locks.writer-starvation", Investigator: "locks", Severity: finding.Warning, Title: "mmap_lock of memchain (pid 100): 2516 reader waits queued behind a waiting writer",
			Evidence: map[string]any{"lock": "mmap_lock of memchain (pid 100)", "lock_addr": "0xffff888100000d38"}},
		{ID: "locks.mmap-hold", Investigator: "locks", Severity: finding.Warning, Title: "mmap_lock of memchain (pid 100) held 160 ms for reading by r_memory (tid 105)",
			Evidence: map[string]any{"mm_pid": 100, "hold_ms_max": 160.0, "hold_ms_total": 2800.0, "holds_over_threshold": 47, "write": false,
				"runtime_ms_total": 300.0, "runnable_ms_total": 900.0, "throttled_ms_total": 0.0, "reclaim_ms_total": 2100.0,
				"pages_scanned_total": 90000, "pages_reclaimed_total": 900},
			Subjects: []finding.Subject{{Role: finding.RoleHolder, PID: 100, TID: 105, Comm: "r_memory"}}},
		{ID: "reclaim.memcg-pressure", Investigator: "reclaim", Severity: finding.Warning, Title: "cgroup /wolf-lab-memchain is reclaiming at its memory limit",
			Evidence:    map[string]any{"cgroup": "/wolf-lab-memchain", "limit_bytes": int64(192 << 20), "usage_bytes": int64(191 << 20), "limit_hits": uint64(208739), "efficiency_pct": 1.0, "pids": []int{100}},
			Remediation: []string{"Give the cgroup headroom."},
			Subjects: []finding.Subject{{Role: finding.RoleCgroup, Cgroup: "/wolf-lab-memchain", CgroupID: 4242},
				{Role: finding.RoleTask, PID: 100, Comm: "memchain", Cgroup: "/wolf-lab-memchain"}}},
		{ID: "sched.runq-latency", Investigator: "sched", Severity: finding.Critical, Title: "Run-queue latency p99 reaches 388 ms"},
		{ID: "system.cpu-saturated", Investigator: "system", Severity: finding.Warning, Title: "All 2 CPUs saturated: 100% busy over 10 s"},
	}
}

func quotaFindings() []finding.Finding {
	return []finding.Finding{
		{ID: "locks.contention", Investigator: "locks", Severity: finding.Warning, Title: "mmap_lock of quotalab (pid 201): 3 s waited by 2 tasks; owner quotalab (pid 201)",
			Evidence: map[string]any{"lock": "mmap_lock of quotalab (pid 201)", "lock_addr": "0xffff888100aa0d38", "mm_pid": 201},
			Subjects: []finding.Subject{
				{Role: finding.RoleOwner, PID: 201, TID: 205, Comm: "holder", Evidence: map[string]any{"owner": "exact", "waited_ms": 3000.0, "mode": "write"}},
				{Role: finding.RoleWaiter, PID: 300, TID: 300, Comm: "psreader", Evidence: map[string]any{"wait_ms_total": 2600.0, "wait_ms_max": 410.0, "waits": 40, "mode": "read"}},
			}},
		{ID: "locks.mmap-hold", Investigator: "locks", Severity: finding.Warning, Title: "mmap_lock of quotalab (pid 201) held 420 ms for writing by holder (tid 205)",
			Evidence: map[string]any{"mm_pid": 201, "hold_ms_max": 420.0, "hold_ms_total": 6000.0, "holds_over_threshold": 30, "write": true,
				"runtime_ms_total": 400.0, "runnable_ms_total": 5500.0, "throttled_ms_total": 5100.0, "reclaim_ms_total": 0.0},
			Subjects: []finding.Subject{{Role: finding.RoleHolder, PID: 201, TID: 205, Comm: "holder"}}},
		{ID: "sched.cpu-throttled", Investigator: "sched", Severity: finding.Warning, Title: "cgroup /wolf-lab-quota throttled in 95% of its CPU periods",
			Evidence: map[string]any{"cgroup": "/wolf-lab-quota", "quota_us": 5000, "period_us": 100000, "nr_periods": 100, "nr_throttled": 95, "throttled_pct": 95.0, "throttled_s": 9.1, "pids": []int{201}},
			Subjects: []finding.Subject{{Role: finding.RoleCgroup, Cgroup: "/wolf-lab-quota"}, {Role: finding.RoleTask, PID: 201, Comm: "quotalab"}}},
	}
}

func fuseFindings() []finding.Finding {
	lock := "mmap_lock of pshang (pid 400)"
	addr := "0xffff888100bb0d38"
	return []finding.Finding{
		{ID: "hung.lock-owner", Investigator: "hung", Severity: finding.Critical, Title: "2 tasks hung 12 s on " + lock,
			Evidence: map[string]any{"lock": lock, "lock_addr": addr, "mm_pid": 400, "lock_type": "rw-semaphore", "owner_likely": true, "blocked_s": 12.0},
			Subjects: []finding.Subject{
				{Role: finding.RoleOffender, PID: 400, TID: 401, Comm: "memreader", State: "D",
					Evidence: map[string]any{"sleeps_on": "folio", "wait_site": "filemap_fault", "fuse_opcode": "READ", "fuse_unique": 42, "fuse_age_s": 12.5, "fuse_request_from_task": true, "mode": "read"}},
				{Role: finding.RoleOwner, PID: 600, TID: 600, Comm: "wolf", Detail: "FUSE daemon", Evidence: map[string]any{"fuse_daemon": true}},
				{Role: finding.RoleVictim, PID: 400, TID: 402, Comm: "unmapper", State: "D", Lock: lock, LockAddr: addr, Evidence: map[string]any{"blocked_s": 11.8, "mode": "write"}},
				{Role: finding.RoleVictim, PID: 500, TID: 500, Comm: "cat", State: "D", Lock: lock, LockAddr: addr, Evidence: map[string]any{"blocked_s": 11.0, "mode": "read", "behind_writer_tid": 402}},
			}},
		{ID: "hung.wait-site", Investigator: "hung", Severity: finding.Warning, Title: "1 task blocked 12 s in filemap_fault",
			Subjects: []finding.Subject{{Role: finding.RoleVictim, PID: 400, TID: 401, Comm: "memreader", State: "D", Evidence: map[string]any{"sleeps_on": "folio", "blocked_s": 12.4}}}},
	}
}

func only(t *testing.T, ds []finding.Diagnosis) finding.Diagnosis {
	t.Helper()
	if len(ds) != 1 {
		var titles []string
		for _, d := range ds {
			titles = append(titles, d.Title)
		}
		t.Fatalf("%d diagnoses, want 1: %q", len(ds), titles)
	}
	return ds[0]
}

func subject(d finding.Diagnosis, role string, match func(finding.Subject) bool) *finding.Subject {
	for i := range d.Subjects {
		if d.Subjects[i].Role == role && match(d.Subjects[i]) {
			return &d.Subjects[i]
		}
	}
	return nil
}

func relations(d finding.Diagnosis) []string {
	var out []string
	for _, h := range d.Chain {
		out = append(out, string(h.Relation))
	}
	return out
}

func TestMemcgLimitUnderMmapLock(t *testing.T) {
	d := only(t, Diagnose(memcgFindings()))
	if d.ID != "diagnose.memcg-limit" || d.Root.Role != finding.RoleCgroup || d.Root.Cgroup != "/wolf-lab-memchain" {
		t.Fatalf("root %s %+v", d.ID, d.Root)
	}
	if !strings.Contains(d.Title, "192 MiB") || !strings.Contains(d.Title, "mmap_lock of memchain (pid 100)") {
		t.Errorf("title %q", d.Title)
	}
	if v := subject(d, finding.RoleVictim, func(s finding.Subject) bool { return s.PID == 200 }); v == nil {
		t.Errorf("the reader from another process is not a victim: %+v", d.Subjects)
	} else if d.Subjects[0].PID != 200 {
		t.Errorf("the reader from another process should come first, got %+v", d.Subjects[0])
	}
	if subject(d, finding.RoleHolder, func(s finding.Subject) bool { return s.TID == 105 }) == nil {
		t.Errorf("holder 105 missing: %+v", d.Subjects)
	}
	if subject(d, finding.RoleLock, func(s finding.Subject) bool { return s.Lock == "mmap_lock of memchain (pid 100)" }) == nil {
		t.Errorf("lock missing: %+v", d.Subjects)
	}
	rel := relations(d)
	for _, want := range []finding.Relation{waitsOn, heldBy, spendsHold, constrainedBy} {
		if !slices.Contains(rel, string(want)) {
			t.Errorf("chain %v lacks %s", rel, want)
		}
	}
	for _, h := range d.Chain {
		if len(h.Evidence) == 0 && h.Relation != heldBy {
			t.Errorf("hop without numbers: %+v", h)
		}
		if h.Mechanism == "" {
			t.Errorf("hop without mechanism: %+v", h)
		}
	}
	var spend finding.Hop
	for _, h := range d.Chain {
		if h.Relation == spendsHold {
			spend = h
		}
	}
	if num(spend.Evidence, "reclaim_ms") != 2100 || !strings.Contains(spend.Text, "in memory reclaim 2.1 s (75%)") {
		t.Errorf("spend hop %+v", spend)
	}
	for _, id := range []string{"locks.contention", "locks.writer-starvation", "locks.mmap-hold", "reclaim.memcg-pressure"} {
		if !slices.Contains(d.Explains, id) {
			t.Errorf("explains %v lacks %s", d.Explains, id)
		}
	}
	if slices.Contains(d.Explains, "sched.runq-latency") {
		t.Errorf("a reclaim chain does not explain run-queue latency: %v", d.Explains)
	}
	if d.Confidence != "certain" {
		t.Errorf("confidence %s: the holds were measured", d.Confidence)
	}
}

func TestCPUQuotaThrottledHolder(t *testing.T) {
	d := only(t, Diagnose(quotaFindings()))
	if d.ID != "diagnose.cpu-quota" || d.Root.Cgroup != "/wolf-lab-quota" {
		t.Fatalf("root %s %+v", d.ID, d.Root)
	}
	if !strings.Contains(d.Title, "5.0 ms per 100 ms") || !strings.Contains(d.Title, "95%") {
		t.Errorf("title %q", d.Title)
	}
	if subject(d, finding.RoleHolder, func(s finding.Subject) bool { return s.TID == 205 }) == nil ||
		subject(d, finding.RoleVictim, func(s finding.Subject) bool { return s.PID == 300 }) == nil {
		t.Errorf("subjects %+v", d.Subjects)
	}
	if d.Confidence != "certain" {
		t.Errorf("throttling measured per hold is certain, got %s", d.Confidence)
	}
}

// A holder that waited for a CPU while its cgroup was throttled, on a
// kernel that showed wolf it was not throttled itself: the quota is not
// the cause, whatever the window's numbers say.
func TestRunnableHolderNotBlamedOnQuotaItDidNotFeel(t *testing.T) {
	fs := quotaFindings()
	fs[1].Evidence["throttled_ms_total"] = 0.0
	for _, d := range Diagnose(fs) {
		if d.ID == "diagnose.cpu-quota" {
			t.Fatalf("blamed the quota: %s", d.Title)
		}
	}
	// Without per-task throttling (older kernels), the window-level
	// attribution is made and said to be likely.
	delete(fs[1].Evidence, "throttled_ms_total")
	d := only(t, Diagnose(fs))
	if d.ID != "diagnose.cpu-quota" || d.Confidence != "likely" || len(d.Confirm) == 0 {
		t.Errorf("%s %s %v", d.ID, d.Confidence, d.Confirm)
	}
}

func TestFuseReaderOwnedMmapLock(t *testing.T) {
	d := only(t, Diagnose(fuseFindings()))
	if d.ID != "diagnose.fuse-daemon" || d.Root.Role != finding.RoleDaemon || d.Root.PID != 600 {
		t.Fatalf("root %s %+v", d.ID, d.Root)
	}
	checks := map[string]*finding.Subject{
		"reader-owner 401": subject(d, finding.RoleHolder, func(s finding.Subject) bool { return s.TID == 401 }),
		"queued writer": subject(d, finding.RoleVictim, func(s finding.Subject) bool {
			return s.TID == 402 && num(s.Evidence, "blocked_s") > 0 && str(s.Evidence, "mode") == "write"
		}),
		"cmdline reader": subject(d, finding.RoleVictim, func(s finding.Subject) bool { return s.PID == 500 && str(s.Evidence, "mode") == "read" }),
		"daemon":         subject(d, finding.RoleDaemon, func(s finding.Subject) bool { return s.PID == 600 }),
		"mmap_lock":      subject(d, finding.RoleLock, func(s finding.Subject) bool { return strings.HasPrefix(s.Lock, "mmap_lock") }),
	}
	for what, s := range checks {
		if s == nil {
			t.Errorf("%s missing from %+v", what, d.Subjects)
		}
	}
	if d.Confidence != "likely" {
		t.Errorf("a reader-owned lock's holder is likely, got %s", d.Confidence)
	}
	if !slices.Contains(d.Explains, "hung.wait-site") || !slices.Contains(d.Explains, "hung.lock-owner") {
		t.Errorf("explains %v", d.Explains)
	}
	found := false
	for _, h := range d.Chain {
		if h.Relation == waitsOn && num(h.Evidence, "behind_writer_tid") == 402 {
			found = true
		}
	}
	if !found {
		t.Errorf("no hop says the reader queued behind the writer: %+v", d.Chain)
	}
}

func TestTwoUnrelatedProblemsStayTwo(t *testing.T) {
	fs := append(memcgFindings(), fuseFindings()...)
	ds := Diagnose(fs)
	if len(ds) != 2 {
		t.Fatalf("%d diagnoses", len(ds))
	}
	ids := []string{ds[0].ID, ds[1].ID}
	slices.Sort(ids)
	if ids[0] != "diagnose.fuse-daemon" || ids[1] != "diagnose.memcg-limit" {
		t.Errorf("ids %v", ids)
	}
	// Critical first: the hung chain.
	if ds[0].Severity != finding.Critical {
		t.Errorf("first %s %v", ds[0].ID, ds[0].Severity)
	}
	r := &finding.Report{Findings: fs}
	Apply(r)
	for _, f := range r.Findings {
		if len(f.ExplainedBy) > 1 {
			t.Errorf("%s explained by %v: the problems share nothing", f.ID, f.ExplainedBy)
		}
	}
}

// A busy host: CPUs saturated, run queues long, long mmap_lock holds by a
// compiler nobody waits for, everyday contention of tens of milliseconds.
func TestBusyHealthyHostHasNone(t *testing.T) {
	fs := []finding.Finding{
		{ID: "sched.runq-latency", Severity: finding.Critical, Title: "Run-queue latency p99 reaches 600 ms"},
		{ID: "system.cpu-saturated", Severity: finding.Warning, Title: "All 2 CPUs saturated"},
		{ID: "locks.mmap-hold", Severity: finding.Warning, Evidence: map[string]any{"mm_pid": 900, "hold_ms_max": 128.0, "hold_ms_total": 128.0, "holds_over_threshold": 1,
			"runtime_ms_total": 10.0, "runnable_ms_total": 110.0, "throttled_ms_total": 0.0, "reclaim_ms_total": 0.0},
			Subjects: []finding.Subject{{Role: finding.RoleHolder, PID: 900, TID: 901, Comm: "cc1"}}},
		{ID: "locks.contention", Severity: finding.Info, Evidence: map[string]any{"lock": "mmap_lock of cc1 (pid 900)", "lock_addr": "0xffff1", "mm_pid": 900},
			Subjects: []finding.Subject{{Role: finding.RoleWaiter, PID: 900, TID: 902, Comm: "cc1", Evidence: map[string]any{"wait_ms_total": 60.0, "wait_ms_max": 40.0, "waits": 3}}}},
		{ID: "sched.cpu-throttled", Severity: finding.Warning, Evidence: map[string]any{"cgroup": "/ci", "quota_us": 50000, "period_us": 100000, "throttled_pct": 40.0, "pids": []int{900}},
			Subjects: []finding.Subject{{Role: finding.RoleCgroup, Cgroup: "/ci"}}},
	}
	if ds := Diagnose(fs); len(ds) != 0 {
		t.Errorf("busy host diagnosed: %s", ds[0].Title)
	}
	if ds := Diagnose(nil); len(ds) != 0 {
		t.Error("empty report diagnosed")
	}
}

// Waiting for a CPU behind a saturated host is a diagnosis only when
// someone waited long for the lock.
func TestHostCPUSaturation(t *testing.T) {
	fs := quotaFindings()[:2]
	fs[1].Evidence["throttled_ms_total"] = 0.0
	fs = append(fs, finding.Finding{ID: "system.cpu-saturated", Severity: finding.Warning, Title: "All 2 CPUs saturated: 100% busy over 10 s",
		Evidence: map[string]any{"busy_pct": 100.0, "cpus": 2, "cpu1_p99_us": 5.0}})
	fs[0].Subjects[1].Evidence["wait_ms_max"] = 1500.0
	d := only(t, Diagnose(fs))
	if d.ID != "diagnose.host-cpu" || !slices.Contains(d.Explains, "system.cpu-saturated") {
		t.Errorf("%s %v", d.ID, d.Explains)
	}
	// The hop to the host carries the saturation's numbers, as every hop
	// carries its own.
	last := d.Chain[len(d.Chain)-1]
	if last.Relation != constrainedBy || last.Evidence["busy_pct"] != 100.0 || last.Evidence["cpus"] != 2 || last.Evidence["cpu1_p99_us"] != nil {
		t.Errorf("host hop: %s %v", last.Relation, last.Evidence)
	}
	fs[0].Subjects[1].Evidence["wait_ms_max"] = 410.0
	if ds := Diagnose(fs); len(ds) != 0 {
		t.Errorf("410 ms behind a busy CPU diagnosed: %s", ds[0].Title)
	}
}

// The JSON a script reads back diagnoses the same (numbers become
// float64, lists []any).
func TestDiagnoseAfterJSONRoundTrip(t *testing.T) {
	for name, fs := range map[string][]finding.Finding{"memcg": memcgFindings(), "quota": quotaFindings(), "fuse": fuseFindings()} {
		b, err := json.Marshal(fs)
		if err != nil {
			t.Fatal(err)
		}
		var back []finding.Finding
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		a, z := Diagnose(fs), Diagnose(back)
		if len(a) != len(z) || len(a) == 0 || a[0].Title != z[0].Title || a[0].ID != z[0].ID {
			t.Errorf("%s: %d vs %d diagnoses", name, len(a), len(z))
		}
	}
}

func TestApplyFoldsExplainedFindings(t *testing.T) {
	r := &finding.Report{Findings: memcgFindings()}
	Apply(r)
	if len(r.Diagnoses) != 1 || r.Diagnoses[0].Ref != "D1" {
		t.Fatalf("%+v", r.Diagnoses)
	}
	for _, f := range r.Findings {
		explained := len(f.ExplainedBy) > 0
		want := f.ID != "sched.runq-latency" && f.ID != "system.cpu-saturated"
		if explained != want {
			t.Errorf("%s explained %v", f.ID, f.ExplainedBy)
		}
	}
	// Applying twice gives the same result.
	Apply(r)
	if len(r.Diagnoses) != 1 || len(r.Findings[0].ExplainedBy) != 1 {
		t.Errorf("second Apply: %d diagnoses, %v", len(r.Diagnoses), r.Findings[0].ExplainedBy)
	}
}

// A holder waiting for another lock: the chain goes on through it.
func TestLockChainThroughOwners(t *testing.T) {
	fs := []finding.Finding{
		{ID: "hung.lock-owner", Severity: finding.Critical, Evidence: map[string]any{"lock_addr": "0xa", "lock": "rtnl_mutex"},
			Subjects: []finding.Subject{
				{Role: finding.RoleOffender, PID: 10, TID: 10, Comm: "ip", State: "D", Lock: "i_rwsem in x", LockAddr: "0xb", Evidence: map[string]any{"sleeps_on": "lock"}},
				{Role: finding.RoleVictim, PID: 11, TID: 11, Comm: "sshd", State: "D", Evidence: map[string]any{"blocked_s": 30.0}},
			}},
		{ID: "hung.lock-owner", Severity: finding.Critical, Evidence: map[string]any{"lock_addr": "0xb"},
			Subjects: []finding.Subject{
				{Role: finding.RoleOffender, PID: 20, TID: 20, Comm: "sh", State: "S", Evidence: map[string]any{"sleeps_on": "fuse", "fuse_opcode": "WRITE"}},
				{Role: finding.RoleOwner, PID: 30, TID: 30, Comm: "fused", Evidence: map[string]any{"fuse_daemon": true}},
				{Role: finding.RoleVictim, PID: 10, TID: 10, Comm: "ip", State: "D", Evidence: map[string]any{"blocked_s": 31.0}},
			}},
	}
	ds := Diagnose(fs)
	if len(ds) != 1 {
		t.Fatalf("%d diagnoses", len(ds))
	}
	d := ds[0]
	if d.ID != "diagnose.fuse-daemon" || d.Root.PID != 30 {
		t.Errorf("%s root %+v", d.ID, d.Root)
	}
	if subject(d, finding.RoleLock, func(s finding.Subject) bool { return s.LockAddr == "0xb" }) == nil {
		t.Errorf("the second lock is not in the chain: %+v", d.Subjects)
	}
	// The owner's own wait on the second lock is a hop with its numbers.
	var own *finding.Hop
	for i, h := range d.Chain {
		if h.Relation == waitsOn && h.From.TID == 10 && h.To.LockAddr == "0xb" {
			own = &d.Chain[i]
		}
	}
	if len(d.Chain) != 6 {
		for _, h := range d.Chain {
			t.Log(h.Relation, ": ", h.Text)
		}
		t.Errorf("%d hops, want 6 (the second lock's chain said once)", len(d.Chain))
	}
	if own == nil || own.Evidence["blocked_s"] != 31.0 || !strings.Contains(own.Text, "ip (pid 10), while holding rtnl_mutex, itself has been blocked (D) 31 s on") {
		t.Errorf("the owner's wait: %+v", own)
	}
}

// A mutex owner others waited on, busy on a CPU between the first and the
// last wait that found it owning the lock: the holder's own work is the
// root, said with the owner's split.
func TestOwnerSpanSaysWhereItsTimeWent(t *testing.T) {
	fs := []finding.Finding{{ID: "locks.contention", Severity: finding.Critical, Evidence: map[string]any{"lock": "rtnl_mutex", "lock_addr": "0xffffffff83e1c5a0"},
		Subjects: []finding.Subject{
			{Role: finding.RoleOwner, PID: 38, TID: 38, Comm: "calico-node", Evidence: map[string]any{"owner": "exact", "waited_ms": 21000.0, "span_ms": 9000.0, "on_cpu_ms": 8500.0, "runnable_ms": 300.0}},
			{Role: finding.RoleWaiter, PID: 40, TID: 40, Comm: "ip", Evidence: map[string]any{"wait_ms_total": 9000.0, "wait_ms_max": 2100.0, "waits": 3}},
		}}}
	d := only(t, Diagnose(fs))
	if d.ID != "diagnose.holder-work" || d.Root.TID != 38 {
		t.Fatalf("%s root %+v", d.ID, d.Root)
	}
	last := d.Chain[len(d.Chain)-1]
	if last.Relation != spendsHold || num(last.Evidence, "on_cpu_ms") != 8500 || !strings.Contains(last.Text, "between the first and the last wait") {
		t.Errorf("last hop %+v", last)
	}
}

// A lock that is wolf's own (its own mmap_lock, held by its threads while
// khugepaged waits: seen on 5.10 under emulation while wolf loaded) is
// wolf's doing: no diagnosis, on an otherwise idle host.
func TestWolfsOwnDoingIsNoDiagnosis(t *testing.T) {
	fs := []finding.Finding{{ID: "locks.contention", Investigator: "locks", Severity: finding.Info,
		Title:    "rw-semaphore in khugepaged: 1.6 s waited by 1 task; held by readers; wolf's own",
		Evidence: map[string]any{"lock": "rw-semaphore in khugepaged", "lock_addr": "0xffff8a893ee315b8", "cause": "wolf"},
		Subjects: []finding.Subject{
			{Role: finding.RoleOwner, PID: 203, TID: 218, Comm: "wolf", Evidence: map[string]any{"owner": "latest_reader", "waited_ms": 1643.6}},
			{Role: finding.RoleWaiter, PID: 32, TID: 32, Comm: "khugepaged", Evidence: map[string]any{"wait_ms_total": 1643.6, "wait_ms_max": 1643.6, "waits": 1, "mode": "write", "ongoing": true}},
		}}}
	if ds := Diagnose(fs); len(ds) != 0 {
		t.Errorf("wolf's own lock diagnosed: %s", ds[0].Title)
	}
	fs[0].Evidence["cause"] = nil
	if ds := Diagnose(fs); len(ds) == 0 {
		t.Error("the same lock held by another process is no diagnosis: the test proves nothing")
	}
}

// A convoy: holders of an mmap_lock starved of CPU, a reader that waited
// 4.4 s of a 10 s window in waits of half a second (Debian's 6.12 under
// emulation, the memcg lab's 32 threads on two CPUs). Half that is a busy
// host, no diagnosis.
func TestConvoyBehindCPUStarvedHolders(t *testing.T) {
	fs := quotaFindings()[:2]
	fs[1].Evidence["throttled_ms_total"] = 0.0
	fs = append(fs, finding.Finding{ID: "system.cpu-saturated", Severity: finding.Warning, Title: "All 2 CPUs saturated: 98% busy over 42 s"})
	fs[0].Evidence["window_s"] = 10.0
	fs[0].Subjects[1].Evidence["wait_ms_max"] = 502.0
	fs[0].Subjects[1].Evidence["wait_ms_total"] = 4449.0
	if d := only(t, Diagnose(fs)); d.ID != "diagnose.host-cpu" {
		t.Errorf("%s: %s", d.ID, d.Title)
	}
	fs[0].Subjects[1].Evidence["wait_ms_total"] = 2200.0
	if ds := Diagnose(fs); len(ds) != 0 {
		t.Errorf("2.2 s of 10 s behind a busy CPU diagnosed: %s", ds[0].Title)
	}
	// In a minute's window (wolf watch), 4.4 s is a busy host too.
	fs[0].Evidence["window_s"] = 60.0
	fs[0].Subjects[1].Evidence["wait_ms_total"] = 4449.0
	if ds := Diagnose(fs); len(ds) != 0 {
		t.Errorf("4.4 s of 60 s behind a busy CPU diagnosed: %s", ds[0].Title)
	}
}
