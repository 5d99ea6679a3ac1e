package containers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// A source is one place where a runtime tells about its containers. list
// returns every container it knows; get one container by id (false when it
// does not know it). Both are bounded by ctx; a source that must ask a
// process (a socket, a CLI) lists only, and get says false.
type source interface {
	name() string
	list(ctx context.Context) ([]Meta, error)
	get(ctx context.Context, id string) (Meta, bool)
}

// maxEntries bounds what one listing reads: a node runs a few hundred
// containers at most; a directory with more is not a runtime's.
const maxEntries = 4096

// maxFile bounds one state file read (an OCI spec is a few KiB, the
// containers/storage index a few hundred bytes per container).
const maxFile = 16 << 20

func readSmall(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxFile))
}

// readDirNames lists a directory, at most maxEntries names.
func readDirNames(dir string) []string {
	f, err := os.Open(dir)
	if err != nil {
		return nil
	}
	defer f.Close()
	names, _ := f.Readdirnames(maxEntries)
	return names
}

// bundles reads the OCI bundles the runtimes keep for running containers:
// containerd's shims (STATE/NAMESPACE/ID/config.json: k8s.io for the CRI
// plugin, moby for docker, default for ctr and nerdctl), and the
// containers/storage userdata CRI-O and podman keep per container
// (overlay-containers/ID/userdata/config.json, under the run root for
// CRI-O and the graph root for podman). Their annotations carry the pod,
// namespace, container name and image (fromAnnotations).
type bundles struct {
	taskDirs    []string // containerd's v2 shim state: NAMESPACE/ID/config.json below
	storageDirs []string // containers/storage's overlay-containers: ID/userdata/config.json below
}

func (bundles) name() string { return "runtime state (OCI bundles)" }

func (b bundles) get(ctx context.Context, id string) (Meta, bool) {
	for _, dir := range b.taskDirs {
		for _, ns := range readDirNames(dir) {
			if ctx.Err() != nil {
				return Meta{}, false
			}
			if m, ok := b.read(filepath.Join(dir, ns, id, "config.json"), id, ns); ok {
				return m, true
			}
		}
	}
	for _, dir := range b.storageDirs {
		if ctx.Err() != nil {
			return Meta{}, false
		}
		if m, ok := b.read(filepath.Join(dir, id, "userdata", "config.json"), id, ""); ok {
			return m, true
		}
	}
	return Meta{}, false
}

func (b bundles) read(path, id, ns string) (Meta, bool) {
	data, err := readSmall(path)
	if err != nil {
		return Meta{}, false
	}
	a, err := specAnnotations(data)
	if err != nil {
		return Meta{}, false
	}
	m := fromAnnotations(a)
	m.ID, m.Source = id, "bundle "+path
	if m.Runtime == "" {
		switch ns {
		case "moby":
			m.Runtime = Docker
		case "":
		default:
			m.Runtime = Containerd
		}
	}
	return m, true
}

func (b bundles) list(ctx context.Context) ([]Meta, error) {
	var out []Meta
	for _, dir := range b.taskDirs {
		for _, ns := range readDirNames(dir) {
			for _, id := range readDirNames(filepath.Join(dir, ns)) {
				if ctx.Err() != nil || len(out) >= maxEntries {
					return out, ctx.Err()
				}
				if m, ok := b.read(filepath.Join(dir, ns, id, "config.json"), id, ns); ok {
					out = append(out, m)
				}
			}
		}
	}
	for _, dir := range b.storageDirs {
		for _, id := range readDirNames(dir) {
			if ctx.Err() != nil || len(out) >= maxEntries {
				return out, ctx.Err()
			}
			if m, ok := b.read(filepath.Join(dir, id, "userdata", "config.json"), id, ""); ok {
				out = append(out, m)
			}
		}
	}
	return out, nil
}

// storageIndex reads containers/storage's index of containers
// (overlay-containers/containers.json): each container's names and, in
// its metadata, the image's name (podman: libpod's
// RuntimeContainerMetadata; CRI-O: its own, with the pod's name too).
type storageIndex struct{ files []string }

func (storageIndex) name() string { return "containers/storage" }

type storageEntry struct {
	ID       string   `json:"id"`
	Names    []string `json:"names"`
	Metadata string   `json:"metadata"`
}

type storageMetadata struct {
	ImageName string `json:"image-name"`
	Name      string `json:"name"`
	PodName   string `json:"pod-name"`
	PodID     string `json:"pod-id"`
}

func (s storageIndex) list(ctx context.Context) ([]Meta, error) {
	var out []Meta
	for _, f := range s.files {
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		data, err := readSmall(f)
		if err != nil {
			continue
		}
		var entries []storageEntry
		if err := json.Unmarshal(data, &entries); err != nil {
			continue
		}
		for _, e := range entries {
			if len(out) >= maxEntries {
				break
			}
			m := Meta{ID: e.ID, Source: f}
			var md storageMetadata
			if e.Metadata != "" && json.Unmarshal([]byte(e.Metadata), &md) == nil {
				m.Image, m.Name, m.Pod, m.PodID = md.ImageName, md.Name, md.PodName, md.PodID
			}
			if m.Name == "" && len(e.Names) > 0 {
				m.Name = e.Names[0]
			}
			out = append(out, m)
		}
	}
	return out, nil
}

func (s storageIndex) get(ctx context.Context, id string) (Meta, bool) {
	all, _ := s.list(ctx)
	for _, m := range all {
		if m.ID == id {
			return m, true
		}
	}
	return Meta{}, false
}

