package kubelet

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/winkube/winkube/emulator/registry"
)

// Images resolves image references as a pull's first requests would.
type Images interface {
	Lookup(ctx context.Context, ref string) (*registry.Manifest, error)
}

// Host is what the pod rules need to know of the node.
type Host struct {
	OS   string // "linux" or "windows"
	Arch string
	// Build is a Windows host's build, "10.0.20348".
	Build string
	// KubeletVersion is the kubelet's ("v1.24.3"); FeatureGates its
	// --feature-gates; Runtime the CRI runtime its criSocket names
	// ("containerd", or "dockershim").
	KubeletVersion string
	FeatureGates   map[string]bool
	Runtime        string
}

// hostProcessGate is the kubelet feature gate HostProcess containers need.
const hostProcessGate = "WindowsHostProcessContainers"

// knowsHostProcess says whether the kubelet has the hostProcess field at
// all: it came in v1.22; an older kubelet drops it when it decodes the pod.
func (h Host) knowsHostProcess() bool {
	minor, ok := kubeletMinor(h.KubeletVersion)
	return !ok || minor >= 22
}

// hostProcessSandbox is the error creating a HostProcess pod's sandbox on
// this node, or nil: the kubelet needs the WindowsHostProcessContainers
// gate (alpha, off by default in v1.22; beta, on by default in
// v1.23-v1.25; GA from v1.26) and a runtime that runs them (containerd
// v1.6+, not dockershim).
func (h Host) hostProcessSandbox() error {
	minor, ok := kubeletMinor(h.KubeletVersion)
	enabled := !ok || minor >= 23
	if v, set := h.FeatureGates[hostProcessGate]; set && (!ok || minor < 26) {
		enabled = v
	}
	if !enabled {
		return fmt.Errorf("Failed to create pod sandbox: pod contains HostProcess containers but feature '%s' is not enabled", hostProcessGate)
	}
	if h.Runtime == "dockershim" {
		return errors.New("Failed to create pod sandbox: rpc error: code = Unknown desc = dockershim does not run Windows HostProcess containers: they need containerd v1.6 or later as the node's CRI runtime (criSocket npipe:////./pipe/containerd-containerd)")
	}
	return nil
}

func kubeletMinor(v string) (int, bool) {
	parts := strings.Split(strings.TrimPrefix(v, "v"), ".")
	if len(parts) < 2 || parts[0] != "1" {
		return 0, false
	}
	n, err := strconv.Atoi(parts[1])
	return n, err == nil
}

// Rejection is a pod the kubelet refuses at admission: it ends Failed.
type Rejection struct{ Reason, Message string }

