// Package windowslimits is the one table of what a pod meets on a Windows
// node: each row says what in a pod it matches, what the Windows kubelet
// (and containerd under it) does with it, what admission does with it, and
// how doctor explains it and says to fix it. The simulated kubelet
// (emulator/machines/kubelet), doctor (internal/doctor) and admission
// (internal/webhooks/workload) all read this table, so a limit cannot be
// enforced by one and explained differently, or not at all, by another.
//
// The package sits outside emulator/ and internal/ because both import it:
// it imports neither (the import rules in .golangci.yml and
// internal/importrules_test.go say so).
//
// Sources (kubernetes/kubernetes at tag v1.36.3, the version go.mod pins;
// k8s.io/component-helpers v0.36.3):
//   - the kubelet's admission: pkg/kubelet/lifecycle/predicate.go
//     rejectPodAdmissionBasedOnOSSelector (line 280), and
//     features_windows.go isPodLevelResourcesSupported (line 26), which
//     asks component-helpers resource/helpers.go IsPodLevelResourcesSet
//     (line 82: a pod-level request or limit of cpu, memory or hugepages-*,
//     IsSupportedPodLevelResource, line 76);
//   - what the kubelet drops: pkg/kubelet/kuberuntime
//     kuberuntime_container_windows.go generateWindowsContainerConfig (the
//     Windows container config carries resources, the user name, the gMSA
//     spec and HostProcess only), kubelet_pods.go translateMountPropagation
//     (private on Windows); containerd internal/cri/server/helpers.go
//     hostNetwork (on Windows, the sandbox's HostProcess flag alone);
//   - what the API server refuses for spec.os.name: windows:
//     pkg/apis/core/validation/validation.go validateWindows (line 4865).
package windowslimits

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Kubelet is what a Windows node does with a pod a row matches.
type Kubelet int

const (
	// Ignores: the pod runs without what it asked for.
	Ignores Kubelet = iota
	// Rejects: the kubelet's admission refuses the pod; it ends Failed
	// with the row's Reason and Message.
	Rejects
	// FailsContainer: containerd cannot create the container; it waits
	// with the row's Reason and Message.
	FailsContainer
	// Unschedulable: no Windows node offers what the pod requests, so the
	// scheduler leaves it Pending; the kubelet never sees it.
	Unschedulable
	// AsAsked: the pod runs as written, with a consequence worth knowing.
	AsAsked
)

func (k Kubelet) String() string {
	return [...]string{"ignores", "rejects", "fails the container", "unschedulable", "as asked"}[k]
}

// Admission is what winkube's workload admission does with a Windows
// workload a row matches.
type Admission int

const (
	// Refuse the workload, naming the field.
	Refuse Admission = iota
	// Warn and admit it.
	Warn
)

// Row is one limit.
type Row struct {
	// ID names the row in tests and logs.
	ID string
	// Match finds the row's limit in a pod, once per place it occurs.
	Match func(Target) []Hit
	// Kubelet is what the node does; Reason and Message are what it
	// reports for Rejects and FailsContainer (for FailsContainer, Message
	// is a format of the container's ID and the device path).
	Kubelet         Kubelet
	Reason, Message string
	// Admission is what admission does, and Refusal what it says: the
	// field error's detail, or the warning after the field's path.
	Admission Admission
	Refusal   string
	// Explain is what the node does with what the pod asks, as doctor
	// says it after the hit's What; Fix how to write the pod instead.
	Explain, Fix string
	// Source is where upstream does what Kubelet says.
	Source string
	// OneLine, when set, has doctor say all the row's hits in a pod in
	// one line: OneLine followed by their What.
	OneLine string
}

// Target is a pod, or a workload's pod template, with where its metadata
// and spec are in the object admission sees.
type Target struct {
	Labels map[string]string
	Spec   *corev1.PodSpec
	Meta   *field.Path
	Path   *field.Path
}

