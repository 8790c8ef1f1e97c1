package localworld

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	addonsv1 "sigs.k8s.io/cluster-api/api/addons/v1beta2"
)

// The add-ons count as applied only when Cluster API has applied every
// resource of every ClusterResourceSet that selects the cluster: the
// progress must not say "add-ons running" while Calico's set is still
// to come.
func TestResourceSetsApplied(t *testing.T) {
	crs := func(name string, match map[string]string, resources ...string) addonsv1.ClusterResourceSet {
		c := addonsv1.ClusterResourceSet{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: addonsv1.ClusterResourceSetSpec{ClusterSelector: metav1.LabelSelector{MatchLabels: match}}}
		for _, r := range resources {
			c.Spec.Resources = append(c.Spec.Resources, addonsv1.ResourceRef{Name: r, Kind: "ConfigMap"})
		}
		return c
	}
	bound := func(name string, applied ...bool) addonsv1.ResourceSetBinding {
		b := addonsv1.ResourceSetBinding{ClusterResourceSetName: name}
		for i, a := range applied {
			b.Resources = append(b.Resources, addonsv1.ResourceBinding{ResourceRef: addonsv1.ResourceRef{Name: name + "-" + string(rune('a'+i)), Kind: "ConfigMap"}, Applied: ptr.To(a)})
		}
		return b
	}
	cluster := map[string]string{"cni": "calico", "metrics-server": "disabled"}
	calico := crs("calico", map[string]string{"cni": "calico"}, "calico-a", "calico-b")
	proxy := crs("proxy", map[string]string{"cni": "calico"}, "proxy-a")
	metrics := crs("metrics", map[string]string{"metrics-server": "enabled"}, "metrics-a")
	empty := crs("everything", nil, "everything-a")
	gone := crs("gone", map[string]string{"cni": "calico"}, "gone-a")
	gone.DeletionTimestamp = ptr.To(metav1.Now())

	for _, tc := range []struct {
		name     string
		sets     []addonsv1.ClusterResourceSet
		bindings []addonsv1.ResourceSetBinding
		want     bool
	}{
		{"every selecting set applied", []addonsv1.ClusterResourceSet{calico, proxy}, []addonsv1.ResourceSetBinding{bound("calico", true, true), bound("proxy", true)}, true},
		{"a selecting set not yet bound", []addonsv1.ClusterResourceSet{calico, proxy}, []addonsv1.ResourceSetBinding{bound("proxy", true)}, false},
		{"a resource not yet recorded", []addonsv1.ClusterResourceSet{calico}, []addonsv1.ResourceSetBinding{bound("calico", true)}, false},
		{"a resource that failed to apply", []addonsv1.ClusterResourceSet{calico}, []addonsv1.ResourceSetBinding{bound("calico", true, false)}, false},
		{"a set that selects other clusters", []addonsv1.ClusterResourceSet{calico, metrics}, []addonsv1.ResourceSetBinding{bound("calico", true, true)}, true},
		{"an empty selector selects nothing", []addonsv1.ClusterResourceSet{empty}, nil, true},
		{"a set being deleted", []addonsv1.ClusterResourceSet{gone}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			binding := &addonsv1.ClusterResourceSetBinding{Spec: addonsv1.ClusterResourceSetBindingSpec{Bindings: tc.bindings}}
			if got := resourceSetsApplied(cluster, tc.sets, binding); got != tc.want {
				t.Errorf("resourceSetsApplied = %v, want %v", got, tc.want)
			}
		})
	}
}
