package watchtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wolf-investigator/wolf/internal/containers"
	"github.com/wolf-investigator/wolf/internal/lab"
	"github.com/wolf-investigator/wolf/internal/lab/fusestall"
	"github.com/wolf-investigator/wolf/internal/testutil"
	"github.com/wolf-investigator/wolf/internal/testutil/wolfcli"
	"github.com/wolf-investigator/wolf/internal/watch"
)

// startWatch runs `wolf watch` with args on a free loopback port and
// returns the process, its metrics address and its stdout.
func startWatch(t *testing.T, args ...string) (*exec.Cmd, string, *wolfcli.SyncBuffer) {
	t.Helper()
	w := wolfcli.StartWatch(t, wolfBin, args...)
	return w.Cmd, w.Addr, w.Out
}

func httpGet(t *testing.T, u string) []byte {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", u, resp.StatusCode, err)
	}
	return b
}

// freePort finds a loopback port for Prometheus (wolf takes :0 itself).
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startPrometheus runs prom with the configuration cfg on a free loopback
// port until t ends, and returns its base URL and its log.
func startPrometheus(t *testing.T, prom, cfg string) (string, *wolfcli.SyncBuffer) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	promLog := &wolfcli.SyncBuffer{}
	pc := exec.Command(prom, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port), "--log.level=warn")
	pc.Stdout, pc.Stderr = promLog, promLog
	if err := pc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Process.Kill(); _ = pc.Wait() })
	return fmt.Sprintf("http://127.0.0.1:%d", port), promLog
}

