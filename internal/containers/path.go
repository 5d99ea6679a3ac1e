// Package containers names cgroups as their users know them: the
// container runtime and container a cgroup belongs to, and the Kubernetes
// pod, namespace and QoS class around it.
//
// It works in two steps. Parse reads what a cgroup's path alone tells
// (runtime, container id, pod uid, QoS class): no I/O, so it always
// answers. A Resolver then asks what the host can tell about those ids
// (the container's name and image, the pod's name and namespace) from the
// runtimes' own state: OCI bundles' annotations on disk, the runtimes' API
// sockets, the podman CLI; each answer is cached per container, every
// question is bounded in time, and none is asked on a hot path. Naming a
// report (Namer) and filtering one (Filter) use both.
package containers

import (
	"regexp"
	"strings"
)

// Runtimes, as Ref.Runtime names them.
const (
	Docker     = "docker"
	Containerd = "containerd"
	CRIO       = "cri-o"
	Podman     = "podman"
	// CRI is a container of a Kubernetes pod whose runtime the path does
	// not tell: under the cgroupfs driver, containerd and docker (through
	// cri-dockerd) both name a container's cgroup by its bare id.
	CRI = "cri"
)

// QoS classes, as Kubernetes names them (lower case, as in the cgroup
// hierarchy the kubelet makes).
const (
	Guaranteed = "guaranteed"
	Burstable  = "burstable"
	BestEffort = "besteffort"
)

// Ref is what a cgroup's path says about the workload in it.
type Ref struct {
	Runtime string // Docker, Containerd, CRIO, Podman, CRI; "" when no container
	ID      string // the container's full id (64 hex digits); "" for a pod's own cgroup
	// Monitor marks the cgroup of the runtime's monitor process for the
	// container ID (CRI-O's and podman's conmon), not of the container.
	Monitor bool
	PodUID  string // the Kubernetes pod's uid, with dashes
	QoS     string // Guaranteed, Burstable or BestEffort, for a Kubernetes pod
	PodID   string // a podman pod's id, when its cgroup is in the path
}

// IsZero reports whether the path named nothing this package knows.
func (r Ref) IsZero() bool { return r == Ref{} }

// ShortID is the id as the runtimes' CLIs print it: 12 hex digits.
func ShortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

var (
	// A container id: docker, containerd, CRI-O and podman all use 64
	// lower-case hex digits (a SHA-256 as text).
	hexID = `[0-9a-f]{64}`

	// Scopes that the systemd cgroup driver makes for a container:
	// runc's systemd driver names a container's unit "PREFIX-NAME.scope"
	// from a cgroupsPath of "slice:PREFIX:NAME" (runc,
	// libcontainer/cgroups/systemd, getUnitName). The prefixes are the
	// runtimes': "docker" (moby, daemon/oci_linux.go, with
	// native.cgroupdriver=systemd), "cri-containerd" (containerd's CRI
	// plugin, getCgroupsPath: "slice:cri-containerd:ID"), "crio" and
	// "crio-conmon" for CRI-O's conmon (CRI-O, internal/config/cgmgr,
	// systemd.go), "libpod" and "libpod-conmon" (podman,
	// libpod/oci_conmon_linux.go), "nerdctl" (nerdctl with the systemd
	// driver).
	scopeRe = regexp.MustCompile(`^(docker|cri-containerd|crio-conmon|crio|libpod-conmon|libpod|nerdctl)-(` + hexID + `)\.scope$`)
	// cgroupfs names: CRI-O puts "crio-ID" (and "crio-conmon-ID") under
	// the pod's cgroup (CRI-O, internal/config/cgmgr/cgroupfs.go),
	// podman "libpod-ID" under its cgroup parent, /libpod_parent by
	// default, and "libpod-payload-ID" in its own cgroup with
	// --cgroups=split (podman, getOCICgroupPath).
	fsPrefixRe = regexp.MustCompile(`^(crio-conmon|crio|libpod-conmon|libpod-payload|libpod)-(` + hexID + `)$`)
	// docker (cgroupfs driver: /docker/ID), containerd's CRI plugin and
	// cri-dockerd under the cgroupfs driver (POD_CGROUP/ID) name a
	// container's cgroup by its bare id.
	bareRe = regexp.MustCompile(`^` + hexID + `$`)

	// The kubelet's pod cgroups (pkg/kubelet/cm: pod_container_manager
	// names a pod "pod"+UID under its QoS class's cgroup, kubepods/
	// burstable, kubepods/besteffort, or kubepods itself for Guaranteed
	// pods; cgroup_manager_linux.go's systemd form joins the names with
	// "-", after replacing every "-" inside a name with "_", and adds
	// ".slice": kubepods-burstable-pod1234_5678.slice).
	kubeSliceRe = regexp.MustCompile(`^kubepods(?:-(burstable|besteffort))?-pod([0-9a-f_]+)\.slice$`)
	kubeDirRe   = regexp.MustCompile(`^pod([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$`)
	// Podman pods with a cgroup of their own: systemd slices
	// "machine-libpod_pod_ID.slice" (rootless: "user-libpod_pod_ID.slice"),
	// podman, libpod/runtime_pod_linux.go; under cgroupfs the pod's id
	// as a directory of /libpod_parent.
	podmanPodRe = regexp.MustCompile(`^(?:machine|user)-libpod_pod_(` + hexID + `)\.slice$`)
)

