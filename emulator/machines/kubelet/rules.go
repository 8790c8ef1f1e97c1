package kubelet

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/winkube/winkube/emulator/machines/containerruntime"
	"github.com/winkube/winkube/emulator/registry"
	"github.com/winkube/winkube/windowslimits"
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

// admit is the kubelet's admission of a pod on this host; nil admits.
//
// What a Windows kubelet of v1.36 refuses is little: the OS field and the
// pod's kubernetes.io/os label against the node's OS
// (pkg/kubelet/lifecycle/predicate.go), and pod-level resources
// (lifecycle/features_windows.go, reason PodLevelResourcesNotSupported
// from handlers.go). Everything else Windows cannot do is not refused by
// the node: the API server refuses Linux-only fields when spec.os.name is
// windows, and otherwise the kubelet and containerd ignore them (see
// ignoredOnWindows and syncPod's host network), which is what makes them
// worth explaining. The Windows refusals are the Rejects rows of
// windowslimits, which doctor and admission read too.
func admit(h Host, pod *corev1.Pod) *Rejection {
	if os, ok := pod.Labels[corev1.LabelOSStable]; ok && os != h.OS {
		// rejectPodAdmissionBasedOnOSSelector reads the pod's labels,
		// not its nodeSelector; on Windows it is the table's os-label row,
		// and a Linux kubelet refuses a windows label alike.
		row := windowslimits.ByID("os-label")
		return &Rejection{row.Reason, row.Message}
	}
	if pod.Spec.OS != nil && string(pod.Spec.OS.Name) != h.OS {
		return &Rejection{"PodOSNotSupported", "Failed to admit pod as the OS field doesn't match node OS"}
	}
	if h.OS != "windows" {
		return nil
	}
	for _, hit := range windowslimits.Find(windowslimits.PodTarget(pod)) {
		if hit.Row.Kubelet == windowslimits.Rejects {
			return &Rejection{hit.Row.Reason, hit.Row.Message}
		}
	}
	hp := HostProcessPod(pod)
	if hp && !h.knowsHostProcess() && pod.Spec.HostNetwork {
		return &Rejection{"UnsupportedPodSpec", fmt.Sprintf("hostNetwork is not supported on Windows for pods that are not HostProcess pods: kubelet %s does not know securityContext.windowsOptions.hostProcess (Kubernetes v1.22 added HostProcess containers)", h.KubeletVersion)}
	}
	return nil
}

// createsOnWindows is containerd's refusal to create a Windows container
// the kubelet asks for, or nil: the table's FailsContainer rows. A raw
// block volume (volumeDevices) reaches the runtime as a CRI device with
// the container path and "mrw" permissions the kubelet sets for Linux, and
// containerd's Windows spec takes only devices named IDType://ID with
// neither (see the volume-devices row's source). Attaching and mapping the
// block volume before it is not simulated: a bound PersistentVolume is
// taken as mapped.
func createsOnWindows(h Host, pod *corev1.Pod, c corev1.Container) *ContainerFailure {
	if h.OS != "windows" {
		return nil
	}
	if f := rootRefused(pod, c); f != nil {
		return f
	}
	// The rows that fail a container read the container alone.
	alone := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{c}}}
	for _, hit := range windowslimits.Find(windowslimits.PodTarget(alone)) {
		if hit.Row.Kubelet == windowslimits.FailsContainer && len(c.VolumeDevices) > 0 {
			return &ContainerFailure{hit.Row.Reason, fmt.Sprintf(hit.Row.Message, containerruntime.ContainerID(pod, c.Name), c.VolumeDevices[0].DevicePath)}
		}
	}
	return nil
}

// nodeCapacity is the capacity the kubelet registers: a Windows node
// offers no huge pages whatever its machine has (the table's hugepages
// row), so pods that request them stay unscheduled.
func nodeCapacity(h Host, c corev1.ResourceList) corev1.ResourceList {
	if h.OS != "windows" || c == nil {
		return c
	}
	out := corev1.ResourceList{}
	for n, q := range c {
		if !strings.HasPrefix(string(n), corev1.ResourceHugePagesPrefix) {
			out[n] = q
		}
	}
	return out
}