// admit is the kubelet's admission of a pod on this host, and the checks
// a Windows runtime makes before creating a sandbox; nil admits.
func admit(h Host, pod *corev1.Pod) *Rejection {
	if pod.Spec.OS != nil && string(pod.Spec.OS.Name) != h.OS {
		return &Rejection{"PodOSNotSupported", "Failed to admit pod as the OS field doesn't match node OS"}
	}
	if h.OS != "windows" {
		return nil
	}
	hp := hostProcessPod(pod)
	if hp && !h.knowsHostProcess() {
		if pod.Spec.HostNetwork {
			return &Rejection{"UnsupportedPodSpec", fmt.Sprintf("hostNetwork is not supported on Windows for pods that are not HostProcess pods: kubelet %s does not know securityContext.windowsOptions.hostProcess (Kubernetes v1.22 added HostProcess containers)", h.KubeletVersion)}
		}
		hp = false
	}
	if pod.Spec.HostNetwork && !hp {
		return &Rejection{"UnsupportedPodSpec", "hostNetwork is not supported on Windows for pods that are not HostProcess pods: set securityContext.windowsOptions.hostProcess: true or remove hostNetwork"}
	}
	var linuxOnly []string
	check := func(where string, sc *corev1.SecurityContext) {
		if sc == nil {
			return
		}
		if sc.Privileged != nil && *sc.Privileged {
			linuxOnly = append(linuxOnly, where+".privileged (use a HostProcess container)")
		}
		if sc.SELinuxOptions != nil {
			linuxOnly = append(linuxOnly, where+".seLinuxOptions")
		}
		if sc.Capabilities != nil {
			linuxOnly = append(linuxOnly, where+".capabilities")
		}
		if sc.RunAsUser != nil {
			linuxOnly = append(linuxOnly, where+".runAsUser (use windowsOptions.runAsUserName)")
		}
		if sc.ProcMount != nil {
			linuxOnly = append(linuxOnly, where+".procMount")
		}
		if sc.AppArmorProfile != nil {
			linuxOnly = append(linuxOnly, where+".appArmorProfile")
		}
	}
	if psc := pod.Spec.SecurityContext; psc != nil {
		if psc.SELinuxOptions != nil {
			linuxOnly = append(linuxOnly, "securityContext.seLinuxOptions")
		}
		if psc.RunAsUser != nil {
			linuxOnly = append(linuxOnly, "securityContext.runAsUser (use windowsOptions.runAsUserName)")
		}
		if len(psc.Sysctls) > 0 {
			linuxOnly = append(linuxOnly, "securityContext.sysctls")
		}
	}
	for _, c := range allContainers(pod) {
		check("containers["+c.Name+"].securityContext", c.SecurityContext)
	}
	if len(linuxOnly) > 0 {
		return &Rejection{"UnsupportedPodSpec", "Windows cannot run this pod: Linux-only settings " + strings.Join(linuxOnly, ", ")}
	}
	return nil
}

func allContainers(pod *corev1.Pod) []corev1.Container {
	return append(append([]corev1.Container(nil), pod.Spec.InitContainers...), pod.Spec.Containers...)
}

// hostProcessPod says whether a pod runs as HostProcess, set on the pod or
// on every container (Kubernetes refuses mixes at admission).
func hostProcessPod(pod *corev1.Pod) bool {
	hp := func(o *corev1.WindowsSecurityContextOptions) *bool {
		if o == nil {
			return nil
		}
		return o.HostProcess
	}
	var podLevel *bool
	if pod.Spec.SecurityContext != nil {
		podLevel = hp(pod.Spec.SecurityContext.WindowsOptions)
	}
	cs := allContainers(pod)
	if len(cs) == 0 {
		return false
	}
	for _, c := range cs {
		v := podLevel
		if c.SecurityContext != nil && hp(c.SecurityContext.WindowsOptions) != nil {
			v = hp(c.SecurityContext.WindowsOptions)
		}
		if v == nil || !*v {
			return false
		}
	}
	return true
}

// ContainerFailure is a container that cannot start: it waits with Reason.
type ContainerFailure struct{ Reason, Message string }

func (f *ContainerFailure) Error() string { return f.Reason + ": " + f.Message }

// Pulled is an image the runtime can run on this host.
type Pulled struct {
	ImageID  string
	Provides string
	// Process is the image's process for the host's OS, when its
	// configuration is known.
	Process *registry.Process
	// Listens are the ports the image's process serves ("80/tcp").
	Listens []string
}

