package containers

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// Info is a cgroup's workload: what its path says (Ref) and what the
// runtime said about it (Meta), merged.
type Info struct {
	Ref
	Name      string // container name
	Image     string
	Pod       string // pod name (Kubernetes or podman)
	Namespace string // Kubernetes namespace
	Sandbox   bool   // the pod's sandbox (pause, infra) container
}

// IsZero reports whether the cgroup is no container's and no pod's.
func (i Info) IsZero() bool { return i == Info{} }

// Resolver turns cgroup paths into Info. What a path says is always
// there; what runtimes say is read from their state on disk on first
// sight of a container id (Lookup, bounded by its ctx), and asked of
// their sockets and CLIs by Refresh, in the background. Answers are kept
// per container id, so a runtime is asked once per container, however
// many windows or findings name it.
type Resolver struct {
	disk  []source // read on a miss, synchronously (bounded)
	asked []source // listed by Refresh only

	mu       sync.Mutex
	byID     map[string]Meta
	missed   map[string]time.Time // ids no source knew, and when
	pods     map[string]podName   // Kubernetes pod uid -> its name
	podmanID map[string]string    // podman pod id -> its name
	errs     []string             // the last refresh's failures, for notes
	// refreshing is closed when the refresh under way ends; nil when none.
	refreshing chan struct{}
	refreshed  time.Time
	// diskBusy is set while a batch of disk reads is outstanding: a batch
	// stuck on a sick file system blocks no other.
	diskBusy bool
	// autoRefresh is Options.AutoRefresh; lastAuto when Resolve last
	// started one.
	autoRefresh time.Duration
	lastAuto    time.Time
}

type podName struct{ name, namespace string }

// Options configures NewResolver; the zero value reads the well-known
// places on this host, and under HostRoot when it exists.
type Options struct {
	// HostRoot is where the host's file system is mounted when wolf runs
	// in a container ("/host" in the DaemonSet of deploy/kubernetes):
	// every runtime path is also looked for below it.
	HostRoot string
	// NoCLI keeps the resolver from running the podman command.
	NoCLI bool
	// PodmanBin is the podman command (default: podman on PATH).
	PodmanBin string
	// AutoRefresh, when positive, has Resolve start a refresh in the
	// background when it meets a container it knows no name of, at most
	// once per AutoRefresh (wolf watch: containers come and go).
	AutoRefresh time.Duration
}

// DefaultHostRoot is where the DaemonSet mounts the host's /run
// (as /host/run) so that runtime state and sockets can be read.
const DefaultHostRoot = "/host"

// NewResolver returns a resolver of the runtimes' usual places.
func NewResolver(o Options) *Resolver {
	if o.HostRoot == "" {
		o.HostRoot = DefaultHostRoot
	}
	at := func(paths ...string) []string {
		var out []string
		for _, p := range paths {
			out = append(out, p)
			if o.HostRoot != "/" {
				out = append(out, filepath.Join(o.HostRoot, p))
			}
		}
		return out
	}
	r := &Resolver{
		disk: []source{
			bundles{
				taskDirs: at("/run/containerd/io.containerd.runtime.v2.task", "/run/k3s/containerd/io.containerd.runtime.v2.task",
					"/run/containerd/io.containerd.runtime.v1.linux"),
				storageDirs: at("/run/containers/storage/overlay-containers", "/var/lib/containers/storage/overlay-containers"),
			},
			storageIndex{files: at("/var/lib/containers/storage/overlay-containers/containers.json")},
			dockerConfigs{dirs: at("/var/lib/docker/containers")},
		},
		asked: []source{
			apiSocket{runtime: Podman, sockets: at("/run/podman/podman.sock")},
			apiSocket{runtime: Docker, sockets: at("/run/docker.sock", "/var/run/docker.sock")},
		},
	}
	if !o.NoCLI {
		r.asked = append(r.asked, podmanCLI{bin: o.PodmanBin})
	}
	r.autoRefresh = o.AutoRefresh
	r.reset()
	return r
}

// newResolverOf is a resolver of the given sources (tests).
func newResolverOf(disk, asked []source) *Resolver {
	r := &Resolver{disk: disk, asked: asked}
	r.reset()
	return r
}

func (r *Resolver) reset() {
	r.byID = map[string]Meta{}
	r.missed = map[string]time.Time{}
	r.pods = map[string]podName{}
	r.podmanID = map[string]string{}
}

// maxCached bounds the cache: past it, the entries of containers no
// longer listed are dropped at the next refresh.
const maxCached = 8192

// learn records what a source said; mu held.
func (r *Resolver) learn(m Meta) {
	if m.ID == "" {
		return
	}
	old, ok := r.byID[m.ID]
	switch {
	case ok && strings.HasPrefix(old.Source, "cgroup "):
		m.merge(old) // what a runtime says over what a path said
	case ok:
		old.merge(m)
		m = old
	case len(r.byID) >= maxCached:
		return
	}
	r.byID[m.ID] = m
	delete(r.missed, m.ID)
	if m.PodUID != "" && m.Pod != "" {
		r.pods[m.PodUID] = podName{m.Pod, m.Namespace}
	}
	if m.Runtime == Podman && m.PodID != "" && m.Pod != "" {
		r.podmanID[m.PodID] = m.Pod
	}
}

// Refresh lists every source, within ctx, and learns what they say. It
// returns when all have answered or ctx ends; a source that has not
// answered by then is reported in the error, and what it says later is
// not waited for.
func (r *Resolver) Refresh(ctx context.Context) error {
	done := r.refreshAsync(ctx)
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("container runtimes: no complete answer within the window: %w", ctx.Err())
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.errs) > 0 {
		return errors.New(strings.Join(r.errs, "; "))
	}
	return nil
}

