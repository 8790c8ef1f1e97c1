package doctor

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func buildNode(name, build string, cordoned bool) corev1.Node {
	return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelOSStable: "windows", windowsBuildLabel: build}},
		Spec: corev1.NodeSpec{Unschedulable: cordoned}}
}

func buildAffinity(builds ...string) corev1.PodSpec {
	return corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: windowsBuildLabel, Operator: corev1.NodeSelectorOpIn, Values: builds}}}}}}}}
}

// The check sees admission's build affinities and windows-build selectors,
// judged against the builds the cluster is leaving and AKS's support.
func TestWindowsBuildPins(t *testing.T) {
	on2019 := buildAffinity("10.0.17763")
	on2022 := buildAffinity("10.0.20348", "10.0.26100")
	selected := corev1.PodSpec{NodeSelector: map[string]string{windowsBuildLabel: "10.0.17763"}}
	workloads := []appsv1.Deployment{*deployment("apps", "iis-1809", on2019), *deployment("apps", "iis-2022", on2022), *deployment("apps", "selected", selected)}
	v132, _ := parse("v1.32.5")
	v133, _ := parse("v1.33.0")

	// Only 2019 nodes, Kubernetes 1.32: nothing is being left, 2019 is supported.
	s := &State{Version: v132, Nodes: []corev1.Node{buildNode("win-a", "10.0.17763", false)}, Deployments: workloads}
	expect(t, "2019 only on 1.32", WindowsBuildPins(s), 0, Warning)

	// A 2022 pool beside the 2019 one: the 2019-pinned workloads are named.
	s.Nodes = append(s.Nodes, buildNode("win-b", "10.0.20348", false))
	fs := WindowsBuildPins(s)
	expect(t, "2022 pool added", fs, 2, Warning, "10.0.17763", "is being left", "10.0.20348 (Windows Server 2022) beside them", "winkube plan windows-upgrade")
	if fs[0].Object != "Deployment/apps/iis-1809" || fs[1].Object != "Deployment/apps/selected" {
		t.Errorf("objects %s, %s", fs[0].Object, fs[1].Object)
	}

	// 2019 alone on Kubernetes 1.33: past AKS's support.
	s = &State{Version: v133, Nodes: []corev1.Node{buildNode("win-a", "10.0.17763", false)}, Deployments: workloads}
	expect(t, "2019 on 1.33", WindowsBuildPins(s), 2, Warning, "Windows Server 2019 is not supported for Kubernetes v1.33", "2026-03-01")

	// Bare pods count; pods of a controller are their workload's.
	s = &State{Nodes: []corev1.Node{buildNode("win-a", "10.0.17763", true), buildNode("win-b", "10.0.17763", true), buildNode("win-c", "10.0.26100", false)},
		Pods: []corev1.Pod{
			{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "debug"}, Spec: on2019},
			{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "owned", OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "x"}}}, Spec: on2019},
		}}
	expect(t, "bare pod", WindowsBuildPins(s), 1, Warning, "Pod/apps/debug", "is being left")
}
