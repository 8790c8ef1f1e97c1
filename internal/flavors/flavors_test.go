package flavors_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/flavors"
	"github.com/winkube/winkube/internal/naming"
	"github.com/winkube/winkube/internal/scheme"
	"github.com/winkube/winkube/internal/webhooks"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func opts(version string, win infrav1.WindowsServerVersion) flavors.Options {
	return flavors.Options{
		ClusterName: "golden", KubernetesVersion: version, WindowsVersion: win, LinuxNodes: 1, WindowsNodes: 2,
		Location: "westeurope", SubscriptionID: "00000000-0000-0000-0000-000000000001", SSHPublicKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIF7hPg8vVfGE87DWrGlLvodFpxwSRCzS9ZjrbOXzcoh test",
		FlannelWindowsImage: userFlannelImage, KubeProxyWindowsImage: userKubeProxyImage,
	}
}

// The flannel flavors' Windows images, which the user builds.
const (
	userFlannelImage   = "registry.example.com/platform/flannel-windows:v0.25.6-hostprocess"
	userKubeProxyImage = "registry.example.com/platform/kube-proxy-windows:v1.36.3-flannel-hostprocess"
)

// testScheme is the Cluster API, winkube and Kubernetes schemes, built
// once: building it registers every kind of four API groups' worth of
// packages, and decodeStrict, called for each distinct document, built it
// every time (a tenth of this package's test CPU). Nothing registers
// kinds after it is built, and a Scheme is safe for concurrent reads.
var testScheme = sync.OnceValue(scheme.New)

// decodeStrict decodes a YAML stream strictly (unknown fields are errors)
// with the Cluster API, winkube and Kubernetes schemes.
func decodeStrict(t *testing.T, data []byte) []runtime.Object {
	t.Helper()
	s := testScheme()
	ser := kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, s, s, kjson.SerializerOptions{Yaml: true, Strict: true})
	var out []runtime.Object
	for _, doc := range bytes.Split(data, []byte("\n---\n")) {
		obj, _, err := ser.Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("strict decoding failed: %v\n%s", err, doc)
		}
		out = append(out, obj)
	}
	return out
}

// admit runs winkube's defaulting and validation on the objects it owns.
func admit(obj runtime.Object) error {
	ctx := context.Background()
	switch o := obj.(type) {
	case *infrav1.AzureCluster:
		w := &webhooks.AzureCluster{}
		if err := w.Default(ctx, o); err != nil {
			return err
		}
		_, err := w.ValidateCreate(ctx, o)
		return err
	case *infrav1.AzureMachineTemplate:
		w := webhooks.AzureMachineTemplate{}
		if err := w.Default(ctx, o); err != nil {
			return err
		}
		_, err := w.ValidateCreate(ctx, o)
		return err
	case *infrav1.AzureMachinePool:
		w := &webhooks.AzureMachinePool{}
		if err := w.Default(ctx, o); err != nil {
			return err
		}
		_, err := w.ValidateCreate(ctx, o)
		return err
	}
	return nil
}

