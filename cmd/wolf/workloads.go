//go:build linux

package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/wolf-investigator/wolf/internal/containers"
	"github.com/wolf-investigator/wolf/internal/finding"
)

// Naming the containers and pods of a report (internal/containers): the
// runtimes are asked once, in the background, while the window runs; the
// report is named from what they said and from what the cgroup paths
// say, within nameTimeout after the window, never waiting for a runtime
// that has not answered.
const (
	// nameTimeout bounds the naming after the window: reads of runtime
	// state on disk and of /proc/PID/cgroup for the report's tasks.
	nameTimeout = 500 * time.Millisecond
	// filterTimeout bounds asking the runtimes what --container and --pod
	// name, before the window.
	filterTimeout = 5 * time.Second
	// refreshTimeout bounds asking them in the background during the
	// window (a shorter window bounds it more): a runtime that has not
	// answered in half a minute will not, and its CLI is not left behind.
	refreshTimeout = 30 * time.Second
)

// workloadFlags are --container and --pod.
type workloadFlags struct{ container, pod string }

func (w *workloadFlags) register(c *cobra.Command) {
	c.Flags().StringVar(&w.container, "container", "", "only findings about this container (`ID`, a prefix of it, or NAME)")
	c.Flags().StringVar(&w.pod, "pod", "", "only findings about this pod (`NAME` or NAME.NAMESPACE: a Kubernetes pod, or a podman pod)")
}

// validate refuses an empty --container or --pod (an unset variable):
// it would silently mean every workload.
func (w *workloadFlags) validate(cmd *cobra.Command) error {
	for _, f := range []string{"container", "pod"} {
		if fl := cmd.Flags().Lookup(f); fl != nil && cmd.Flags().Changed(f) && fl.Value.String() == "" {
			return usageErr("--%s: empty name (leave --%s out for every workload)", f, f)
		}
	}
	return nil
}

// naming names a report's workloads and keeps what --container and --pod
// ask for.
type naming struct {
	resolver *containers.Resolver
	namer    *containers.Namer
	filter   *containers.Filter
}

// prepare starts naming for a run of one window: it checks --container
// and --pod (asking the runtimes, bounded by filterTimeout; a name that
// matches nothing is bad usage), or else starts asking the runtimes in the
// background for at most the window.
func (w *workloadFlags) prepare(ctx context.Context, window time.Duration) (*naming, error) {
	n := &naming{resolver: containers.NewResolver(containers.Options{})}
	n.namer = &containers.Namer{Resolver: n.resolver}
	if w.container == "" && w.pod == "" {
		n.resolver.RefreshAsync(min(window, refreshTimeout))
		return n, nil
	}
	ctx, cancel := context.WithTimeout(ctx, filterTimeout)
	defer cancel()
	_ = n.resolver.Refresh(ctx) // what did not answer is said if nothing matches
	n.resolver.Scan(ctx, "/sys/fs/cgroup")
	f, err := n.resolver.NewFilter(w.container, w.pod)
	if err != nil {
		return nil, usageErr("%v", err)
	}
	n.filter = f
	return n, nil
}

// apply names rep's workloads and filters it.
func (n *naming) apply(ctx context.Context, rep *finding.Report) {
	if n == nil {
		return
	}
	// Named even when the run was interrupted: the report is written.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), nameTimeout)
	defer cancel()
	n.namer.Report(ctx, rep)
	n.filter.Apply(rep)
}
