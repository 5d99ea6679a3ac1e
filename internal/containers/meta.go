package containers

import (
	"encoding/json"
	"strings"
)

// Meta is what a runtime says about one container.
type Meta struct {
	ID      string
	Runtime string
	Name    string // the container's name (in Kubernetes, its name in the pod spec)
	Image   string
	// Pod is the pod's name: a Kubernetes pod, or a podman pod.
	Pod       string
	Namespace string // the Kubernetes namespace
	PodUID    string // the Kubernetes pod's uid
	PodID     string // the podman pod's id, or the CRI sandbox's id
	// Sandbox marks a pod's sandbox (pause, infra) container.
	Sandbox bool
	// Source says where the names came from, for the report's notes.
	Source string
}

// merge fills m's empty fields from o (m wins where both say).
func (m *Meta) merge(o Meta) {
	fill := func(dst *string, src string) {
		if *dst == "" {
			*dst = src
		}
	}
	fill(&m.ID, o.ID)
	fill(&m.Runtime, o.Runtime)
	fill(&m.Name, o.Name)
	fill(&m.Image, o.Image)
	fill(&m.Pod, o.Pod)
	fill(&m.Namespace, o.Namespace)
	fill(&m.PodUID, o.PodUID)
	fill(&m.PodID, o.PodID)
	fill(&m.Source, o.Source)
	m.Sandbox = m.Sandbox || o.Sandbox
}

// Annotation and label keys the runtimes put on containers, by who sets
// them.
const (
	// containerd's CRI plugin, on every container's OCI spec
	// (containerd, pkg/cri/annotations/annotations.go).
	criContainerType = "io.kubernetes.cri.container-type" // "sandbox" or "container"
	criSandboxID     = "io.kubernetes.cri.sandbox-id"
	criSandboxName   = "io.kubernetes.cri.sandbox-name"
	criSandboxNS     = "io.kubernetes.cri.sandbox-namespace"
	criSandboxUID    = "io.kubernetes.cri.sandbox-uid"
	criContainerName = "io.kubernetes.cri.container-name"
	criImageName     = "io.kubernetes.cri.image-name"
	// The kubelet's labels on every container it asks for
	// (kubernetes, pkg/kubelet/types/labels.go); CRI-O puts them on the
	// OCI spec as annotations, docker (cri-dockerd) as labels.
	kubePodName       = "io.kubernetes.pod.name"
	kubePodNamespace  = "io.kubernetes.pod.namespace"
	kubePodUID        = "io.kubernetes.pod.uid"
	kubeContainerName = "io.kubernetes.container.name"
	// CRI-O's own (CRI-O, pkg/annotations; podman sets some of them too,
	// podman pkg/annotations).
	crioContainerType = "io.kubernetes.cri-o.ContainerType" // "sandbox" or "container"
	crioImageName     = "io.kubernetes.cri-o.ImageName"
	crioSandboxID     = "io.kubernetes.cri-o.SandboxID"
	// "libpod" on a podman container's spec (podman, pkg/annotations:
	// io.container.manager).
	containerManager = "io.container.manager"
)

// fromAnnotations reads a container's identity from the annotations of
// its OCI spec (containerd's CRI plugin, CRI-O, podman) or from its labels
// (docker): the first key that has a value wins.
func fromAnnotations(a map[string]string) Meta {
	first := func(keys ...string) string {
		for _, k := range keys {
			if v := a[k]; v != "" {
				return v
			}
		}
		return ""
	}
	m := Meta{
		Name:      first(criContainerName, kubeContainerName),
		Image:     first(criImageName, crioImageName),
		Pod:       first(criSandboxName, kubePodName),
		Namespace: first(criSandboxNS, kubePodNamespace),
		PodUID:    first(criSandboxUID, kubePodUID),
		PodID:     first(criSandboxID, crioSandboxID),
	}
	switch {
	case a[containerManager] == "libpod":
		m.Runtime = Podman
	case a[criContainerType] != "" || a[criSandboxID] != "":
		m.Runtime = Containerd
	case a[crioContainerType] != "":
		m.Runtime = CRIO
	}
	m.Sandbox = first(criContainerType, crioContainerType) == "sandbox"
	return m
}

// specAnnotations reads the annotations of an OCI runtime spec
// (config.json of a bundle).
func specAnnotations(b []byte) (map[string]string, error) {
	var spec struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		return nil, err
	}
	return spec.Annotations, nil
}

// trimName drops the "/" docker puts before container names.
func trimName(n string) string { return strings.TrimPrefix(n, "/") }
