package flavors_test

import (
	"crypto/sha1" //nolint:gosec // git's blob id, not a security hash
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
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
// is the file at Calico's tag v3.30.7 (git blob 3215384b of
// manifests/calico-typha.yaml, commit 74485ea4), and decodes it.
func upstreamCalico(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile("calico-typha-v3.30.7.yaml")
	if err != nil {
		t.Fatal(err)
	}
	h := sha1.New() //nolint:gosec // git's blob id
	fmt.Fprintf(h, "blob %d\x00", len(data))
	h.Write(data)
	if got := fmt.Sprintf("%x", h.Sum(nil)); got != flavors.CalicoManifestBlob {
		t.Fatalf("calico-typha-v3.30.7.yaml is blob %s, not Calico v3.30.7's manifests/calico-typha.yaml (%s)", got, flavors.CalicoManifestBlob)
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

// calicoParts sorts objects into CRDs, ClusterRoles' rules and
// ClusterRoleBindings by name, and Tiers' specs.
func calicoParts(t *testing.T, objs []*unstructured.Unstructured) (crds map[string]*unstructured.Unstructured,
	roles map[string][]rbacv1.PolicyRule, bindings map[string]*rbacv1.ClusterRoleBinding, tiers map[string]map[string]any) {
	t.Helper()
	crds, roles, bindings, tiers = map[string]*unstructured.Unstructured{}, map[string][]rbacv1.PolicyRule{}, map[string]*rbacv1.ClusterRoleBinding{}, map[string]map[string]any{}
	for _, u := range objs {
		switch u.GetKind() {
		case "CustomResourceDefinition":
			crds[u.GetName()] = u
		case "ClusterRole":
			r := &rbacv1.ClusterRole{}
			mustConvert(t, u, r)
			roles[r.Name] = r.Rules
		case "ClusterRoleBinding":
			b := &rbacv1.ClusterRoleBinding{}
			mustConvert(t, u, b)
			bindings[b.Name] = b
		case "Tier":
			tiers[u.GetName()], _, _ = unstructured.NestedMap(u.Object, "spec")
		}
	}
	return crds, roles, bindings, tiers
}

// TestCalicoIsTheRelease: every flavor that runs Calico delivers every CRD
// of Calico v3.30.7's calico-typha.yaml with its schema, the release's
// ClusterRoles for calico-node, the CNI plugin, calico-kube-controllers
// and the tier getter, bound as the release binds them, and the tiers
// calico-node's start-up creates. Felix's syncer lists and watches tiers,
// the staged policies and the Kubernetes (Baseline)AdminNetworkPolicies:
// without them Felix never reaches in-sync.
func TestCalicoIsTheRelease(t *testing.T) {
	wantCRDs, wantRoles, wantBindings, _ := calicoParts(t, upstreamCalico(t))
	if len(wantCRDs) != 24 || len(wantRoles) != 4 {
		t.Fatalf("the manifest has %d CRDs and %d ClusterRoles, want 24 and 4", len(wantCRDs), len(wantRoles))
	}
	for _, flavor := range []string{flavors.Default, flavors.Windows, flavors.MachinePoolWindows} {
		objs, err := flavors.Generate(flavor, opts("v1.36.3", "2022"))
		if err != nil {
			t.Fatal(err)
		}
		gotCRDs, gotRoles, gotBindings, tiers := calicoParts(t, addonObjects(t, objs))
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

// operatorWindows reads the operator's render of the Windows objects
// (testdata/tigera-operator/windows-v1.38.16.yaml, written from
// tigera/operator pkg/render/windows.go at v1.38.16, 9cbd52a5).
func operatorWindows(t *testing.T) (*appsv1.DaemonSet, map[string]any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "tigera-operator", "windows-v1.38.16.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	docs := yamlDocs(string(data))
	cm := &corev1.ConfigMap{}
	ds := &appsv1.DaemonSet{}
	if err := yaml.UnmarshalStrict([]byte(docs[0]), cm); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict([]byte(docs[1]), ds); err != nil {
		t.Fatal(err)
	}
	var conf map[string]any
	if err := jsonUnmarshal(cm.Data["config"], &conf); err != nil {
		t.Fatal(err)
	}
	return ds, conf
}

// TestCalicoWindowsIsTheOperatorsRender: calico-node-windows and
// cni-config-windows are the tigera operator's render at the pinned
// version, field by field, but for the differences below, each because
// winkube installs Calico from manifests through a ClusterResourceSet
// rather than through the operator. A change on either side that is not
// one of these fails.
func TestCalicoWindowsIsTheOperatorsRender(t *testing.T) {
	want, wantConf := operatorWindows(t)
	_, addons, _ := objectsOf(t, flavors.Windows, opts("v1.36.3", "2022"))
	var got *appsv1.DaemonSet
	var gotCM *corev1.ConfigMap
	for _, o := range addons {
		switch o := o.(type) {
		case *appsv1.DaemonSet:
			if o.Name == "calico-node-windows" {
				got = o
			}
		case *corev1.ConfigMap:
			if o.Name == "cni-config-windows" {
				gotCM = o
			}
		}
	}
	if got == nil || gotCM == nil {
		t.Fatalf("no calico-node-windows (%v) or cni-config-windows (%v)", got != nil, gotCM != nil)
	}
	if gotCM.Namespace != "kube-system" {
		t.Errorf("cni-config-windows in %s, want kube-system", gotCM.Namespace)
	}
	var gotConf map[string]any
	if err := jsonUnmarshal(gotCM.Data["config"], &gotConf); err != nil {
		t.Fatal(err)
	}

	// 1. The CNI plugin's API server: the operator writes the address it
	// read from kubernetes-services-endpoint into the configuration;
	// a ClusterResourceSet's objects are fixed when the template is
	// generated, so install-cni fills it in from the same ConfigMap's
	// values (its __KUBERNETES_SERVICE_HOST__ and __KUBECONFIG_FILEPATH__
	// placeholders).
	plugin := wantConf["plugins"].([]any)[0].(map[string]any)
	plugin["kubernetes"] = map[string]any{"k8s_api_root": "https://__KUBERNETES_SERVICE_HOST__:__KUBERNETES_SERVICE_PORT__", "kubeconfig": "__KUBECONFIG_FILEPATH__"}
	if !reflect.DeepEqual(gotConf, wantConf) {
		t.Errorf("cni-config-windows:\n got %v\nwant %v", gotConf, wantConf)
	}

	// 2. Namespace: calico-node's ServiceAccount is in kube-system, as
	// the manifest install has it.
	want.Namespace = "kube-system"
	// 3. Labels the operator's handler does not set on the DaemonSet.
	want.Labels = map[string]string{"k8s-app": "calico-node-windows"}
	// 4. Typha without TLS, as the manifest install runs it
	// (manifests/calico-typha.yaml, Calico v3.30.7): Felix's TLS settings,
	// the certificate volumes and mounts and the CA's hash annotation go;
	// the Service's name stays and its namespace is kube-system, where
	// the manifest puts Typha. The cni-config hash is compared by name
	// (the operator hashes the data with its own function).
	pod := &want.Spec.Template.Spec
	delete(want.Spec.Template.Annotations, "tigera-operator.hash.operator.tigera.io/tigera-ca-private")
	for k := range got.Spec.Template.Annotations {
		want.Spec.Template.Annotations[k] = got.Spec.Template.Annotations[k]
	}
	typha := func(name string) bool {
		switch name {
		case "FELIX_TYPHACAFILE", "FELIX_TYPHACERTFILE", "FELIX_TYPHAKEYFILE", "FELIX_TYPHACN", "FELIX_TYPHAURISAN", "tigera-ca-bundle", "node-certs":
			return true
		}
		return false
	}
	// 5. Volumes for Linux paths the Windows containers never mount.
	linuxOnly := func(name string) bool { return name == "lib-modules" || name == "xtables-lock" || name == "policysync" }
	pod.Volumes = slices.DeleteFunc(pod.Volumes, func(v corev1.Volume) bool { return typha(v.Name) || linuxOnly(v.Name) })
	// 6. The wireserver's HNS ACL (calicoStaticRules): its ConfigMap
	// mounted into felix, which copies it beside calico-node.exe.
	pod.Volumes = append(pod.Volumes, corev1.Volume{Name: "calico-static-rules", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "calico-static-rules"}}}})
	for _, cs := range [][]corev1.Container{pod.InitContainers, pod.Containers} {
		for i := range cs {
			c := &cs[i]
			c.Env = slices.DeleteFunc(slices.Clone(c.Env), func(e corev1.EnvVar) bool { return typha(e.Name) })
			c.VolumeMounts = slices.DeleteFunc(slices.Clone(c.VolumeMounts), func(m corev1.VolumeMount) bool { return typha(m.Name) })
			for j := range c.Env {
				e := &c.Env[j]
				switch e.Name {
				case "CLUSTER_TYPE":
					// 7. Not installed by the operator.
					e.Value = "k8s,windows"
				case "FELIX_TYPHAK8SNAMESPACE":
					// 4, continued.
					e.Value = "kube-system"
				case "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT":
					// 8. From the ConfigMap the operator reads them from.
					e.Value, e.ValueFrom = "", &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: "kubernetes-services-endpoint"}, Key: e.Name}}
				}
			}
			if c.Name == "felix" {
				c.Args = got.Spec.Template.Spec.Containers[0].Args
				c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "calico-static-rules", MountPath: "/calico-static-rules", ReadOnly: true})
			}
		}
	}
	if !strings.Contains(strings.Join(got.Spec.Template.Spec.Containers[0].Args, " "), "felix-service.ps1") {
		t.Errorf("felix does not run felix-service.ps1: %q", got.Spec.Template.Spec.Containers[0].Args)
	}
	gotJSON, _ := json.MarshalIndent(got, "", " ")
	wantJSON, _ := json.MarshalIndent(want, "", " ")
	if string(gotJSON) != string(wantJSON) {
		t.Errorf("calico-node-windows differs from the operator's render (but for the listed differences):\n%s", lineDiff(string(wantJSON), string(gotJSON)))
	}
}

