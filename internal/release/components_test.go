package release_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/winkube/winkube/internal/incluster"
	"github.com/winkube/winkube/internal/release"
	"github.com/winkube/winkube/internal/testenv"
)

const testImage = "registry.example.com/winkube-manager:v0.3.1"

func components(t *testing.T) map[string]client.Object {
	t.Helper()
	objs, err := release.Components(release.Options{Image: testImage})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]client.Object{}
	for _, o := range objs {
		kind := reflect.TypeOf(o).Elem().Name()
		if u, ok := o.(*unstructured.Unstructured); ok {
			kind = u.GetKind()
		}
		key := kind + "/" + o.GetName()
		if _, dup := out[key]; dup {
			t.Fatalf("two objects %s", key)
		}
		out[key] = o
	}
	return out
}

// TestComponentsCarryTheGeneratedManifests: every CRD of config/crd, the
// generated ClusterRole and the webhooks come through unchanged but for
// what installing them needs (labels, Service, CA injection).
func TestComponentsCarryTheGeneratedManifests(t *testing.T) {
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	objs := components(t)
	files, _ := filepath.Glob(filepath.Join(root, "config", "crd", "*.yaml"))
	if len(files) < 6 {
		t.Fatalf("config/crd has %d files", len(files))
	}
	for _, f := range files {
		data, _ := os.ReadFile(f)
		want := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(data, want); err != nil {
			t.Fatal(err)
		}
		got, ok := objs["CustomResourceDefinition/"+want.Name].(*apiextensionsv1.CustomResourceDefinition)
		if !ok {
			t.Errorf("the components lack CRD %s", want.Name)
			continue
		}
		if !reflect.DeepEqual(got.Spec, want.Spec) {
			t.Errorf("CRD %s differs from %s", want.Name, f)
		}
		if got.Labels["cluster.x-k8s.io/v1beta2"] != "v1alpha1" {
			t.Errorf("CRD %s lacks the contract label: %v", want.Name, got.Labels)
		}
		if _, ok := got.Labels[clusterctlv1.ClusterctlLabel]; !ok {
			t.Errorf("CRD %s lacks the label clusterctl move discovers kinds by: %v", want.Name, got.Labels)
		}
	}
	data, _ := os.ReadFile(filepath.Join(root, "config", "rbac", "role.yaml"))
	wantRole := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal(data, wantRole); err != nil {
		t.Fatal(err)
	}
	role := objs["ClusterRole/"+release.ClusterRole].(*rbacv1.ClusterRole)
	if !reflect.DeepEqual(role.Rules, wantRole.Rules) {
		t.Errorf("the ClusterRole's rules differ from config/rbac/role.yaml")
	}
	binding := objs["ClusterRoleBinding/"+release.ClusterRole].(*rbacv1.ClusterRoleBinding)
	if binding.RoleRef.Name != role.Name || binding.Subjects[0].Name != release.ServiceAccount || binding.Subjects[0].Namespace != release.Namespace {
		t.Errorf("the ClusterRoleBinding does not bind the role to the manager's ServiceAccount: %+v", binding)
	}

	cert := objs["Certificate/"+release.Certificate].(*unstructured.Unstructured)
	dnsNames, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	secretName, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
	issuerName, _, _ := unstructured.NestedString(cert.Object, "spec", "issuerRef", "name")
	if _, ok := objs["Issuer/"+issuerName]; !ok {
		t.Errorf("the Certificate's issuer %q is not among the components", issuerName)
	}
	wantDNS := release.WebhookService + "." + release.Namespace + ".svc"
	if len(dnsNames) == 0 || dnsNames[0] != wantDNS {
		t.Errorf("the Certificate's names %v do not name the webhook Service %s", dnsNames, wantDNS)
	}
	svc := objs["Service/"+release.WebhookService].(*corev1.Service)
	checkService := func(kind, name string, annotations map[string]string, refs []*admissionregistrationv1.ServiceReference) {
		if annotations["cert-manager.io/inject-ca-from"] != release.Namespace+"/"+release.Certificate {
			t.Errorf("%s %s: inject-ca-from %q", kind, name, annotations["cert-manager.io/inject-ca-from"])
		}
		if len(refs) == 0 {
			t.Errorf("%s %s has no webhooks", kind, name)
		}
		for _, r := range refs {
			if r == nil || r.Name != svc.Name || r.Namespace != svc.Namespace {
				t.Errorf("%s %s: a webhook calls %+v, not the webhook Service", kind, name, r)
			}
		}
	}
	mwc := objs["MutatingWebhookConfiguration/"+release.MutatingWebhooks].(*admissionregistrationv1.MutatingWebhookConfiguration)
	var refs []*admissionregistrationv1.ServiceReference
	for _, w := range mwc.Webhooks {
		refs = append(refs, w.ClientConfig.Service)
	}
	checkService("MutatingWebhookConfiguration", mwc.Name, mwc.Annotations, refs)
	vwc := objs["ValidatingWebhookConfiguration/"+release.ValidatingWebhooks].(*admissionregistrationv1.ValidatingWebhookConfiguration)
	refs = nil
	for _, w := range vwc.Webhooks {
		refs = append(refs, w.ClientConfig.Service)
	}
	checkService("ValidatingWebhookConfiguration", vwc.Name, vwc.Annotations, refs)

	// The Deployment: the manager's own flags, the Certificate's Secret at
	// the webhook cert dir, probes and Service on named ports it declares.
	d := objs["Deployment/"+release.Deployment].(*appsv1.Deployment)
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	if c.Image != testImage || pod.ServiceAccountName != release.ServiceAccount {
		t.Errorf("Deployment runs %s as %s", c.Image, pod.ServiceAccountName)
	}
	// The command `winkube manager` runs (cmd/winkube wires it in
	// internal/cli), built alone: the test need not link the whole CLI.
	manager := incluster.NewManagerCommand()
	if err := manager.ParseFlags(c.Args); err != nil {
		t.Fatalf("winkube manager refuses the Deployment's arguments %v: %v", c.Args, err)
	}
	flag := func(name string) string { return manager.Flags().Lookup(name).Value.String() }
	if flag("leader-elect") != "true" {
		t.Errorf("the Deployment does not elect a leader: %v", c.Args)
	}
	var certMount string
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == secretName {
				certMount = m.MountPath
			}
		}
	}
	if certMount == "" || certMount != flag("webhook-cert-dir") {
		t.Errorf("the Certificate's Secret %s is mounted at %q, the manager reads %q", secretName, certMount, flag("webhook-cert-dir"))
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports[c.LivenessProbe.HTTPGet.Port.StrVal] == 0 || ports[c.ReadinessProbe.HTTPGet.Port.StrVal] == 0 || ports[svc.Spec.Ports[0].TargetPort.StrVal] == 0 {
		t.Errorf("probes or Service name ports the container lacks: %v", ports)
	}
	if !strings.HasSuffix(flag("health-probe-bind-address"), ":"+itoa(ports["healthz"])) || flag("webhook-port") != itoa(ports["webhook-server"]) ||
		!strings.HasSuffix(flag("metrics-bind-address"), ":"+itoa(ports["metrics"])) {
		t.Errorf("the manager listens on %s/%s/%s, the container declares %v",
			flag("health-probe-bind-address"), flag("webhook-port"), flag("metrics-bind-address"), ports)
	}
	if c.LivenessProbe.HTTPGet.Path != "/healthz" || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("probes: %s %s", c.LivenessProbe.HTTPGet.Path, c.ReadinessProbe.HTTPGet.Path)
	}
	sc := c.SecurityContext
	if sc == nil || !*sc.RunAsNonRoot || *sc.RunAsUser != release.NonRootUserID || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation {
		t.Errorf("the manager container is not locked down: %+v", sc)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("no resource requests: %v", c.Resources.Requests)
	}
	for k, v := range d.Spec.Selector.MatchLabels {
		if svc.Spec.Selector[k] != v || d.Spec.Template.Labels[k] != v {
			t.Errorf("the Service or Pod template does not carry the Deployment's selector %s=%s", k, v)
		}
	}
}