// PodTarget is a Pod as the kubelet and doctor see it.
func PodTarget(p *corev1.Pod) Target {
	return Target{Labels: p.Labels, Spec: &p.Spec, Meta: field.NewPath("metadata"), Path: field.NewPath("spec")}
}

// Hit is one place a row matches.
type Hit struct {
	Row *Row
	// Path is the field, for admission's error.
	Path *field.Path
	// What is what the pod asks, for doctor ("emptyDir cache with medium: Memory").
	What string
	// Container names the container for container rows.
	Container string
}

// Find returns the hits of every row in t, in the table's order.
func Find(t Target) []Hit {
	var out []Hit
	for i := range Rows {
		for _, h := range Rows[i].Match(t) {
			h.Row = &Rows[i]
			out = append(out, h)
		}
	}
	return out
}

// ByID returns the row named id, or nil.
func ByID(id string) *Row {
	for i := range Rows {
		if Rows[i].ID == id {
			return &Rows[i]
		}
	}
	return nil
}

// IsHostProcess says whether the pod is a HostProcess pod: set on the
// pod, or on every container (validation.go validateWindowsHostProcessPod
// counts a container's own setting first, then the pod's; the API server
// refuses mixes).
func IsHostProcess(spec *corev1.PodSpec) bool {
	var podLevel *bool
	if sc := spec.SecurityContext; sc != nil && sc.WindowsOptions != nil {
		podLevel = sc.WindowsOptions.HostProcess
	}
	n := 0
	for _, c := range containers(spec) {
		v := podLevel
		if c.c.SecurityContext != nil && c.c.SecurityContext.WindowsOptions != nil && c.c.SecurityContext.WindowsOptions.HostProcess != nil {
			v = c.c.SecurityContext.WindowsOptions.HostProcess
		}
		if v == nil || !*v {
			return false
		}
		n++
	}
	return n > 0
}

