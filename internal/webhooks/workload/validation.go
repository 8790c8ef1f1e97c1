package workload

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// IsWindows reports whether a pod is for Windows nodes.
func IsWindows(spec *corev1.PodSpec) bool {
	return spec.OS != nil && spec.OS.Name == corev1.Windows || spec.NodeSelector[corev1.LabelOSStable] == "windows"
}

// isHostProcess says whether the pod is a HostProcess pod: set on the pod,
// or on every container (kubernetes v1.36.3 pkg/apis/core/validation
// validateWindowsHostProcessPod counts a container's own setting first,
// then the pod's; a pod with HostProcess containers only is one, as
// calico-node-windows and the Azure Disk CSI driver's node DaemonSet are).
func isHostProcess(spec *corev1.PodSpec) bool {
	if sc := spec.SecurityContext; sc != nil && sc.WindowsOptions != nil && sc.WindowsOptions.HostProcess != nil && *sc.WindowsOptions.HostProcess {
		return true
	}
	all := append(append([]corev1.Container(nil), spec.InitContainers...), spec.Containers...)
	for _, c := range all {
		if c.SecurityContext == nil || c.SecurityContext.WindowsOptions == nil || c.SecurityContext.WindowsOptions.HostProcess == nil || !*c.SecurityContext.WindowsOptions.HostProcess {
			return false
		}
	}
	return len(all) > 0
}

// IsHostProcess is isHostProcess for the diagnosis.
func IsHostProcess(spec *corev1.PodSpec) bool { return isHostProcess(spec) }

// ValidateWindows refuses what Windows cannot do, naming the field, and
// warns of what it does differently.
func ValidateWindows(spec *corev1.PodSpec, path *field.Path) (errs field.ErrorList, warnings []string) {
	if !IsWindows(spec) {
		return nil, nil
	}
	podHP := isHostProcess(spec)
	if spec.HostNetwork && !podHP {
		errs = append(errs, field.Forbidden(path.Child("hostNetwork"), "Windows pods use the host's network only as HostProcess pods: set securityContext.windowsOptions.hostProcess: true, or remove hostNetwork"))
	}
	if spec.HostPID {
		errs = append(errs, field.Forbidden(path.Child("hostPID"), "Windows has no host PID namespace to share: remove hostPID"))
	}
	if spec.HostIPC {
		errs = append(errs, field.Forbidden(path.Child("hostIPC"), "Windows has no host IPC namespace to share: remove hostIPC"))
	}
	if sc := spec.SecurityContext; sc != nil {
		p := path.Child("securityContext")
		if sc.SELinuxOptions != nil {
			errs = append(errs, field.Forbidden(p.Child("seLinuxOptions"), "SELinux does not exist on Windows"))
		}
		if sc.RunAsUser != nil {
			errs = append(errs, field.Forbidden(p.Child("runAsUser"), "Windows users are names: use windowsOptions.runAsUserName"))
		}
		if sc.FSGroup != nil {
			errs = append(errs, field.Forbidden(p.Child("fsGroup"), "Windows has no file-system groups: remove fsGroup"))
		}
		if len(sc.Sysctls) > 0 {
			errs = append(errs, field.Forbidden(p.Child("sysctls"), "sysctls are Linux kernel settings"))
		}
	}
	for i, v := range spec.Volumes {
		vp := path.Child("volumes").Index(i)
		if v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumMemory {
			errs = append(errs, field.NotSupported(vp.Child("emptyDir", "medium"), v.EmptyDir.Medium, []string{"\"\" (disk)"}))
		}
		if v.Secret != nil {
			warnings = append(warnings, "volume "+v.Name+": Secrets mounted into Windows pods are written in clear text to the node's disk")
		}
	}
	var hpContainers, plainContainers int
	for _, c := range containersWithPaths(spec, path) {
		if c.c.SecurityContext != nil {
			csc, cp := c.c.SecurityContext, c.path.Child("securityContext")
			if csc.Privileged != nil && *csc.Privileged {
				errs = append(errs, field.Forbidden(cp.Child("privileged"), "Windows has no privileged containers: use a HostProcess pod (securityContext.windowsOptions.hostProcess: true)"))
			}
			if csc.Capabilities != nil {
				errs = append(errs, field.Forbidden(cp.Child("capabilities"), "capabilities are Linux's"))
			}
			if csc.SELinuxOptions != nil {
				errs = append(errs, field.Forbidden(cp.Child("seLinuxOptions"), "SELinux does not exist on Windows"))
			}
			if csc.RunAsUser != nil {
				errs = append(errs, field.Forbidden(cp.Child("runAsUser"), "Windows users are names: use windowsOptions.runAsUserName"))
			}
		}
		hp := podHP
		if c.c.SecurityContext != nil && c.c.SecurityContext.WindowsOptions != nil && c.c.SecurityContext.WindowsOptions.HostProcess != nil {
			hp = *c.c.SecurityContext.WindowsOptions.HostProcess
		}
		if hp {
			hpContainers++
		} else {
			plainContainers++
		}
		for j, m := range c.c.VolumeMounts {
			if m.MountPropagation != nil && *m.MountPropagation != corev1.MountPropagationNone {
				errs = append(errs, field.Forbidden(c.path.Child("volumeMounts").Index(j).Child("mountPropagation"), "Windows has no mount propagation: remove it"))
			}
		}
		if len(c.c.VolumeDevices) > 0 {
			errs = append(errs, field.Forbidden(c.path.Child("volumeDevices"), "raw block devices cannot be given to Windows containers: use a file-system volume"))
		}
		for _, e := range c.c.EnvFrom {
			if e.SecretRef != nil {
				warnings = append(warnings, c.path.String()+": Secrets given to Windows pods are stored in clear text on the node")
			}
		}
	}
	if hpContainers > 0 && plainContainers > 0 {
		errs = append(errs, field.Invalid(path.Child("containers"), hpContainers, "a HostProcess pod must have only HostProcess containers: set hostProcess on the pod's securityContext.windowsOptions, and on no container to false"))
	}
	if hpContainers > 0 && !spec.HostNetwork {
		errs = append(errs, field.Invalid(path.Child("hostNetwork"), false, "HostProcess pods must set hostNetwork: true"))
	}
	return errs, warnings
}

type pathedContainer struct {
	c    *corev1.Container
	path *field.Path
}

func containersWithPaths(spec *corev1.PodSpec, path *field.Path) []pathedContainer {
	var out []pathedContainer
	for i := range spec.InitContainers {
		out = append(out, pathedContainer{&spec.InitContainers[i], path.Child("initContainers").Index(i)})
	}
	for i := range spec.Containers {
		out = append(out, pathedContainer{&spec.Containers[i], path.Child("containers").Index(i)})
	}
	return out
}