func itoa(i int32) string { return strconv.Itoa(int(i)) }

func TestMetadataMapsTheReleaseSeriesToTheContract(t *testing.T) {
	md, err := release.Metadata("v1.4.2")
	if err != nil {
		t.Fatal(err)
	}
	if len(md.ReleaseSeries) != 1 || md.ReleaseSeries[0].Major != 1 || md.ReleaseSeries[0].Minor != 4 || md.ReleaseSeries[0].Contract != "v1beta2" {
		t.Fatalf("release series: %+v", md.ReleaseSeries)
	}
	for _, bad := range []string{"1.4.2", "latest", ""} {
		if _, err := release.Metadata(bad); err == nil {
			t.Errorf("version %q accepted", bad)
		}
	}
}

// TestManagerRoleGrantsNoUnusedConfigMapVerbs: the manager applies
// (server-side) the services-endpoint ConfigMap of a cluster, and reads and
// updates, by name, the version-bound add-on ConfigMaps a cluster's
// ClusterResourceSets name after it (<cluster>-kube-proxy-windows,
// <cluster>-cloud-provider-azure) when its control plane's version
// changes; it caches none. Listing or watching every ConfigMap of the
// management cluster would let a compromised manager collect what other
// controllers keep there.
func TestManagerRoleGrantsNoUnusedConfigMapVerbs(t *testing.T) {
	role := components(t)["ClusterRole/"+release.ClusterRole].(*rbacv1.ClusterRole)
	var verbs []string
	for _, r := range role.Rules {
		for _, res := range r.Resources {
			if (res == "configmaps" || res == "*") && (len(r.APIGroups) == 0 || r.APIGroups[0] == "" || r.APIGroups[0] == "*") {
				verbs = append(verbs, r.Verbs...)
			}
		}
	}
	allowed := map[string]bool{"create": true, "patch": true, "get": true, "update": true}
	for _, v := range verbs {
		if !allowed[v] {
			t.Errorf("the manager's ClusterRole grants %q on ConfigMaps, which the manager never does (it applies one with create and patch, and gets and updates add-on ConfigMaps by name)", v)
		}
	}
}
