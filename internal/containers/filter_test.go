package containers

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wolf-investigator/wolf/internal/finding"
)

func filterResolver(t *testing.T) *Resolver {
	t.Helper()
	const id3 = "5555555555555555555555555555555555555555555555555555555555555555"
	const uid2 = "11111111-2222-3333-4444-555555555555"
	asked := &fakeSource{noGet: true, metas: []Meta{
		{ID: tID, Runtime: Containerd, Name: "server", Pod: "clickhouse-0", Namespace: "prod", PodUID: tUID},
		{ID: tID2, Runtime: Containerd, Name: "server", Pod: "clickhouse-0", Namespace: "staging", PodUID: uid2},
		{ID: id3, Runtime: Podman, Name: "web", Pod: "shop.v2", PodID: "6666666666666666666666666666666666666666666666666666666666666666"},
	}}
	r := newResolverOf(nil, []source{asked})
	if err := r.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestNewFilter(t *testing.T) {
	r := filterResolver(t)
	cases := []struct {
		container, pod string
		want           []string // matched, in words
		err            string
	}{
		{"", "clickhouse-0.prod", []string{"pod clickhouse-0 (ns prod), container server"}, ""},
		{"", "clickhouse-0", []string{"pod clickhouse-0 (ns prod), container server", "pod clickhouse-0 (ns staging), container server"}, ""},
		{"", "shop.v2", []string{"pod shop.v2, container web"}, ""}, // a pod name with a dot
		{"server", "clickhouse-0.staging", []string{"pod clickhouse-0 (ns staging), container server"}, ""},
		{"web", "", []string{"pod shop.v2, container web"}, ""},
		{tID[:12], "", []string{"pod clickhouse-0 (ns prod), container server"}, ""},
		{"nginx", "", nil, "--container nginx: no such container here (containers here: server, server, web)"},
		{"", "kafka-0.prod", nil, "--pod kafka-0.prod: no such pod here (pods here: clickhouse-0.prod, clickhouse-0.staging, shop.v2)"},
		{"web", "clickhouse-0", nil, "--container web: no such container in pod clickhouse-0 here"},
		{"be7", "", nil, "--container be7: no such container"}, // too short a prefix to mean an id
	}
	for _, c := range cases {
		f, err := r.NewFilter(c.container, c.pod)
		if c.err != "" {
			if err == nil || !strings.HasPrefix(err.Error(), c.err) {
				t.Errorf("NewFilter(%q, %q): error %v, want one starting %q", c.container, c.pod, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("NewFilter(%q, %q): %v", c.container, c.pod, err)
			continue
		}
		if strings.Join(f.Matched, "|") != strings.Join(c.want, "|") {
			t.Errorf("NewFilter(%q, %q) matched %q, want %q", c.container, c.pod, f.Matched, c.want)
		}
	}
	if f, err := r.NewFilter("", ""); f != nil || err != nil {
		t.Errorf("no filter asked: %v %v", f, err)
	}
}

func TestFilterApply(t *testing.T) {
	r := filterResolver(t)
	f, err := r.NewFilter("", "clickhouse-0.prod")
	if err != nil {
		t.Fatal(err)
	}
	in := finding.Subject{Role: finding.RoleCgroup, Workload: finding.Workload{ContainerID: tID, PodUID: tUID}}
	podLevel := finding.Subject{Role: finding.RoleCgroup, Workload: finding.Workload{PodUID: tUID}}
	other := finding.Subject{Role: finding.RoleTask, PID: 3, Workload: finding.Workload{ContainerID: tID2}}
	rep := &finding.Report{
		Findings: []finding.Finding{
			{ID: "a", Subjects: []finding.Subject{in}},
			{ID: "b", Subjects: []finding.Subject{other}},
			{ID: "c", Subjects: []finding.Subject{podLevel}},
			{ID: "d"}, // the host's
		},
		Diagnoses: []finding.Diagnosis{
			{ID: "x", Root: finding.Subject{Role: finding.RoleCPU}, Chain: []finding.Hop{{From: in}}},
			{ID: "y", Root: other},
			{ID: "z", Root: in},
		},
	}
	f.Apply(rep)
	var ids []string
	for _, fd := range rep.Findings {
		ids = append(ids, fd.ID)
	}
	for _, d := range rep.Diagnoses {
		ids = append(ids, d.ID)
	}
	// The diagnosis rooted in the pod first, then the one it is only in.
	if strings.Join(ids, ",") != "a,c,z,x" {
		t.Errorf("kept %v, want a, c, z, x", ids)
	}
	if len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "--pod clickhouse-0.prod: only the findings and diagnoses about pod clickhouse-0 (ns prod), container server (3 others left out)") {
		t.Errorf("notes: %q", rep.Notes)
	}
}

// Scan finds containers by their cgroups when no runtime answers.
func TestScan(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{
		"cpu/kubepods/burstable/pod" + tUID + "/" + tID,
		"memory/kubepods/burstable/pod" + tUID + "/" + tID,
		"cpu/libpod_parent/libpod-" + tID2,
		"cpu/system.slice/sshd.service",
	} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	r := newResolverOf(nil, nil)
	r.Scan(context.Background(), root)
	known := r.Known()
	if len(known) != 2 {
		t.Fatalf("known: %+v", known)
	}
	f, err := r.NewFilter(tID2[:8], "")
	if err != nil || len(f.Matched) != 1 || f.Matched[0] != "podman container 3f2a1b9c0d1e" {
		t.Errorf("filter by id prefix: %+v %v", f, err)
	}
	if _, err := r.NewFilter("", tUID); err != nil {
		t.Errorf("a pod by its uid: %v", err)
	}
}
