package flavors_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/winkube/winkube/internal/flavors"
)

// calicoFlavors are the flavors whose CNI is Calico.
var calicoFlavors = []string{flavors.Default, flavors.Windows, flavors.MachinePoolWindows}

// manifestObject is the release manifest's object of that kind and name.
func manifestObject(t *testing.T, manifest []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	if u := named(manifest, kind, name); u != nil {
		return u.DeepCopy()
	}
	t.Fatalf("the release manifest has no %s %s", kind, name)
	return nil
}

// addonsOf are the add-on objects a flavor delivers.
func addonsOf(t *testing.T, flavor string, o flavors.Options) []*unstructured.Unstructured {
	t.Helper()
	objs, err := flavors.Generate(flavor, o)
	if err != nil {
		t.Fatal(err)
	}
	return addonObjects(t, objs)
}

// named is the object of that kind and name, or nil.
func named(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, u := range objs {
		if u.GetKind() == kind && u.GetName() == name {
			return u
		}
	}
	return nil
}

// TestCalicoTyphaIsTheManifests: every Calico flavor delivers the
// calico-typha Service, PodDisruptionBudget and Deployment of Calico
// v3.30.7's manifests/calico-typha.yaml as the release ships them, but for
// the two edits the flavor documents: the replicas (the flavor's
// CALICO_TYPHA_REPLICAS, the manifest's 1 by default) and the tolerations
// and node affinity CAPZ gives Typha (cluster-api-provider-azure 69ec3a40,
// templates/addons/cluster-api-helm/calico.yaml typhaDeployment).
func TestCalicoTyphaIsTheManifests(t *testing.T) {
	capzScheduling := map[string]any{}
	if err := json.Unmarshal([]byte(`{
		"tolerations": [
			{"effect": "NoExecute", "operator": "Exists"},
			{"effect": "NoSchedule", "key": "node-role.kubernetes.io/control-plane", "operator": "Exists"},
			{"effect": "NoSchedule", "key": "node.kubernetes.io/not-ready", "operator": "Exists"}],
		"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
			{"weight": 50, "preference": {"matchExpressions": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]}}]}}
	}`), &capzScheduling); err != nil {
		t.Fatal(err)
	}
	manifest := upstreamCalico(t)
	for _, flavor := range calicoFlavors {
		for _, replicas := range []int32{0, 4} {
			o := opts("v1.36.3", "2022")
			o.CalicoTyphaReplicas = replicas
			wantReplicas := int64(replicas)
			if replicas == 0 {
				wantReplicas = 1 // the manifest's
			}
			addons := addonsOf(t, flavor, o)
			for _, kind := range []string{"Service", "PodDisruptionBudget", "Deployment"} {
				want := manifestObject(t, manifest, kind, "calico-typha")
				got := named(addons, kind, "calico-typha")
				if got == nil {
					t.Errorf("%s: no %s calico-typha among the add-ons", flavor, kind)
					continue
				}
				if kind == "Deployment" {
					if r, _, _ := unstructured.NestedFieldNoCopy(want.Object, "spec", "replicas"); fmt.Sprint(r) != "1" {
						t.Fatalf("the manifest's Typha has %v replicas, want 1", r)
					}
					_ = unstructured.SetNestedField(want.Object, wantReplicas, "spec", "replicas")
					for k, v := range capzScheduling {
						_ = unstructured.SetNestedField(want.Object, v, "spec", "template", "spec", k)
					}
				}
				gotJSON, _ := json.MarshalIndent(got.Object, "", " ")
				wantJSON, _ := json.MarshalIndent(want.Object, "", " ")
				if string(gotJSON) != string(wantJSON) {
					t.Errorf("%s (replicas %d): %s calico-typha differs from the manifest's (but for the documented edits):\n%s",
						flavor, replicas, kind, lineDiff(string(wantJSON), string(gotJSON)))
				}
			}
		}
	}
}