// hostNetworkIgnored says whether a pod asks for the host's network and
// gets a pod network instead: on Windows only HostProcess sandboxes share
// the host's network (containerd internal/cri/server/helpers.go
// hostNetwork, 301026e5: on windows it is the sandbox's HostProcess flag
// alone), while the kubelet still reports the node's IPs as the pod's
// (kubelet_pods.go generateAPIPodStatus: "HostNetwork Pods inherit the
// node IPs as PodIPs"). The WindowsHostNetwork gate that would have
// changed it was deprecated in v1.33 and is read nowhere in v1.36. It is
// the table's host-network row, and what a kubelet older than v1.22 does
// with a HostProcess pod it cannot recognise.
func (h Host) hostNetworkIgnored(pod *corev1.Pod) bool {
	return h.OS == "windows" && pod.Spec.HostNetwork && !(HostProcessPod(pod) && h.knowsHostProcess())
}

// ignoredOnWindows are what a Windows kubelet and containerd leave out of
// a container it runs, and what the kubelet logs of it: the Windows
// container config carries only resources, the user name, the gMSA spec
// and HostProcess (kuberuntime_container_windows.go
// generateWindowsContainerConfig), so privileged, capabilities, runAsUser,
// seLinuxOptions, procMount and the rest are dropped; mount propagation
// becomes private (kubelet_pods.go translateMountPropagation); an
// emptyDir of medium Memory is a plain directory, since the Windows
// mounter makes a directory for the source "tmpfs" (mount-utils
// mount_windows.go MountSensitive, v0.36.3). The kubelet logs only the
// runAsUser, seLinuxOptions and runAsGroup ones, and only when
// runAsNonRoot is set (security_context_windows.go verifyRunAsNonRoot).
func ignoredOnWindows(pod *corev1.Pod, c corev1.Container) (logged []string) {
	sc := effectiveSecurityContext(pod, c)
	if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		return nil
	}
	if sc.RunAsUser != nil {
		logged = append(logged, "Windows container does not support SecurityContext.RunAsUser, please use SecurityContext.WindowsOptions")
	}
	if sc.SELinuxOptions != nil {
		logged = append(logged, "Windows container does not support SecurityContext.SELinuxOptions, please use SecurityContext.WindowsOptions")
	}
	if sc.RunAsGroup != nil {
		logged = append(logged, "Windows container does not support SecurityContext.RunAsGroup")
	}
	return logged
}

// rootRefused is the kubelet's runAsNonRoot check for a Windows container
// that names its user: ContainerAdministrator, in any case, is the root
// identity, so the container is not created and waits with
// CreateContainerConfigError (kubernetes pkg/kubelet/kuberuntime/
// security_context_windows.go verifyRunAsNonRoot, v1.36.3; upstream e2e
// test/e2e/windows/security_context.go reads the event's message).
func rootRefused(pod *corev1.Pod, c corev1.Container) *ContainerFailure {
	sc := effectiveSecurityContext(pod, c)
	if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.WindowsOptions == nil || sc.WindowsOptions.RunAsUserName == nil {
		return nil
	}
	if user := *sc.WindowsOptions.RunAsUserName; strings.EqualFold(user, "ContainerAdministrator") {
		return &ContainerFailure{"CreateContainerConfigError", fmt.Sprintf("Error: container's runAsUserName (%s) which will be regarded as root identity and will break non-root policy (pod: %q, container: %s)",
			user, pod.Name+"_"+pod.Namespace+"("+string(pod.UID)+")", c.Name)}
	}
	return nil
}

