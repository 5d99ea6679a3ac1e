package containers

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/wolf-investigator/wolf/internal/finding"
	"github.com/wolf-investigator/wolf/internal/procfs"
)

// Text names a workload for people: "pod clickhouse-0 (ns prod),
// container server", "pod web, container nginx" (a podman pod), "container
// db"; without a runtime's answer, what the path tells: "pod uid
// 8f1c2d3e-…, containerd container be7701a021ff". Empty for a cgroup of
// no container and no pod.
func (i Info) Text() string {
	var parts []string
	switch {
	case i.Pod != "" && i.Namespace != "":
		parts = append(parts, fmt.Sprintf("pod %s (ns %s)", i.Pod, i.Namespace))
	case i.Pod != "":
		parts = append(parts, "pod "+i.Pod)
	case i.PodUID != "":
		parts = append(parts, "pod uid "+i.PodUID)
	case i.PodID != "":
		parts = append(parts, "podman pod "+ShortID(i.PodID))
	}
	if i.ID != "" {
		var c string
		switch {
		case i.Sandbox:
			c = "sandbox container " + ShortID(i.ID)
		case i.Name != "":
			c = "container " + i.Name
		case i.Runtime != "" && i.Runtime != CRI:
			c = i.Runtime + " container " + ShortID(i.ID)
		default:
			c = "container " + ShortID(i.ID)
		}
		if i.Monitor {
			c = "conmon of " + c
		}
		parts = append(parts, c)
	}
	return strings.Join(parts, ", ")
}

// Workload is i as a report's subject carries it.
func (i Info) Workload() finding.Workload {
	if i.IsZero() {
		return finding.Workload{}
	}
	return finding.Workload{
		Runtime: i.Runtime, ContainerID: i.ID, Container: i.Name, Image: i.Image,
		Pod: i.Pod, Namespace: i.Namespace, PodUID: i.PodUID, QoS: i.QoS, Label: i.Text(),
	}
}

// Namer names every cgroup and task of a report after its container and
// pod: the subjects get their Workload, and the texts that name a
// container's cgroup by its path (titles, summaries, the hops of a
// diagnosis) name it as its users know it instead. Remediations keep the
// path: they are commands. It is the one place this happens, after the
// investigators and the diagnosis stage, so that neither has to know
// about containers.
type Namer struct {
	Resolver *Resolver
	// Proc reads /proc/PID/cgroup of tasks a report names without their
	// cgroup (under its timeouts: the read takes cgroup_mutex).
	Proc procfs.Reader
}

// maxTasks bounds the /proc/PID/cgroup reads one naming makes.
const maxTasks = 256

// Report names rep's findings and diagnoses, within ctx: what is not
// resolved by then keeps what its path says.
func (n *Namer) Report(ctx context.Context, rep *finding.Report) {
	if n == nil || n.Resolver == nil {
		return
	}
	subjects, texts := reportParts(rep)
	n.name(ctx, subjects, texts)
	if miss := unnamed(subjects); miss != "" {
		note := "containers named by id only (no runtime said their names): " + miss
		if errs := n.Resolver.Errors(); len(errs) > 0 {
			note += "; " + strings.Join(errs, "; ")
		}
		rep.Notes = append(rep.Notes, note)
	}
}

// Findings names findings (wolf watch's windows), within ctx.
func (n *Namer) Findings(ctx context.Context, fs []finding.Finding) {
	if n == nil || n.Resolver == nil {
		return
	}
	var subjects []*finding.Subject
	var texts []*string
	for i := range fs {
		subjects, texts = findingParts(&fs[i], subjects, texts)
	}
	n.name(ctx, subjects, texts)
}

// Diagnoses names diagnoses (wolf watch's joins), within ctx.
func (n *Namer) Diagnoses(ctx context.Context, ds []finding.Diagnosis) {
	if n == nil || n.Resolver == nil {
		return
	}
	var subjects []*finding.Subject
	var texts []*string
	for i := range ds {
		subjects, texts = diagnosisParts(&ds[i], subjects, texts)
	}
	n.name(ctx, subjects, texts)
}

func reportParts(rep *finding.Report) ([]*finding.Subject, []*string) {
	var subjects []*finding.Subject
	var texts []*string
	for i := range rep.Findings {
		subjects, texts = findingParts(&rep.Findings[i], subjects, texts)
	}
	for i := range rep.Diagnoses {
		subjects, texts = diagnosisParts(&rep.Diagnoses[i], subjects, texts)
	}
	return subjects, texts
}

func findingParts(f *finding.Finding, subjects []*finding.Subject, texts []*string) ([]*finding.Subject, []*string) {
	texts = append(texts, &f.Title, &f.Summary)
	for j := range f.Subjects {
		subjects = append(subjects, &f.Subjects[j])
		texts = append(texts, &f.Subjects[j].Detail)
	}
	return subjects, texts
}

func diagnosisParts(d *finding.Diagnosis, subjects []*finding.Subject, texts []*string) ([]*finding.Subject, []*string) {
	texts = append(texts, &d.Title, &d.Summary)
	subjects = append(subjects, &d.Root)
	for j := range d.Subjects {
		subjects = append(subjects, &d.Subjects[j])
	}
	for j := range d.Chain {
		h := &d.Chain[j]
		subjects = append(subjects, &h.From, &h.To)
		texts = append(texts, &h.Text)
	}
	for j := range d.Rivals {
		subjects = append(subjects, &d.Rivals[j].Root)
		texts = append(texts, &d.Rivals[j].Text)
	}
	return subjects, texts
}