// TestEveryFlavorVersionAndWindowsRelease: each flavor, for Kubernetes 1.22 to
// 1.36 and Windows 2019/2022/2025, either generates objects that decode
// strictly and pass winkube's webhooks, or is refused with a reason.
func TestEveryFlavorVersionAndWindowsRelease(t *testing.T) {
	// It reaches no API server and changes no package state (Generate
	// copies the parsed manifests): it runs beside the waiting
	// TestComponentsListWithTheirOwnRights.
	t.Parallel()
	generated, refused := 0, 0
	// A document met in an earlier combination (Calico's CRDs, an add-on
	// that does not change with the version) decodes and is admitted as it
	// was then: each distinct document is checked once, which is most of
	// this test's time saved on a 2-core machine. An object is rendered
	// only if no earlier combination had one of its type with the same
	// JSON: its document would be the same (flavors.YAML renders each
	// object alone, from its JSON), and rendering the ConfigMaps of
	// Calico's CRDs again for every combination was most of what was left.
	s, checked, rendered := testScheme(), map[string]bool{}, map[string]bool{}
	for _, flavor := range flavors.Names() {
		for minor := 22; minor <= 36; minor++ {
			for _, win := range []infrav1.WindowsServerVersion{"2019", "2022", "2025"} {
				version := fmt.Sprintf("v1.%d.1", minor)
				objs, err := flavors.Generate(flavor, opts(version, win))
				if err != nil {
					if !strings.Contains(err.Error(), "use") || !strings.Contains(err.Error(), "v1.") {
						t.Errorf("%s %s %s refused without saying what to use: %v", flavor, version, win, err)
					}
					refused++
					continue
				}
				var fresh []client.Object
				for _, o := range objs {
					j, err := json.Marshal(o)
					if err != nil {
						t.Fatal(err)
					}
					if key := fmt.Sprintf("%T", o) + string(j); !rendered[key] {
						rendered[key] = true
						fresh = append(fresh, o)
					}
				}
				if len(fresh) > 0 {
					data, err := flavors.YAML(s, fresh)
					if err != nil {
						t.Fatal(err)
					}
					for _, doc := range bytes.Split(data, []byte("\n---\n")) {
						if checked[string(doc)] {
							continue
						}
						checked[string(doc)] = true
						for _, obj := range decodeStrict(t, doc) {
							if err := admit(obj); err != nil {
								t.Errorf("%s %s %s: %T refused by winkube's webhooks: %v", flavor, version, win, obj, err)
							}
						}
					}
				}
				generated++
			}
		}
	}
	t.Logf("%d combinations generated (%d distinct documents), %d refused", generated, len(checked), refused)
	for _, tc := range []struct {
		flavor, version string
		win             infrav1.WindowsServerVersion
		refused         bool
	}{
		// Docker cannot run the HostProcess add-ons, on any version.
		{flavors.WindowsDockershim, "v1.24.0", "2019", true},
		{flavors.WindowsDockershim, "v1.23.5", "2019", true},
		{flavors.WindowsFlannel, "v1.31.4", "2025", true},
		{flavors.WindowsFlannel, "v1.32.0", "2025", false},
		{flavors.WindowsFlannel, "v1.22.1", "2022", true},
		{flavors.WindowsFlannel, "v1.22.1", "2019", false},
		// Calico's kube-proxy for Windows is published from 1.33.
		{flavors.Windows, "v1.32.9", "2022", true},
		{flavors.MachinePoolWindows, "v1.32.9", "2022", true},
		{flavors.Windows, "v1.33.0", "2022", false},
		{flavors.Default, "v1.22.1", "2025", false}, // no Windows nodes, no Windows images needed
	} {
		_, err := flavors.Generate(tc.flavor, opts(tc.version, tc.win))
		if (err != nil) != tc.refused {
			t.Errorf("%s %s Windows %s: error %v, want refused=%v", tc.flavor, tc.version, tc.win, err, tc.refused)
		}
	}
}

// windows-dockershim would put HostProcess add-ons on Docker nodes, which
// Docker cannot run, and a CRI socket that makes kubeadm start the kubelet
// without dockershim: it is refused on every version, as a generated cluster
// and as a clusterctl template, with why and what to use instead.
func TestDockershimFlavorIsRefusedWithWhyAndWhatInstead(t *testing.T) {
	want := []string{"Docker does not support HostProcess containers", "removed in Kubernetes v1.24", "kubernetes/kubernetes#97252",
		"cannot be shown to be published", "--flavor windows (containerd)", "change-runtime-containerd"}
	for _, version := range []string{"v1.23.5", "v1.23.17", "v1.36.3"} {
		_, err := flavors.Generate(flavors.WindowsDockershim, opts(version, "2019"))
		if err == nil {
			t.Fatalf("windows-dockershim %s generated", version)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("windows-dockershim %s: error %q does not say %q", version, err, w)
			}
		}
	}
	if _, _, err := flavors.Template(testScheme(), flavors.WindowsDockershim, "2019", false); err == nil || !strings.Contains(err.Error(), "HostProcess") {
		t.Errorf("windows-dockershim clusterctl template: %v", err)
	}
	if slices.Contains(flavors.Names(), flavors.WindowsDockershim) {
		t.Errorf("flavors.Names() offers windows-dockershim: %v", flavors.Names())
	}
}

