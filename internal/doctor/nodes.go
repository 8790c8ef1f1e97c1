package doctor

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/winkube/winkube/internal/images"
	"github.com/winkube/winkube/internal/webhooks/workload"
)

const (
	windowsBuildLabel  = "node.kubernetes.io/windows-build"
	uninitializedTaint = "node.cloudprovider.kubernetes.io/uninitialized"
	hostProcessGate    = "WindowsHostProcessContainers"
)

// release names the Windows Server release of a build ("10.0.20348" ->
// "Windows Server 2022").
func release(build string) string {
	for v, b := range images.WindowsBuild {
		if b == build {
			return "Windows Server " + string(v)
		}
	}
	return "an unknown Windows release"
}

// buildOf is a Windows node's build (major.minor.build), from its label or
// its kernel version.
func buildOf(n *corev1.Node) string {
	if b := n.Labels[windowsBuildLabel]; b != "" {
		return b
	}
	parts := strings.Split(n.Status.NodeInfo.KernelVersion, ".")
	if len(parts) >= 3 {
		return strings.Join(parts[:3], ".")
	}
	return ""
}

// WindowsNodes reports the Windows nodes per build: which Windows images
// the cluster can run (process isolation needs the host's build).
func WindowsNodes(s *State) []Finding {
	byBuild := map[string][]string{}
	for _, n := range s.windowsNodes() {
		b := buildOf(n)
		byBuild[b] = append(byBuild[b], n.Name)
	}
	builds := slices.Sorted(maps.Keys(byBuild))
	var out []Finding
	for _, b := range builds {
		names := byBuild[b]
		sort.Strings(names)
		if b == "" {
			out = append(out, Finding{Check: "windows-nodes", Severity: Warning,
				Message: fmt.Sprintf("Windows nodes %s report no build (no %s label, no kernel version)", strings.Join(names, ", "), windowsBuildLabel),
				Fix:     "the kubelet sets the label when it registers: check that these nodes run a Windows kubelet of Kubernetes 1.17 or newer"})
			continue
		}
		out = append(out, Finding{Check: "windows-nodes", Severity: Info,
			Message: fmt.Sprintf("%d Windows node(s) on build %s (%s): %s; they run process-isolated images of that build only", len(names), b, release(b), strings.Join(names, ", "))})
	}
	return out
}

// platformErrors are what a container runtime says when an image is not for
// the node: a Windows build mismatch, a manifest list without the node's
// platform, or an OS the runtime cannot run.
var platformErrors = []struct{ text, kind string }{
	{"the container operating system does not match the host operating system", "build"},
	{"no match for platform in manifest", "platform"},
	{"cannot be used on this platform", "platform"},
	{"exec format error", "platform"},
}

func platformError(msg string) string {
	low := strings.ToLower(msg)
	for _, p := range platformErrors {
		if strings.Contains(low, p.text) {
			return p.kind
		}
	}
	return ""
}

// PlatformMismatch reports pods whose images are for another OS, Windows
// build or platform than their node, from their containers' states and
// their Warning events.
func PlatformMismatch(s *State) []Finding {
	type hit struct {
		pod     *corev1.Pod
		kind    string
		message string
	}
	hits := map[string]*hit{}
	pods := map[string]*corev1.Pod{}
	for i := range s.Pods {
		p := &s.Pods[i]
		pods[p.Namespace+"/"+p.Name] = p
		statuses := append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...)
		for _, cs := range statuses {
			for _, msg := range []string{waitingMessage(cs.State), waitingMessage(cs.LastTerminationState), terminatedMessage(cs.State), terminatedMessage(cs.LastTerminationState)} {
				if k := platformError(msg); k != "" && hits[p.Namespace+"/"+p.Name] == nil {
					hits[p.Namespace+"/"+p.Name] = &hit{p, k, fmt.Sprintf("container %s (%s): %s", cs.Name, cs.Image, msg)}
				}
			}
		}
	}
	var waiting []Finding
	for _, e := range s.Events {
		if e.InvolvedObject.Kind != "Pod" || e.Type != corev1.EventTypeWarning {
			continue
		}
		key := e.InvolvedObject.Namespace + "/" + e.InvolvedObject.Name
		if e.Reason == workload.MissingBuildReason && pods[key] != nil && pods[key].Spec.NodeName == "" {
			// winkube admission kept it off the wrong build; it says how.
			waiting = append(waiting, Finding{Check: "platform-mismatch", Severity: Warning, Object: ref("Pod", e.InvolvedObject.Namespace, e.InvolvedObject.Name),
				Message: "the pod waits for a Windows build no node has: " + e.Message,
				Fix:     "add nodes of that build, or change the image's tag to a build the cluster has"})
			continue
		}
		if k := platformError(e.Message); k != "" && hits[key] == nil && pods[key] != nil {
			hits[key] = &hit{pods[key], k, e.Message}
		}
	}
	keys := slices.Sorted(maps.Keys(hits))
	var out []Finding
	for _, k := range keys {
		h := hits[k]
		where := "its node"
		fix := "select the OS the image is built for: spec.os.name and nodeSelector kubernetes.io/os (winkube admission sets both from the images), or use a multi-platform image"
		if n := s.node(h.pod.Spec.NodeName); n != nil {
			where = "node " + n.Name
			if isWindowsNode(n) {
				where += fmt.Sprintf(" (Windows build %s, %s)", buildOf(n), release(buildOf(n)))
			}
		}
		if h.kind == "build" {
			fix = "a process-isolated Windows image runs only on a host of its own build (a 2025 host also runs 2022 images): use the image tag for the node's build (ltsc2022 for 10.0.20348, ltsc2019 for 10.0.17763), " +
				"or add nodes of the image's build ('winkube up --windows-version 2019', or a MachineDeployment whose AzureMachineTemplate sets windowsServerVersion: \"2019\"); winkube admission keeps such pods Pending instead of failing them"
		}
		out = append(out, Finding{Check: "platform-mismatch", Severity: Error, Object: ref("Pod", h.pod.Namespace, h.pod.Name),
			Message: fmt.Sprintf("the image does not run on %s: %s", where, h.message), Fix: fix})
	}
	sort.SliceStable(waiting, func(i, j int) bool { return waiting[i].Object < waiting[j].Object })
	return append(out, waiting...)
}

