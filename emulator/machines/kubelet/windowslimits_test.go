package kubelet

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/winkube/winkube/internal/doctor"
	"github.com/winkube/winkube/internal/webhooks/workload"
	"github.com/winkube/winkube/windowslimits"
)

// limitExamples are a pod for each row of the Windows limits table.
var limitExamples = map[string]func(*corev1.Pod){
	"os-label": func(p *corev1.Pod) { p.Labels = map[string]string{corev1.LabelOSStable: "linux"} },
	// hugepages only: v0.36.3's IsPodLevelResourcesSet counts them.
	"pod-level-resources": func(p *corev1.Pod) {
		p.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{"hugepages-2Mi": resource.MustParse("2Mi")}}
	},
	"host-network": func(p *corev1.Pod) { p.Spec.HostNetwork = true },
	"linux-only": func(p *corev1.Pod) {
		p.Spec.HostPID = true
		p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
	},
	"linux-hardening": func(p *corev1.Pod) {
		p.Spec.SecurityContext = &corev1.PodSecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}}
		p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{SELinuxOptions: &corev1.SELinuxOptions{Level: "s0:c24,c9"}}
	},
	"memory-emptydir": func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "m", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}}
	},
	"mount-propagation": func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: `C:\k`}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "h", MountPath: `C:\k`, MountPropagation: ptr.To(corev1.MountPropagationBidirectional)}}
	},
	"volume-devices": func(p *corev1.Pod) {
		p.Spec.Containers[0].VolumeDevices = []corev1.VolumeDevice{{Name: "disk", DevicePath: "/dev/xvda"}}
	},
	"hugepages": func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{"hugepages-2Mi": resource.MustParse("2Mi"), corev1.ResourceMemory: resource.MustParse("2Mi")}}
	},
	"secret-on-disk": func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "tls"}}}}}}}}
	},
}

func limitsPod(mutate func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Spec: corev1.PodSpec{
		NodeName: "win-1", NodeSelector: map[string]string{corev1.LabelOSStable: "windows"},
		Containers: []corev1.Container{{Name: "c", Image: "mcr.microsoft.com/windows/nanoserver:ltsc2022"}},
	}}
	if mutate != nil {
		mutate(p)
	}
	return p
}