// RefreshAsync starts a refresh bounded by timeout, unless one is under
// way, and returns at once.
func (r *Resolver) RefreshAsync(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	done := r.refreshAsync(ctx)
	go func() { <-done; cancel() }()
}

func (r *Resolver) refreshAsync(ctx context.Context) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refreshLocked(ctx)
}

// refreshLocked starts a refresh unless one is under way; mu held.
func (r *Resolver) refreshLocked(ctx context.Context) <-chan struct{} {
	if r.refreshing != nil {
		return r.refreshing
	}
	done := make(chan struct{})
	r.refreshing = done
	go func() {
		defer close(done)
		srcs := append(append([]source{}, r.disk...), r.asked...)
		lists := make([][]Meta, len(srcs))
		errs := make([]error, len(srcs))
		var wg sync.WaitGroup
		for i, s := range srcs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				lists[i], errs[i] = s.list(ctx)
			}()
		}
		wg.Wait()
		r.mu.Lock()
		defer r.mu.Unlock()
		n := 0
		for _, l := range lists {
			n += len(l)
		}
		if len(r.byID)+n > maxCached {
			r.reset()
		}
		// Where two sources say different things the first one wins: the
		// runtimes' own state (the names Kubernetes gave) before what a
		// socket or the CLI lists.
		var msgs []string
		for i, l := range lists {
			for _, m := range l {
				r.learn(m)
			}
			if errs[i] != nil {
				msgs = append(msgs, fmt.Sprintf("%s: %v", srcs[i].name(), errs[i]))
			}
		}
		r.errs = msgs
		r.refreshed = time.Now()
		r.refreshing = nil
	}()
	return done
}

// Refreshed says when the last refresh ended (zero: none yet).
func (r *Resolver) Refreshed() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refreshed
}

// Errors are what the last refresh could not do ("podman ps: no answer").
func (r *Resolver) Errors() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.errs...)
}

// missTTL is how long an id no source knew is not asked about again.
const missTTL = 30 * time.Second

// Resolve returns the workload of every path, reading the runtimes' state
// on disk for container ids not yet known, within ctx: whatever is not
// read by then is named by its path alone (and read in the background
// for next time). It never asks a socket or a CLI: Refresh does.
func (r *Resolver) Resolve(ctx context.Context, paths []string) map[string]Info {
	out := make(map[string]Info, len(paths))
	var want []string
	now := time.Now()
	r.mu.Lock()
	for _, p := range paths {
		ref := Parse(p)
		if ref.ID == "" {
			continue
		}
		if _, ok := r.byID[ref.ID]; ok {
			continue
		}
		if t, ok := r.missed[ref.ID]; ok && now.Sub(t) < missTTL {
			continue
		}
		want = append(want, ref.ID)
	}
	busy := r.diskBusy
	if len(want) > 0 && !busy {
		r.diskBusy = true
	}
	r.mu.Unlock()
	if len(want) > 0 && !busy {
		done := make(chan struct{})
		go func() {
			defer close(done)
			r.readDisk(want)
		}()
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	nameless := false
	for _, p := range paths {
		info := r.infoLocked(Parse(p))
		out[p] = info
		nameless = nameless || (info.ID != "" && info.Name == "") || (info.PodID != "" && info.Pod == "")
	}
	if nameless && r.autoRefresh > 0 && r.refreshing == nil && time.Since(r.lastAuto) >= r.autoRefresh {
		r.lastAuto = time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), autoRefreshTimeout)
		done := r.refreshLocked(ctx)
		go func() { <-done; cancel() }()
	}
	return out
}

// autoRefreshTimeout bounds a refresh Resolve starts.
const autoRefreshTimeout = 10 * time.Second

// readDisk asks the disk sources about ids, one after the other.
func (r *Resolver) readDisk(ids []string) {
	defer func() {
		r.mu.Lock()
		r.diskBusy = false
		r.mu.Unlock()
	}()
	sort.Strings(ids)
	ctx := context.Background()
	for i, id := range ids {
		if i > 0 && id == ids[i-1] {
			continue
		}
		found := false
		for _, s := range r.disk {
			if m, ok := s.get(ctx, id); ok {
				r.mu.Lock()
				r.learn(m)
				r.mu.Unlock()
				found = true
			}
		}
		if !found {
			r.mu.Lock()
			r.missed[id] = time.Now()
			r.mu.Unlock()
		}
	}
}

// Info is the workload of one path from what is known now: no I/O.
func (r *Resolver) Info(path string) Info {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.infoLocked(Parse(path))
}

func (r *Resolver) infoLocked(ref Ref) Info {
	info := Info{Ref: ref}
	if ref.IsZero() {
		return info
	}
	if m, ok := r.byID[ref.ID]; ok && ref.ID != "" {
		info.Name, info.Image, info.Pod, info.Namespace, info.Sandbox = m.Name, m.Image, m.Pod, m.Namespace, m.Sandbox
		if info.Runtime == "" || info.Runtime == CRI {
			info.Runtime = m.Runtime
		}
		if info.PodUID == "" {
			info.PodUID = m.PodUID
		}
		if info.PodID == "" && m.Runtime == Podman {
			info.PodID = m.PodID
		}
	}
	if info.Pod == "" && info.PodUID != "" {
		if p, ok := r.pods[info.PodUID]; ok {
			info.Pod, info.Namespace = p.name, p.namespace
		}
	}
	if info.Pod == "" && info.PodID != "" {
		info.Pod = r.podmanID[info.PodID]
	}
	return info
}

// Known lists every container the sources know, as of the last refresh
// and disk reads.
func (r *Resolver) Known() []Meta {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Meta, 0, len(r.byID))
	for _, m := range r.byID {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
