package flavors_test

import (
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client/yamlprocessor"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/flavors"
	"github.com/winkube/winkube/internal/images"
)

// versionBound are the flavors' ConfigMaps whose images follow the
// Kubernetes version.
var versionBound = []string{"kube-proxy-windows", "cloud-provider-azure"}

func configMaps(objs []client.Object) map[string]string {
	out := map[string]string{}
	for _, o := range objs {
		if cm, ok := o.(*corev1.ConfigMap); ok {
			for k, v := range cm.Data {
				out[cm.Name+"/"+k] = v
			}
		}
	}
	return out
}

// TestFollowVersionRendersTheTargetsAddons: the add-ons of a cluster made
// at v1.35.4, moved to v1.36.3, are what the flavor renders for v1.36.3
// (kube-proxy for Windows by tag, the cloud provider from the chart's
// table, and the oss/v2 repository from 1.32), and nothing else moves.
func TestFollowVersionRendersTheTargetsAddons(t *testing.T) {
	from, err := flavors.Generate(flavors.Windows, opts("v1.35.4", infrav1.WindowsServer2022))
	if err != nil {
		t.Fatal(err)
	}
	to, err := flavors.Generate(flavors.Windows, opts("v1.36.3", infrav1.WindowsServer2022))
	if err != nil {
		t.Fatal(err)
	}
	old, want := configMaps(from), configMaps(to)
	target, _ := images.ParseVersion("v1.36.3")
	moved := 0
	for key, doc := range old {
		got, changes, err := flavors.FollowVersion(doc, target)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if got != want[key] {
			t.Errorf("%s after following v1.36.3 differs from the flavor's v1.36.3 rendering:\n%s\nwant\n%s", key, got, want[key])
		}
		bound := false
		for _, b := range versionBound {
			bound = bound || strings.HasPrefix(key, "golden-"+b+"/")
		}
		if bound != (len(changes) > 0) {
			t.Errorf("%s: changes %v; version-bound: %v", key, changes, bound)
		}
		moved += len(changes)
	}
	// kube-proxy-windows, the cloud controller manager, the node
	// manager's Linux and Windows DaemonSets.
	if moved != 4 {
		t.Errorf("%d images moved, want 4", moved)
	}
	if strings.Contains(want["golden-kube-proxy-windows/kube-proxy-windows.yaml"], "v1.35.4") {
		t.Fatal("the v1.36.3 rendering still names v1.35.4: the comparison proves nothing")
	}
}

// TestFollowVersionOnAClusterctlTemplate: a cluster installed from the
// clusterctl template (its versions substituted by clusterctl, the cloud
// provider's release chosen by the user) follows as one the flavors made.
func TestFollowVersionOnAClusterctlTemplate(t *testing.T) {
	data, _, err := flavors.Template(testScheme(), flavors.Windows, "2022", false)
	if err != nil {
		t.Fatal(err)
	}
	process := func(k8s, cpa string) map[string]string {
		values := map[string]string{"CLUSTER_NAME": "c1", "KUBERNETES_VERSION": k8s, "AZURE_LOCATION": "westeurope",
			"AZURE_SUBSCRIPTION_ID": "00000000-0000-0000-0000-000000000001", "AZURE_SSH_PUBLIC_KEY_B64": "c3NoLWVkMjU1MTkgQUFBQQ==",
			"AZURE_SSH_PUBLIC_KEY": "ssh-ed25519 AAAA", "CONTROL_PLANE_MACHINE_COUNT": "1", "WORKER_MACHINE_COUNT": "1", "WINDOWS_WORKER_MACHINE_COUNT": "2",
			"AZURE_CONTROL_PLANE_MACHINE_TYPE": "Standard_D2s_v3", "AZURE_NODE_MACHINE_TYPE": "Standard_D4s_v3", "CLOUD_PROVIDER_AZURE_VERSION": cpa}
		out, err := yamlprocessor.NewSimpleProcessor().Process(data, func(k string) (string, error) {
			if v, ok := values[k]; ok {
				return v, nil
			}
			return "", os.ErrNotExist
		})
		if err != nil {
			t.Fatal(err)
		}
		objs := decodeStrict(t, out)
		cos := make([]client.Object, 0, len(objs))
		for _, o := range objs {
			if co, ok := o.(client.Object); ok {
				cos = append(cos, co)
			}
		}
		return configMaps(cos)
	}
	old, want := process("v1.35.4", "v1.35.4"), process("v1.36.3", "v1.36.0")
	target, _ := images.ParseVersion("v1.36.3")
	for _, b := range versionBound {
		key := "c1-" + b + "/" + b + ".yaml"
		if old[key] == "" {
			t.Fatalf("the template has no ConfigMap %s", key)
		}
		got, changes, err := flavors.FollowVersion(old[key], target)
		if err != nil || len(changes) == 0 {
			t.Fatalf("%s: changes %v, error %v", key, changes, err)
		}
		if got != want[key] {
			t.Errorf("%s after following v1.36.3:\n%s\nwant\n%s", key, got, want[key])
		}
	}
}