// pull resolves an image for this host the way containerd does: it picks
// the host's platform from an index, and Windows process isolation needs
// the image's build to be the host's (a 2025 host also runs 2022 images).
// HostProcess containers run on the host and need only a Windows image.
func pull(ctx context.Context, images Images, h Host, ref string, hostProcess bool) (*Pulled, error) {
	canon := registry.Canonical(ref)
	m, err := images.Lookup(ctx, ref)
	if errors.Is(err, registry.ErrNotFound) {
		return nil, &ContainerFailure{"ErrImagePull", fmt.Sprintf("failed to pull and unpack image %q: failed to resolve reference %q: %s: not found", canon, canon, canon)}
	}
	if err != nil {
		return nil, &ContainerFailure{"ErrImagePull", fmt.Sprintf("failed to pull and unpack image %q: %v", canon, err)}
	}
	id := registry.Repository(ref) + "@" + m.Digest
	var sameOS []string
	for _, p := range m.Platforms {
		if p.OS == h.OS && p.Architecture == h.Arch {
			sameOS = append(sameOS, p.OSVersion)
		}
	}
	noMatch := &ContainerFailure{"ErrImagePull", fmt.Sprintf("failed to pull and unpack image %q: no match for platform in manifest: not found", canon)}
	if len(sameOS) == 0 {
		return nil, noMatch
	}
	pulled := &Pulled{ImageID: id, Provides: m.Provides, Listens: m.Listens}
	if pr, ok := m.Process[h.OS]; ok {
		pulled.Process = &pr
	}
	if h.OS != "windows" || hostProcess {
		return pulled, nil
	}
	for _, v := range sameOS {
		if runsOn(v, h.Build) {
			return pulled, nil
		}
	}
	if len(m.Platforms) > 1 {
		return nil, noMatch // an index with no entry for this build
	}
	return nil, &ContainerFailure{"CreateContainerError", "failed to create containerd task: failed to create shim task: hcs::CreateComputeSystem: The container operating system does not match the host operating system.: unknown"}
}

// runsOn says whether a process-isolated image of build image runs on a
// host of build host ("10.0.20348" forms; the image's revision is ignored).
func runsOn(image, host string) bool {
	ib, hb := buildOf(image), buildOf(host)
	if ib == hb {
		return true
	}
	// Windows Server 2025 runs Windows Server 2022 images.
	return hb == "10.0.26100" && ib == "10.0.20348"
}

func buildOf(v string) string {
	parts := strings.Split(v, ".")
	if len(parts) > 3 {
		parts = parts[:3]
	}
	return strings.Join(parts, ".")
}

// unreachableRegistry is the failure of a pull when the machine has no way
// to the internet: name resolution works (Azure DNS needs none) but the
// connection to the registry's port 443 never completes, and containerd
// reports the dial timeout. The message is put together as containerd
// v1.7 does: the CRI plugin's PullImage (pkg/cri/server/image_pull.go)
// wraps the client's pull in "failed to pull and unpack image %q", whose
// fetch (pull.go) wraps the resolver's error in "failed to resolve
// reference %q"; the resolver (remotes/docker/resolver.go, request.do)
// wraps the HTTP client's error in "failed to do request", and Go's
// url.Error gives `Head "<url>": dial tcp <ip>:443: i/o timeout`.
func unreachableRegistry(ref string) *ContainerFailure {
	canon := registry.Canonical(ref)
	host, repo, object := splitCanonical(canon)
	u := "https://" + host + "/v2/" + repo + "/manifests/" + object
	return &ContainerFailure{"ErrImagePull", fmt.Sprintf("failed to pull and unpack image %q: failed to resolve reference %q: failed to do request: Head %q: dial tcp %s:443: i/o timeout", canon, canon, u, publicAddress(host))}
}

// splitCanonical splits "registry.k8s.io/pause:3.10" into the host
// containerd connects to, the repository and the tag or digest. Docker
// Hub's references name docker.io, whose registry containerd reaches at
// registry-1.docker.io (remotes/docker/config/hosts.go, v1.7).
func splitCanonical(canon string) (host, repo, object string) {
	host, rest, _ := strings.Cut(canon, "/")
	if host == "docker.io" {
		host = "registry-1.docker.io"
	}
	if i := strings.Index(rest, "@"); i >= 0 {
		return host, rest[:i], rest[i+1:]
	}
	if i := strings.LastIndex(rest, ":"); i >= 0 {
		return host, rest[:i], rest[i+1:]
	}
	return host, rest, "latest"
}

// publicAddress stands for the address Azure DNS gives a registry's name.
// The local world has no public DNS, so the address is one of the
// documentation range 203.0.113.0/24 (RFC 5737), the same for a name
// every time.
func publicAddress(host string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(host))
	return "203.0.113." + strconv.Itoa(1+int(h.Sum32()%254))
}
