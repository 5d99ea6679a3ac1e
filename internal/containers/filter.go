package containers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/wolf-investigator/wolf/internal/finding"
)

// Scan walks the cgroup hierarchies under root (/sys/fs/cgroup) for the
// cgroups of containers and pods, and learns what their paths say: a
// container the runtimes did not list (none answered) is still found by
// its id. It stops at ctx's end or after maxScan directories.
func (r *Resolver) Scan(ctx context.Context, root string) {
	seen := 0
	var walk func(dir string, depth int)
	walk = func(dir string, depth int) {
		if depth > maxScanDepth || seen >= maxScan || ctx.Err() != nil {
			return
		}
		for _, name := range readDirNames(dir) {
			p := filepath.Join(dir, name)
			if st, err := os.Lstat(p); err != nil || !st.IsDir() {
				continue
			}
			seen++
			if ref := Parse(p); ref.ID != "" {
				r.mu.Lock()
				if _, ok := r.byID[ref.ID]; !ok && len(r.byID) < maxCached {
					r.byID[ref.ID] = Meta{ID: ref.ID, Runtime: ref.Runtime, PodUID: ref.PodUID, PodID: ref.PodID, Source: "cgroup " + p}
				}
				r.mu.Unlock()
			}
			walk(p, depth+1)
		}
	}
	walk(root, 0)
}

// maxScan and maxScanDepth bound Scan: a node's cgroup trees hold a few
// thousand directories (pods x containers x hierarchies), kubepods' nest
// six deep below a v1 controller's mount.
const (
	maxScan      = 100000
	maxScanDepth = 8
)

// Filter keeps what concerns some containers or pods: the findings and
// diagnoses whose subjects are in them (by the Workload a Namer gave the
// subjects).
type Filter struct {
	ids  map[string]bool // container ids
	pods map[string]bool // Kubernetes pod uids and podman pod ids
	// What was asked, in words, for the report's note.
	what string
	// Matched names the containers the filter keeps, in words.
	Matched []string
}

// NewFilter resolves --container (an id, an id's prefix, or a name) and
// --pod (NAME, or NAME.NAMESPACE for a Kubernetes pod) against what the
// resolver knows (after Refresh and Scan). Both given: the container of
// that pod. An argument that matches nothing is an error, which names what
// is known.
func (r *Resolver) NewFilter(container, pod string) (*Filter, error) {
	if container == "" && pod == "" {
		return nil, nil
	}
	known := r.Known()
	f := &Filter{ids: map[string]bool{}, pods: map[string]bool{}}
	var words []string
	if pod != "" {
		words = append(words, "--pod "+pod)
	}
	if container != "" {
		words = append(words, "--container "+container)
	}
	f.what = strings.Join(words, " ")

	inPod := func(m Meta) bool { return true }
	if pod != "" {
		matches := podMatches(known, pod)
		if len(matches) == 0 {
			return nil, fmt.Errorf("--pod %s: no such pod here%s", pod, knownPods(known, r.Errors()))
		}
		inPod = func(m Meta) bool { return matches[podKeyOf(m)] }
		for k := range matches {
			f.pods[k] = true
		}
	}
	for _, m := range known {
		if !inPod(m) {
			continue
		}
		if container != "" && !containerMatches(m, container) {
			continue
		}
		if container != "" || pod != "" {
			f.ids[m.ID] = true
			f.Matched = append(f.Matched, infoOf(m).Text())
		}
	}
	if container != "" {
		f.pods = map[string]bool{} // a container of the pod, not the pod's own cgroup
		if len(f.ids) == 0 {
			where := ""
			if pod != "" {
				where = " in pod " + pod
			}
			return nil, fmt.Errorf("--container %s: no such container%s here%s", container, where, knownContainers(known, r.Errors()))
		}
	}
	sort.Strings(f.Matched)
	return f, nil
}

// infoOf is what a runtime said about a container, as an Info.
func infoOf(m Meta) Info {
	return Info{Ref: Ref{Runtime: m.Runtime, ID: m.ID, PodUID: m.PodUID, PodID: m.PodID},
		Name: m.Name, Image: m.Image, Pod: m.Pod, Namespace: m.Namespace, Sandbox: m.Sandbox}
}

// podKeyOf is the key a filter keeps a container's pod by.
func podKeyOf(m Meta) string {
	if m.PodUID != "" {
		return m.PodUID
	}
	return m.PodID
}

