package doctor

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/winkube/winkube/internal/webhooks/workload"
)

// A Windows node refuses little of what Windows cannot do: the API server
// refuses Linux-only fields only for pods that set spec.os.name: windows,
// and the kubelet and containerd on Windows drop the rest without a word
// (kubernetes.io "Windows containers in Kubernetes", API compatibility;
// kubelet v1.36.3 kuberuntime_container_windows.go, kubelet_pods.go
// translateMountPropagation; containerd helpers.go hostNetwork). What is
// dropped is what surprises: a pod that runs, but not as written. Each
// limit below is one a pod on a Windows node meets, with what the node
// does and how to write the pod instead.

// windowsLimit is one thing a Windows node does not do as asked.
type windowsLimit struct {
	severity Severity
	// what the pod asks, what the node does, and how to fix it.
	what, does, fix string
}

// windowsLimits are the limits a pod spec meets on a Windows node.
func windowsLimits(p *corev1.Pod, node *corev1.Node) []windowsLimit {
	spec := &p.Spec
	var out []windowsLimit
	hp := hostProcessSpec(spec)
	if spec.HostNetwork && !hp {
		ip := "the node's IP"
		if p.Status.PodIP != "" {
			ip = p.Status.PodIP
		}
		out = append(out, windowsLimit{Warning, "hostNetwork without HostProcess",
			fmt.Sprintf("is ignored: containerd gives the pod a pod network of its own, while its status reports the node's IP (%s), so a Service, a probe or a client reaching %s on the pod's ports does not reach the pod", ip, ip),
			"make it a HostProcess pod (securityContext.windowsOptions.hostProcess: true) if it must share the node's network; otherwise remove hostNetwork and reach it through a Service"})
	}
	if ls := linuxOnlyFields(spec); len(ls) > 0 && !hp {
		out = append(out, windowsLimit{Warning, "Linux-only settings " + strings.Join(ls, ", "),
			"are ignored: the Windows container config carries only resources, the user name, the gMSA credential spec and HostProcess, so the container runs without them (a privileged container runs unprivileged)",
			"remove them, use securityContext.windowsOptions (runAsUserName, gmsaCredentialSpec, hostProcess), and set spec.os.name: windows so the API server refuses them"})
	}
	for _, v := range spec.Volumes {
		if v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumMemory {
			out = append(out, windowsLimit{Warning, "emptyDir " + v.Name + " with medium: Memory",
				"is a directory on the node's disk: Windows has no tmpfs, the kubelet's mounter makes a plain directory, so its data is not in memory and survives on disk until the pod goes",
				"drop medium: Memory (the result is the same), and keep secrets out of it"})
		}
	}
	for _, c := range append(append([]corev1.Container(nil), spec.InitContainers...), spec.Containers...) {
		for _, m := range c.VolumeMounts {
			if m.MountPropagation != nil && *m.MountPropagation != corev1.MountPropagationNone {
				out = append(out, windowsLimit{Warning, fmt.Sprintf("mountPropagation %s on container %s's mount %s", *m.MountPropagation, c.Name, m.MountPath),
					"is private on Windows: the kubelet asks for private propagation whatever the pod says, so mounts made later on the host are not seen",
					"remove mountPropagation"})
			}
		}
		if len(c.VolumeDevices) > 0 {
			out = append(out, windowsLimit{Error, "volumeDevices on container " + c.Name,
				"cannot be created: containerd on Windows takes no device with a container path, so the container fails with CreateContainerError \"unexpected ContainerPath …, must be empty\"",
				"use a volumeMount of a file-system volume (volumeMode: Filesystem)"})
		}
		for name := range c.Resources.Requests {
			if strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix) {
				out = append(out, windowsLimit{Error, fmt.Sprintf("%s on container %s", name, c.Name),
					"cannot be scheduled: Windows nodes offer no huge pages (a container cannot hold the large-page privilege), so the scheduler finds no node with the resource",
					"remove the huge-pages request and limit"})
			}
		}
	}
	if r := spec.Resources; r != nil && (len(r.Requests) > 0 || len(r.Limits) > 0) {
		out = append(out, windowsLimit{Error, "pod-level resources (spec.resources)",
			"are refused by the Windows kubelet: the pod fails with PodLevelResourcesNotSupported",
			"set resources on each container instead"})
	}
	if os, ok := p.Labels[corev1.LabelOSStable]; ok && node != nil && os != node.Labels[corev1.LabelOSStable] {
		out = append(out, windowsLimit{Error, fmt.Sprintf("the label %s=%s", corev1.LabelOSStable, os),
			"makes the kubelet refuse the pod (PodOSSelectorNodeLabelDoesNotMatch): it compares the pod's own kubernetes.io/os label with the node's OS",
			"remove the label, or select nodes with nodeSelector rather than labelling the pod"})
	}
	return out
}