// The rows. Their order is the order doctor reports them in.
var Rows = []Row{
	{
		ID:      "os-label",
		Kubelet: Rejects, Reason: "PodOSSelectorNodeLabelDoesNotMatch",
		Message:   "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label",
		Admission: Refuse, Refusal: "a Windows kubelet refuses a pod whose own kubernetes.io/os label is not windows (PodOSSelectorNodeLabelDoesNotMatch): remove the label, or set it to windows",
		Explain: "makes the kubelet refuse the pod (PodOSSelectorNodeLabelDoesNotMatch): it compares the pod's own kubernetes.io/os label with the node's OS",
		Fix:     "remove the label, or select nodes with nodeSelector rather than labelling the pod",
		Source:  "kubernetes v1.36.3 pkg/kubelet/lifecycle/predicate.go:280 rejectPodAdmissionBasedOnOSSelector (the pod's labels, not its nodeSelector)",
		Match: func(t Target) []Hit {
			if os, ok := t.Labels[corev1.LabelOSStable]; ok && os != string(corev1.Windows) {
				return []Hit{{Path: t.Meta.Child("labels").Key(corev1.LabelOSStable), What: fmt.Sprintf("the label %s=%s", corev1.LabelOSStable, os)}}
			}
			return nil
		},
	},
	{
		ID:      "pod-level-resources",
		Kubelet: Rejects, Reason: "PodLevelResourcesNotSupported",
		Message:   "pod-level resources are not supported on Windows",
		Admission: Refuse, Refusal: "a Windows kubelet refuses pod-level cpu, memory and hugepages requests and limits (PodLevelResourcesNotSupported): set resources on each container instead",
		Explain: "are refused by the Windows kubelet: the pod fails with PodLevelResourcesNotSupported",
		Fix:     "set resources on each container instead",
		Source:  "kubernetes v1.36.3 pkg/kubelet/lifecycle/features_windows.go:26 isPodLevelResourcesSupported; component-helpers v0.36.3 resource/helpers.go:82 IsPodLevelResourcesSet",
		Match: func(t Target) []Hit {
			r := t.Spec.Resources
			if r == nil {
				return nil
			}
			var names []string
			for _, l := range []corev1.ResourceList{r.Requests, r.Limits} {
				for n := range l {
					// IsSupportedPodLevelResource: cpu, memory, hugepages-*.
					if n == corev1.ResourceCPU || n == corev1.ResourceMemory || strings.HasPrefix(string(n), corev1.ResourceHugePagesPrefix) {
						names = append(names, string(n))
					}
				}
			}
			if len(names) == 0 {
				return nil
			}
			return []Hit{{Path: t.Path.Child("resources"), What: "pod-level resources (spec.resources " + strings.Join(uniq(names), ", ") + ")"}}
		},
	},
	{
		ID:        "host-network",
		Kubelet:   Ignores,
		Admission: Refuse, Refusal: "Windows pods use the host's network only as HostProcess pods: set securityContext.windowsOptions.hostProcess: true, or remove hostNetwork",
		Explain: "is ignored: containerd gives the pod a pod network of its own, while its status reports the node's IP, so a Service, a probe or a client reaching that IP on the pod's ports does not reach the pod",
		Fix:     "make it a HostProcess pod (securityContext.windowsOptions.hostProcess: true) if it must share the node's network; otherwise remove hostNetwork and reach it through a Service",
		Source:  "containerd 301026e5 internal/cri/server/helpers.go hostNetwork; kubernetes v1.36.3 pkg/kubelet/kubelet_pods.go generateAPIPodStatus (host-network pods report the node's IPs)",
		Match: func(t Target) []Hit {
			if t.Spec.HostNetwork && !IsHostProcess(t.Spec) {
				return []Hit{{Path: t.Path.Child("hostNetwork"), What: "hostNetwork without HostProcess"}}
			}
			return nil
		},
	},
	{
		ID:        "linux-only",
		OneLine:   "Linux-only settings",
		Kubelet:   Ignores,
		Admission: Refuse, Refusal: "cannot be set for a Windows pod: Windows has no such setting, the kubelet drops it; use securityContext.windowsOptions (runAsUserName, gmsaCredentialSpec, hostProcess) instead",
		Explain: "are ignored: the Windows container config carries only resources, the user name, the gMSA credential spec and HostProcess, so the container runs without them (a privileged container runs unprivileged)",
		Fix:     "remove them, use securityContext.windowsOptions (runAsUserName, gmsaCredentialSpec, hostProcess), and set spec.os.name: windows so the API server refuses them",
		Source:  "kubernetes v1.36.3 pkg/kubelet/kuberuntime/kuberuntime_container_windows.go:118 generateWindowsContainerConfig; pkg/apis/core/validation/validation.go:4865 validateWindows (the fields)",
		Match:   linuxOnly,
	},
	// The Linux hardening a pod may carry wherever it lands is only
	// warned of: Kubernetes admits it on a pod without spec.os.name, the
	// Windows kubelet drops it, and a pod that merely restricts itself
	// loses nothing it counted on. Refusing it would refuse what upstream
	// requires to run (kubernetes v1.36.3 test/e2e/windows/security_context.go:150
	// "should ignore Linux-specific SecurityContext if set", a seLinuxOptions
	// on a Windows pod) and every pod of a namespace whose Pod Security
	// level is restricted, which must set seccompProfile and drop
	// capabilities unless spec.os.name is windows (kubernetes
	// pod-security-admission v0.36.3 policy/check_seccompProfile_restricted.go:151,
	// check_capabilities_restricted.go:141: both exempt only that).
	{
		ID:        "linux-hardening",
		OneLine:   "Linux-only hardening",
		Kubelet:   Ignores,
		Admission: Warn, Refusal: "has no effect on Windows: the kubelet drops it (set spec.os.name: windows to say the pod is for Windows)",
		Explain: "are ignored: Windows has no seccomp, AppArmor, SELinux, Linux capabilities, read-only root or numeric users, so the container runs without these restrictions",
		Fix:     "set spec.os.name: windows (Pod Security then exempts the pod from the Linux-only checks) and use securityContext.windowsOptions.runAsUserName for a non-administrator user",
		Source:  "kubernetes v1.36.3 pkg/kubelet/kuberuntime/kuberuntime_container_windows.go:118 generateWindowsContainerConfig; pkg/apis/core/validation/validation.go:4865 validateWindows (only with spec.os.name: windows)",
		Match:   linuxHardening,
	},
	{
		ID:        "memory-emptydir",
		Kubelet:   Ignores,
		Admission: Refuse, Refusal: "Windows has no tmpfs: an emptyDir of medium Memory is a directory on the node's disk; drop medium: Memory",
		Explain: "is a directory on the node's disk: Windows has no tmpfs, the kubelet's mounter makes a plain directory, so its data is not in memory and survives on disk until the pod goes",
		Fix:     "drop medium: Memory (the result is the same), and keep secrets out of it",
		Source:  "mount-utils v0.36.3 mount_windows.go:78 MountSensitive (a plain directory for the source tmpfs)",
		Match: func(t Target) []Hit {
			var out []Hit
			for i, v := range t.Spec.Volumes {
				if v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumMemory {
					out = append(out, Hit{Path: t.Path.Child("volumes").Index(i).Child("emptyDir", "medium"), What: "emptyDir " + v.Name + " with medium: Memory"})
				}
			}
			return out
		},
	},
	{
		ID:        "mount-propagation",
		Kubelet:   Ignores,
		Admission: Refuse, Refusal: "Windows has no mount propagation: the kubelet makes every mount private; remove mountPropagation",
		Explain: "is private on Windows: the kubelet asks for private propagation whatever the pod says, so mounts made later on the host are not seen",
		Fix:     "remove mountPropagation",
		Source:  "kubernetes v1.36.3 pkg/kubelet/kubelet_pods.go:428 translateMountPropagation",
		Match: eachContainer(func(c *corev1.Container, p *field.Path) (out []Hit) {
			for j, m := range c.VolumeMounts {
				if m.MountPropagation != nil && *m.MountPropagation != corev1.MountPropagationNone {
					out = append(out, Hit{Path: p.Child("volumeMounts").Index(j).Child("mountPropagation"),
						What: fmt.Sprintf("mountPropagation %s on container %s's mount %s", *m.MountPropagation, c.Name, m.MountPath)})
				}
			}
			return out
		}),
	},
	{
		ID:      "volume-devices",
		Kubelet: FailsContainer, Reason: "CreateContainerError",
		Message:   "failed to generate container %q spec: failed to generate spec: unexpected ContainerPath %s, must be empty",
		Admission: Refuse, Refusal: "raw block devices cannot be given to Windows containers (containerd fails the container with CreateContainerError): use a volumeMount of a file-system volume",
		Explain: "cannot be created: containerd on Windows takes no device with a container path, so the container fails with CreateContainerError \"unexpected ContainerPath …, must be empty\"",
		Fix:     "use a volumeMount of a file-system volume (volumeMode: Filesystem)",
		Source:  "containerd 301026e5 internal/cri/opts/spec_windows_opts.go WithWindowsDevices, wrapped by container_create.go",
		Match: eachContainer(func(c *corev1.Container, p *field.Path) []Hit {
			if len(c.VolumeDevices) == 0 {
				return nil
			}
			return []Hit{{Path: p.Child("volumeDevices"), What: "volumeDevices on container " + c.Name}}
		}),
	},
	{
		ID:        "hugepages",
		Kubelet:   Unschedulable,
		Admission: Refuse, Refusal: "Windows nodes offer no huge pages, so no node can run this container: remove the huge-pages request and limit",
		Explain: "cannot be scheduled: Windows nodes offer no huge pages (a container cannot hold the large-page privilege), so the scheduler finds no node with the resource",
		Fix:     "remove the huge-pages request and limit",
		Source:  "kubernetes v1.36.3 pkg/kubelet/cadvisor/util.go:41 CapacityFromMachineInfo (hugepages-* from the machine info's HugePages, which pkg/kubelet/winstats never fills)",
		Match: eachContainer(func(c *corev1.Container, p *field.Path) (out []Hit) {
			var names []string
			for _, l := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
				for n := range l {
					if strings.HasPrefix(string(n), corev1.ResourceHugePagesPrefix) {
						names = append(names, string(n))
					}
				}
			}
			for _, n := range uniq(names) {
				out = append(out, Hit{Path: p.Child("resources"), What: fmt.Sprintf("%s on container %s", n, c.Name)})
			}
			return out
		}),
	},
	{
		ID:        "secret-on-disk",
		Kubelet:   AsAsked,
		Admission: Warn, Refusal: "Secrets mounted into Windows pods are written in clear text to the node's disk",
		Explain: "Windows writes them in clear text to the node's disk",
		Fix:     "limit who can log on to Windows nodes and read the kubelet's folder (c:\\var\\lib\\kubelet), use encrypted disks, or read the secret at run time from a store (Azure Key Vault's CSI driver) instead of a volume",
		Source:  "kubernetes v1.36.3 pkg/volume/secret/secret.go:54 and projected/projected.go:63 (Secret files go to an emptyDir of medium Memory), which mount-utils v0.36.3 mount_windows.go:82 makes a plain directory",
		// What is the Secret's name. Environment variables from Secrets
		// are not files: they are not in this row.
		Match: func(t Target) []Hit {
			var out []Hit
			for i, v := range t.Spec.Volumes {
				if v.Secret != nil {
					out = append(out, Hit{Path: t.Path.Child("volumes").Index(i).Child("secret"), What: v.Secret.SecretName})
				}
				if v.Projected != nil {
					for j, src := range v.Projected.Sources {
						if src.Secret != nil {
							out = append(out, Hit{Path: t.Path.Child("volumes").Index(i).Child("projected", "sources").Index(j).Child("secret"), What: src.Secret.Name})
						}
					}
				}
			}
			return out
		},
	},
}