// runtimeOfPrefix maps a scope or directory prefix to its runtime and
// whether it is the runtime's monitor.
func runtimeOfPrefix(p string) (string, bool) {
	switch p {
	case "docker":
		return Docker, false
	case "cri-containerd", "nerdctl":
		return Containerd, false
	case "crio":
		return CRIO, false
	case "crio-conmon":
		return CRIO, true
	case "libpod", "libpod-payload":
		return Podman, false
	case "libpod-conmon":
		return Podman, true
	}
	return "", false
}

// Parse reads a cgroup path (v1 or v2, cgroupfs or systemd driver; as the
// kernel shows it in /proc/PID/cgroup, or relative to a cgroup mount):
// the innermost container it is in, and the Kubernetes pod or podman pod
// around it. Sub-cgroups a runtime makes inside a container's cgroup
// ("libpod-ID.scope/container", "crio-ID.scope/container") belong to the
// container. A path that names none of these gives the zero Ref: a cgroup
// of an unknown runtime reads as its path.
func Parse(path string) Ref {
	var r Ref
	comps := strings.Split(path, "/")
	sawKube := false
	for i, c := range comps {
		if c == "" || c == "." || c == ".." {
			continue
		}
		if m := kubeSliceRe.FindStringSubmatch(c); m != nil {
			r = Ref{PodUID: strings.ReplaceAll(m[2], "_", "-"), QoS: qosOr(m[1])}
			sawKube = true
			continue
		}
		if c == "kubepods" || strings.HasPrefix(c, "kubepods.") || strings.HasPrefix(c, "kubepods-") {
			sawKube = true
			continue
		}
		if m := kubeDirRe.FindStringSubmatch(c); m != nil && sawKube {
			qos := Guaranteed
			if i > 0 && (comps[i-1] == Burstable || comps[i-1] == BestEffort) {
				qos = comps[i-1]
			}
			r = Ref{PodUID: m[1], QoS: qos}
			continue
		}
		if m := podmanPodRe.FindStringSubmatch(c); m != nil {
			r = Ref{PodID: m[1]}
			continue
		}
		if m := scopeRe.FindStringSubmatch(c); m != nil {
			rt, mon := runtimeOfPrefix(m[1])
			r = container(r, rt, m[2], mon)
			continue
		}
		if m := fsPrefixRe.FindStringSubmatch(c); m != nil {
			rt, mon := runtimeOfPrefix(m[1])
			r = container(r, rt, m[2], mon)
			continue
		}
		if bareRe.MatchString(c) {
			parent := ""
			if i > 0 {
				parent = comps[i-1]
			}
			switch {
			case parent == "libpod_parent" && i+1 < len(comps) && strings.HasPrefix(comps[i+1], "libpod-"):
				// A podman pod's cgroup under cgroupfs: its containers
				// are below it.
				r = Ref{PodID: c}
			case r.PodUID != "" && r.ID == "":
				// A container of a Kubernetes pod under the cgroupfs
				// driver: containerd or cri-dockerd.
				r = container(r, CRI, c, false)
			case parent == "docker" || r.Runtime == Docker:
				r = container(r, Docker, c, false)
			case r.ID == "":
				// A bare id under something else (containerd's own
				// namespaces: /k8s.io/ID, /default/ID; moby's
				// cgroup-parent): a container whose runtime the path
				// does not say.
				r = container(r, "", c, false)
			}
			continue
		}
		if r.ID != "" {
			// A sub-cgroup of the container ("container", "init.scope",
			// a nested runtime's own hierarchy): still the container's.
			continue
		}
	}
	return r
}

// container sets the innermost container on r, keeping the pod around it.
func container(r Ref, runtime, id string, monitor bool) Ref {
	return Ref{Runtime: runtime, ID: id, Monitor: monitor, PodUID: r.PodUID, QoS: r.QoS, PodID: r.PodID}
}

func qosOr(q string) string {
	if q == "" {
		return Guaranteed
	}
	return q
}