// lineDiff lists the lines of b that are not in a and those of a not in b.
func lineDiff(a, b string) string {
	as, bs := strings.Split(a, "\n"), strings.Split(b, "\n")
	var out []string
	for _, l := range bs {
		if !slices.Contains(as, l) {
			out = append(out, "+ "+l)
		}
	}
	for _, l := range as {
		if !slices.Contains(bs, l) {
			out = append(out, "- "+l)
		}
	}
	return strings.Join(out, "\n")
}

// TestCalicoCNIConfigLoadsAsThePluginReadsIt: install-cni fills the
// template's tokens in as text (projectcalico/calico v3.30.7 74485ea4,
// cni-plugin/pkg/install/install.go) and the calico plugin decodes mtu as
// an int (cni-plugin/pkg/types/types.go); a netconf it cannot decode fails
// every pod's CNI ADD on Linux nodes.
func TestCalicoCNIConfigLoadsAsThePluginReadsIt(t *testing.T) {
	for _, flavor := range []string{flavors.Default, flavors.Windows, flavors.MachinePoolWindows} {
		objs, err := flavors.Generate(flavor, opts("v1.36.3", "2022"))
		if err != nil {
			t.Fatal(err)
		}
		var data map[string]any
		for _, u := range addonObjects(t, objs) {
			if u.GetKind() == "ConfigMap" && u.GetName() == "calico-config" {
				data, _, _ = unstructured.NestedMap(u.Object, "data")
			}
		}
		tmpl, _ := data["cni_network_config"].(string)
		mtu, _ := data["veth_mtu"].(string)
		if tmpl == "" || mtu == "" {
			t.Fatalf("%s: calico-config has no cni_network_config or veth_mtu: %v", flavor, data)
		}
		conf := strings.NewReplacer("__KUBERNETES_NODE_NAME__", "node-0", "__KUBECONFIG_FILEPATH__", "/etc/cni/net.d/calico-kubeconfig",
			"__CNI_MTU__", mtu).Replace(tmpl)
		var netconf struct {
			Plugins []struct {
				Type string `json:"type"`
				MTU  int    `json:"mtu"`
			} `json:"plugins"`
		}
		if err := json.Unmarshal([]byte(conf), &netconf); err != nil {
			t.Fatalf("%s: the calico plugin cannot load the netconf install-cni writes: %v\n%s", flavor, err, conf)
		}
		if len(netconf.Plugins) == 0 || netconf.Plugins[0].Type != "calico" || netconf.Plugins[0].MTU != flavors.OverlayMTU {
			t.Errorf("%s: first plugin %+v, want calico with mtu %d", flavor, netconf.Plugins, flavors.OverlayMTU)
		}
		var types []string
		for _, p := range netconf.Plugins {
			types = append(types, p.Type)
		}
		if want := upstreamCNIChain(t); !slices.Equal(types, want) {
			t.Errorf("%s: CNI chain %v, want the release's %v: install-cni copies only the release's plugins, so any other fails every pod's CNI ADD", flavor, types, want)
		}
	}
}