// TestCalicoNodeFindsTypha: calico-config names the Typha Service as the
// manifest's does, and Linux calico-node reads it into
// FELIX_TYPHAK8SSERVICENAME as the manifest's calico-node does; Windows
// Felix and the node service are told the Service's name and namespace
// (kube-system, where the manifest puts Typha: the operator's
// calico-system does not exist here).
func TestCalicoNodeFindsTypha(t *testing.T) {
	manifest := upstreamCalico(t)
	wantCM := manifestObject(t, manifest, "ConfigMap", "calico-config")
	wantName, _, _ := unstructured.NestedString(wantCM.Object, "data", "typha_service_name")
	wantDS := &appsv1.DaemonSet{}
	mustConvert(t, manifestObject(t, manifest, "DaemonSet", "calico-node"), wantDS)
	wantEnv := envNamed(t, wantDS.Spec.Template.Spec.Containers, "calico-node", "FELIX_TYPHAK8SSERVICENAME")
	if wantName != "calico-typha" || wantEnv == nil {
		t.Fatalf("the manifest's typha_service_name is %q and its calico-node reads it as %v", wantName, wantEnv)
	}
	for _, flavor := range calicoFlavors {
		addons := addonsOf(t, flavor, opts("v1.36.3", "2022"))
		cm := named(addons, "ConfigMap", "calico-config")
		if got, _, _ := unstructured.NestedString(cm.Object, "data", "typha_service_name"); got != wantName {
			t.Errorf("%s: calico-config typha_service_name %q, want %q", flavor, got, wantName)
		}
		ds := &appsv1.DaemonSet{}
		mustConvert(t, named(addons, "DaemonSet", "calico-node"), ds)
		if got := envNamed(t, ds.Spec.Template.Spec.Containers, "calico-node", "FELIX_TYPHAK8SSERVICENAME"); !reflect.DeepEqual(got, wantEnv) {
			t.Errorf("%s: calico-node's FELIX_TYPHAK8SSERVICENAME is %v, want the manifest's %v", flavor, got, wantEnv)
		}
		if flavor == flavors.Default {
			continue
		}
		wds := &appsv1.DaemonSet{}
		mustConvert(t, named(addons, "DaemonSet", "calico-node-windows"), wds)
		for _, c := range []string{"felix", "node"} {
			for name, want := range map[string]string{"FELIX_TYPHAK8SSERVICENAME": "calico-typha", "FELIX_TYPHAK8SNAMESPACE": "kube-system"} {
				if got := envNamed(t, wds.Spec.Template.Spec.Containers, c, name); got == nil || got.Value != want {
					t.Errorf("%s: calico-node-windows container %s has %s = %v, want %q", flavor, c, name, got, want)
				}
			}
		}
	}
}

// envNamed is the variable of that name in the named container, or nil.
func envNamed(t *testing.T, cs []corev1.Container, container, name string) *corev1.EnvVar {
	t.Helper()
	i := slices.IndexFunc(cs, func(c corev1.Container) bool { return c.Name == container })
	if i < 0 {
		t.Fatalf("no container %s", container)
	}
	for _, e := range cs[i].Env {
		if e.Name == name {
			return &e
		}
	}
	return nil
}

// typhaSyncerKinds are what one Typha lists and watches, all nodes' worth:
// its four syncer pipelines (projectcalico/calico v3.30.7 74485ea4,
// typha/pkg/daemon/daemon.go CreateServer) with the kinds each watches in
// the Kubernetes datastore: libcalico-go/lib/backend/syncersv1/
// felixsyncer/felixsyncerv1.go (Profiles are namespaces and service
// accounts, WorkloadEndpoints pods), bgpsyncer/bgpsyncer.go (block
// affinities with Calico IPAM), tunnelipsyncer/tunnelipsyncer.go and
// nodestatussyncer/nodestatussyncer.go. A kind added here without its
// rule in calico-node's role fails the test below.
var typhaSyncerKinds = map[string][][2]string{
	"felix": {
		{"crd.projectcalico.org", "clusterinformations"}, {"crd.projectcalico.org", "felixconfigurations"},
		{"crd.projectcalico.org", "globalnetworkpolicies"}, {"crd.projectcalico.org", "stagedglobalnetworkpolicies"},
		{"crd.projectcalico.org", "globalnetworksets"}, {"crd.projectcalico.org", "ippools"},
		{"", "nodes"}, {"", "namespaces"}, {"", "serviceaccounts"}, {"", "pods"},
		{"crd.projectcalico.org", "networkpolicies"}, {"crd.projectcalico.org", "stagednetworkpolicies"},
		{"crd.projectcalico.org", "stagedkubernetesnetworkpolicies"}, {"crd.projectcalico.org", "networksets"},
		{"crd.projectcalico.org", "tiers"}, {"crd.projectcalico.org", "hostendpoints"},
		{"crd.projectcalico.org", "bgpconfigurations"}, {"crd.projectcalico.org", "bgppeers"},
		{"networking.k8s.io", "networkpolicies"},
		{"policy.networking.k8s.io", "adminnetworkpolicies"}, {"policy.networking.k8s.io", "baselineadminnetworkpolicies"},
		{"discovery.k8s.io", "endpointslices"}, {"", "services"}, {"crd.projectcalico.org", "ipamblocks"},
	},
	"bgp": {
		{"crd.projectcalico.org", "ippools"}, {"crd.projectcalico.org", "bgpconfigurations"}, {"", "nodes"},
		{"crd.projectcalico.org", "bgppeers"}, {"crd.projectcalico.org", "bgpfilters"}, {"crd.projectcalico.org", "blockaffinities"},
	},
	"tunnel-ip-allocation": {{"crd.projectcalico.org", "ippools"}, {"", "nodes"}},
	"node-status":          {{"crd.projectcalico.org", "caliconodestatuses"}},
}