// linuxOnly finds the Linux-only fields validateWindows refuses when
// spec.os.name is windows that ask for something the container will not
// have (powers, shared namespaces, groups for volumes); linuxHardening the
// ones that only restrict it. The API server refuses any value; a pod that
// reaches a Windows node by its nodeSelector alone passes the API server,
// and the kubelet drops the fields, so only values that ask for something
// (privileged: true, not false) are hits: a false one asks for what
// Windows does anyway. A HostProcess pod is no hit either: its containers
// are processes of the host, with the privileges of the user
// windowsOptions names, so what the kubelet drops takes nothing from them
// (the Azure Disk CSI driver's Windows node DaemonSet carries a
// capabilities drop for Linux and runs).
func linuxOnly(t Target) []Hit {
	return settingHits(t, func(spec *corev1.PodSpec) []setting {
		out := []setting{{"hostPID", spec.HostPID}, {"hostIPC", spec.HostIPC}, {"shareProcessNamespace", isTrue(spec.ShareProcessNamespace)}}
		if sc := spec.SecurityContext; sc != nil {
			out = append(out, []setting{
				{"securityContext.fsGroup", sc.FSGroup != nil}, {"securityContext.sysctls", len(sc.Sysctls) > 0},
				{"securityContext.supplementalGroups", len(sc.SupplementalGroups) > 0},
				{"securityContext.supplementalGroupsPolicy", sc.SupplementalGroupsPolicy != nil},
			}...)
		}
		return out
	}, func(sc *corev1.SecurityContext) []setting {
		return []setting{
			{"capabilities.add", sc.Capabilities != nil && len(sc.Capabilities.Add) > 0}, {"privileged", isTrue(sc.Privileged)},
			{"allowPrivilegeEscalation", isTrue(sc.AllowPrivilegeEscalation)}, {"procMount", sc.ProcMount != nil},
		}
	})
}

