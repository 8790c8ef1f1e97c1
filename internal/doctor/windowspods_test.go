package doctor

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

func TestWindowsPodLimits(t *testing.T) {
	c := newCluster(t)
	ns := namespace(t, "winlimits")
	c.linuxNode("lin-1")
	c.windowsNode("win-1")
	ctr := func(f func(*corev1.Container)) []corev1.Container {
		ct := corev1.Container{Name: "main", Image: "mcr.microsoft.com/windows/servercore:ltsc2022"}
		f(&ct)
		return []corev1.Container{ct}
	}
	// The same spec on Linux says nothing.
	c.pod(ns, "hostnet-linux", "lin-1", nil, corev1.PodSpec{HostNetwork: true}, true)
	expect(t, "Linux", WindowsPodLimits(c.state()), 0, Warning)

	c.pod(ns, "hostnet", "win-1", nil, corev1.PodSpec{HostNetwork: true}, true)
	expect(t, "hostNetwork", WindowsPodLimits(c.state()), 1, Warning, "Pod/winlimits/hostnet", "hostNetwork without HostProcess", "HostProcess pod")
	hp := &corev1.PodSecurityContext{WindowsOptions: &corev1.WindowsSecurityContextOptions{HostProcess: ptr.To(true)}}
	c.pod(ns, "hostprocess", "win-1", nil, corev1.PodSpec{HostNetwork: true, SecurityContext: hp}, true)
	expect(t, "a HostProcess pod is not one", WindowsPodLimits(c.state()), 1, Warning, "Pod/winlimits/hostnet")

	c.pod(ns, "privileged", "win-1", nil, corev1.PodSpec{Containers: ctr(func(ct *corev1.Container) {
		ct.SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true), RunAsUser: ptr.To[int64](1000)}
	})}, true)
	// Two rows: the power it will not have, and the hardening the node
	// drops (a user ID Windows has no use for).
	fs := about(WindowsPodLimits(c.state()), "Pod/winlimits/privileged")
	if len(fs) != 2 {
		t.Fatalf("privileged: %d findings, want 2 (settings and hardening): %+v", len(fs), fs)
	}
	expect(t, "privileged", fs[:1], 1, Warning, "Linux-only settings containers[*].securityContext.privileged", "runs unprivileged")
	expect(t, "privileged's user", fs[1:], 1, Warning, "Linux-only hardening containers[*].securityContext.runAsUser", "spec.os.name: windows")

	// Every field the API server refuses for a Windows pod, as the
	// Windows limits table lists them: AppArmor too.
	c.pod(ns, "apparmor", "win-1", nil, corev1.PodSpec{Containers: ctr(func(ct *corev1.Container) {
		ct.SecurityContext = &corev1.SecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}}
	})}, true)
	expect(t, "apparmor", about(WindowsPodLimits(c.state()), "Pod/winlimits/apparmor"), 1, Warning, "containers[*].securityContext.appArmorProfile")

	c.pod(ns, "memory", "win-1", nil, corev1.PodSpec{Volumes: []corev1.Volume{{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}},
		Containers: ctr(func(ct *corev1.Container) {
			ct.VolumeMounts = []corev1.VolumeMount{{Name: "cache", MountPath: `C:\cache`, MountPropagation: ptr.To(corev1.MountPropagationHostToContainer)}}
		})}, true)
	fs = about(WindowsPodLimits(c.state()), "Pod/winlimits/memory")
	expect(t, "memory", fs[:1], 1, Warning, "emptyDir cache with medium: Memory", "node's disk")
	expect(t, "propagation", fs[1:], 1, Warning, "mountPropagation HostToContainer", "private")

	c.pod(ns, "hugepages", "win-1", nil, corev1.PodSpec{Containers: ctr(func(ct *corev1.Container) {
		ct.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{"hugepages-2Mi": resource.MustParse("2Mi"), corev1.ResourceMemory: resource.MustParse("2Mi")},
			Limits: corev1.ResourceList{"hugepages-2Mi": resource.MustParse("2Mi"), corev1.ResourceMemory: resource.MustParse("2Mi")}}
	})}, false)
	c.pod(ns, "labelled", "win-1", map[string]string{corev1.LabelOSStable: "linux"}, corev1.PodSpec{}, false)
	expect(t, "hugepages", about(WindowsPodLimits(c.state()), "Pod/winlimits/hugepages"), 1, Error, "hugepages-2Mi on container main", "no huge pages")
	expect(t, "os label", about(WindowsPodLimits(c.state()), "Pod/winlimits/labelled"), 1, Error, "PodOSSelectorNodeLabelDoesNotMatch")
}

func about(fs []Finding, object string) []Finding {
	var out []Finding
	for _, f := range fs {
		if f.Object == object {
			out = append(out, f)
		}
	}
	return out
}
