package workload_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

func request(t testing.TB, kind string, obj runtime.Object, ns string) admission.Request {
	t.Helper()
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Create, Namespace: ns, Kind: metav1.GroupVersionKind{Version: "v1", Kind: kind},
		Object: runtime.RawExtension{Raw: raw},
	}}
}

func TestSecretsInWindowsPodsWarn(t *testing.T) {
	p := pod("default", img2019)
	p.Spec.OS = &corev1.PodOS{Name: corev1.Windows}
	p.Spec.Volumes = []corev1.Volume{{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds"}}}}
	resp := adm.Validate().Handle(context.Background(), request(t, "Pod", p, "default"))
	if !resp.Allowed || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "clear text") {
		t.Fatalf("allowed=%v warnings=%v", resp.Allowed, resp.Warnings)
	}
}

func TestServiceWithManyWindowsBackendsOnOldBuildsWarns(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "win-old-" + ns}}
	if err := env.Client.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	node.Status.NodeInfo.KernelVersion = "10.0.17763.1911"
	if err := env.Client.Status().Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 65; i++ {
		p := pod(ns, img2019)
		p.Labels = map[string]string{"app": "web"}
		p.Spec.NodeName = node.Name
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80}}}}
	resp := adm.Services().Handle(ctx, request(t, "Service", svc, ns))
	if !resp.Allowed || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "65 Windows backends") || !strings.Contains(resp.Warnings[0], "17763.2746") {
		t.Fatalf("allowed=%v warnings=%v", resp.Allowed, resp.Warnings)
	}
	// An updated node: no warning.
	node.Status.NodeInfo.KernelVersion = "10.0.17763.2746"
	if err := env.Client.Status().Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	if resp := adm.Services().Handle(ctx, request(t, "Service", svc, ns)); len(resp.Warnings) != 0 {
		t.Fatalf("warned for an updated node: %v", resp.Warnings)
	}
}

// TestLinuxHardeningIsWarnedOf: a Windows pod (placed by its image, no
// spec.os.name) carrying what a restricted Pod Security namespace demands
// of every such pod, and the seLinuxOptions of upstream's "should ignore
// Linux-specific SecurityContext if set", is admitted with a warning per
// field: the kubelet drops them and the pod loses nothing it counted on.
// What asks for powers it will not have is still refused.
func TestLinuxHardeningIsWarnedOf(t *testing.T) {
	ctx := context.Background()
	p := pod("default", img2019)
	p.Spec.NodeSelector = map[string]string{corev1.LabelOSStable: "windows"} // as placement leaves it
	p.Spec.SecurityContext = &corev1.PodSecurityContext{
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		SELinuxOptions: &corev1.SELinuxOptions{Level: "s0:c24,c9"},
	}
	no := false
	p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{
		AllowPrivilegeEscalation: &no,
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	resp := adm.Validate().Handle(ctx, request(t, "Pod", p, "default"))
	if !resp.Allowed {
		t.Fatalf("a restricted-shaped Windows pod was refused: %v", resp.Result)
	}
	joined := strings.Join(resp.Warnings, "\n")
	for _, want := range []string{"securityContext.seccompProfile", "securityContext.seLinuxOptions", "securityContext.capabilities.drop"} {
		if !strings.Contains(joined, want) {
			t.Errorf("no warning naming %s: %v", want, resp.Warnings)
		}
	}

	p.Spec.Containers[0].SecurityContext.Capabilities.Add = []corev1.Capability{"NET_ADMIN"}
	if resp := adm.Validate().Handle(ctx, request(t, "Pod", p, "default")); resp.Allowed {
		t.Fatalf("a Windows pod adding capabilities was admitted: %v", resp.Warnings)
	}
}