// upstreamCNIChain is the plugin types of the release's calico-config
// cni_network_config, in order.
func upstreamCNIChain(t *testing.T) []string {
	t.Helper()
	for _, u := range upstreamCalico(t) {
		if u.GetKind() != "ConfigMap" || u.GetName() != "calico-config" {
			continue
		}
		tmpl, _, _ := unstructured.NestedString(u.Object, "data", "cni_network_config")
		conf := strings.NewReplacer("__KUBERNETES_NODE_NAME__", "node-0", "__KUBECONFIG_FILEPATH__", "/k", "__CNI_MTU__", "1350").Replace(tmpl)
		var netconf struct {
			Plugins []struct {
				Type string `json:"type"`
			} `json:"plugins"`
		}
		if err := json.Unmarshal([]byte(conf), &netconf); err != nil {
			t.Fatalf("the release's cni_network_config: %v", err)
		}
		var types []string
		for _, p := range netconf.Plugins {
			types = append(types, p.Type)
		}
		return types
	}
	t.Fatal("the release has no calico-config ConfigMap")
	return nil
}

// TestCalicoNodeDisablesVXLANChecksumOffload: on Azure, Felix must turn TX
// checksum offload off on its VXLAN device whatever the kernel, as CAPZ
// makes it do (cluster-api-provider-azure 69ec3a40,
// templates/addons/calico/patches/calico-node.yaml); Felix v3.30.7 on its
// own does so only for kernels up to 5.7, and Service traffic from a node
// to a pod on another node is then dropped (projectcalico/calico#4865).
func TestCalicoNodeDisablesVXLANChecksumOffload(t *testing.T) {
	for _, flavor := range []string{flavors.Default, flavors.Windows, flavors.MachinePoolWindows} {
		objs, err := flavors.Generate(flavor, opts("v1.36.3", "2022"))
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, u := range addonObjects(t, objs) {
			if u.GetKind() != "DaemonSet" || u.GetName() != "calico-node" {
				continue
			}
			ds := &appsv1.DaemonSet{}
			mustConvert(t, u, ds)
			found = true
			for _, c := range ds.Spec.Template.Spec.Containers {
				if c.Name != "calico-node" {
					continue
				}
				i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "FELIX_FEATUREDETECTOVERRIDE" })
				if i < 0 || c.Env[i].Value != "ChecksumOffloadBroken=true" {
					t.Errorf("%s: calico-node has no FELIX_FEATUREDETECTOVERRIDE=ChecksumOffloadBroken=true: Felix leaves VXLAN checksum offload on, and Azure drops node-to-Service traffic across nodes", flavor)
				}
			}
		}
		if !found {
			t.Fatalf("%s: no calico-node DaemonSet among the add-ons", flavor)
		}
	}
}
