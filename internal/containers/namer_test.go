package containers

import (
	"context"
	"strings"
	"testing"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/procfs"
)

const (
	tID  = "be7701a021ff5b1c8bf2d9bd4a0c3a8e5e2d3f1a9c0b8d7e6f5a4b3c2d1e0f9a"
	tID2 = "3f2a1b9c0d1e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f90"
	tUID = "8f1c2d3e-4a5b-6c7d-8e9f-0a1b2c3d4e5f"
	tUS  = "8f1c2d3e_4a5b_6c7d_8e9f_0a1b2c3d4e5f"
)

func TestInfoText(t *testing.T) {
	cases := []struct {
		info Info
		want string
	}{
		{Info{Ref: Ref{Runtime: Containerd, ID: tID, PodUID: tUID, QoS: Burstable}, Name: "server", Pod: "clickhouse-0", Namespace: "prod"},
			"pod clickhouse-0 (ns prod), container server"},
		{Info{Ref: Ref{Runtime: Podman, ID: tID, PodID: tID2}, Name: "web", Pod: "shop"}, "pod shop, container web"},
		{Info{Ref: Ref{Runtime: Docker, ID: tID}, Name: "db"}, "container db"},
		{Info{Ref: Ref{Runtime: Containerd, ID: tID, PodUID: tUID, QoS: Burstable}}, "pod uid " + tUID + ", containerd container be7701a021ff"},
		{Info{Ref: Ref{Runtime: CRI, ID: tID, PodUID: tUID}}, "pod uid " + tUID + ", container be7701a021ff"},
		{Info{Ref: Ref{Runtime: Docker, ID: tID}}, "docker container be7701a021ff"},
		{Info{Ref: Ref{ID: tID}}, "container be7701a021ff"},
		{Info{Ref: Ref{PodUID: tUID, QoS: Guaranteed}, Pod: "clickhouse-0", Namespace: "prod"}, "pod clickhouse-0 (ns prod)"},
		{Info{Ref: Ref{Runtime: CRIO, ID: tID, Monitor: true, PodUID: tUID}, Name: "server", Pod: "ch-0", Namespace: "prod"}, "pod ch-0 (ns prod), conmon of container server"},
		{Info{Ref: Ref{Runtime: Containerd, ID: tID, PodUID: tUID}, Pod: "ch-0", Namespace: "prod", Sandbox: true}, "pod ch-0 (ns prod), sandbox container be7701a021ff"},
		{Info{Ref: Ref{PodID: tID2}}, "podman pod 3f2a1b9c0d1e"},
		{Info{}, ""},
	}
	for _, c := range cases {
		if got := c.info.Text(); got != c.want {
			t.Errorf("%+v: Text() = %q, want %q", c.info, got, c.want)
		}
	}
}

func TestReplacePath(t *testing.T) {
	p := "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + tUS + ".slice/cri-containerd-" + tID + ".scope"
	n := "pod clickhouse-0 (ns prod), container server"
	cases := []struct{ in, want string }{
		// sched.cpu-throttled's title
		{"cgroup " + p + " throttled by its CPU quota in 100% of periods: 10 ms per 100 ms",
			n + " throttled by its CPU quota in 100% of periods: 10 ms per 100 ms"},
		// the diagnosis titles
		{"Memory cgroup " + p + " at its limit (192 MiB): its reclaim runs under mmap_lock",
			"Memory cgroup of " + n + " at its limit (192 MiB): its reclaim runs under mmap_lock"},
		{"CPU quota of cgroup " + p + " (10 ms per 100 ms): 3 tasks wait",
			"CPU quota of " + n + " (10 ms per 100 ms): 3 tasks wait"},
		{"Reclaim livelock in cgroup " + p + ": calls last up to 2 s",
			"Reclaim livelock in " + n + ": calls last up to 2 s"},
		{"r_file (pid 5) is in memory cgroup " + p + ", which sits at its memory limit",
			"r_file (pid 5) is in memory cgroup of " + n + ", which sits at its memory limit"},
		{"throttled 3 s in 9 waits by the CPU quota of cgroup " + p + ".",
			"throttled 3 s in 9 waits by the CPU quota of " + n + "."},
		{"bare " + p + " here", "bare " + n + " here"},
		{"twice: cgroup " + p + " and cgroup " + p, "twice: cgroup of " + n + " and cgroup of " + n},
		// not the path: a longer one, or one it is inside of
		{"cgroup " + p + "/sub is busy", "cgroup " + p + "/sub is busy"},
		{"cgroup " + p + ".old is busy", "cgroup " + p + ".old is busy"},
		{"cgroup /x" + p + " is busy", "cgroup /x" + p + " is busy"},
		{"nothing here", "nothing here"},
	}
	for _, c := range cases {
		if got := replacePath(c.in, p, n); got != c.want {
			t.Errorf("replacePath(%q)\n got %q\nwant %q", c.in, got, c.want)
		}
	}
}

// fakeSource is a source with fixed answers, counting questions.
type fakeSource struct {
	metas        []Meta
	gets, lists  int
	noGet        bool
	listBlocksOn chan struct{}
}