// effectiveSecurityContext merges the pod's and the container's as
// pkg/securitycontext DetermineEffectiveSecurityContext does, for the
// fields ignoredOnWindows and rootRefused read.
func effectiveSecurityContext(pod *corev1.Pod, c corev1.Container) corev1.SecurityContext {
	var out corev1.SecurityContext
	if p := pod.Spec.SecurityContext; p != nil {
		out.RunAsUser, out.RunAsGroup, out.RunAsNonRoot, out.SELinuxOptions = p.RunAsUser, p.RunAsGroup, p.RunAsNonRoot, p.SELinuxOptions
		if p.WindowsOptions != nil {
			out.WindowsOptions = p.WindowsOptions.DeepCopy()
		}
	}
	if s := c.SecurityContext; s != nil {
		if s.RunAsUser != nil {
			out.RunAsUser = s.RunAsUser
		}
		if s.RunAsGroup != nil {
			out.RunAsGroup = s.RunAsGroup
		}
		if s.RunAsNonRoot != nil {
			out.RunAsNonRoot = s.RunAsNonRoot
		}
		if s.SELinuxOptions != nil {
			out.SELinuxOptions = s.SELinuxOptions
		}
		if w := s.WindowsOptions; w != nil && w.RunAsUserName != nil {
			if out.WindowsOptions == nil {
				out.WindowsOptions = &corev1.WindowsSecurityContextOptions{}
			}
			out.WindowsOptions.RunAsUserName = w.RunAsUserName
		}
	}
	return out
}

func allContainers(pod *corev1.Pod) []corev1.Container {
	return append(append([]corev1.Container(nil), pod.Spec.InitContainers...), pod.Spec.Containers...)
}

// HostProcessPod says whether a pod runs as HostProcess, set on the pod or
// on every container (Kubernetes refuses mixes at admission).
func HostProcessPod(pod *corev1.Pod) bool { return windowslimits.IsHostProcess(&pod.Spec) }

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
	// Listens are the ports the image's process serves ("80/tcp"), and
	// ListenFlags the flags that move them.
	Listens     []string
	ListenFlags []string
}

// resolve asks the image's registry for its manifest, as containerd's
// pull does first.
func resolve(ctx context.Context, images Images, ref string) (*registry.Manifest, error) {
	canon := registry.Canonical(ref)
	m, err := images.Lookup(ctx, ref)
	if errors.Is(err, registry.ErrNotFound) {
		if f := deniedRepository(ctx, images, ref); f != nil {
			return nil, f
		}
		return nil, &ContainerFailure{"ErrImagePull", fmt.Sprintf("failed to pull and unpack image %q: failed to resolve reference %q: %s: not found", canon, canon, canon)}
	}
	if err != nil {
		return nil, &ContainerFailure{"ErrImagePull", fmt.Sprintf("failed to pull and unpack image %q: %v", canon, err)}
	}
	return m, nil
}

// unpack is the rest of the pull, and the container's creation, for an
// image whose manifest is m, the way containerd and HCS decide: the host's
// platform is picked from an index, and Windows process isolation needs
// the image's build to be the host's (a 2025 host also runs 2022 images).
// HostProcess containers run on the host and need only a Windows image.
func unpack(m *registry.Manifest, h Host, ref string, hostProcess bool) (*Pulled, error) {
	canon := registry.Canonical(ref)
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
	pulled := &Pulled{ImageID: id, Provides: m.Provides, Listens: m.Listens, ListenFlags: m.ListenFlags}
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

// deniedRepository is the pull's failure when ref names a Docker Hub
// repository that does not exist: Docker Hub answers the token request
// for it with the error insufficient_scope rather than a 404, and
// containerd reports an authorization failure as a possibly missing
// repository (core/remotes/docker/authorizer.go invalidAuthorization
// "server message: %s: %w" and resolver.go "pull access denied,
// repository does not exist or may require authorization", 301026e5).
// Other registries (mcr.microsoft.com) answer 404: "not found".
func deniedRepository(ctx context.Context, images Images, ref string) *ContainerFailure {
	repos, ok := images.(interface {
		HasRepository(ctx context.Context, ref string) (bool, error)
	})
	canon := registry.Canonical(ref)
	if !ok || !strings.HasPrefix(canon, "docker.io/") {
		return nil
	}
	if has, err := repos.HasRepository(ctx, ref); err != nil || has {
		return nil
	}
	return &ContainerFailure{"ErrImagePull", fmt.Sprintf("failed to pull and unpack image %q: failed to resolve reference %q: pull access denied, repository does not exist or may require authorization: server message: insufficient_scope: authorization failed", canon, canon)}
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
