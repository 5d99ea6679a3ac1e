package containers

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func specWith(t *testing.T, a map[string]string) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"ociVersion": "1.0.2", "annotations": a, "linux": map[string]any{"cgroupsPath": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The OCI bundles each runtime keeps, with the annotations its source
// says it writes: containerd's CRI plugin (pkg/cri/annotations:
// DefaultCRIAnnotations), CRI-O (the kubelet's labels as annotations, and
// its own io.kubernetes.cri-o.*), podman (io.container.manager=libpod, the
// pod's id as CRI-O's SandboxID: seen on this host's podman 4.3).
func TestBundles(t *testing.T) {
	root := t.TempDir()
	tasks := filepath.Join(root, "run/containerd/io.containerd.runtime.v2.task")
	storage := filepath.Join(root, "run/containers/storage/overlay-containers")
	writeFile(t, filepath.Join(tasks, "k8s.io", tID, "config.json"), specWith(t, map[string]string{
		"io.kubernetes.cri.container-type": "container", "io.kubernetes.cri.sandbox-id": tID2,
		"io.kubernetes.cri.sandbox-name": "clickhouse-0", "io.kubernetes.cri.sandbox-namespace": "prod",
		"io.kubernetes.cri.sandbox-uid": tUID, "io.kubernetes.cri.container-name": "server",
		"io.kubernetes.cri.image-name": "docker.io/clickhouse/clickhouse-server:24.3",
	}))
	writeFile(t, filepath.Join(tasks, "k8s.io", tID2, "config.json"), specWith(t, map[string]string{
		"io.kubernetes.cri.container-type": "sandbox", "io.kubernetes.cri.sandbox-id": tID2,
		"io.kubernetes.cri.sandbox-name": "clickhouse-0", "io.kubernetes.cri.sandbox-namespace": "prod",
		"io.kubernetes.cri.sandbox-uid": tUID,
	}))
	const crioID = "1111111111111111111111111111111111111111111111111111111111111111"
	const podmanID = "2222222222222222222222222222222222222222222222222222222222222222"
	writeFile(t, filepath.Join(storage, crioID, "userdata", "config.json"), specWith(t, map[string]string{
		"io.kubernetes.pod.name": "kafka-1", "io.kubernetes.pod.namespace": "queues", "io.kubernetes.pod.uid": tUID,
		"io.kubernetes.container.name": "broker", "io.kubernetes.cri-o.ContainerType": "container",
		"io.kubernetes.cri-o.ImageName": "quay.io/strimzi/kafka:0.40", "io.kubernetes.cri-o.SandboxID": tID2,
	}))
	writeFile(t, filepath.Join(storage, podmanID, "userdata", "config.json"), specWith(t, map[string]string{
		"io.container.manager": "libpod", "io.kubernetes.cri-o.ContainerType": "container",
		"io.kubernetes.cri-o.SandboxID": tID2,
	}))
	writeFile(t, filepath.Join(tasks, "moby", "3333333333333333333333333333333333333333333333333333333333333333", "config.json"), specWith(t, nil))
	writeFile(t, filepath.Join(tasks, "k8s.io", "4444444444444444444444444444444444444444444444444444444444444444", "config.json"), "not json")

	b := bundles{taskDirs: []string{tasks}, storageDirs: []string{storage}}
	ctx := context.Background()
	m, ok := b.get(ctx, tID)
	if !ok || m.Runtime != Containerd || m.Name != "server" || m.Pod != "clickhouse-0" || m.Namespace != "prod" || m.PodUID != tUID ||
		m.Image != "docker.io/clickhouse/clickhouse-server:24.3" || m.PodID != tID2 || m.Sandbox {
		t.Errorf("containerd: %+v %v", m, ok)
	}
	if m, _ := b.get(ctx, tID2); !m.Sandbox || m.Pod != "clickhouse-0" {
		t.Errorf("containerd sandbox: %+v", m)
	}
	if m, ok := b.get(ctx, crioID); !ok || m.Runtime != CRIO || m.Name != "broker" || m.Pod != "kafka-1" || m.Namespace != "queues" || m.Image != "quay.io/strimzi/kafka:0.40" {
		t.Errorf("cri-o: %+v %v", m, ok)
	}
	if m, ok := b.get(ctx, podmanID); !ok || m.Runtime != Podman || m.PodID != tID2 || m.Name != "" {
		t.Errorf("podman: %+v %v", m, ok)
	}
	if m, ok := b.get(ctx, "3333333333333333333333333333333333333333333333333333333333333333"); !ok || m.Runtime != Docker {
		t.Errorf("docker's bundle in containerd's moby namespace: %+v %v", m, ok)
	}
	if _, ok := b.get(ctx, "4444444444444444444444444444444444444444444444444444444444444444"); ok {
		t.Errorf("a broken spec must not count")
	}
	if _, ok := b.get(ctx, "5555555555555555555555555555555555555555555555555555555555555555"); ok {
		t.Errorf("an unknown id must not be found")
	}
	all, err := b.list(ctx)
	if err != nil || len(all) != 5 {
		t.Errorf("list: %d entries, %v", len(all), err)
	}
}

// containers/storage's index (overlay-containers/containers.json), as
// podman 4.3 writes it on this host, and docker's config.v2.json.
func TestStorageIndexAndDockerConfig(t *testing.T) {
	root := t.TempDir()
	idx := filepath.Join(root, "containers.json")
	writeFile(t, idx, `[{"id":"`+tID+`","names":["wolfweb"],"image":"56dd","layer":"b100","metadata":"{\"image-name\":\"localhost/wolf-pods-test:1\",\"image-id\":\"56dd\",\"name\":\"wolfweb\",\"created-at\":1795858604}","created":"2026-11-28T09:36:44Z","flags":{"MountLabel":"","ProcessLabel":""}}]`)
	s := storageIndex{files: []string{idx, filepath.Join(root, "missing.json")}}
	m, ok := s.get(context.Background(), tID)
	if !ok || m.Name != "wolfweb" || m.Image != "localhost/wolf-pods-test:1" {
		t.Errorf("storage index: %+v %v", m, ok)
	}
	dir := filepath.Join(root, "docker")
	writeFile(t, filepath.Join(dir, tID2, "config.v2.json"), `{"ID":"`+tID2+`","Name":"/web","Config":{"Image":"nginx:1.27","Labels":{"com.example":"x"}}}`)
	d := dockerConfigs{dirs: []string{dir}}
	if m, ok := d.get(context.Background(), tID2); !ok || m.Name != "web" || m.Image != "nginx:1.27" || m.Runtime != Docker {
		t.Errorf("docker config: %+v %v", m, ok)
	}
}

// serveUnix serves h on a unix socket in a temporary directory.
func serveUnix(t *testing.T, h http.Handler) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "api.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return sock
}