func (f *fakeSource) name() string { return "fake" }
func (f *fakeSource) list(ctx context.Context) ([]Meta, error) {
	f.lists++
	if f.listBlocksOn != nil {
		select {
		case <-f.listBlocksOn:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return f.metas, nil
}
func (f *fakeSource) get(_ context.Context, id string) (Meta, bool) {
	f.gets++
	if f.noGet {
		return Meta{}, false
	}
	for _, m := range f.metas {
		if m.ID == id {
			return m, true
		}
	}
	return Meta{}, false
}

func TestNamerReport(t *testing.T) {
	p := "/kubepods/burstable/pod" + tUID + "/" + tID
	unknown := "/docker/" + tID2
	disk := &fakeSource{metas: []Meta{{ID: tID, Runtime: Containerd, Name: "server", Image: "clickhouse:24", Pod: "clickhouse-0", Namespace: "prod", PodUID: tUID}}}
	n := &Namer{Resolver: newResolverOf([]source{disk}, nil), Proc: procfs.Reader{Root: t.TempDir()}}
	rep := &finding.Report{
		Findings: []finding.Finding{{
			ID: "sched.cpu-throttled", Title: "cgroup " + p + " throttled by its CPU quota in 100% of periods",
			Subjects:    []finding.Subject{{Role: finding.RoleCgroup, Cgroup: p}, {Role: finding.RoleTask, PID: 7, Comm: "x", Cgroup: p}},
			Remediation: []string{"Raise the quota (v1: echo N > " + p + "/cpu.cfs_quota_us)"},
		}, {
			ID: "x.y", Title: "cgroup " + unknown + " is busy", Subjects: []finding.Subject{{Role: finding.RoleCgroup, Cgroup: unknown}},
		}, {
			ID: "x.z", Title: "cgroup /system.slice/a.service is busy", Subjects: []finding.Subject{{Role: finding.RoleCgroup, Cgroup: "/system.slice/a.service"}},
		}},
		Diagnoses: []finding.Diagnosis{{
			Title: "CPU quota of cgroup " + p + " (10 ms per 100 ms): x waits",
			Root:  finding.Subject{Role: finding.RoleCgroup, Cgroup: p},
			Chain: []finding.Hop{{From: finding.Subject{Role: finding.RoleVictim, PID: 9}, To: finding.Subject{Role: finding.RoleCgroup, Cgroup: p},
				Text: "x (pid 9) is in cgroup " + p + ", whose CPU quota is 10 ms"}},
		}},
	}
	n.Report(context.Background(), rep)
	want := "pod clickhouse-0 (ns prod), container server"
	f := rep.Findings[0]
	if f.Title != want+" throttled by its CPU quota in 100% of periods" {
		t.Errorf("title: %q", f.Title)
	}
	w := f.Subjects[0].Workload
	if w.Label != want || w.Pod != "clickhouse-0" || w.Namespace != "prod" || w.Container != "server" || w.ContainerID != tID ||
		w.Runtime != Containerd || w.PodUID != tUID || w.QoS != Burstable || w.Image != "clickhouse:24" {
		t.Errorf("workload: %+v", w)
	}
	if f.Subjects[1].Workload.Label != want {
		t.Errorf("task subject: %+v", f.Subjects[1].Workload)
	}
	if !strings.Contains(f.Remediation[0], p+"/cpu.cfs_quota_us") {
		t.Errorf("remediation must keep the path: %q", f.Remediation[0])
	}
	if got := rep.Findings[1].Title; got != "docker container 3f2a1b9c0d1e is busy" {
		t.Errorf("an unresolved container reads as what its path says: %q", got)
	}
	if got := rep.Findings[2].Title; got != "cgroup /system.slice/a.service is busy" || rep.Findings[2].Subjects[0].Workload != (finding.Workload{}) {
		t.Errorf("a cgroup of no container reads as its path: %q %+v", got, rep.Findings[2].Subjects[0].Workload)
	}
	d := rep.Diagnoses[0]
	if d.Title != "CPU quota of "+want+" (10 ms per 100 ms): x waits" || d.Root.Workload.Label != want || d.Chain[0].To.Workload.Label != want ||
		d.Chain[0].Text != "x (pid 9) is in "+want+", whose CPU quota is 10 ms" {
		t.Errorf("diagnosis: %q / %q / %+v", d.Title, d.Chain[0].Text, d.Root.Workload)
	}
	if len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "3f2a1b9c0d1e (docker)") {
		t.Errorf("notes: %q", rep.Notes)
	}
	// Asked once per container, however often it is named.
	gets := disk.gets
	n.Report(context.Background(), rep)
	if disk.gets != gets {
		t.Errorf("a known container was asked about again: %d -> %d", gets, disk.gets)
	}
}

// A task named by pid alone gets its container from /proc/PID/cgroup.
func TestNamerTask(t *testing.T) {
	root := t.TempDir()
	writeFile(t, root+"/42/cgroup", "12:memory:/libpod_parent/libpod-"+tID+"\n11:cpu:/libpod_parent/libpod-"+tID+"\n0::/\n")
	disk := &fakeSource{metas: []Meta{{ID: tID, Runtime: Podman, Name: "web", PodID: tID2}}}
	asked := &fakeSource{metas: []Meta{{ID: tID, Runtime: Podman, Name: "web", Pod: "shop", PodID: tID2}}, noGet: true}
	r := newResolverOf([]source{disk}, []source{asked})
	if err := r.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	n := &Namer{Resolver: r, Proc: procfs.Reader{Root: root}}
	fs := []finding.Finding{{Title: "a task", Subjects: []finding.Subject{{Role: finding.RoleVictim, PID: 42, Comm: "web"}, {Role: finding.RoleVictim, PID: 43, Comm: "gone"}}}}
	n.Findings(context.Background(), fs)
	if got := fs[0].Subjects[0].Workload; got.Label != "pod shop, container web" || got.Runtime != Podman {
		t.Errorf("task: %+v", got)
	}
	if got := fs[0].Subjects[1].Workload; got != (finding.Workload{}) {
		t.Errorf("a task whose cgroup cannot be read: %+v", got)
	}
	if fs[0].Subjects[0].Cgroup != "" {
		t.Errorf("the subject's cgroup is the investigator's to set: %q", fs[0].Subjects[0].Cgroup)
	}
}
