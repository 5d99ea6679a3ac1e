package watchtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/containers/podmantest"
	"github.com/wolf-investigator/wolf/internal/testutil"
	"github.com/wolf-investigator/wolf/internal/testutil/wolfcli"
)

// wolf watch's series about a capped container's cgroup and task carry
// its pod and container labels; promtool accepts what is served.
func TestWatchLabelsPodAndContainer(t *testing.T) {
	podmantest.Require(t)
	promtool := testutil.RequireTool(t, "promtool")
	testutil.Exclusive(t)
	p := podmantest.New(t)
	tag := fmt.Sprint(os.Getpid())
	pod, name := "wolf-test-wpod-"+tag, "wolf-test-wapi-"+tag
	p.Pod(pod)
	p.Start(name, []string{"--pod", pod, "--cpus", "0.1"}, "spin", "60")
	incidents := t.TempDir()
	_, addr, lines := startWatch(t, "--investigators", "sched", "--interval", "3s", "--top", "1000", "--incidents", incidents)
	var body string
	wolfcli.WaitFor(t, "a series naming the container", 60*time.Second, func() bool {
		body = string(httpGet(t, "http://"+addr+"/metrics"))
		return strings.Contains(body, `container="`+name+`"`)
	})
	var series []string
	for _, l := range strings.Split(body, "\n") {
		if strings.Contains(l, `container="`+name+`"`) {
			series = append(series, l)
		}
	}
	if len(series) == 0 {
		t.Fatalf("no series names container %s", name)
	}
	for _, l := range series {
		if !strings.Contains(l, `pod="`+pod+`"`) {
			t.Errorf("series without its pod: %s", l)
		}
	}
	t.Logf("%d series name the container, e.g. %s", len(series), series[0])

	// The JSON lines and the incident bundle (the CPU quota diagnosis
	// starts one) name them too.
	want := `"workload":"pod ` + pod + `, container ` + name + `"`
	wolfcli.WaitFor(t, "a JSON line naming the container", 30*time.Second, func() bool { return strings.Contains(lines.String(), want) })
	var bundle string
	wolfcli.WaitFor(t, "an incident bundle naming the container", 30*time.Second, func() bool {
		reports, _ := filepath.Glob(filepath.Join(incidents, "*", "report.json"))
		for _, r := range reports {
			// report.json is indented: "workload": "…".
			if b, err := os.ReadFile(r); err == nil && strings.Contains(string(b), `"pod `+pod+`, container `+name+`"`) {
				bundle = r
				return true
			}
		}
		return false
	})
	t.Logf("incident bundle %s names the container", bundle)
	check := exec.Command(promtool, "check", "metrics")
	check.Stdin = strings.NewReader(body)
	if msg, err := check.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, msg)
	}
}
