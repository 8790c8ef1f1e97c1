package startneeds

import (
	"context"
	"io/fs"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

// TestCatalogIsWellFormed: every component names its images and upstream
// source, and every need is one thing, with its source and the line the
// component logs when it is missing.
func TestCatalogIsWellFormed(t *testing.T) {
	names := map[string]bool{}
	for _, c := range Catalog() {
		if c.Name == "" || c.Source == "" || len(c.Images) == 0 || len(c.Needs) == 0 {
			t.Errorf("component %+v lacks a name, source, image or need", c.Name)
		}
		if names[c.Name] {
			t.Errorf("component %s listed twice", c.Name)
		}
		names[c.Name] = true
		for _, img := range c.Images {
			// A registry host, then the path (registry.k8s.io's images
			// have no namespace).
			host, _, _ := strings.Cut(img, "/")
			if strings.Contains(img[strings.LastIndex(img, "/")+1:], ":") || !strings.Contains(host, ".") || strings.Count(img, "/") < 1 {
				t.Errorf("%s: image %q is not a canonical repository without tag", c.Name, img)
			}
		}
		if len(c.Watches) > 0 && (c.WatchSource == "" || c.Sync.Retry <= 0 || c.Sync.MaxRetry < c.Sync.Retry || (c.Sync.NotFoundSynced && c.Sync.MissingRetry <= 0)) {
			t.Errorf("%s lists and watches without the source it follows or a retry: %q %+v", c.Name, c.WatchSource, c.Sync)
		}
		for _, w := range c.Watches {
			if w.Version == "" || w.Resource == "" {
				t.Errorf("%s: watch %+v names no resource", c.Name, w)
			}
		}
		for i, n := range c.Needs {
			kinds := 0
			for _, set := range []bool{n.Mount != nil, n.HostNetwork, n.HostProcess, n.Env != "", n.Arg != "", n.Permission != nil, n.CRD != "", n.ConfigMap != nil, n.CloudConfig != nil} {
				if set {
					kinds++
				}
			}
			if kinds != 1 || n.Source == "" || !strings.Contains(n.Log, "%s") {
				t.Errorf("%s need %d: %d kinds set, source %q, log %q", c.Name, i, kinds, n.Source, n.Log)
			}
		}
	}
	for _, want := range []string{"calico-node", "calico-node-windows", "calico-typha", "calico-kube-controllers", "kube-flannel", "kube-proxy (Windows)",
		"cloud-controller-manager", "cloud-node-manager", "cloud-node-manager (Windows)"} {
		if !names[want] {
			t.Errorf("no component %s", want)
		}
	}
}

// TestFindByImageOSAndContainer: a component is its image repository (any
// tag or registry spelling), on its OS, in its upstream container.
func TestFindByImageOSAndContainer(t *testing.T) {
	c := &Checker{Components: Catalog()}
	cases := []struct {
		os, name, image, want string
	}{
		{"linux", "calico-node", "calico/node:v3.30.7", "calico-node"},
		{"linux", "kube-proxy", "registry.k8s.io/kube-proxy:v1.36.3", "kube-proxy"},
		{"linux", "calico-node", "docker.io/calico/node@sha256:0123456789012345678901234567890123456789012345678901234567890123", "calico-node"},
		{"linux", "kube-flannel", "docker.io/flannel/flannel:v0.25.6", "kube-flannel"},
		{"linux", "install-cni", "docker.io/flannel/flannel:v0.25.6", "flannel install-cni"},
		{"linux", "cloud-node-manager", "mcr.microsoft.com/oss/v2/kubernetes/azure-cloud-node-manager:v1.36.0", "cloud-node-manager"},
		{"windows", "cloud-node-manager", "mcr.microsoft.com/oss/v2/kubernetes/azure-cloud-node-manager:v1.36.0", "cloud-node-manager (Windows)"},
		{"windows", "calico-node", "calico/node:v3.30.7", ""},
		{"linux", "nginx", "nginx:1.27", ""},
	}
	for _, tc := range cases {
		got := ""
		if comp := c.Find(tc.os, corev1.Container{Name: tc.name, Image: tc.image}); comp != nil {
			got = comp.Name
		}
		if got != tc.want {
			t.Errorf("%s %s on %s: %q, want %q", tc.name, tc.image, tc.os, got, tc.want)
		}
	}
	if !c.HasEffect("linux", "mcr.microsoft.com/oss/kubernetes/azure-cloud-controller-manager:v1.31.12", EffectCloudController) {
		t.Error("the cloud-controller-manager image does not run the cloud's controllers")
	}
}

// TestCloudConfigFields: azure.json needs every field, and credentials of
// one kind or another; without, it fails as cloud-provider-azure does.
func TestCloudConfigFields(t *testing.T) {
	c := &Checker{}
	full := `{"cloud":"AzurePublicCloud","tenantId":"t","subscriptionId":"s","resourceGroup":"rg","location":"westeurope","vmType":"vmss",
"vnetName":"v","vnetResourceGroup":"rg","subnetName":"n","securityGroupName":"nsg","securityGroupResourceGroup":"rg","routeTableName":"rt","loadBalancerSku":"Standard"`
	cc := CloudConfig{PathArg: "--cloud-config", Default: "/etc/kubernetes/azure.json", Fields: azureJSONFields, Credentials: true}
	ct := corev1.Container{Args: []string{"--cloud-config=/etc/kubernetes/azure.json"}}
	for body, want := range map[string]string{
		full + `,"useManagedIdentityExtension":true}`:                                                        "",
		full + `,"aadClientId":"id","aadClientSecret":"secret"}`:                                             "",
		full + `,"aadClientId":"id"}`:                                                                        "nil pointer dereference",
		full + `,"aadClientId":"id","cloudConfigType":"file","useInstanceMetadata":false}`:                   "useInstanceMetadata must be enabled without Azure credentials",
		strings.Replace(full, `"tenantId":"t"`, `"tenantId":""`, 1) + `,"useManagedIdentityExtension":true}`: "tenantId",
		`not json`: "failed to parse",
	} {
		node := Node{ReadFile: func(string) ([]byte, error) { return []byte(body), nil }}
		missing, detail, err := c.checkCloudConfig(node, ct, cc)
		if err != nil {
			t.Fatal(err)
		}
		if (want == "") != (missing == "") || !strings.Contains(detail, want) {
			t.Errorf("%.40s...: missing %q (%s), want %q", body, missing, detail, want)
		}
	}
}

// TestAzureDiskRoleByFlags: the Azure Disk CSI driver's one image is its
// controller without --nodeid, a node plugin with it, and the Windows
// HostProcess node plugin with --enable-windows-host-process=true.
func TestAzureDiskRoleByFlags(t *testing.T) {
	c := &Checker{Components: Catalog()}
	const image = "mcr.microsoft.com/oss/v2/kubernetes-csi/azuredisk-csi:v1.34.5"
	cases := []struct {
		os, image string
		args      []string
		want      string
	}{
		{"linux", image, []string{"--endpoint=$(CSI_ENDPOINT)", "--allow-empty-cloud-config=false"}, "azuredisk-csi controller"},
		{"linux", image, []string{"--nodeid=$(KUBE_NODE_NAME)"}, "azuredisk-csi node"},
		{"windows", image + "-windows-hp", []string{"--nodeid=$(KUBE_NODE_NAME)", "--enable-windows-host-process=true"}, "azuredisk-csi node (Windows)"},
		// The csi-proxy form: the driver reaches the host through
		// csi-proxy, not as a host process.
		{"windows", image, []string{"--nodeid=$(KUBE_NODE_NAME)"}, ""},
		{"windows", image + "-windows-hp", []string{"--nodeid=x", "--enable-windows-host-process=false"}, ""},
	}
	for _, tc := range cases {
		got := ""
		if comp := c.Find(tc.os, corev1.Container{Name: "azuredisk", Image: tc.image, Args: tc.args}); comp != nil {
			got = comp.Name
		}
		if got != tc.want {
			t.Errorf("%s %v on %s: %q, want %q", tc.image, tc.args, tc.os, got, tc.want)
		}
	}
}

// TestAzureDiskCloudConfigSources: the controller's cloud config comes
// from the Secret the flags name, else from the file its
// AZURE_CREDENTIAL_FILE or the default names, which it sees only through
// its hostPath volume; with neither it exits, and only when it was told
// not to run without one.
func TestAzureDiskCloudConfigSources(t *testing.T) {
	var need Need
	for _, comp := range Catalog() {
		if comp.Name == "azuredisk-csi controller" {
			need = comp.Needs[0]
		}
	}
	if need.CloudConfig == nil || need.IfArg != "--allow-empty-cloud-config=false" {
		t.Fatalf("the controller's first need is %+v, want its cloud config", need)
	}
	ctx := context.Background()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "c"}, Spec: corev1.PodSpec{
		Volumes: []corev1.Volume{{Name: "azure-cred", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/etc/kubernetes/"}}}},
	}}
	mounted := corev1.Container{Name: "azuredisk", Image: "mcr.microsoft.com/oss/v2/kubernetes-csi/azuredisk-csi:v1.34.5",
		Args:         []string{"--cloud-config-secret-name=azure-cloud-provider", "--cloud-config-secret-namespace=kube-system", "--allow-empty-cloud-config=false"},
		VolumeMounts: []corev1.VolumeMount{{Name: "azure-cred", MountPath: "/etc/kubernetes/"}}}
	unmounted := *mounted.DeepCopy()
	unmounted.VolumeMounts = nil
	withEnv := *mounted.DeepCopy()
	withEnv.Env = []corev1.EnvVar{{Name: "AZURE_CREDENTIAL_FILE", Value: "/etc/kubernetes/other.json"}}
	files := map[string]string{}
	node := Node{OS: "linux", ReadFile: func(p string) ([]byte, error) {
		if d, ok := files[p]; ok {
			return []byte(d), nil
		}
		return nil, fs.ErrNotExist
	}}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "azure-cloud-provider"}, Data: map[string][]byte{"cloud-config": []byte(`{"cloud":"AzurePublicCloud"}`)}}
	for _, tc := range []struct {
		name      string
		container corev1.Container
		files     map[string]string
		secret    bool
		missing   string
	}{
		{"the node's file", mounted, map[string]string{"/etc/kubernetes/azure.json": "{}"}, false, ""},
		{"neither", mounted, nil, false, "cloud config /etc/kubernetes/azure.json"},
		{"the file, not mounted", unmounted, map[string]string{"/etc/kubernetes/azure.json": "{}"}, false, "hostPath /etc/kubernetes"},
		{"the Secret, no volume", unmounted, nil, true, ""},
		{"a file that is no JSON", mounted, map[string]string{"/etc/kubernetes/azure.json": "{"}, false, "cloud config /etc/kubernetes/azure.json"},
		{"the file the environment names", withEnv, map[string]string{"/etc/kubernetes/other.json": "{}"}, false, ""},
		{"not the default when the environment names another", withEnv, map[string]string{"/etc/kubernetes/azure.json": "{}"}, false, "other.json"},
	} {
		var objs []runtime.Object
		if tc.secret {
			objs = append(objs, secret)
		}
		files = tc.files
		c := &Checker{Client: fake.NewSimpleClientset(objs...), Components: Catalog()}
		missing, detail, err := c.check(ctx, node, pod, tc.container, need)
		if err != nil {
			t.Fatal(err)
		}
		if (missing == "") != (tc.missing == "") || !strings.Contains(missing, tc.missing) {
			t.Errorf("%s: missing %q (%s), want %q", tc.name, missing, detail, tc.missing)
		}
	}
	// Without --allow-empty-cloud-config=false the driver runs without one.
	allowed := *unmounted.DeepCopy()
	allowed.Args = allowed.Args[:2]
	if hasArgs(allowed, []string{need.IfArg}, true) || !hasArgs(mounted, []string{need.IfArg}, true) {
		t.Error("the need does not follow --allow-empty-cloud-config")
	}
}