func waitingMessage(s corev1.ContainerState) string {
	if s.Waiting != nil {
		return s.Waiting.Message
	}
	return ""
}

func terminatedMessage(s corev1.ContainerState) string {
	if s.Terminated != nil {
		return s.Terminated.Message
	}
	return ""
}

// UninitializedNodes reports nodes that no cloud controller manager has
// initialized: every winkube kubelet runs with cloud-provider external and
// this taint, so nothing but tolerating add-ons schedules there.
func UninitializedNodes(s *State) []Finding {
	var out []Finding
	for i := range s.Nodes {
		n := &s.Nodes[i]
		for _, t := range n.Spec.Taints {
			if t.Key == uninitializedTaint {
				out = append(out, Finding{Check: "cloud-provider", Severity: Error, Object: ref("Node", "", n.Name),
					Message: fmt.Sprintf("node %s still carries the %s taint: no cloud controller manager has initialized it, so ordinary pods do not schedule there", n.Name, uninitializedTaint),
					Fix:     "run cloud-provider-azure (azure-cloud-controller-manager and azure-cloud-node-manager): give the Cluster the label cloud-provider=azure so its ClusterResourceSet installs it, and check that its pods run"})
			}
		}
	}
	return out
}

// Dockershim reports nodes whose kubelet talks to Docker: dockershim was
// removed in Kubernetes 1.24.
func Dockershim(s *State) []Finding {
	var out []Finding
	for i := range s.Nodes {
		n := &s.Nodes[i]
		if !strings.HasPrefix(n.Status.NodeInfo.ContainerRuntimeVersion, "docker://") {
			continue
		}
		v, err := images.ParseVersion(n.Status.NodeInfo.KubeletVersion)
		f := Finding{Check: "dockershim", Object: ref("Node", "", n.Name),
			Fix: "replace the node with a containerd one: the default (containerd) flavors, or containerRuntime: containerd in its AzureMachineTemplate; 'winkube images list' shows the containerd images"}
		if err == nil && v.AtLeast(1, images.DockershimRemovedMinor) {
			f.Severity = Error
			f.Message = fmt.Sprintf("node %s runs %s with kubelet %s, but dockershim was removed in Kubernetes v1.%d", n.Name, n.Status.NodeInfo.ContainerRuntimeVersion, v, images.DockershimRemovedMinor)
		} else {
			f.Severity = Warning
			f.Message = fmt.Sprintf("node %s runs Docker (%s) through dockershim, which Kubernetes v1.%d removed: this node cannot be upgraded past v1.%d", n.Name, n.Status.NodeInfo.ContainerRuntimeVersion, images.DockershimRemovedMinor, images.DockershimRemovedMinor-1)
		}
		out = append(out, f)
	}
	return out
}

// maxKubeletLag is how many minor versions a kubelet may trail the API
// server: three from Kubernetes 1.28 (KEP-3935), two before.
func maxKubeletLag(apiserver images.Version) int {
	if apiserver.AtLeast(1, 28) {
		return 3
	}
	return 2
}

