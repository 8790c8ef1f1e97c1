package flavors_test

import (
	"context"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	addonsv1 "sigs.k8s.io/cluster-api/api/addons/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client/yamlprocessor"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/winkube/winkube/internal/flavors"
)

// addonParts finds the Cluster and an add-on's ClusterResourceSet and
// ConfigMap, named <cluster>-<addon>.
func addonParts(objs []client.Object, addon string) (cluster *clusterv1.Cluster, set *addonsv1.ClusterResourceSet, cm *corev1.ConfigMap) {
	for _, o := range objs {
		switch o := o.(type) {
		case *clusterv1.Cluster:
			cluster = o
		case *addonsv1.ClusterResourceSet:
			if strings.HasSuffix(o.Name, "-"+addon) {
				set = o
			}
		case *corev1.ConfigMap:
			if strings.HasSuffix(o.Name, "-"+addon) {
				cm = o
			}
		}
	}
	return cluster, set, cm
}

func metricsServerParts(objs []client.Object) (*clusterv1.Cluster, *addonsv1.ClusterResourceSet, *corev1.ConfigMap) {
	return addonParts(objs, "metrics-server")
}

// TestMetricsServerIsOptIn: no flavor installs metrics-server by default;
// with the option the Cluster's label selects a ClusterResourceSet whose
// objects are the pinned release manifest's, with the one added flag, and
// a real API server accepts them.
func TestMetricsServerIsOptIn(t *testing.T) {
	for _, flavor := range flavors.Names() {
		o := opts("v1.36.3", "2022")
		objs, err := flavors.Generate(flavor, o)
		if err != nil {
			t.Fatal(err)
		}
		if cluster, set, cm := metricsServerParts(objs); cluster.Labels[flavors.MetricsServerLabel] != "" || set != nil || cm != nil {
			t.Fatalf("%s: by default, label %q, ClusterResourceSet %v, ConfigMap %v", flavor, cluster.Labels[flavors.MetricsServerLabel], set != nil, cm != nil)
		}
		o.MetricsServer = true
		if objs, err = flavors.Generate(flavor, o); err != nil {
			t.Fatal(err)
		}
		cluster, set, cm := metricsServerParts(objs)
		if set == nil || cm == nil {
			t.Fatalf("%s: with the add-on, ClusterResourceSet %v, ConfigMap %v", flavor, set != nil, cm != nil)
		}
		sel, err := metav1.LabelSelectorAsSelector(&set.Spec.ClusterSelector)
		if err != nil || !sel.Matches(labels.Set(cluster.Labels)) || len(set.Spec.Resources) != 1 || set.Spec.Resources[0].Name != cm.Name {
			t.Fatalf("%s: the ClusterResourceSet %v does not select Cluster labels %v and its ConfigMap %s (%v)", flavor, set.Spec, cluster.Labels, cm.Name, err)
		}
	}

	o := opts("v1.36.3", "2022")
	o.MetricsServer = true
	objs, err := flavors.Generate(flavors.Windows, o)
	if err != nil {
		t.Fatal(err)
	}
	delivered := addonObjects(t, objs)
	var got []*unstructured.Unstructured
	for _, u := range delivered {
		if u.GetLabels()["k8s-app"] == "metrics-server" {
			got = append(got, u)
		}
	}
	pinned := pinnedMetricsServer(t)
	if len(got) != len(pinned) {
		t.Fatalf("the add-on delivers %d objects, the release manifest has %d", len(got), len(pinned))
	}
	for i, want := range pinned {
		have := got[i].DeepCopy()
		if have.GetKind() == "Deployment" {
			d := &appsv1.Deployment{}
			mustConvert(t, have, d)
			c := d.Spec.Template.Spec.Containers[0]
			wantArgs := []string{"--cert-dir=/tmp", "--secure-port=10250", "--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
				"--kubelet-use-node-status-port", "--metric-resolution=15s", "--kubelet-insecure-tls"}
			if c.Image != flavors.MetricsServerImage || !slices.Equal(c.Args, wantArgs) || d.Spec.Template.Spec.NodeSelector[corev1.LabelOSStable] != "linux" {
				t.Errorf("metrics-server runs %s %v on %v, want %s %v on Linux nodes", c.Image, c.Args, d.Spec.Template.Spec.NodeSelector, flavors.MetricsServerImage, wantArgs)
			}
			// The one change: the flag after upstream's.
			containers, _, _ := unstructured.NestedSlice(have.Object, "spec", "template", "spec", "containers")
			first := containers[0].(map[string]any)
			args := first["args"].([]any)
			first["args"] = args[:len(args)-1]
			_ = unstructured.SetNestedSlice(have.Object, containers, "spec", "template", "spec", "containers")
		}
		if !reflect.DeepEqual(have.Object, want.Object) {
			t.Errorf("%s %s differs from the release manifest's:\n got %v\nwant %v", want.GetKind(), want.GetName(), have.Object, want.Object)
		}
	}

	// The API server (with the aggregator, which serves APIServices)
	// accepts every object as it is.
	ctx := context.Background()
	for _, u := range got {
		if err := env.Client.Create(ctx, u.DeepCopy(), client.DryRunAll); err != nil {
			t.Errorf("the API server refuses %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
}

// pinnedMetricsServer reads the release manifest the flavors embed.
func pinnedMetricsServer(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile("metrics-server-v0.8.0.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for _, doc := range strings.Split(string(data), "\n---\n") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatal(err)
		}
		out = append(out, u)
	}
	kinds := map[string]int{}
	for _, u := range out {
		kinds[u.GetKind()]++
	}
	if kinds["Deployment"] != 1 || kinds["APIService"] != 1 || kinds["Service"] != 1 || len(out) != 9 {
		t.Fatalf("the pinned manifest has %v: not metrics-server's components.yaml", kinds)
	}
	return out
}

// TestMetricsServerTemplateVariable: in a clusterctl template the add-on is
// the optional variable METRICS_SERVER, off unless set to enabled, as
// clusterctl's own template processor reads it.
func TestMetricsServerTemplateVariable(t *testing.T) {
	checkAddonVariable(t, "METRICS_SERVER", "disabled", map[string]bool{"": false, "enabled": true}, "metrics-server")
}

// checkAddonVariable checks an optional add-on's clusterctl template
// variable: it is listed with its default, and each value, substituted
// as clusterctl does, makes the Cluster's labels match the add-on's
// ClusterResourceSet (<cluster>-<addon>) or not.
func checkAddonVariable(t *testing.T, name, def string, cases map[string]bool, addon string) {
	t.Helper()
	data, vars, err := flavors.Template(testScheme(), flavors.Windows, "2022", false)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(vars, name) {
		t.Fatalf("variables %v lack %s", vars, name)
	}
	p := yamlprocessor.NewSimpleProcessor()
	defaults, err := p.GetVariableMap(data)
	if err != nil {
		t.Fatal(err)
	}
	if d := defaults[name]; d == nil || *d != def {
		t.Fatalf("%s's default is %v, want %s (an optional variable)", name, d, def)
	}
	for value, selected := range cases {
		values := map[string]string{"CLUSTER_NAME": "c1", "KUBERNETES_VERSION": "v1.36.3", "AZURE_LOCATION": "westeurope",
			"AZURE_SUBSCRIPTION_ID": "00000000-0000-0000-0000-000000000001", "AZURE_SSH_PUBLIC_KEY_B64": "c3NoLWVkMjU1MTkgQUFBQQ==",
			"AZURE_SSH_PUBLIC_KEY": "ssh-ed25519 AAAA", "CONTROL_PLANE_MACHINE_COUNT": "1", "WORKER_MACHINE_COUNT": "1", "WINDOWS_WORKER_MACHINE_COUNT": "2",
			"AZURE_CONTROL_PLANE_MACHINE_TYPE": "Standard_D2s_v3", "AZURE_NODE_MACHINE_TYPE": "Standard_D4s_v3", "CLOUD_PROVIDER_AZURE_VERSION": "v1.36.0"}
		if value != "" {
			values[name] = value
		}
		out, err := p.Process(data, func(k string) (string, error) {
			if v, ok := values[k]; ok {
				return v, nil
			}
			return "", os.ErrNotExist
		})
		if err != nil {
			t.Fatalf("%s=%q: %v", name, value, err)
		}
		objs := decodeStrict(t, out)
		cos := make([]client.Object, 0, len(objs))
		for _, o := range objs {
			if co, ok := o.(client.Object); ok {
				cos = append(cos, co)
			}
		}
		cluster, set, _ := addonParts(cos, addon)
		if cluster == nil || set == nil {
			t.Fatalf("%s=%q: Cluster %v, %s ClusterResourceSet %v", name, value, cluster != nil, addon, set != nil)
		}
		sel, _ := metav1.LabelSelectorAsSelector(&set.Spec.ClusterSelector)
		if sel.Matches(labels.Set(cluster.Labels)) != selected {
			t.Errorf("%s=%q: Cluster labels %v, the add-on selected %v, want %v", name, value, cluster.Labels, !selected, selected)
		}
	}
}
