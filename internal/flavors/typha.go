package flavors

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// calicoTyphaName names Typha's Service, Deployment and
// PodDisruptionBudget in calico-typha.yaml, and the Service Felix looks
// Typha up by.
const calicoTyphaName = "calico-typha"

// DefaultTyphaReplicas is the replicas calico-typha.yaml ships.
const DefaultTyphaReplicas = 1

// calicoTypha is Typha as calico-typha.yaml ships it (Service, Deployment,
// PodDisruptionBudget; it runs as calico-node, whose role covers what its
// syncers list), with two edits:
//   - replicas: CALICO_TYPHA_REPLICAS (Options.CalicoTyphaReplicas), the
//     manifest's 1 unless set; the manifest has no autoscaler, so whoever
//     installs it sizes it ('winkube up' does, with TyphaReplicas);
//   - scheduling: CAPZ's override of Typha's tolerations and its preferred
//     node affinity for control-plane nodes
//     (cluster-api-provider-azure 69ec3a40, templates/addons/
//     cluster-api-helm/calico.yaml typhaDeployment): tolerating every
//     NoSchedule taint kept Typha on nodes being deleted and broke
//     scale-ins and upgrades. Typha therefore waits, as on CAPZ, for the
//     cloud provider to lift a node's uninitialized taint.
func (b *builder) calicoTypha() []runtime.Object {
	deploy := calicoManifestObject("Deployment", calicoTyphaName)
	set := func(v any, path ...string) {
		path = append([]string{"spec"}, path...)
		if err := unstructured.SetNestedField(deploy.Object, v, path...); err != nil {
			panic(err)
		}
	}
	set(int64(b.o.CalicoTyphaReplicas), "replicas")
	scheduling, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&corev1.PodSpec{
		Tolerations: []corev1.Toleration{
			{Effect: corev1.TaintEffectNoExecute, Operator: corev1.TolerationOpExists},
			{Effect: corev1.TaintEffectNoSchedule, Key: controlPlaneRoleLabel, Operator: corev1.TolerationOpExists},
			{Effect: corev1.TaintEffectNoSchedule, Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists},
		},
		Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 50, Preference: corev1.NodeSelectorTerm{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: controlPlaneRoleLabel, Operator: corev1.NodeSelectorOpExists}},
			}}},
		}},
	})
	if err != nil {
		panic(err)
	}
	set(scheduling["tolerations"], "template", "spec", "tolerations")
	set(scheduling["affinity"], "template", "spec", "affinity")
	return []runtime.Object{
		calicoManifestObject("PodDisruptionBudget", calicoTyphaName),
		calicoManifestObject("Service", calicoTyphaName),
		deploy,
	}
}

// TyphaReplicas is the number of Typhas the tigera operator, which CAPZ
// installs Calico with, scales to for a cluster of that many schedulable
// nodes, linuxNodes of them Linux (tigera/operator v1.38.16 9cbd52a5,
// pkg/common/autoscale.go GetExpectedTyphaScale): one per 200 nodes plus
// one spare, at least 3 above 4 nodes, 2 for 3-4 nodes and 1 for up to 2.
// Typha runs on Linux only, and the operator's autoscaler never sets more
// replicas than there are Linux nodes (it refuses and keeps its last
// count, pkg/controller/installation/typha_autoscaler.go
// autoscaleReplicas): capped here at linuxNodes.
func TyphaReplicas(nodes, linuxNodes int) int {
	const nodesPerTypha = 200
	var n int
	switch {
	case nodes <= 2:
		n = 1
	case nodes <= 4:
		n = 2
	default:
		n = max(nodes/nodesPerTypha+2, 3)
	}
	return max(min(n, linuxNodes), 1)
}