// dockerConfigs reads docker's own record of each container
// (/var/lib/docker/containers/ID/config.v2.json: its name, image and
// labels, the kubelet's among them when cri-dockerd made it).
type dockerConfigs struct{ dirs []string }

func (dockerConfigs) name() string { return "docker state" }

func (d dockerConfigs) read(path, id string) (Meta, bool) {
	data, err := readSmall(path)
	if err != nil {
		return Meta{}, false
	}
	var c struct {
		Name   string `json:"Name"`
		Config struct {
			Image  string            `json:"Image"`
			Labels map[string]string `json:"Labels"`
		} `json:"Config"`
	}
	if json.Unmarshal(data, &c) != nil {
		return Meta{}, false
	}
	m := fromAnnotations(c.Config.Labels)
	m.ID, m.Runtime, m.Source = id, Docker, path
	if m.Name == "" {
		m.Name = trimName(c.Name)
	}
	if m.Image == "" {
		m.Image = c.Config.Image
	}
	return m, true
}

func (d dockerConfigs) get(ctx context.Context, id string) (Meta, bool) {
	for _, dir := range d.dirs {
		if ctx.Err() != nil {
			return Meta{}, false
		}
		if m, ok := d.read(filepath.Join(dir, id, "config.v2.json"), id); ok {
			return m, true
		}
	}
	return Meta{}, false
}

func (d dockerConfigs) list(ctx context.Context) ([]Meta, error) {
	var out []Meta
	for _, dir := range d.dirs {
		for _, id := range readDirNames(dir) {
			if ctx.Err() != nil || len(out) >= maxEntries {
				return out, ctx.Err()
			}
			if m, ok := d.read(filepath.Join(dir, id, "config.v2.json"), id); ok {
				out = append(out, m)
			}
		}
	}
	return out, nil
}

// apiSocket asks a runtime's HTTP API on its unix socket for its
// containers: docker's Engine API (GET /containers/json?all=1) or
// podman's libpod API (GET /v4.0.0/libpod/containers/json?all=true,
// which names each container's pod).
type apiSocket struct {
	runtime string // Docker or Podman
	sockets []string
}

func (a apiSocket) name() string { return a.runtime + " API socket" }

func (apiSocket) get(context.Context, string) (Meta, bool) { return Meta{}, false }

// apiContainer is the part of both APIs' container list entries wolf
// reads (docker: Id, Names, Image, Labels; podman adds Pod and PodName).
type apiContainer struct {
	ID      string            `json:"Id"`
	Names   []string          `json:"Names"`
	Image   string            `json:"Image"`
	Labels  map[string]string `json:"Labels"`
	Pod     string            `json:"Pod"`
	PodName string            `json:"PodName"`
}

func (c apiContainer) meta(runtime, source string) Meta {
	m := fromAnnotations(c.Labels)
	m.ID, m.Runtime, m.Source = c.ID, runtime, source
	if m.Name == "" && len(c.Names) > 0 {
		m.Name = trimName(c.Names[0])
	}
	if m.Image == "" {
		m.Image = c.Image
	}
	if m.Pod == "" {
		m.Pod = c.PodName
	}
	if m.PodID == "" {
		m.PodID = c.Pod
	}
	return m
}

func (a apiSocket) list(ctx context.Context) ([]Meta, error) {
	var errs []error
	for _, sock := range a.sockets {
		if _, err := os.Stat(sock); err != nil {
			continue
		}
		path := "/containers/json?all=1"
		if a.runtime == Podman {
			path = "/v4.0.0/libpod/containers/json?all=true"
		}
		var list []apiContainer
		if err := getJSON(ctx, sock, path, &list); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", sock, err))
			continue
		}
		out := make([]Meta, 0, len(list))
		for _, c := range list {
			if len(out) >= maxEntries {
				break
			}
			out = append(out, c.meta(a.runtime, sock))
		}
		return out, nil
	}
	return nil, errors.Join(errs...)
}

// getJSON GETs path from an HTTP server on a unix socket, within ctx.
func getJSON(ctx context.Context, sock, path string, v any) error {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://runtime"+path, nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, maxFile)).Decode(v)
}

// podmanCLI asks the podman command (`podman ps -a --pod --format json
// --no-trunc`): where no podman socket listens, the names of podman's
// pods live only in its database, which podman reads.
type podmanCLI struct{ bin string }

func (podmanCLI) name() string { return "podman ps" }

func (podmanCLI) get(context.Context, string) (Meta, bool) { return Meta{}, false }

func (p podmanCLI) list(ctx context.Context) ([]Meta, error) {
	bin := p.bin
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("podman"); err != nil {
			return nil, nil // no podman here: nothing to ask
		}
	}
	cmd := exec.CommandContext(ctx, bin, "ps", "--all", "--pod", "--format", "json", "--no-trunc")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("podman ps: no answer: %w", ctx.Err())
		}
		return nil, fmt.Errorf("podman ps: %w: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	var list []apiContainer
	if err := json.Unmarshal(stdout.Bytes(), &list); err != nil {
		return nil, fmt.Errorf("podman ps: %w", err)
	}
	out := make([]Meta, 0, len(list))
	for _, c := range list {
		if len(out) >= maxEntries {
			break
		}
		out = append(out, c.meta(Podman, "podman ps"))
	}
	return out, nil
}