func TestMissingValuesAreListed(t *testing.T) {
	_, err := flavors.Generate(flavors.Windows, flavors.Options{KubernetesVersion: "v1.36.3"})
	if err == nil {
		t.Fatal("generated without a name, location, subscription or key")
	}
	for _, want := range []string{"NAME", "--location", "--subscription-id", "--ssh-public-key"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not list %s", err, want)
		}
	}
	if _, err := flavors.Generate("windows-overlay", opts("v1.36.3", "2022")); err == nil || !strings.Contains(err.Error(), "windows-flannel") {
		t.Errorf("an unknown flavor's error does not list the flavors: %v", err)
	}
}

// A name Azure's DNS labels cannot start with is refused before anything
// is applied, not when the API server's public IP is made.
func TestAClusterNameMustStartWithALetter(t *testing.T) {
	o := opts("v1.36.3", "2022")
	o.ClusterName = "12345"
	if _, err := flavors.Generate(flavors.Windows, o); err == nil || !strings.Contains(err.Error(), "DNS label") {
		t.Errorf("a cluster named 12345: %v", err)
	}
}

func TestGoldenFiles(t *testing.T) {
	for _, flavor := range []string{flavors.Windows, flavors.WindowsFlannel} {
		objs, err := flavors.Generate(flavor, opts("v1.36.3", "2022"))
		if err != nil {
			t.Fatal(err)
		}
		got, err := flavors.YAML(testScheme(), objs)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("testdata", "golden", flavor+".yaml")
		if *update {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test ./internal/flavors -run Golden -update)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("flavor %s differs from %s; if the change is intended run go test ./internal/flavors -run Golden -update", flavor, path)
		}
	}
}

// objectsOf decodes a flavor and the add-on objects inside its ConfigMaps.
func objectsOf(t *testing.T, flavor string, o flavors.Options) (top []runtime.Object, addons []runtime.Object, addonData map[string]string) {
	t.Helper()
	objs, err := flavors.Generate(flavor, o)
	if err != nil {
		t.Fatal(err)
	}
	data, err := flavors.YAML(testScheme(), objs)
	if err != nil {
		t.Fatal(err)
	}
	top = decodeStrict(t, data)
	addonData = map[string]string{}
	for _, obj := range top {
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok {
			continue
		}
		for k, v := range cm.Data {
			addonData[k] = v
			for _, doc := range yamlDocs(v) {
				if strings.Contains(doc, "apiVersion: crd.projectcalico.org/v1") {
					continue // Calico's kinds, not in our schemes
				}
				addons = append(addons, decodeStrict(t, []byte(doc))...)
			}
		}
	}
	return top, addons, addonData
}