// TestCalicoNodeRoleCoversTyphasSyncers: Typha runs as calico-node (the
// manifest's serviceAccountName), so calico-node's ClusterRole, as every
// Calico flavor delivers it, must let it list and watch every kind of its
// four syncers and get endpoints (Felix's discovery of Typhas,
// typha/pkg/discovery/discovery.go, and Typha's own count of its peers,
// typha/pkg/k8s/lookup.go). A missing list is a 403 retried for ever: that
// syncer never reaches in-sync and Typha never reports ready.
func TestCalicoNodeRoleCoversTyphasSyncers(t *testing.T) {
	if len(typhaSyncerKinds["felix"]) != 24 || len(typhaSyncerKinds) != 4 {
		t.Fatalf("the syncers' kinds are incomplete: %d syncers, felix %d kinds", len(typhaSyncerKinds), len(typhaSyncerKinds["felix"]))
	}
	for _, flavor := range calicoFlavors {
		role := named(addonsOf(t, flavor, opts("v1.36.3", "2022")), "ClusterRole", "calico-node")
		if role == nil {
			t.Fatalf("%s: no ClusterRole calico-node", flavor)
		}
		r := &rbacv1.ClusterRole{}
		mustConvert(t, role, r)
		var missing []string
		if !ruleGrants(r.Rules, "", "endpoints", "get") {
			missing = append(missing, "get endpoints")
		}
		for syncer, kinds := range typhaSyncerKinds {
			for _, gr := range kinds {
				for _, verb := range []string{"list", "watch"} {
					if !ruleGrants(r.Rules, gr[0], gr[1], verb) {
						missing = append(missing, fmt.Sprintf("%s %s.%s (%s syncer)", verb, gr[1], gr[0], syncer))
					}
				}
			}
		}
		if len(missing) > 0 {
			slices.Sort(missing)
			t.Errorf("%s: calico-node's ClusterRole, which Typha runs as, lacks: %s", flavor, strings.Join(missing, "; "))
		}
	}
}

// TestTyphaReplicas: the replicas the tigera operator's autoscaler sets
// (tigera/operator v1.38.16 9cbd52a5, pkg/common/autoscale.go
// GetExpectedTyphaScale; pkg/controller/installation/typha_autoscaler.go
// refuses to scale past the Linux nodes).
func TestTyphaReplicas(t *testing.T) {
	for _, c := range []struct{ nodes, linux, want int }{
		{0, 0, 1}, {1, 1, 1}, {2, 2, 1},
		{3, 3, 2}, {4, 2, 2}, // 1+1+2
		{5, 5, 3}, {199, 199, 3}, {200, 200, 3}, {399, 399, 3}, {400, 400, 4},
		{501, 101, 4},                                  // 1+100+400
		{600, 600, 5}, {1000, 1000, 7}, {1001, 201, 7}, // 1+200+800
		{2001, 2001, 12}, {3601, 3601, 20},
		// Not enough Linux nodes: the operator refuses to scale
		// past them and keeps its last count, which as a cluster
		// grows is at most the Linux nodes; the world takes them.
		{5, 1, 1}, {501, 3, 3},
	} {
		if got := flavors.TyphaReplicas(c.nodes, c.linux); got != c.want {
			t.Errorf("TyphaReplicas(%d nodes, %d Linux) = %d, want %d", c.nodes, c.linux, got, c.want)
		}
	}
}