func linuxHardening(t Target) []Hit {
	return settingHits(t, func(spec *corev1.PodSpec) []setting {
		out := []setting{{"hostUsers", spec.HostUsers != nil && !*spec.HostUsers}}
		if sc := spec.SecurityContext; sc != nil {
			out = append(out, []setting{
				{"securityContext.appArmorProfile", sc.AppArmorProfile != nil}, {"securityContext.seLinuxOptions", sc.SELinuxOptions != nil},
				{"securityContext.seccompProfile", sc.SeccompProfile != nil}, {"securityContext.fsGroupChangePolicy", sc.FSGroupChangePolicy != nil},
				{"securityContext.runAsUser", sc.RunAsUser != nil}, {"securityContext.runAsGroup", sc.RunAsGroup != nil},
				{"securityContext.seLinuxChangePolicy", sc.SELinuxChangePolicy != nil},
			}...)
		}
		return out
	}, func(sc *corev1.SecurityContext) []setting {
		return []setting{
			{"appArmorProfile", sc.AppArmorProfile != nil}, {"seLinuxOptions", sc.SELinuxOptions != nil},
			{"seccompProfile", sc.SeccompProfile != nil},
			{"capabilities.drop", sc.Capabilities != nil && len(sc.Capabilities.Drop) > 0 && len(sc.Capabilities.Add) == 0},
			{"readOnlyRootFilesystem", isTrue(sc.ReadOnlyRootFilesystem)},
			{"runAsUser", sc.RunAsUser != nil}, {"runAsGroup", sc.RunAsGroup != nil},
		}
	})
}