// VersionSkew reports kubelets the control plane does not support: newer
// than the API server, or older than the skew policy allows.
func VersionSkew(s *State) []Finding {
	if s.Version.Major == 0 {
		return nil
	}
	var out []Finding
	for i := range s.Nodes {
		n := &s.Nodes[i]
		kv, err := images.ParseVersion(n.Status.NodeInfo.KubeletVersion)
		if err != nil {
			continue
		}
		lag := s.Version.Minor - kv.Minor
		switch {
		case kv.Minor > s.Version.Minor:
			out = append(out, Finding{Check: "version-skew", Severity: Error, Object: ref("Node", "", n.Name),
				Message: fmt.Sprintf("node %s runs kubelet %s, newer than the API server %s: a kubelet must never be newer than the control plane", n.Name, kv, s.Version),
				Fix:     "upgrade the control plane first (the KubeadmControlPlane's version), then the workers; or roll this node back to the control plane's version"})
		case lag > maxKubeletLag(s.Version):
			out = append(out, Finding{Check: "version-skew", Severity: Error, Object: ref("Node", "", n.Name),
				Message: fmt.Sprintf("node %s runs kubelet %s, %d minor versions behind the API server %s; the skew policy allows %d", n.Name, kv, lag, s.Version, maxKubeletLag(s.Version)),
				Fix:     "upgrade the node's MachineDeployment or MachinePool (spec.template.spec.version) to the control plane's version, one minor version at a time"})
		}
	}
	return out
}

// HostProcessFeatureGate reports a control plane that refuses HostProcess
// pods, which the Windows kube-proxy and CNI are: Kubernetes 1.22 needs the
// WindowsHostProcessContainers gate turned on, 1.23 to 1.25 need it not
// turned off, and before 1.22 there are none.
func HostProcessFeatureGate(s *State) []Finding {
	if s.Version.Major == 0 || len(s.windowsNodes()) == 0 {
		return nil
	}
	v := s.Version
	if !v.AtLeast(1, images.HostProcessMinor) {
		return []Finding{{Check: "hostprocess-feature-gate", Severity: Error,
			Message: fmt.Sprintf("the control plane runs %s, which has no HostProcess containers: the Windows kube-proxy and CNI of the containerd flavors cannot run", v),
			Fix:     fmt.Sprintf("upgrade to Kubernetes v1.%d or newer (v1.%d or newer needs no feature gate)", images.HostProcessMinor, images.HostProcessGAMinor)}}
	}
	if !images.NeedsHostProcessFeatureGate(v) {
		return nil
	}
	var out []Finding
	seen := false
	for i := range s.Pods {
		p := &s.Pods[i]
		if p.Namespace != "kube-system" || p.Labels["component"] != "kube-apiserver" {
			continue
		}
		seen = true
		value, set := featureGate(p, hostProcessGate)
		switch {
		case v.Minor == images.HostProcessMinor && value != "true":
			out = append(out, Finding{Check: "hostprocess-feature-gate", Severity: Error, Object: ref("Pod", p.Namespace, p.Name),
				Message: fmt.Sprintf("Kubernetes %s needs the %s feature gate for HostProcess pods (the Windows kube-proxy and CNI), and this API server does not turn it on", v, hostProcessGate),
				Fix:     fmt.Sprintf("add feature-gates: %s=true to the KubeadmControlPlane's apiServer extraArgs and to every Windows kubelet's kubeletExtraArgs (the windows flavors do this for v1.22)", hostProcessGate)})
		case set && value == "false":
			out = append(out, Finding{Check: "hostprocess-feature-gate", Severity: Error, Object: ref("Pod", p.Namespace, p.Name),
				Message: fmt.Sprintf("this API server turns %s off, so HostProcess pods (the Windows kube-proxy and CNI) are refused", hostProcessGate),
				Fix:     fmt.Sprintf("remove %s=false from the API server's and the Windows kubelets' feature gates", hostProcessGate)})
		}
	}
	if !seen && v.Minor == images.HostProcessMinor {
		out = append(out, Finding{Check: "hostprocess-feature-gate", Severity: Warning,
			Message: fmt.Sprintf("Kubernetes %s needs the %s feature gate on the API server and every Windows kubelet, and no kube-apiserver pod is visible to check it", v, hostProcessGate),
			Fix:     fmt.Sprintf("make sure both run with --feature-gates=%s=true", hostProcessGate)})
	}
	return out
}

// featureGate reads gate from a pod's --feature-gates arguments.
func featureGate(p *corev1.Pod, gate string) (value string, set bool) {
	for _, c := range p.Spec.Containers {
		for _, a := range append(append([]string{}, c.Command...), c.Args...) {
			list, ok := strings.CutPrefix(a, "--feature-gates=")
			if !ok {
				continue
			}
			for _, kv := range strings.Split(list, ",") {
				if k, val, ok := strings.Cut(kv, "="); ok && strings.TrimSpace(k) == gate {
					value, set = strings.ToLower(strings.TrimSpace(val)), true
				}
			}
		}
	}
	return value, set
}
