package containers

import (
	"context"
	"sync"
)

// Labels gives Prometheus series the namespace, pod and container of the
// cgroup or task they are about (wolf watch's metrics). Their values come
// from what the resolver knows: the pod's and the container's names, or
// the container's short id when no runtime said its name; empty for what
// is in no container. A series' cgroup or task already bounds how many
// series there are, and the three labels follow from it, so they add no
// series of their own.
type Labels struct {
	Namer *Namer

	mu    sync.Mutex
	tasks map[int]string // pid -> its container's cgroup path ("" if none)
}

// maxLabelTasks bounds the tasks whose cgroups Labels remembers: the
// metrics export the top N tasks per family, N at most 1000.
const maxLabelTasks = 4096

// Resolve learns, within ctx, the workloads of the cgroups and tasks a
// window's series name: the runtime state on disk, /proc/PID/cgroup for
// tasks (under the reader's timeouts).
func (l *Labels) Resolve(ctx context.Context, cgroups []string, pids []int) {
	if l == nil || l.Namer == nil || l.Namer.Resolver == nil {
		return
	}
	l.mu.Lock()
	if l.tasks == nil || len(l.tasks)+len(pids) > maxLabelTasks {
		l.tasks = map[int]string{}
	}
	var want []int
	for _, pid := range pids {
		if _, ok := l.tasks[pid]; !ok && pid > 0 {
			want = append(want, pid)
		}
	}
	l.mu.Unlock()
	got := map[int]string{}
	for _, pid := range want {
		if ctx.Err() != nil {
			break
		}
		if cgs, err := l.Namer.Proc.Cgroup(ctx, pid, 0); err == nil {
			got[pid] = containerPath(cgs)
		}
	}
	l.mu.Lock()
	paths := append([]string(nil), cgroups...)
	for pid, p := range got {
		l.tasks[pid] = p
		if p != "" {
			paths = append(paths, p)
		}
	}
	l.mu.Unlock()
	l.Namer.Resolver.Resolve(ctx, paths)
}

// Cgroup is a cgroup's namespace, pod and container labels; no I/O.
func (l *Labels) Cgroup(path string) [3]string {
	if l == nil || l.Namer == nil || l.Namer.Resolver == nil || path == "" {
		return [3]string{}
	}
	return labelsOf(l.Namer.Resolver.Info(path))
}

// Task is a task's namespace, pod and container labels, as learnt by
// Resolve; no I/O.
func (l *Labels) Task(pid int) [3]string {
	if l == nil {
		return [3]string{}
	}
	l.mu.Lock()
	p := l.tasks[pid]
	l.mu.Unlock()
	return l.Cgroup(p)
}

func labelsOf(i Info) [3]string {
	c := i.Name
	if c == "" && i.ID != "" {
		c = ShortID(i.ID)
	}
	return [3]string{i.Namespace, i.Pod, c}
}