// setting is one field of a pod or container, named by its path below the
// pod's spec (or the container's securityContext), and whether the pod
// sets it.
type setting struct {
	name string
	on   bool
}

// settingHits is a hit for each setting a non-HostProcess pod sets, at
// pod level and in each container's securityContext.
func settingHits(t Target, pod func(*corev1.PodSpec) []setting, ctr func(*corev1.SecurityContext) []setting) []Hit {
	spec := t.Spec
	if IsHostProcess(spec) {
		return nil
	}
	var out []Hit
	for _, f := range pod(spec) {
		if f.on {
			path := t.Path
			for _, part := range strings.Split(f.name, ".") {
				path = path.Child(part)
			}
			out = append(out, Hit{Path: path, What: f.name})
		}
	}
	for _, c := range containers(spec) {
		sc := c.c.SecurityContext
		if sc == nil {
			continue
		}
		p := c.path(t.Path).Child("securityContext")
		for _, f := range ctr(sc) {
			if f.on {
				out = append(out, Hit{Path: p.Child(f.name), What: "containers[*].securityContext." + f.name, Container: c.c.Name})
			}
		}
	}
	return out
}

// WhatAll joins the hits' What, each once, sorted: doctor's one line for
// a row that matches in several places.
func WhatAll(hits []Hit) string {
	var ws []string
	for _, h := range hits {
		ws = append(ws, h.What)
	}
	return strings.Join(uniq(ws), ", ")
}

func isTrue(b *bool) bool { return b != nil && *b }

func uniq(ss []string) []string {
	sort.Strings(ss)
	out := ss[:0]
	for i, s := range ss {
		if i == 0 || s != ss[i-1] {
			out = append(out, s)
		}
	}
	return out
}

// eachContainer is a Match of f over the pod's init containers and
// containers, each hit naming its container.
func eachContainer(f func(c *corev1.Container, path *field.Path) []Hit) func(Target) []Hit {
	return func(t Target) []Hit {
		var out []Hit
		for _, c := range containers(t.Spec) {
			for _, h := range f(c.c, c.path(t.Path)) {
				h.Container = c.c.Name
				out = append(out, h)
			}
		}
		return out
	}
}

type container struct {
	c     *corev1.Container
	init  bool
	index int
}

func (c container) path(spec *field.Path) *field.Path {
	if c.init {
		return spec.Child("initContainers").Index(c.index)
	}
	return spec.Child("containers").Index(c.index)
}

func containers(spec *corev1.PodSpec) []container {
	var out []container
	for i := range spec.InitContainers {
		out = append(out, container{&spec.InitContainers[i], true, i})
	}
	for i := range spec.Containers {
		out = append(out, container{&spec.Containers[i], false, i})
	}
	return out
}
