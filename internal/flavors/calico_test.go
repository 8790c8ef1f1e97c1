package flavors_test

import (
	"crypto/sha1" //nolint:gosec // git's blob id, not a security hash
	"fmt"
	"os"
	"reflect"
	"regexp"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/winkube/winkube/internal/flavors"
)

// yamlDocs splits a YAML stream at its document separators: lines that
// are "---" alone, as the API machinery's reader does; an indented "---"
// inside a CRD's description is text.
func yamlDocs(stream string) []string {
	return regexp.MustCompile(`(?m)^---[ \t]*\n`).Split(stream, -1)
}

// upstreamCalico reads the embedded release manifest from disk, checks it
// is the file at Calico's tag v3.30.7 (git blob 5f75d30c of
// manifests/calico-vxlan.yaml, commit 74485ea4), and decodes it.
func upstreamCalico(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile("calico-vxlan-v3.30.7.yaml")
	if err != nil {
		t.Fatal(err)
	}
	h := sha1.New() //nolint:gosec // git's blob id
	fmt.Fprintf(h, "blob %d\x00", len(data))
	h.Write(data)
	if got := fmt.Sprintf("%x", h.Sum(nil)); got != flavors.CalicoManifestBlob {
		t.Fatalf("calico-vxlan-v3.30.7.yaml is blob %s, not Calico v3.30.7's manifests/calico-vxlan.yaml (%s)", got, flavors.CalicoManifestBlob)
	}
	var out []*unstructured.Unstructured
	for _, doc := range yamlDocs(string(data)) {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatal(err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
	return out
}

// TestCalicoIsTheRelease: every flavor that runs Calico delivers every CRD
// of Calico v3.30.7's calico-vxlan.yaml with its schema, the release's
// ClusterRoles for calico-node, the CNI plugin, calico-kube-controllers
// and the tier getter, bound as the release binds them, and the tiers
// calico-node's start-up creates. Felix's syncer lists and watches tiers,
// the staged policies and the Kubernetes (Baseline)AdminNetworkPolicies:
// without them Felix never reaches in-sync.
func TestCalicoIsTheRelease(t *testing.T) {
	upstream := upstreamCalico(t)
	wantCRDs := map[string]*unstructured.Unstructured{}
	wantRoles := map[string][]rbacv1.PolicyRule{}
	wantBindings := map[string]*rbacv1.ClusterRoleBinding{}
	for _, u := range upstream {
		switch u.GetKind() {
		case "CustomResourceDefinition":
			wantCRDs[u.GetName()] = u
		case "ClusterRole":
			r := &rbacv1.ClusterRole{}
			mustConvert(t, u, r)
			wantRoles[r.Name] = r.Rules
		case "ClusterRoleBinding":
			b := &rbacv1.ClusterRoleBinding{}
			mustConvert(t, u, b)
			wantBindings[b.Name] = b
		}
	}
	if len(wantCRDs) != 24 || len(wantRoles) != 4 {
		t.Fatalf("the manifest has %d CRDs and %d ClusterRoles, want 24 and 4", len(wantCRDs), len(wantRoles))
	}
	for _, flavor := range []string{flavors.Default, flavors.Windows, flavors.MachinePoolWindows} {
		objs, err := flavors.Generate(flavor, opts("v1.36.3", "2022"))
		if err != nil {
			t.Fatal(err)
		}
		gotCRDs := map[string]*unstructured.Unstructured{}
		gotRoles := map[string][]rbacv1.PolicyRule{}
		gotBindings := map[string]*rbacv1.ClusterRoleBinding{}
		tiers := map[string]map[string]any{}
		for _, u := range addonObjects(t, objs) {
			switch u.GetKind() {
			case "CustomResourceDefinition":
				gotCRDs[u.GetName()] = u
			case "ClusterRole":
				r := &rbacv1.ClusterRole{}
				mustConvert(t, u, r)
				gotRoles[r.Name] = r.Rules
			case "ClusterRoleBinding":
				b := &rbacv1.ClusterRoleBinding{}
				mustConvert(t, u, b)
				gotBindings[b.Name] = b
			case "Tier":
				spec, _, _ := unstructured.NestedMap(u.Object, "spec")
				tiers[u.GetName()] = spec
			}
		}
		for name, want := range wantCRDs {
			got := gotCRDs[name]
			if got == nil {
				t.Errorf("%s: CRD %s of the release is not delivered", flavor, name)
				continue
			}
			if !reflect.DeepEqual(got.Object["spec"], want.Object["spec"]) {
				t.Errorf("%s: CRD %s differs from the release's", flavor, name)
			}
		}
		for name := range gotCRDs {
			if wantCRDs[name] == nil {
				t.Errorf("%s: CRD %s is not in the release", flavor, name)
			}
		}
		for name, want := range wantRoles {
			if got, ok := gotRoles[name]; !ok || !reflect.DeepEqual(got, want) {
				t.Errorf("%s: ClusterRole %s:\n got %v\nwant %v", flavor, name, got, want)
			}
			got, want := gotBindings[name], wantBindings[name]
			if got == nil || !reflect.DeepEqual(got.RoleRef, want.RoleRef) || !reflect.DeepEqual(got.Subjects, want.Subjects) {
				t.Errorf("%s: ClusterRoleBinding %s = %v, want %v", flavor, name, got, want)
			}
		}
		// What Felix's syncer lists and watches beyond the kinds older
		// releases had (libcalico-go felixsyncerv1.go, v3.30.7).
		for _, gr := range [][2]string{
			{"crd.projectcalico.org", "tiers"}, {"crd.projectcalico.org", "stagednetworkpolicies"},
			{"crd.projectcalico.org", "stagedglobalnetworkpolicies"}, {"crd.projectcalico.org", "stagedkubernetesnetworkpolicies"},
			{"policy.networking.k8s.io", "adminnetworkpolicies"}, {"policy.networking.k8s.io", "baselineadminnetworkpolicies"},
		} {
			for _, verb := range []string{"list", "watch"} {
				if !ruleGrants(gotRoles["calico-node"], gr[0], gr[1], verb) {
					t.Errorf("%s: calico-node may not %s %s.%s", flavor, verb, gr[1], gr[0])
				}
			}
			crdName := gr[1] + "." + gr[0]
			if gotCRDs[crdName] == nil {
				t.Errorf("%s: no CRD %s", flavor, crdName)
			}
		}
		// libcalico-go/lib/clientv3/client.go ensureTierExists, with
		// api/pkg/apis/projectcalico/v3/tier.go's orders.
		for name, want := range map[string]string{
			"default": "Deny 1e+06", "adminnetworkpolicy": "Pass 1000", "baselineadminnetworkpolicy": "Pass 1e+07",
		} {
			spec := tiers[name]
			order, _ := spec["order"].(int64)
			f, ok := spec["order"].(float64)
			if !ok {
				f = float64(order)
			}
			if got := fmt.Sprintf("%v %v", spec["defaultAction"], f); got != want {
				t.Errorf("%s: Tier %s: defaultAction and order %s, want %s", flavor, name, got, want)
			}
		}
	}
}

// TestCalicoCRDsFitKubectlApply: each ConfigMap of the template stays
// under the 256 KiB a client-side kubectl apply can keep in its
// last-applied annotation.
func TestCalicoCRDsFitKubectlApply(t *testing.T) {
	objs, err := flavors.Generate(flavors.Windows, opts("v1.36.3", "2022"))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		data, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			t.Fatal(err)
		}
		j, err := yaml.Marshal(data)
		if err != nil {
			t.Fatal(err)
		}
		if len(j) > 200_000 {
			t.Errorf("%s %s is %d bytes: kubectl apply cannot keep it in its last-applied annotation", o.GetObjectKind().GroupVersionKind().Kind, o.GetName(), len(j))
		}
	}
}