// TestSeedNumbers pins the numbers the seeds give where they must appear.
func TestSeedNumbers(t *testing.T) {
	// Flannel: VNI 4096 on UDP 4789, Linux eth0 at 1400 so the overlay gets 1350.
	top, addons, _ := objectsOf(t, flavors.WindowsFlannel, opts("v1.36.3", "2022"))
	var sawNetConf, sawMTU bool
	for _, obj := range addons {
		if cm, ok := obj.(*corev1.ConfigMap); ok && cm.Name == "kube-flannel-cfg" {
			var conf struct {
				Network string
				Backend struct {
					Type string
					VNI  int
					Port int
				}
			}
			if err := jsonUnmarshal(cm.Data["net-conf.json"], &conf); err != nil {
				t.Fatal(err)
			}
			sawNetConf = conf.Backend.Type == "vxlan" && conf.Backend.VNI == 4096 && conf.Backend.Port == 4789 && conf.Network == "10.244.0.0/16"
		}
	}
	for _, obj := range top {
		if kct, ok := obj.(*bootstrapv1.KubeadmConfigTemplate); ok && kct.Name == "golden-md-0" {
			for _, c := range kct.Spec.Template.Spec.PreKubeadmCommands {
				sawMTU = sawMTU || c == "ip link set dev eth0 mtu 1400"
			}
		}
	}
	if !sawNetConf || !sawMTU {
		t.Fatalf("flannel net-conf with VNI 4096/port 4789: %v; Linux eth0 MTU 1400: %v", sawNetConf, sawMTU)
	}

	// Calico for Windows: VXLAN VNI 4096, MTU 1350, the service range
	// excepted from OutBoundNAT and routed through the overlay, as the
	// tigera operator renders cni-config-windows.
	top, addons, data := objectsOf(t, flavors.Windows, opts("v1.36.3", "2022"))
	var calico, static *corev1.ConfigMap
	for _, obj := range addons {
		if cm, ok := obj.(*corev1.ConfigMap); ok && cm.Name == "cni-config-windows" {
			calico = cm
		}
		if cm, ok := obj.(*corev1.ConfigMap); ok && cm.Name == "calico-static-rules" {
			static = cm
		}
	}
	if calico == nil {
		t.Fatal("no cni-config-windows")
	}
	for _, want := range []string{`"vxlan_vni": 4096`, `"mtu": 1350`, `"OutBoundNAT"`, `"SDNROUTE"`, `"10.96.0.0/12"`, `"mode": "vxlan"`} {
		if !strings.Contains(calico.Data["config"], want) {
			t.Errorf("cni-config-windows lacks %s:\n%s", want, calico.Data["config"])
		}
	}
	if !strings.Contains(data["calico-resources.yaml"], "strictAffinity: true") {
		t.Fatal("Calico's IPAM is not strictAffinity")
	}
	// As CAPZ does, Windows pods cannot reach Azure's wireserver on port
	// 80 (an HNS ACL), and Linux nodes drop forwarded traffic to it; no
	// Calico policy with Pass stands before the cluster's NetworkPolicies.
	if static == nil || !strings.Contains(static.Data["static-rules.json"], `"RemoteAddresses": "168.63.129.16/32"`) || !strings.Contains(static.Data["static-rules.json"], `"Action": "Block"`) {
		t.Fatalf("no HNS ACL keeping Windows pods from the wireserver: %+v", static)
	}
	if strings.Contains(data["calico-resources.yaml"], "GlobalNetworkPolicy") {
		t.Fatal("a Calico GlobalNetworkPolicy for the wireserver: Windows Felix does not support its Pass action")
	}
	var sawIPTables bool
	for _, obj := range top {
		if kct, ok := obj.(*bootstrapv1.KubeadmConfigTemplate); ok {
			for _, c := range kct.Spec.Template.Spec.PreKubeadmCommands {
				sawIPTables = sawIPTables || c == "iptables -I FORWARD -d 168.63.129.16 -p tcp --dport 80 -j DROP"
			}
		}
	}
	if !sawIPTables {
		t.Fatal("Linux workers do not drop pods' traffic to the wireserver")
	}

	// Every DaemonSet is pinned to its OS; Windows ones are HostProcess.
	var sawKubeProxy bool
	for _, obj := range addons {
		ds, ok := obj.(*appsv1.DaemonSet)
		if !ok {
			continue
		}
		os := ds.Spec.Template.Spec.NodeSelector[corev1.LabelOSStable]
		if os != "linux" && os != "windows" {
			t.Errorf("DaemonSet %s has no kubernetes.io/os nodeSelector", ds.Name)
		}
		if os == "windows" {
			p := ds.Spec.Template.Spec
			tolerates := false
			for _, tt := range p.Tolerations {
				tolerates = tolerates || (tt.Key == "" && tt.Operator == corev1.TolerationOpExists && (tt.Effect == "" || tt.Effect == corev1.TaintEffectNoSchedule))
			}
			// HostProcess for the pod, or for each container (the
			// tigera operator's form).
			hostProcess := true
			for _, c := range append(append([]corev1.Container(nil), p.InitContainers...), p.Containers...) {
				wo := (*corev1.WindowsSecurityContextOptions)(nil)
				if p.SecurityContext != nil {
					wo = p.SecurityContext.WindowsOptions
				}
				if c.SecurityContext != nil && c.SecurityContext.WindowsOptions != nil {
					wo = c.SecurityContext.WindowsOptions
				}
				hostProcess = hostProcess && wo != nil && wo.HostProcess != nil && *wo.HostProcess && wo.RunAsUserName != nil && *wo.RunAsUserName == `NT AUTHORITY\system`
			}
			if !p.HostNetwork || !hostProcess || p.PriorityClassName != "system-node-critical" || !tolerates {
				t.Errorf("Windows DaemonSet %s is not a node-critical HostProcess DaemonSet tolerating all taints", ds.Name)
			}
		}
		if ds.Name == "kube-proxy-windows" {
			sawKubeProxy = ds.Spec.Template.Spec.Containers[0].Image == "docker.io/sigwindowstools/kube-proxy:v1.36.3-calico-hostprocess"
		}
	}
	if !sawKubeProxy {
		t.Fatal("no kube-proxy-windows DaemonSet with the v1.36.3 HostProcess image")
	}

	// The Windows kubelet as the seeds set it.
	for _, obj := range top {
		kct, ok := obj.(*bootstrapv1.KubeadmConfigTemplate)
		if !ok || kct.Name != "golden-md-win" {
			continue
		}
		nr := kct.Spec.Template.Spec.JoinConfiguration.NodeRegistration
		args := map[string]string{}
		for _, a := range nr.KubeletExtraArgs {
			args[a.Name] = *a.Value
		}
		if nr.CRISocket != "npipe:////./pipe/containerd-containerd" || nr.Name != `{{ ds.meta_data["local_hostname"] }}` ||
			args["cloud-provider"] != "external" || args["windows-priorityclass"] != "ABOVE_NORMAL_PRIORITY_CLASS" ||
			args["register-with-taints"] != "node.cloudprovider.kubernetes.io/uninitialized=true:NoSchedule" || args["feature-gates"] != "" {
			t.Fatalf("Windows node registration %+v args %v", nr, args)
		}
		if u := kct.Spec.Template.Spec.Users; len(u) != 1 || u[0].Name != "capi" || u[0].Groups != "Administrators" || len(u[0].SSHAuthorizedKeys) != 1 {
			t.Fatalf("Windows users %+v", u)
		}
	}

	// 1.22 to 1.25 need the HostProcess feature gate on kubelet and API server.
	top, _, _ = objectsOf(t, flavors.WindowsFlannel, opts("v1.25.3", "2019"))
	var gates int
	for _, obj := range top {
		switch o := obj.(type) {
		case *bootstrapv1.KubeadmConfigTemplate:
			for _, a := range o.Spec.Template.Spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs {
				if a.Name == "feature-gates" && *a.Value == "WindowsHostProcessContainers=true" {
					gates++
				}
			}
		case *controlplanev1.KubeadmControlPlane:
			for _, a := range o.Spec.KubeadmConfigSpec.ClusterConfiguration.APIServer.ExtraArgs {
				if a.Name == "feature-gates" && *a.Value == "WindowsHostProcessContainers=true" {
					gates++
				}
			}
		}
	}
	if gates != 2 {
		t.Fatalf("v1.25: %d WindowsHostProcessContainers gates, want kubelet and API server", gates)
	}

	// The Windows scale set's computer names fit in 15 characters.
	top, _, _ = objectsOf(t, flavors.MachinePoolWindows, opts("v1.36.3", "2022"))
	for _, obj := range top {
		if amp, ok := obj.(*infrav1.AzureMachinePool); ok {
			if p := naming.WindowsScaleSetPrefix(amp.Name); len(p)+6 > 15 {
				t.Fatalf("pool %s gets prefix %s: instance names over 15 characters", amp.Name, p)
			}
		}
	}
}