// The container lists of docker's Engine API (GET /containers/json) and
// podman's libpod API (GET /libpod/containers/json), in the shapes their
// API references document (Id, Names, Image, Labels; podman's Pod and
// PodName).
func TestAPISocket(t *testing.T) {
	docker := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/containers/json" || r.URL.Query().Get("all") != "1" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(`[{"Id":"` + tID + `","Names":["/k8s_server_clickhouse-0_prod_x_0"],"Image":"clickhouse:24",` +
			`"Labels":{"io.kubernetes.pod.name":"clickhouse-0","io.kubernetes.pod.namespace":"prod","io.kubernetes.container.name":"server","io.kubernetes.pod.uid":"` + tUID + `"}},` +
			`{"Id":"` + tID2 + `","Names":["/db"],"Image":"postgres:16","Labels":{}}]`))
	}))
	ms, err := apiSocket{runtime: Docker, sockets: []string{"/nonexistent.sock", docker}}.list(context.Background())
	if err != nil || len(ms) != 2 {
		t.Fatalf("docker: %v %v", ms, err)
	}
	if m := ms[0]; m.Name != "server" || m.Pod != "clickhouse-0" || m.Namespace != "prod" || m.PodUID != tUID || m.Runtime != Docker {
		t.Errorf("docker, kubelet's container: %+v", m)
	}
	if m := ms[1]; m.Name != "db" || m.Image != "postgres:16" {
		t.Errorf("docker: %+v", m)
	}
	podman := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v4.0.0/libpod/containers/json" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(`[{"Id":"` + tID + `","Names":["wolfweb"],"Image":"localhost/wolf-pods-test:1","Pod":"` + tID2 + `","PodName":"wolfpod1","Labels":null}]`))
	}))
	ms, err = apiSocket{runtime: Podman, sockets: []string{podman}}.list(context.Background())
	if err != nil || len(ms) != 1 || ms[0].Name != "wolfweb" || ms[0].Pod != "wolfpod1" || ms[0].PodID != tID2 || ms[0].Runtime != Podman {
		t.Errorf("podman: %+v %v", ms, err)
	}
	// A socket whose server does not answer: the list ends with ctx.
	hung := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := (apiSocket{runtime: Docker, sockets: []string{hung}}).list(ctx); err == nil {
		t.Errorf("a runtime that does not answer must be an error")
	}
}

// A refresh that a runtime does not answer ends with its ctx, and what the
// others said is kept.
func TestRefreshBounded(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	slow := &fakeSource{listBlocksOn: block, noGet: true}
	fast := &fakeSource{metas: []Meta{{ID: tID, Name: "web"}}}
	r := newResolverOf([]source{fast}, []source{slow})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := r.Refresh(ctx); err == nil {
		t.Errorf("a refresh a source did not finish must say so")
	}
	// The fast source's answer lands once the slow one gives up (its ctx
	// ended); wait for that refresh to end.
	deadline := time.Now().Add(5 * time.Second)
	for r.Refreshed().IsZero() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := r.Info("/docker/" + tID); got.Name != "web" {
		t.Errorf("after the refresh: %+v", got)
	}
}