// TestWindowsLimitsAgree: every row of the table is enforced by the
// simulated kubelet, explained by doctor and refused or warned of by
// admission, each as the row says; a pod that meets no row meets none of
// the three.
func TestWindowsLimitsAgree(t *testing.T) {
	winNode := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "win-1", Labels: map[string]string{corev1.LabelOSStable: "windows"}}}
	findings := func(p *corev1.Pod) []doctor.Finding {
		s := &doctor.State{Nodes: []corev1.Node{winNode}, Pods: []corev1.Pod{*p}}
		return append(doctor.WindowsPodLimits(s), doctor.SecretsOnWindows(s)...)
	}
	admission := func(p *corev1.Pod) (field.ErrorList, []string) {
		return workload.ValidateWindowsTarget(windowslimits.Target{Labels: p.Labels, Spec: &p.Spec, Meta: field.NewPath("metadata"), Path: field.NewPath("spec")})
	}

	plain := limitsPod(nil)
	if rej := admit(win2022, plain); rej != nil {
		t.Errorf("a plain Windows pod: kubelet refuses it: %+v", rej)
	}
	if fs := findings(plain); len(fs) != 0 {
		t.Errorf("a plain Windows pod: doctor says %+v", fs)
	}
	if errs, warnings := admission(plain); len(errs) != 0 || len(warnings) != 0 {
		t.Errorf("a plain Windows pod: admission says %v %v", errs, warnings)
	}

	for i := range windowslimits.Rows {
		row := &windowslimits.Rows[i]
		example, ok := limitExamples[row.ID]
		if !ok {
			t.Errorf("row %s has no example here: add one", row.ID)
			continue
		}
		pod := limitsPod(example)
		var hits []windowslimits.Hit
		for _, h := range windowslimits.Find(windowslimits.PodTarget(pod)) {
			if h.Row == row {
				hits = append(hits, h)
			}
		}
		if len(hits) == 0 {
			t.Errorf("row %s does not match its example", row.ID)
			continue
		}

		// The kubelet.
		rej := admit(win2022, pod)
		var failed *ContainerFailure
		for _, c := range allContainers(pod) {
			if f := createsOnWindows(win2022, pod, c); f != nil {
				failed = f
			}
		}
		switch row.Kubelet {
		case windowslimits.Rejects:
			if rej == nil || rej.Reason != row.Reason || rej.Message != row.Message {
				t.Errorf("row %s: kubelet admits %+v, want it rejected with %s", row.ID, rej, row.Reason)
			}
			if ok := admit(linux, limitsPod(nil)); ok != nil {
				t.Errorf("row %s: a Linux kubelet refuses a plain pod: %+v", row.ID, ok)
			}
		case windowslimits.FailsContainer:
			if rej != nil || failed == nil || failed.Reason != row.Reason || !strings.Contains(failed.Message, strings.SplitN(row.Message, "%", 2)[0]) {
				t.Errorf("row %s: kubelet admission %+v, container %+v, want the container failed with %s", row.ID, rej, failed, row.Reason)
			}
		case windowslimits.Ignores, windowslimits.AsAsked:
			if rej != nil || failed != nil {
				t.Errorf("row %s: the kubelet runs it; got admission %+v, container %+v", row.ID, rej, failed)
			}
			if row.ID == "host-network" && !win2022.hostNetworkIgnored(pod) {
				t.Errorf("row %s: the kubelet gives the pod the host's network", row.ID)
			}
		case windowslimits.Unschedulable:
			if rej != nil || failed != nil {
				t.Errorf("row %s: the scheduler, not the kubelet, keeps it; got admission %+v, container %+v", row.ID, rej, failed)
			}
			machine := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), "hugepages-2Mi": resource.MustParse("1Gi")}
			if _, offered := nodeCapacity(win2022, machine)["hugepages-2Mi"]; offered {
				t.Errorf("row %s: a Windows node offers huge pages", row.ID)
			}
			if _, offered := nodeCapacity(linux, machine)["hugepages-2Mi"]; !offered {
				t.Errorf("row %s: a Linux node lost its huge pages", row.ID)
			}
		default:
			t.Errorf("row %s: kubelet outcome %v not checked here", row.ID, row.Kubelet)
		}

		// Doctor.
		want := doctor.Warning
		if row.Kubelet == windowslimits.Rejects || row.Kubelet == windowslimits.FailsContainer || row.Kubelet == windowslimits.Unschedulable {
			want = doctor.Error
		}
		explained := false
		for _, f := range findings(pod) {
			explained = explained || strings.Contains(f.Message, row.Explain) && strings.Contains(f.Message, hits[0].What) && f.Fix == row.Fix && f.Severity == want
		}
		if !explained {
			t.Errorf("row %s: doctor does not explain it as a %s saying %q: %+v", row.ID, want, row.Explain, findings(pod))
		}

		// Admission.
		errs, warnings := admission(pod)
		switch row.Admission {
		case windowslimits.Refuse:
			for _, h := range hits {
				refused := false
				for _, e := range errs {
					refused = refused || e.Type == field.ErrorTypeForbidden && e.Field == h.Path.String() && e.Detail == row.Refusal
				}
				if !refused {
					t.Errorf("row %s: admission does not refuse %s: %v", row.ID, h.Path, errs)
				}
			}
		case windowslimits.Warn:
			if len(errs) != 0 || len(warnings) != len(hits) || !strings.Contains(warnings[0], row.Refusal) {
				t.Errorf("row %s: admission refuses %v and warns %q, want one warning per hit saying %q", row.ID, errs, warnings, row.Refusal)
			}
		}
	}
}