func hostProcessSpec(spec *corev1.PodSpec) bool {
	if sc := spec.SecurityContext; sc != nil && sc.WindowsOptions != nil && sc.WindowsOptions.HostProcess != nil && *sc.WindowsOptions.HostProcess {
		return true
	}
	if len(spec.Containers) == 0 {
		return false
	}
	for _, c := range spec.Containers {
		if c.SecurityContext == nil || c.SecurityContext.WindowsOptions == nil || c.SecurityContext.WindowsOptions.HostProcess == nil || !*c.SecurityContext.WindowsOptions.HostProcess {
			return false
		}
	}
	return true
}

// linuxOnlyFields are the fields the API server refuses for os.name:
// windows (kubernetes.io's list of fields a Windows pod must not set).
func linuxOnlyFields(spec *corev1.PodSpec) []string {
	set := map[string]bool{}
	if spec.HostPID {
		set["hostPID"] = true
	}
	if spec.HostIPC {
		set["hostIPC"] = true
	}
	if spec.ShareProcessNamespace != nil && *spec.ShareProcessNamespace {
		set["shareProcessNamespace"] = true
	}
	if sc := spec.SecurityContext; sc != nil {
		for name, on := range map[string]bool{
			"securityContext.seLinuxOptions": sc.SELinuxOptions != nil, "securityContext.seccompProfile": sc.SeccompProfile != nil,
			"securityContext.fsGroup": sc.FSGroup != nil, "securityContext.fsGroupChangePolicy": sc.FSGroupChangePolicy != nil,
			"securityContext.sysctls": len(sc.Sysctls) > 0, "securityContext.runAsUser": sc.RunAsUser != nil,
			"securityContext.runAsGroup": sc.RunAsGroup != nil, "securityContext.supplementalGroups": len(sc.SupplementalGroups) > 0,
		} {
			if on {
				set[name] = true
			}
		}
	}
	for _, c := range append(append([]corev1.Container(nil), spec.InitContainers...), spec.Containers...) {
		sc := c.SecurityContext
		if sc == nil {
			continue
		}
		for name, on := range map[string]bool{
			"seLinuxOptions": sc.SELinuxOptions != nil, "seccompProfile": sc.SeccompProfile != nil, "capabilities": sc.Capabilities != nil,
			"readOnlyRootFilesystem": sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem, "privileged": sc.Privileged != nil && *sc.Privileged,
			"allowPrivilegeEscalation": sc.AllowPrivilegeEscalation != nil && *sc.AllowPrivilegeEscalation, "procMount": sc.ProcMount != nil,
			"runAsUser": sc.RunAsUser != nil, "runAsGroup": sc.RunAsGroup != nil,
		} {
			if on {
				set["containers[*].securityContext."+name] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// WindowsPodLimits reports pods on Windows nodes, or meant for them, that
// ask for what Windows does not do, once per owner and limit.
func WindowsPodLimits(s *State) []Finding {
	seen := map[string]bool{}
	var out []Finding
	for i := range s.Pods {
		p := &s.Pods[i]
		node := s.node(p.Spec.NodeName)
		if node != nil && !isWindowsNode(node) || node == nil && !workload.IsWindows(&p.Spec) {
			continue
		}
		kind, name := "Pod", p.Name
		if len(p.OwnerReferences) > 0 {
			kind, name = p.OwnerReferences[0].Kind, p.OwnerReferences[0].Name
		}
		for _, l := range windowsLimits(p, node) {
			key := kind + "/" + p.Namespace + "/" + name + "/" + l.what
			if seen[key] {
				continue
			}
			seen[key] = true
			where := "a Windows node"
			if node != nil {
				where = "Windows node " + node.Name
			}
			out = append(out, Finding{Check: "windows-pod-limits", Severity: l.severity, Object: ref(kind, p.Namespace, name),
				Message: fmt.Sprintf("pod %s/%s on %s: %s %s", p.Namespace, p.Name, where, l.what, l.does),
				Fix:     l.fix})
		}
	}
	return out
}