// name fills the subjects' workloads and rewrites the texts.
func (n *Namer) name(ctx context.Context, subjects []*finding.Subject, texts []*string) {
	// The cgroup of each subject: its own, or its task's.
	cgroupOf := make(map[*finding.Subject]string, len(subjects))
	var paths []string
	tasks := map[int]string{}
	for _, s := range subjects {
		switch {
		case s.Cgroup != "":
			cgroupOf[s] = s.Cgroup
		case s.PID > 0 && s.Role != finding.RoleLock:
			if _, ok := tasks[s.PID]; !ok && len(tasks) < maxTasks {
				tasks[s.PID] = ""
			}
		}
	}
	n.taskCgroups(ctx, tasks)
	for _, s := range subjects {
		if _, ok := cgroupOf[s]; !ok && s.PID > 0 {
			if p := tasks[s.PID]; p != "" {
				cgroupOf[s] = p
			}
		}
	}
	seen := map[string]bool{}
	for _, p := range cgroupOf {
		if !seen[p] {
			seen[p] = true
			paths = append(paths, p)
		}
	}
	infos := n.Resolver.Resolve(ctx, paths)
	for s, p := range cgroupOf {
		if info := infos[p]; !info.IsZero() {
			s.Workload = info.Workload()
		}
	}
	// Rewrite the texts, longest path first, so that no path is replaced
	// inside a longer one.
	var named []string
	for _, p := range paths {
		if infos[p].Text() != "" && p != "/" {
			named = append(named, p)
		}
	}
	sort.Slice(named, func(i, j int) bool { return len(named[i]) > len(named[j]) })
	for _, t := range texts {
		for _, p := range named {
			*t = replacePath(*t, p, infos[p].Text())
		}
	}
}

// taskCgroups reads the cgroup of each task (pid -> path), each read
// under the reader's timeout, all within ctx.
func (n *Namer) taskCgroups(ctx context.Context, tasks map[int]string) {
	for pid := range tasks {
		if ctx.Err() != nil {
			return
		}
		cgs, err := n.Proc.Cgroup(ctx, pid, 0)
		if err != nil {
			continue
		}
		tasks[pid] = containerPath(cgs)
	}
}

// containerPath picks, of a task's cgroups (one per v1 hierarchy, and
// v2's), the one that says most about its container: the first that
// names a container, else the first that names a pod, else "".
func containerPath(cgs []procfs.Cgroup) string {
	best, bestScore := "", 0
	for _, c := range cgs {
		r := Parse(c.Path)
		score := 0
		switch {
		case r.ID != "":
			score = 2
		case !r.IsZero():
			score = 1
		}
		if score > bestScore {
			best, bestScore = c.Path, score
		}
	}
	return best
}

// replacePath replaces the cgroup path p in text t with name, the words
// around it adjusted: "cgroup P throttled…" (the text's start) and "…of
// cgroup P", "…in cgroup P" lose the word cgroup ("pod x, container y
// throttled…", "…of pod x, container y"); elsewhere "cgroup P" becomes
// "cgroup of pod x, container y" ("Memory cgroup of …"); a bare P is
// replaced by the name.
func replacePath(t, p, name string) string {
	if p == "" || !strings.Contains(t, p) {
		return t
	}
	var b strings.Builder
	for {
		i := strings.Index(t, p)
		if i < 0 {
			b.WriteString(t)
			return b.String()
		}
		end := i + len(p)
		if !boundary(t, end) || (i > 0 && isPathByte(t[i-1])) {
			b.WriteString(t[:end])
			t = t[end:]
			continue
		}
		before := t[:i]
		switch {
		case strings.HasSuffix(before, "cgroup "):
			lead := strings.TrimSuffix(before, "cgroup ")
			trimmed := strings.TrimRight(lead, " ")
			if trimmed == "" || hasWordSuffix(trimmed, "of", "in", "for", "by", "to") {
				b.WriteString(lead)
				b.WriteString(name)
			} else {
				b.WriteString(before)
				b.WriteString("of ")
				b.WriteString(name)
			}
		default:
			b.WriteString(before)
			b.WriteString(name)
		}
		t = t[end:]
	}
}

// boundary reports whether a path ending at t[end] ends there: the next
// byte is not one a path goes on with ("/a" in "/a/b" or "/a.slice"); a
// '.' or ',' ends it when what follows is not part of a name.
func boundary(t string, end int) bool {
	if end >= len(t) {
		return true
	}
	c := t[end]
	if c == '.' || c == ',' || c == ':' || c == ';' {
		return end+1 >= len(t) || !isPathByte(t[end+1]) || t[end+1] == '/'
	}
	return !isPathByte(c)
}

func isPathByte(c byte) bool {
	return c == '/' || c == '-' || c == '_' || c == '.' || c == '@' || c == ':' ||
		c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// hasWordSuffix reports whether s's last word is one of words (any case).
func hasWordSuffix(s string, words ...string) bool {
	last := strings.ToLower(s[strings.LastIndexByte(s, ' ')+1:])
	for _, w := range words {
		if last == w {
			return true
		}
	}
	return false
}

// unnamed lists the containers the subjects name by id only, or "".
func unnamed(subjects []*finding.Subject) string {
	seen := map[string]bool{}
	var ids []string
	for _, s := range subjects {
		w := s.Workload
		if w.ContainerID != "" && w.Container == "" && !seen[w.ContainerID] {
			seen[w.ContainerID] = true
			id := ShortID(w.ContainerID)
			if w.Runtime != "" {
				id += " (" + w.Runtime + ")"
			}
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return strings.Join(ids, ", ")
}