// promQuery runs an instant PromQL query and returns the first sample's
// value, or false when the result is empty.
func promQuery(t *testing.T, base, q string) (float64, bool) {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return 0, false // not up yet
	}
	defer resp.Body.Close()
	var r struct {
		Status string
		Data   struct {
			Result []struct {
				Value [2]any
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || r.Status != "success" || len(r.Data.Result) == 0 {
		return 0, false
	}
	s, _ := r.Data.Result[0].Value[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	return v, err == nil
}

// The acceptance test: a real Prometheus scrapes wolf watch on
// loopback while the fuse-rwsem lab hangs two tasks, and PromQL sees
// them; promtool accepts the endpoint's output.
func TestWatchPrometheusSeesHungLab(t *testing.T) {
	testutil.RequireRoot(t)
	prom, err := exec.LookPath("prometheus")
	testutil.Require(t, err == nil, "needs Debian's prometheus (apt-get install prometheus)")
	promtool, err := exec.LookPath("promtool")
	testutil.Require(t, err == nil, "needs promtool (package prometheus)")
	_, err = os.Stat("/dev/fuse")
	testutil.Require(t, err == nil, "needs /dev/fuse")
	testutil.Exclusive(t)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	inst, err := fusestall.NewRWSem().Start(ctx, lab.Options{Victims: 2, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()

	w, addr, out := startWatch(t, "--interval", "2s")
	if got := string(httpGet(t, "http://"+addr+"/healthz")); got != "ok\n" {
		t.Errorf("/healthz: %q", got)
	}

	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [%q]\nscrape_configs:\n  - job_name: wolf\n    static_configs:\n      - targets: [%q]\n",
		mustAbs(t, "../../../deploy/prometheus/wolf-rules.yml"), addr)
	base, promLog := startPrometheus(t, prom, cfg)

	victims := len(inst.Tasks().Victims)
	var hung float64
	deadline := time.Now().Add(40 * time.Second)
	for {
		v, ok := promQuery(t, base, `wolf_hung_tasks{job="wolf"}`)
		if ok && v >= float64(victims) {
			hung = v
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("PromQL wolf_hung_tasks = %v (ok %v), want >= %d; prometheus log:\n%s\nwolf events:\n%s", v, ok, victims, promLog.String(), out.String())
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("PromQL wolf_hung_tasks = %v (lab: %d victims)", hung, victims)
	if v, ok := promQuery(t, base, `wolf_hung_task_blocked_seconds_max{job="wolf"}`); !ok || v < 5 {
		t.Errorf("wolf_hung_task_blocked_seconds_max = %v (ok %v), want >= 5 s (the hung threshold)", v, ok)
	}
	if v, ok := promQuery(t, base, `wolf_findings{job="wolf",id="hung.lock-owner"}`); !ok || v < 1 {
		t.Errorf("wolf_findings for hung.lock-owner = %v (ok %v)", v, ok)
	}
	if v, ok := promQuery(t, base, `sum(wolf_collector_success{job="wolf"})`); !ok || v < 1 {
		t.Errorf("collectors succeeding: %v (ok %v)", v, ok)
	}

	// promtool check metrics on what wolf serves, now that every family
	// has data.
	metrics := httpGet(t, "http://"+addr+"/metrics")
	check := exec.Command(promtool, "check", "metrics")
	check.Stdin = bytes.NewReader(metrics)
	if msg, err := check.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, msg)
	}
	for _, name := range []string{"wolf_build_info", "wolf_collector_last_run_duration_seconds", "wolf_bpf_run_seconds_total", "wolf_events_total", "process_resident_memory_bytes", "wolf_runqueue_latency_seconds_bucket"} {
		if !bytes.Contains(metrics, []byte("\n"+name)) {
			t.Errorf("/metrics lacks %s", name)
		}
	}

	// The JSON lines: a start for the lab's lock owner, every line an event.
	if err := w.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(); err != nil {
		t.Errorf("wolf watch after SIGTERM: %v", err)
	}
	started := false
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	sc.Buffer(nil, 1<<22)
	for sc.Scan() {
		var e watch.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("not a JSON event line: %q: %v", sc.Text(), err)
		}
		if e.Event == "start" && e.Finding != nil && e.Finding.ID == "hung.lock-owner" {
			started = true
		}
	}
	if !started {
		t.Errorf("no start event for hung.lock-owner in:\n%s", out.String())
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// The shipped deployment files are valid for the tools that read them.
func TestDeployFiles(t *testing.T) {
	if promtool, err := exec.LookPath("promtool"); err == nil {
		if out, err := exec.Command(promtool, "check", "rules", "../../../deploy/prometheus/wolf-rules.yml").CombinedOutput(); err != nil {
			t.Errorf("promtool check rules: %v\n%s", err, out)
		}
		test := exec.Command(promtool, "test", "rules", "wolf-rules.test.yml")
		test.Dir = "../../../deploy/prometheus"
		if out, err := test.CombinedOutput(); err != nil {
			t.Errorf("promtool test rules: %v\n%s", err, out)
		}
	} else {
		t.Log("promtool not installed: rules not checked")
	}

	unit, err := os.ReadFile("../../../deploy/systemd/wolf-watch.service")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(unit, []byte("ExecStart=/usr/local/bin/wolf watch --listen 127.0.0.1:9740")) {
		t.Errorf("unit's ExecStart changed: update this test and docs/watch.md together")
	}
	// The incidents directory must be one systemd lets wolf write.
	if !bytes.Contains(unit, []byte("--incidents /var/lib/wolf/incidents")) || !bytes.Contains(unit, []byte("StateDirectory=wolf")) {
		t.Errorf("unit: incidents not in /var/lib/wolf (StateDirectory=wolf)")
	}
	if sa, err := exec.LookPath("systemd-analyze"); err == nil {
		// verify wants the binary to exist: point it at the one built.
		dir := t.TempDir()
		u := bytes.ReplaceAll(unit, []byte("/usr/local/bin/wolf"), []byte(wolfBin))
		p := filepath.Join(dir, "wolf-watch.service")
		if err := os.WriteFile(p, u, 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(sa, "verify", p).CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("systemd-analyze verify: %v\n%s", err, out)
		}
	}

	// The DaemonSet: parsed as YAML (python3's yaml when present) and
	// checked for what wolf needs on a node.
	ds := "../../../deploy/kubernetes/wolf-daemonset.yaml"
	if err := exec.Command("python3", "-c", "import yaml").Run(); err == nil {
		script := `
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
ds = [d for d in docs if d["kind"] == "DaemonSet"][0]
spec = ds["spec"]["template"]["spec"]
c = spec["containers"][0]
mounts = {m["mountPath"] for m in c["volumeMounts"]}
vols = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"]}
for m in c["volumeMounts"]:
    assert m["name"] in vols, "mount without volume: " + m["name"]
need = ["/sys/kernel/btf", "/sys/fs/bpf", "/sys/kernel/tracing", "/sys/fs/cgroup", "/proc"]
missing = [p for p in need if p not in vols.values()]
assert not missing, "host paths missing: %s" % missing
assert spec["hostPID"] is True, "hostPID"
assert c["securityContext"]["privileged"] is True, "privileged"
assert any(a.startswith("--listen=") for a in c["args"]), "listen"
inc = [a.split("=", 1)[1] for a in c["args"] if a.startswith("--incidents=")]
assert inc and inc[0] in mounts, "incidents directory not mounted: %s" % inc
assert vols["incidents"] == inc[0], "incidents volume"
# The container runtimes' state and sockets, where wolf looks for them
# (containers.DefaultHostRoot), read-only; the node's name.
run = [m for m in c["volumeMounts"] if m["mountPath"] == sys.argv[2] + "/run"]
assert run and run[0].get("readOnly") is True and vols[run[0]["name"]] == "/run", "the node's /run read-only at %s/run" % sys.argv[2]
env = {e["name"]: e for e in c["env"]}
assert env["WOLF_NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName", "WOLF_NODE_NAME"
print("ok")
`
		if out, err := exec.Command("python3", "-c", script, ds, containers.DefaultHostRoot).CombinedOutput(); err != nil {
			t.Errorf("DaemonSet: %v\n%s", err, out)
		}
	} else {
		b, err := os.ReadFile(ds)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"hostPID: true", "privileged: true", "path: /sys/kernel/btf", "path: /sys/fs/bpf", "path: /sys/kernel/tracing", "path: /sys/fs/cgroup", "path: /proc", "--incidents=/var/lib/wolf/incidents", "mountPath: /var/lib/wolf/incidents",
			"mountPath: " + containers.DefaultHostRoot + "/run", "path: /run", "name: WOLF_NODE_NAME", "fieldPath: spec.nodeName"} {
			if !bytes.Contains(b, []byte(want)) {
				t.Errorf("DaemonSet lacks %q", want)
			}
		}
	}
}
