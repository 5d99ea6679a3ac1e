package diagnosistest

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/containers/podmantest"
	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/testutil"
)

// firstItem is the first item of a text report: the first DIAGNOSIS or
// finding, its title lines joined.
func firstItem(text string) string {
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		for _, head := range []string{"DIAGNOSIS ", "CRITICAL  ", "WARNING   ", "INFO      "} {
			if !strings.HasPrefix(l, head) {
				continue
			}
			title := strings.TrimSpace(l[len(head):])
			for _, more := range lines[i+1:] {
				more = strings.TrimSpace(more)
				if more == "" || strings.HasPrefix(more, "[") {
					break
				}
				title += " " + more
			}
			return title
		}
	}
	return ""
}

// The acceptance test: with a CPU-capped container in a podman
// pod, doctor names the pod and the container by name, and its first item
// is about them when asked about the pod.
func TestDoctorNamesPodAndContainer(t *testing.T) {
	podmantest.Require(t)
	testutil.Exclusive(t)
	p := podmantest.New(t)
	tag := fmt.Sprint(os.Getpid())
	pod, name := "wolf-test-shop-"+tag, "wolf-test-api-"+tag
	p.Pod(pod)
	c := p.Start(name, []string{"--pod", pod, "--cpus", "0.1"}, "spin", "60")
	want := "pod " + pod + ", container " + name
	time.Sleep(time.Second) // a few throttled periods before the window

	// The whole host: some item names them, its subjects say who they are.
	rep := doctorJSON(t, 6*time.Second)
	var named *finding.Subject
	titles := ""
	for _, d := range rep.Diagnoses {
		titles += d.Title + "\n"
		for i := range d.Subjects {
			if s := &d.Subjects[i]; s.ContainerID == c.ID && strings.Contains(d.Title, want) {
				named = s
			}
		}
	}
	for _, f := range rep.Findings {
		titles += f.Title + "\n"
		for i := range f.Subjects {
			if s := &f.Subjects[i]; s.ContainerID == c.ID && strings.Contains(f.Title, want) {
				named = s
			}
		}
	}
	if named == nil {
		t.Fatalf("no diagnosis or finding names %q; titles:\n%s", want, titles)
	}
	if named.Pod != pod || named.Container != name || named.Runtime != "podman" || named.Image != podmantest.Image || named.Label != want {
		t.Errorf("subject: %+v", named.Workload)
	}
	// On a host where nothing else is wrong, doctor's first item is
	// theirs; on a shared machine others' work may come first.
	first, others := "", 0
	if len(rep.Diagnoses) > 0 {
		first = rep.Diagnoses[0].Title
	} else if len(rep.Findings) > 0 {
		first = rep.Findings[0].Title
	}
	for _, d := range rep.Diagnoses {
		if !strings.Contains(d.Title, want) {
			others++
		}
	}
	for _, f := range rep.Findings {
		if f.Severity >= finding.Warning && len(f.ExplainedBy) == 0 && !strings.Contains(f.Title, want) {
			others++
		}
	}
	if others == 0 && !strings.Contains(first, want) {
		t.Errorf("nothing else is wrong, yet doctor's first item does not name %q: %q", want, first)
	}
	t.Logf("doctor's first item (%d others at warning or above): %s", others, first)

	// Asked about the pod, doctor's first item names it and the container.
	r := runWolf(t, 60*time.Second, "doctor", "--duration", "6s", "--pod", pod)
	if r.Code != 0 {
		t.Fatalf("doctor --pod: exit %d: %s", r.Code, r.Stderr)
	}
	first = firstItem(r.Stdout)
	t.Logf("first item: %s", first)
	if !strings.Contains(first, want) {
		t.Errorf("doctor --pod %s: first item %q does not name %q\n%s", pod, first, want, r.Stdout)
	}
	if !strings.Contains(first, "CPU quota") && !strings.Contains(first, "throttled") {
		t.Errorf("the first item is not the container's CPU quota: %q", first)
	}
}
