package containers

import "testing"

// The layouts below are the ones the runtimes and the kubelet make, read
// from their sources and documentation:
//
//   - runc, libcontainer/cgroups/systemd (getUnitName): a cgroupsPath of
//     "slice:PREFIX:NAME" becomes the unit "PREFIX-NAME.scope" under slice;
//   - kubelet, pkg/kubelet/cm/cgroup_manager_linux.go and
//     pod_container_manager_linux.go: a pod's cgroup is "pod"+UID under
//     kubepods (Guaranteed), kubepods/burstable or kubepods/besteffort;
//     the systemd driver escapes "-" in each name to "_", joins the names
//     with "-" and adds ".slice" (kubepods-burstable-pod<uid_>.slice);
//   - containerd, CRI plugin (getCgroupsPath): "SLICE:cri-containerd:ID"
//     under a systemd parent, PARENT/ID otherwise;
//   - CRI-O, internal/config/cgmgr: "crio-ID.scope" and
//     "crio-conmon-ID.scope" (systemd), PARENT/crio-ID and
//     PARENT/crio-conmon-ID (cgroupfs);
//   - podman, libpod/container_internal_linux.go (getOCICgroupPath) and
//     runtime_pod_linux.go: "libpod-ID.scope" and "libpod-conmon-ID.scope" in
//     machine.slice (rootless: the user's user.slice), a pod's
//     "machine-libpod_pod_ID.slice"; /libpod_parent/libpod-ID and
//     /libpod_parent/POD/libpod-ID under cgroupfs, "libpod-payload-ID"
//     inside its own cgroup with --cgroups=split;
//   - docker (moby): /docker/ID (cgroupfs driver), system.slice/docker-ID.scope
//     (systemd driver); under the kubelet, through cri-dockerd, a pod's
//     cgroup/ID or docker-ID.scope.
func TestParse(t *testing.T) {
	const (
		id  = "be7701a021ff5b1c8bf2d9bd4a0c3a8e5e2d3f1a9c0b8d7e6f5a4b3c2d1e0f9a"
		id2 = "3f2a1b9c0d1e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f90"
		uid = "8f1c2d3e-4a5b-6c7d-8e9f-0a1b2c3d4e5f"
		us  = "8f1c2d3e_4a5b_6c7d_8e9f_0a1b2c3d4e5f" // the systemd driver's escape
	)
	cases := []struct {
		name, path string
		want       Ref
	}{
		// docker
		{"docker cgroupfs", "/docker/" + id, Ref{Runtime: Docker, ID: id}},
		{"docker systemd", "/system.slice/docker-" + id + ".scope", Ref{Runtime: Docker, ID: id}},
		{"docker in docker", "/docker/" + id2 + "/docker/" + id, Ref{Runtime: Docker, ID: id}},
		{"docker under the kubelet, systemd", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + us + ".slice/docker-" + id + ".scope",
			Ref{Runtime: Docker, ID: id, PodUID: uid, QoS: Burstable}},
		// containerd (CRI)
		{"containerd systemd burstable", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + us + ".slice/cri-containerd-" + id + ".scope",
			Ref{Runtime: Containerd, ID: id, PodUID: uid, QoS: Burstable}},
		{"containerd systemd besteffort", "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + us + ".slice/cri-containerd-" + id + ".scope",
			Ref{Runtime: Containerd, ID: id, PodUID: uid, QoS: BestEffort}},
		{"containerd systemd guaranteed", "/kubepods.slice/kubepods-pod" + us + ".slice/cri-containerd-" + id + ".scope",
			Ref{Runtime: Containerd, ID: id, PodUID: uid, QoS: Guaranteed}},
		{"cgroupfs driver burstable", "/kubepods/burstable/pod" + uid + "/" + id, Ref{Runtime: CRI, ID: id, PodUID: uid, QoS: Burstable}},
		{"cgroupfs driver besteffort", "/kubepods/besteffort/pod" + uid + "/" + id, Ref{Runtime: CRI, ID: id, PodUID: uid, QoS: BestEffort}},
		{"cgroupfs driver guaranteed", "/kubepods/pod" + uid + "/" + id, Ref{Runtime: CRI, ID: id, PodUID: uid, QoS: Guaranteed}},
		{"rootless kubelet", "/user.slice/user-1001.slice/user@1001.service/user.slice/cri-containerd-" + id + ".scope", Ref{Runtime: Containerd, ID: id}},
		{"containerd namespace, no kubelet", "/k8s.io/" + id, Ref{ID: id}},
		{"nerdctl systemd", "/system.slice/nerdctl-" + id + ".scope", Ref{Runtime: Containerd, ID: id}},
		// CRI-O
		{"cri-o systemd", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + us + ".slice/crio-" + id + ".scope",
			Ref{Runtime: CRIO, ID: id, PodUID: uid, QoS: Burstable}},
		{"cri-o systemd, v2 sub-cgroup", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + us + ".slice/crio-" + id + ".scope/container",
			Ref{Runtime: CRIO, ID: id, PodUID: uid, QoS: Burstable}},
		{"cri-o conmon systemd", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + us + ".slice/crio-conmon-" + id + ".scope",
			Ref{Runtime: CRIO, ID: id, Monitor: true, PodUID: uid, QoS: Burstable}},
		{"cri-o cgroupfs", "/kubepods/burstable/pod" + uid + "/crio-" + id, Ref{Runtime: CRIO, ID: id, PodUID: uid, QoS: Burstable}},
		{"cri-o conmon cgroupfs", "/kubepods/pod" + uid + "/crio-conmon-" + id, Ref{Runtime: CRIO, ID: id, Monitor: true, PodUID: uid, QoS: Guaranteed}},
		// podman
		{"podman cgroupfs", "/libpod_parent/libpod-" + id, Ref{Runtime: Podman, ID: id}},
		{"podman cgroupfs pod", "/libpod_parent/" + id2 + "/libpod-" + id, Ref{Runtime: Podman, ID: id, PodID: id2}},
		{"podman --cgroups=split", "/machine.slice/libpod-conmon-" + id + ".scope/libpod-payload-" + id, Ref{Runtime: Podman, ID: id}},
		{"podman systemd", "/machine.slice/libpod-" + id + ".scope", Ref{Runtime: Podman, ID: id}},
		{"podman systemd, crun's sub-cgroup", "/machine.slice/libpod-" + id + ".scope/container", Ref{Runtime: Podman, ID: id}},
		{"podman conmon", "/machine.slice/libpod-conmon-" + id + ".scope", Ref{Runtime: Podman, ID: id, Monitor: true}},
		{"podman pod systemd", "/machine.slice/machine-libpod_pod_" + id2 + ".slice/libpod-" + id + ".scope", Ref{Runtime: Podman, ID: id, PodID: id2}},
		{"podman pod's own cgroup", "/machine.slice/machine-libpod_pod_" + id2 + ".slice", Ref{PodID: id2}},
		{"podman rootless", "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + id + ".scope", Ref{Runtime: Podman, ID: id}},
		// pods' own cgroups
		{"pod cgroup systemd", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + us + ".slice", Ref{PodUID: uid, QoS: Burstable}},
		{"pod cgroup cgroupfs", "/kubepods/besteffort/pod" + uid, Ref{PodUID: uid, QoS: BestEffort}},
		// seen from inside a cgroup namespace (a DaemonSet's /proc/PID/cgroup)
		{"through a cgroup namespace", "/../../kubepods-burstable-pod" + us + ".slice/cri-containerd-" + id + ".scope",
			Ref{Runtime: Containerd, ID: id, PodUID: uid, QoS: Burstable}},
		// what is not a container reads as its path
		{"root", "/", Ref{}},
		{"a service", "/system.slice/sshd.service", Ref{}},
		{"a lab", "/wolf-lab-memchain-18838", Ref{}},
		{"a QoS class", "/kubepods.slice/kubepods-burstable.slice", Ref{}},
		{"a short hex name", "/docker/3f2a1b9c0d1e", Ref{}},
		{"upper-case hex", "/docker/" + "BE7701A021FF5B1C8BF2D9BD4A0C3A8E5E2D3F1A9C0B8D7E6F5A4B3C2D1E0F9A", Ref{}},
		{"pod dir outside kubepods", "/pod" + uid, Ref{}},
		{"unknown runtime scope", "/machine.slice/lxc-" + id + ".scope", Ref{}},
	}
	for _, c := range cases {
		if got := Parse(c.path); got != c.want {
			t.Errorf("%s: Parse(%q)\n got %+v\nwant %+v", c.name, c.path, got, c.want)
		}
	}
}

func TestShortID(t *testing.T) {
	if got := ShortID("be7701a021ff5b1c8bf2d9bd4a0c3a8e5e2d3f1a9c0b8d7e6f5a4b3c2d1e0f9a"); got != "be7701a021ff" {
		t.Errorf("ShortID = %q", got)
	}
	if got := ShortID("abc"); got != "abc" {
		t.Errorf("ShortID(short) = %q", got)
	}
}