// TestFollowVersionRefusesAMinorWithoutACloudProviderRelease: the cloud
// provider is left as it was, and the error names it.
func TestFollowVersionRefusesAMinorWithoutACloudProviderRelease(t *testing.T) {
	doc := "image: mcr.microsoft.com/oss/v2/kubernetes/azure-cloud-node-manager:v1.36.0\n"
	v, _ := images.ParseVersion("v1.37.0")
	got, _, err := flavors.FollowVersion(doc, v)
	if err == nil || !strings.Contains(err.Error(), "no release for Kubernetes 1.37") {
		t.Fatalf("error %v, want one naming the missing release", err)
	}
	if got != doc {
		t.Errorf("the manifest changed to %q", got)
	}
}

// TestFollowVersionKeepsAMirror: a mirrored cloud provider keeps its
// mirror; only the release moves.
func TestFollowVersionKeepsAMirror(t *testing.T) {
	doc := "image: registry.example.com:5000/mirror/azure-cloud-controller-manager:v1.35.4\n" +
		"image: registry.example.com:5000/mirror/sigwindowstools/kube-proxy:v1.35.4-calico-hostprocess\n"
	v, _ := images.ParseVersion("v1.36.3")
	got, _, err := flavors.FollowVersion(doc, v)
	if err != nil {
		t.Fatal(err)
	}
	want := "image: registry.example.com:5000/mirror/azure-cloud-controller-manager:v1.36.0\n" +
		"image: registry.example.com:5000/mirror/sigwindowstools/kube-proxy:v1.36.3-calico-hostprocess\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// TestFollowVersionPassesOverOtherManifests: a manifest that names no
// version-bound image (Calico's, the largest) comes back as it was, and
// without the regexps' pass over it: following allocates nothing for it
// (the add-on version controller runs this on every Cluster event).
func TestFollowVersionPassesOverOtherManifests(t *testing.T) {
	objs, err := flavors.Generate(flavors.Windows, opts("v1.36.3", infrav1.WindowsServer2022))
	if err != nil {
		t.Fatal(err)
	}
	target, _ := images.ParseVersion("v1.36.3")
	others := 0
	for key, doc := range configMaps(objs) {
		bound := false
		for _, b := range versionBound {
			bound = bound || strings.HasPrefix(key, "golden-"+b+"/")
		}
		if bound {
			continue
		}
		others++
		got, changes, err := flavors.FollowVersion(doc, target)
		if err != nil || got != doc || len(changes) != 0 {
			t.Fatalf("%s: changes %v, error %v, manifest changed %v; want it as it was", key, changes, err, got != doc)
		}
		if n := testing.AllocsPerRun(3, func() { _, _, _ = flavors.FollowVersion(doc, target) }); n != 0 {
			t.Errorf("%s (%d bytes, no version-bound image): following it allocated %.0f times, want none", key, len(doc), n)
		}
	}
	if others == 0 {
		t.Fatal("the flavor has no add-on without a version-bound image: the test proves nothing")
	}
}
