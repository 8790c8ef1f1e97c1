package components

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
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
			if strings.Contains(img[strings.LastIndex(img, "/")+1:], ":") || strings.Count(img, "/") < 2 {
				t.Errorf("%s: image %q is not a canonical repository without tag", c.Name, img)
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
	for _, want := range []string{"calico-node", "calico-node-windows", "calico-kube-controllers", "kube-flannel", "kube-proxy (Windows)",
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
