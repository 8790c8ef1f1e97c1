package workload

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/winkube/winkube/windowslimits"
)

// IsWindows reports whether a pod is for Windows nodes.
func IsWindows(spec *corev1.PodSpec) bool {
	return spec.OS != nil && spec.OS.Name == corev1.Windows || spec.NodeSelector[corev1.LabelOSStable] == "windows"
}

// IsHostProcess says whether the pod is a HostProcess pod (the table's
// rule: set on the pod, or on every container).
func IsHostProcess(spec *corev1.PodSpec) bool { return windowslimits.IsHostProcess(spec) }

// ValidateWindows refuses what Windows cannot do, naming the field, and
// warns of what it does differently, as the rows of windowslimits say.
func ValidateWindows(spec *corev1.PodSpec, path *field.Path) (errs field.ErrorList, warnings []string) {
	return ValidateWindowsTarget(windowslimits.Target{Spec: spec, Path: path})
}

// ValidateWindowsTarget is ValidateWindows with the pod's labels, which
// the kubelet reads too (the os-label row).
func ValidateWindowsTarget(t windowslimits.Target) (errs field.ErrorList, warnings []string) {
	spec, path := t.Spec, t.Path
	if !IsWindows(spec) {
		return nil, nil
	}
	for _, hit := range windowslimits.Find(t) {
		switch hit.Row.Admission {
		case windowslimits.Refuse:
			errs = append(errs, field.Forbidden(hit.Path, hit.Row.Refusal))
		case windowslimits.Warn:
			warnings = append(warnings, hit.Path.String()+": "+hit.Row.Refusal)
		}
	}
	// What the API server refuses of any HostProcess pod, Windows or not
	// (kubernetes v1.36.3 pkg/apis/core/validation/validation.go:8637
	// validateWindowsHostProcessPod): not a limit of the Windows node, so
	// not a row of the table.
	podHP := spec.SecurityContext != nil && spec.SecurityContext.WindowsOptions != nil && spec.SecurityContext.WindowsOptions.HostProcess != nil && *spec.SecurityContext.WindowsOptions.HostProcess
	var hpContainers, plainContainers int
	for _, c := range containersWithPaths(spec, path) {
		hp := podHP
		if c.c.SecurityContext != nil && c.c.SecurityContext.WindowsOptions != nil && c.c.SecurityContext.WindowsOptions.HostProcess != nil {
			hp = *c.c.SecurityContext.WindowsOptions.HostProcess
		}
		if hp {
			hpContainers++
		} else {
			plainContainers++
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