func TestImageTagsFromBuildVersions(t *testing.T) {
	_, addons, _ := objectsOf(t, flavors.Windows, opts("v1.36.3+winkube.1", "2022"))
	for _, obj := range addons {
		if ds, ok := obj.(*appsv1.DaemonSet); ok && ds.Name == "kube-proxy-windows" {
			if img := ds.Spec.Template.Spec.Containers[0].Image; img != "docker.io/sigwindowstools/kube-proxy:v1.36.3_winkube.1-calico-hostprocess" {
				t.Fatalf("image %s: '+' must become '_' in a tag", img)
			}
			return
		}
	}
	t.Fatal("no kube-proxy-windows")
}

func TestClusterctlTemplate(t *testing.T) {
	data, vars, err := flavors.Template(testScheme(), flavors.Windows, "2022", false)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	for _, v := range []string{"CLUSTER_NAME", "KUBERNETES_VERSION", "AZURE_LOCATION", "AZURE_SUBSCRIPTION_ID", "AZURE_SSH_PUBLIC_KEY", "AZURE_SSH_PUBLIC_KEY_B64",
		"CONTROL_PLANE_MACHINE_COUNT", "WORKER_MACHINE_COUNT", "WINDOWS_WORKER_MACHINE_COUNT", "AZURE_CONTROL_PLANE_MACHINE_TYPE", "AZURE_NODE_MACHINE_TYPE",
		"CALICO_TYPHA_REPLICAS"} {
		if !strings.Contains(strings.Join(vars, ","), v) || !strings.Contains(text, "${"+v) {
			t.Errorf("template lacks ${%s}", v)
		}
	}
	// The cloud provider's repository depends on the minor (oss/v2 from
	// 1.32, as the chart has it): a variable, not a fixed oss/v2.
	for _, img := range []string{"azure-cloud-controller-manager", "azure-cloud-node-manager"} {
		if want := "${CLOUD_PROVIDER_AZURE_REPOSITORY:=mcr.microsoft.com/oss/v2/kubernetes}/" + img + ":${CLOUD_PROVIDER_AZURE_VERSION}"; !strings.Contains(text, want) {
			t.Errorf("template lacks %s", want)
		}
	}
	if strings.Contains(text, "image: mcr.microsoft.com/oss/v2/kubernetes/azure-cloud") {
		t.Error("the template pins the cloud provider's images to oss/v2 for every Kubernetes version")
	}
	// Typha's replicas: the manifest's 1 unless set, as 'winkube up' sets
	// it from the world's node count.
	if !strings.Contains(text, "replicas: ${CALICO_TYPHA_REPLICAS:=1}") {
		t.Error("the template's calico-typha Deployment does not take its replicas from ${CALICO_TYPHA_REPLICAS:=1}")
	}
	if !strings.Contains(text, "kube-proxy:${KUBERNETES_VERSION/+/_}-calico-hostprocess") {
		t.Error("the kube-proxy image tag does not turn '+' into '_'")
	}
	if strings.Contains(text, "sentinel") || strings.Contains(text, "namespace: ") && strings.Contains(text, "wknamespace") {
		t.Error("a sentinel value is left in the template")
	}
	// With the variables filled in, it decodes strictly.
	filled := strings.NewReplacer("${CLUSTER_NAME}", "c1", "${KUBERNETES_VERSION/+/_}", "v1.36.3", "${KUBERNETES_VERSION}", "v1.36.3",
		"${AZURE_LOCATION}", "westeurope", "${AZURE_SUBSCRIPTION_ID}", "00000000-0000-0000-0000-000000000001",
		"${AZURE_SSH_PUBLIC_KEY_B64}", "c3NoLWVkMjU1MTkgQUFBQQ==", "${AZURE_SSH_PUBLIC_KEY}", "ssh-ed25519 AAAA",
		"${CONTROL_PLANE_MACHINE_COUNT}", "1", "${WORKER_MACHINE_COUNT}", "1", "${WINDOWS_WORKER_MACHINE_COUNT}", "2",
		"${AZURE_CONTROL_PLANE_MACHINE_TYPE}", "Standard_D2s_v3", "${AZURE_NODE_MACHINE_TYPE}", "Standard_D4s_v3", "${CLOUD_PROVIDER_AZURE_VERSION}", "v1.36.0",
		"${CLOUD_PROVIDER_AZURE_REPOSITORY:=mcr.microsoft.com/oss/v2/kubernetes}", "mcr.microsoft.com/oss/v2/kubernetes",
		"${METRICS_SERVER:=disabled}", "disabled", "${AZUREDISK_CSI:=false}", "false", "${CALICO_TYPHA_REPLICAS:=1}", "1").Replace(text)
	if strings.Contains(filled, "${") {
		t.Fatalf("unfilled variables remain")
	}
	decodeStrict(t, []byte(filled))
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