// podMatches are the pods NAME or NAME.NAMESPACE names (pod names may
// have dots, namespaces never do: the whole argument is tried as a name
// first), or a pod's uid or podman pod id (or its prefix).
func podMatches(known []Meta, arg string) map[string]bool {
	out := map[string]bool{}
	add := func(pred func(Meta) bool) {
		for _, m := range known {
			if k := podKeyOf(m); k != "" && pred(m) {
				out[k] = true
			}
		}
	}
	add(func(m Meta) bool { return m.Pod == arg })
	if len(out) == 0 {
		if i := strings.LastIndexByte(arg, '.'); i > 0 {
			name, ns := arg[:i], arg[i+1:]
			add(func(m Meta) bool { return m.Pod == name && m.Namespace == ns })
		}
	}
	if len(out) == 0 && len(arg) >= 4 {
		add(func(m Meta) bool { return strings.HasPrefix(m.PodUID, arg) || strings.HasPrefix(m.PodID, arg) })
	}
	return out
}

func containerMatches(m Meta, arg string) bool {
	if m.Name == arg {
		return true
	}
	return len(arg) >= 4 && strings.HasPrefix(m.ID, strings.ToLower(arg))
}

func knownPods(known []Meta, errs []string) string {
	seen := map[string]bool{}
	var names []string
	for _, m := range known {
		n := m.Pod
		if n == "" {
			continue
		}
		if m.Namespace != "" {
			n += "." + m.Namespace
		}
		if !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	return knownList("pods", names, errs)
}

func knownContainers(known []Meta, errs []string) string {
	var names []string
	for _, m := range known {
		n := m.Name
		if n == "" {
			n = ShortID(m.ID)
		}
		names = append(names, n)
	}
	return knownList("containers", names, errs)
}

// knownList says what there is instead, briefly, and why names may lack.
func knownList(what string, names, errs []string) string {
	sort.Strings(names)
	s := ""
	switch {
	case len(names) == 0:
		s = " (no " + what + " found)"
	case len(names) > 8:
		s = fmt.Sprintf(" (%s here: %s and %d more)", what, strings.Join(names[:8], ", "), len(names)-8)
	default:
		s = fmt.Sprintf(" (%s here: %s)", what, strings.Join(names, ", "))
	}
	if len(errs) > 0 {
		s += "; " + strings.Join(errs, "; ")
	}
	return s
}

// Match reports whether a subject is in the filter's containers or pods.
func (f *Filter) Match(s *finding.Subject) bool {
	w := s.Workload
	return (w.ContainerID != "" && f.ids[w.ContainerID]) || (w.PodUID != "" && f.pods[w.PodUID])
}

// Apply keeps, of a named report, the findings and diagnoses that name a
// subject in the filter's containers or pods, and says so in a note.
func (f *Filter) Apply(rep *finding.Report) {
	if f == nil {
		return
	}
	keep := func(subjects ...*finding.Subject) bool {
		for _, s := range subjects {
			if f.Match(s) {
				return true
			}
		}
		return false
	}
	var fs []finding.Finding
	dropped := 0
	for i := range rep.Findings {
		fd := &rep.Findings[i]
		var ss []*finding.Subject
		for j := range fd.Subjects {
			ss = append(ss, &fd.Subjects[j])
		}
		if keep(ss...) {
			fs = append(fs, *fd)
		} else {
			dropped++
		}
	}
	// Diagnoses whose root is in the filter's workloads come first: asked
	// about a pod, its own limit is the answer before a host it suffers
	// from (which stays, after it).
	var rooted, others []finding.Diagnosis
	for i := range rep.Diagnoses {
		d := &rep.Diagnoses[i]
		ss := []*finding.Subject{&d.Root}
		for j := range d.Subjects {
			ss = append(ss, &d.Subjects[j])
		}
		for j := range d.Chain {
			ss = append(ss, &d.Chain[j].From, &d.Chain[j].To)
		}
		switch {
		case f.Match(&d.Root):
			rooted = append(rooted, *d)
		case keep(ss...):
			others = append(others, *d)
		default:
			dropped++
		}
	}
	ds := append(rooted, others...)
	if fs == nil {
		fs = []finding.Finding{}
	}
	rep.Findings, rep.Diagnoses = fs, ds
	note := fmt.Sprintf("%s: only the findings and diagnoses about %s", f.what, strings.Join(f.Matched, "; "))
	if dropped > 0 {
		note += fmt.Sprintf(" (%d others left out)", dropped)
	}
	rep.Notes = append(rep.Notes, note+"; histograms and profiles are the host's")
}
