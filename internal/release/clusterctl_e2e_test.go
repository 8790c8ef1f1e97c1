package release_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/crypto/ssh"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	clusterctl "sigs.k8s.io/cluster-api/cmd/clusterctl/client"
	clusterctllog "sigs.k8s.io/cluster-api/cmd/clusterctl/log"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/internal/controllers"
	"github.com/winkube/winkube/internal/flavors"
	"github.com/winkube/winkube/internal/release"
	"github.com/winkube/winkube/internal/scheme"
	"github.com/winkube/winkube/internal/testenv"
)

const (
	e2eVersion      = "v0.1.0"
	e2eSubscription = "00000000-0000-0000-0000-00000000c7c7"
	// certManagerVersion is the version clusterctl v1.14 installs by default;
	// the local "release" carries it so clusterctl finds nothing to upgrade.
	certManagerVersion = "v1.21.1"
)

// capiModule is a field of the Cluster API module winkube is built with,
// as go.mod pins it: its version ({{.Version}}), or where the module cache
// holds it ({{.Dir}}).
func capiModule(t *testing.T, root, format string) string {
	t.Helper()
	cmd := exec.Command("go", "list", "-m", "-f", format, "sigs.k8s.io/cluster-api")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -m sigs.k8s.io/cluster-api: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// writeYAML writes objects as one YAML stream.
func writeYAML(t *testing.T, path string, objs ...any) {
	t.Helper()
	var b bytes.Buffer
	for _, o := range objs {
		data, err := yaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("---\n")
		b.Write(data)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// localCAPIRelease writes a local clusterctl repository release of one of
// Cluster API's providers: its CRDs as config/capi holds them (generated
// from Cluster API's Go types), in their namespace. The controllers'
// Deployments are left out: no kubelet would run them here, and the test
// plays their part where winkube depends on it.
func localCAPIRelease(t *testing.T, root, repo, label, file, namespace, version string, extra []any, crdDirs ...string) string {
	t.Helper()
	objs := append([]any{map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": namespace}}}, extra...)
	for _, d := range crdDirs {
		files, _ := filepath.Glob(filepath.Join(root, "config", "capi", d, "*.yaml"))
		if len(files) == 0 {
			t.Fatalf("no CRDs under config/capi/%s", d)
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var crd map[string]any
			if err := yaml.Unmarshal(data, &crd); err != nil {
				t.Fatal(err)
			}
			objs = append(objs, crd)
		}
	}
	dir := filepath.Join(repo, label, version)
	writeYAML(t, filepath.Join(dir, file), objs...)
	v := strings.Split(strings.TrimPrefix(version, "v"), ".")
	major, _ := strconv.Atoi(v[0])
	minor, _ := strconv.Atoi(v[1])
	writeYAML(t, filepath.Join(dir, "metadata.yaml"), &clusterctlv1.Metadata{
		TypeMeta:      metav1.TypeMeta{APIVersion: clusterctlv1.GroupVersion.String(), Kind: "Metadata"},
		ReleaseSeries: []clusterctlv1.ReleaseSeries{{Major: int32(major), Minor: int32(minor), Contract: clusterv1.GroupVersion.Version}},
	})
	return filepath.Join(dir, file)
}

// localCertManagerRelease writes a local cert-manager "release" that
// clusterctl installs instead of downloading cert-manager's: the namespace
// and small CRDs of cert-manager's four core kinds (hand-built here, with
// open schemas), enough for clusterctl's readiness check, which creates an
// Issuer and a Certificate. No cert-manager controller runs; the test
// issues the webhook certificate and injects its CA as cert-manager would.
func localCertManagerRelease(t *testing.T, repo string) string {
	t.Helper()
	objs := []any{&corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: "cert-manager"}}}
	for _, k := range []struct {
		kind, plural string
		scope        apiextensionsv1.ResourceScope
	}{
		{"Certificate", "certificates", apiextensionsv1.NamespaceScoped},
		{"CertificateRequest", "certificaterequests", apiextensionsv1.NamespaceScoped},
		{"Issuer", "issuers", apiextensionsv1.NamespaceScoped},
		{"ClusterIssuer", "clusterissuers", apiextensionsv1.ClusterScoped},
	} {
		objs = append(objs, &apiextensionsv1.CustomResourceDefinition{
			TypeMeta:   metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
			ObjectMeta: metav1.ObjectMeta{Name: k.plural + ".cert-manager.io"},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{
				Group: "cert-manager.io", Scope: k.scope,
				Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: k.kind, ListKind: k.kind + "List", Plural: k.plural, Singular: strings.ToLower(k.kind)},
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
					Name: "v1", Served: true, Storage: true,
					Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
						Type: "object", XPreserveUnknownFields: ptr.To(true),
					}},
					Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				}},
			},
		})
	}
	path := filepath.Join(repo, "cert-manager", certManagerVersion, "cert-manager.yaml")
	writeYAML(t, path, objs...)
	return path
}

// servingCert plays cert-manager: a self-signed CA and a serving
// certificate for the Certificate's DNS names (and 127.0.0.1, where the
// test serves the webhooks).
func servingCert(t *testing.T, dnsNames []string) (caPEM, certPEM, keyPEM []byte) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "winkube-selfsigned"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: dnsNames[0]}, DNSNames: dnsNames, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// kubeconfigFor writes a kubeconfig for cfg; with impersonate set, every
// request acts as that user and groups, which the admin may do.
func kubeconfigFor(t *testing.T, cfg *rest.Config, path, impersonate string, groups ...string) {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["user"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Impersonate: impersonate, ImpersonateGroups: groups}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "user", Namespace: "default"}
	kc.CurrentContext = "envtest"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// moveLog records what clusterctl's move logs it would create.
type moveLog struct {
	mu      sync.Mutex
	created map[string]bool // Kind/namespace/name
}

func (m *moveLog) Init(logr.RuntimeInfo)  {}
func (m *moveLog) Enabled(level int) bool { return true }
func (m *moveLog) Info(_ int, msg string, kv ...any) {
	if msg != "Creating" || len(kv) < 4 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.created[fmt.Sprintf("%v/%v/%v", kv[0], kv[3], kv[1])] = true
}
func (m *moveLog) Error(error, string, ...any)                      {}
func (m *moveLog) WithValues(...any) logr.LogSink                   { return m }
func (m *moveLog) WithName(string) logr.LogSink                     { return m }
func (m *moveLog) WithCallDepth(int) logr.LogSink                   { return m }
func (m *moveLog) GetCallStackHelper() func()                       { return func() {} }
func (m *moveLog) WithCallStackHelper() logr.CallStackHelperLogSink { return m }

// lockedBuffer is the manager's log, read while it writes.
type lockedBuffer struct{ testenv.SyncBuffer }

// forbidden returns the manager's log lines about requests RBAC refused.
func (l *lockedBuffer) forbidden() string {
	var out []string
	for _, line := range strings.Split(l.String(), "\n") {
		if strings.Contains(line, "forbidden") {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// winkubeBinary is the static winkube binary, built once for the package's
// tests (the image test packs it, the end-to-end test runs it).
func winkubeBinary(t *testing.T) string {
	t.Helper()
	bin, err := testenv.SharedWinkube()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// TestClusterctlInstallsWinkube is the path of a platform team with a
// management cluster: clusterctl init from winkube's provider repository
// (with Cluster API's providers and cert-manager from local repositories:
// nothing is downloaded), clusterctl generate cluster, the manager running in
// its own process with the Deployment's arguments as the components'
// ServiceAccount (so the shipped RBAC is what is tested) against the ARM
// emulator, an AzureCluster in the team's own VNet and Windows AzureMachines
// Ready, clusterctl move's object graph, and then the move itself, mid-life,
// into a second management cluster while a machine is being deleted: the
// cluster is deleted from there, and nothing is leaked, nothing of the
// team's network changed and nothing refused.
func TestClusterctlInstallsWinkube(t *testing.T) {
	testenv.SkipIfShort(t, "clusterctl installing Cluster API and winkube into a management cluster")
	start := time.Now()
	// envtest logs through controller-runtime's logger; the managers run
	// in their own processes with their own.
	ctrllog.SetLogger(logr.Discard())
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	s := scheme.New()
	if err := clusterctlv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()

	// Local repositories: Cluster API's providers at the version winkube is
	// built with, cert-manager, and winkube's own release as `make release`
	// writes it.
	repo := filepath.Join(dir, "repository")
	capi := capiModule(t, root, "{{.Version}}")
	capiDir := capiModule(t, root, "{{.Dir}}")
	coreURL := localCAPIRelease(t, root, repo, "cluster-api", "core-components.yaml", "capi-system", capi,
		capiManagerRole(t, capiDir, "core", capiCore), "core-v1beta2", "addons-v1beta2")
	bootstrapURL := localCAPIRelease(t, root, repo, "bootstrap-kubeadm", "bootstrap-components.yaml", "capi-kubeadm-bootstrap-system", capi, nil, "bootstrap-kubeadm-v1beta2")
	controlPlaneURL := localCAPIRelease(t, root, repo, "control-plane-kubeadm", "control-plane-components.yaml", "capi-kubeadm-control-plane-system", capi,
		capiManagerRole(t, capiDir, "controlplane/kubeadm", capiControlPlane), "controlplane-kubeadm-v1beta2")
	certManagerURL := localCertManagerRelease(t, repo)
	const image = "registry.example.com/platform/winkube-manager:" + e2eVersion
	winkubeDir, err := release.WriteRepository(repo, release.RepositoryOptions{Version: e2eVersion, Image: image})
	if err != nil {
		t.Fatal(err)
	}
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	sshKey, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	authorizedKey := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sshKey)))
	clusterctlConfig := map[string]any{
		"providers": []map[string]string{
			{"name": "cluster-api", "type": "CoreProvider", "url": coreURL},
			{"name": "kubeadm", "type": "BootstrapProvider", "url": bootstrapURL},
			{"name": "kubeadm", "type": "ControlPlaneProvider", "url": controlPlaneURL},
			{"name": release.ProviderName, "type": "InfrastructureProvider", "url": filepath.Join(winkubeDir, release.ComponentsFile)},
		},
		"cert-manager": map[string]string{"url": certManagerURL, "version": certManagerVersion, "timeout": "1m"},
		// The windows flavor's variables, as a user sets them in the
		// environment or here.
		"AZURE_LOCATION":                   "westeurope",
		"AZURE_SUBSCRIPTION_ID":            e2eSubscription,
		"AZURE_SSH_PUBLIC_KEY":             authorizedKey,
		"AZURE_SSH_PUBLIC_KEY_B64":         base64.StdEncoding.EncodeToString([]byte(authorizedKey)),
		"AZURE_CONTROL_PLANE_MACHINE_TYPE": "Standard_D2s_v3",
		"AZURE_NODE_MACHINE_TYPE":          "Standard_D4s_v3",
		"WINDOWS_WORKER_MACHINE_COUNT":     "1",
		"CLOUD_PROVIDER_AZURE_VERSION":     "v1.36.0", // cloud-provider-azure's release for Kubernetes v1.36
	}
	configPath := filepath.Join(dir, "clusterctl.yaml")
	writeYAML(t, configPath, clusterctlConfig)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "xdg")) // clusterctl's overrides and caches, not the user's
	cc, err := clusterctl.New(ctx, configPath)
	if err != nil {
		t.Fatal(err)
	}

	// clusterctl init --infrastructure winkube:v0.1.0
	src := newPlane(t, ctx, cc, s, dir, "source")
	c, kubeconfig := src.c, src.kubeconfig
	var names []string
	for _, comp := range src.installed {
		names = append(names, comp.ManifestLabel()+"@"+comp.Version())
	}
	sort.Strings(names)
	if want := "bootstrap-kubeadm@" + capi + " cluster-api@" + capi + " control-plane-kubeadm@" + capi + " infrastructure-winkube@" + e2eVersion; strings.Join(names, " ") != want {
		t.Fatalf("clusterctl init installed %v, want %s", names, want)
	}
	providers := &clusterctlv1.ProviderList{}
	if err := c.List(ctx, providers); err != nil {
		t.Fatal(err)
	}
	var winkubeInventory *clusterctlv1.Provider
	for i := range providers.Items {
		if providers.Items[i].Name == release.ProviderLabel {
			winkubeInventory = &providers.Items[i]
		}
	}
	if winkubeInventory == nil || winkubeInventory.Namespace != release.Namespace || winkubeInventory.Version != e2eVersion || winkubeInventory.Type != string(clusterctlv1.InfrastructureProviderType) {
		t.Fatalf("clusterctl's inventory lacks winkube %s in %s: %+v", e2eVersion, release.Namespace, providers.Items)
	}
	// Every object of the components is there, labelled as clusterctl's.
	want, err := release.Components(release.Options{Image: image})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range want {
		u := &unstructured.Unstructured{}
		gvk, err := apiutilGVK(o)
		if err != nil {
			t.Fatal(err)
		}
		u.SetGroupVersionKind(gvk)
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), u); err != nil {
			t.Errorf("clusterctl init did not install %s %s: %v", gvk.Kind, o.GetName(), err)
			continue
		}
		if u.GetLabels()[clusterv1.ProviderNameLabel] != release.ProviderLabel {
			t.Errorf("%s %s lacks clusterctl's provider label: %v", gvk.Kind, o.GetName(), u.GetLabels())
		}
	}
	clusterAPIMayUseWinkubeKinds(t, ctx, src)
	if img := src.deployment(t, ctx).Spec.Template.Spec.Containers[0].Image; img != image {
		t.Fatalf("the installed Deployment runs %s, not %s", img, image)
	}

	// clusterctl generate cluster demo --infrastructure winkube --flavor windows
	source := &clusterctl.ProviderRepositorySourceOptions{InfrastructureProvider: release.ProviderName, Flavor: flavors.Windows}
	listed, err := cc.GetClusterTemplate(ctx, clusterctl.GetClusterTemplateOptions{Kubeconfig: kubeconfig, ProviderRepositorySource: source, ClusterName: "demo", ListVariablesOnly: true})
	if err != nil {
		t.Fatalf("clusterctl generate cluster --list-variables: %v", err)
	}
	_, wantVars, err := flavors.Template(scheme.New(), flavors.Windows, "", false)
	if err != nil {
		t.Fatal(err)
	}
	gotVars := listed.Variables()
	sort.Strings(gotVars)
	if strings.Join(gotVars, ",") != strings.Join(wantVars, ",") {
		t.Fatalf("clusterctl lists variables %v, the flavor has %v", gotVars, wantVars)
	}
	tmpl, err := cc.GetClusterTemplate(ctx, clusterctl.GetClusterTemplateOptions{
		Kubeconfig: kubeconfig, ProviderRepositorySource: source, ClusterName: "demo", TargetNamespace: "default",
		KubernetesVersion: "v1.36.3", ControlPlaneMachineCount: ptr.To[int64](1), WorkerMachineCount: ptr.To[int64](1),
	})
	if err != nil {
		t.Fatalf("clusterctl generate cluster demo --flavor windows: %v", err)
	}
	rendered, err := tmpl.Yaml()
	if err != nil || bytes.Contains(rendered, []byte("${")) {
		t.Fatalf("the rendered template keeps a variable (%v):\n%s", err, rendered)
	}

	// The shipped RBAC is what the manager gets: it acts as the components'
	// ServiceAccount, which may not, say, list Pods.
	saRest := rest.CopyConfig(src.env.Config)
	saRest.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + release.Namespace + ":" + release.ServiceAccount,
		Groups: []string{"system:serviceaccounts", "system:authenticated"}}
	saClient, err := client.New(saRest, client.Options{Scheme: src.env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := saClient.List(ctx, &corev1.PodList{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the API server does not enforce RBAC on the ServiceAccount (listing Pods: %v)", err)
	}

	// The manager with the Deployment's own arguments, as the ServiceAccount.
	// Its own credential (the cluster names no identity) is a service
	// principal of the emulator's Entra ID, from the environment.
	az := newAzureWorld(t, dir)
	src.startManager(t, ctx, az, dir)

	// The platform team's network, in a group of its own: the cluster adds
	// its subnets to the team's VNet.
	team := newTeamNetwork(t, ctx, az)

	// kubectl apply of the rendered cluster, through winkube's webhooks.
	objs := tmpl.Objs()
	for i := range objs {
		o := objs[i].DeepCopy()
		if o.GetKind() == "AzureCluster" {
			team.use(t, o)
		}
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("applying the rendered %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	cluster := &clusterv1.Cluster{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "demo"}, cluster); err != nil {
		t.Fatal(err)
	}
	capiPart := newCAPIPart(t, ctx, c, cluster)
	ac := &infrav1.AzureCluster{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: cluster.Spec.InfrastructureRef.Name}, ac); err != nil {
		t.Fatal(err)
	}
	capiPart.own(ac, cluster)
	// The control plane's and the workers' templates, as KubeadmControlPlane
	// and the MachineSet controller adopt them.
	templates := &infrav1.AzureMachineTemplateList{}
	if err := c.List(ctx, templates, client.InNamespace("default")); err != nil || len(templates.Items) < 2 {
		t.Fatalf("AzureMachineTemplates of the rendered cluster: %d %v", len(templates.Items), err)
	}
	var windowsTemplate *infrav1.AzureMachineTemplate
	for i := range templates.Items {
		capiPart.own(&templates.Items[i], cluster)
		if templates.Items[i].Spec.Template.Spec.OS() == infrav1.Windows {
			windowsTemplate = &templates.Items[i]
		}
	}
	if windowsTemplate == nil {
		t.Fatal("the windows flavor has no Windows AzureMachineTemplate")
	}
	src.until(t, 3*time.Minute, func() string { return clusterReady(ctx, c, ac) })
	capiPart.infrastructureProvisioned()
	am := capiPart.windowsMachine(windowsTemplate)
	src.until(t, 3*time.Minute, func() string { return machineReady(ctx, c, am) })
	if !strings.Contains(am.Spec.ProviderID, "/virtualMachines/") {
		t.Fatalf("the Windows AzureMachine has no provider ID: %v", am.Spec.ProviderID)
	}
	t.Logf("AzureCluster and Windows AzureMachine Ready: %s", time.Since(start).Round(time.Millisecond))

	// clusterctl move --dry-run: its object graph must hold every winkube
	// object of the namespace.
	var winkubeObjects []string
	for _, list := range []client.ObjectList{&infrav1.AzureClusterList{}, &infrav1.AzureMachineList{}, &infrav1.AzureMachineTemplateList{},
		&infrav1.AzureMachinePoolList{}, &infrav1.AzureMachinePoolMachineList{}, &infrav1.AzureClusterTemplateList{}} {
		if err := c.List(ctx, list, client.InNamespace("default")); err != nil {
			t.Fatal(err)
		}
		items, _ := meta.ExtractList(list)
		for _, item := range items {
			o := item.(client.Object)
			kind := strings.TrimSuffix(fmt.Sprintf("%T", list)[len("*v1alpha1."):], "List")
			winkubeObjects = append(winkubeObjects, kind+"/default/"+o.GetName())
		}
	}
	// Secrets winkube's controllers write (owned by winkube objects) move
	// too. What is listed is what exists before the move reads the
	// namespace: the MachineDeployment's other machines and their Secrets
	// may still be coming, and a dry run cannot show what it never saw.
	secrets := &corev1.SecretList{}
	if err := c.List(ctx, secrets, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	moved := &moveLog{created: map[string]bool{}}
	clusterctllog.SetLogger(logr.New(moved))
	if err := cc.Move(ctx, clusterctl.MoveOptions{FromKubeconfig: kubeconfig, Namespace: "default", DryRun: true}); err != nil {
		t.Fatalf("clusterctl move --dry-run: %v", err)
	}
	if len(winkubeObjects) < 5 {
		t.Fatalf("only %d winkube objects: %v", len(winkubeObjects), winkubeObjects)
	}
	for _, o := range winkubeObjects {
		if !moved.created[o] {
			t.Errorf("clusterctl move would leave %s behind", o)
		}
	}
	var ownedSecrets int
	for _, sec := range secrets.Items {
		for _, ref := range sec.OwnerReferences {
			if !strings.HasPrefix(ref.APIVersion, infrav1.GroupVersion.Group+"/") {
				continue
			}
			ownedSecrets++
			if !moved.created["Secret/default/"+sec.Name] {
				t.Errorf("clusterctl move would leave Secret %s (owned by %s %s) behind", sec.Name, ref.Kind, ref.Name)
			}
		}
	}
	for _, o := range []string{"Cluster/default/demo", "Machine/default/" + am.Name, "Secret/default/" + am.Name + "-bootstrap",
		"ConfigMap/default/demo" + infrav1.ServicesEndpointSuffix} {
		if !moved.created[o] {
			t.Errorf("clusterctl move would leave %s behind", o)
		}
	}
	t.Logf("move graph: %d objects, %d of them winkube's and %d Secrets winkube's own; total %s", len(moved.created), len(winkubeObjects), ownedSecrets, time.Since(start).Round(time.Millisecond))
	if t.Failed() {
		return
	}
	moveMidLife(t, ctx, cc, s, dir, az, src, team, capiPart, windowsTemplate, am)
	t.Logf("moved and deleted from the target: total %s", time.Since(start).Round(time.Millisecond))
}

// moveMidLife is the move itself: a second management cluster gets the
// providers (clusterctl init) and its own manager; a second Windows machine
// is made and then deleted, and while Azure is still deleting its VM the
// cluster is moved. From the target the cluster becomes Ready again without
// refusing anything of its own, and is deleted: what it made in Azure is
// gone, and the team's network is as it was.
func moveMidLife(t *testing.T, ctx context.Context, cc clusterctl.Client, s *runtime.Scheme, dir string, az *azureWorld,
	src *plane, team *teamNetwork, capiPart *capiPart, windowsTemplate *infrav1.AzureMachineTemplate, am *infrav1.AzureMachine) {
	t.Helper()
	dst := newPlane(t, ctx, cc, s, dir, "target")
	dst.startManager(t, ctx, az, dir)
	c := src.c

	leaving := capiPart.windowsMachine(windowsTemplate)
	src.until(t, 3*time.Minute, func() string { return machineReady(ctx, c, leaving) })
	vmOf := func(m *infrav1.AzureMachine) string {
		return m.Spec.ProviderID[strings.LastIndex(m.Spec.ProviderID, "/")+1:]
	}
	keptVM, leavingVM := vmOf(am), vmOf(leaving)
	// What Cluster API's controllers would have reported by now, which
	// clusterctl move checks: the control plane initialized, each Machine
	// a node.
	capiPart.provisioned()

	// Azure takes its time deleting a VM. The user deletes the second
	// Machine; Cluster API's machine controller deletes its AzureMachine.
	az.emu.SetFaults(arm.FaultConfig{Faults: []arm.Fault{{Method: http.MethodDelete, Kind: "virtualMachines", OperationDelay: 20 * time.Second}}})
	capiPart.deleteMachine(leaving)
	src.until(t, time.Minute, func() string {
		if err := c.Get(ctx, client.ObjectKeyFromObject(leaving), leaving); err != nil {
			return err.Error()
		}
		var ops infrav1.Futures
		_ = json.Unmarshal([]byte(leaving.Annotations[controllers.OperationsAnnotation]), &ops)
		for _, op := range ops {
			if op.Type == http.MethodDelete && op.ServiceName == "virtualmachines" {
				return ""
			}
		}
		return "the VM's delete is not under way yet: " + leaving.Annotations[controllers.OperationsAnnotation]
	})

	// clusterctl move --to-kubeconfig target.kubeconfig
	before := time.Now()
	moved := &moveLog{created: map[string]bool{}}
	clusterctllog.SetLogger(logr.New(moved))
	if err := cc.Move(ctx, clusterctl.MoveOptions{FromKubeconfig: src.kubeconfig, ToKubeconfig: dst.kubeconfig, Namespace: "default"}); err != nil {
		t.Fatalf("clusterctl move: %v", err)
	}
	t.Logf("clusterctl move: %d objects in %s", len(moved.created), time.Since(before).Round(time.Millisecond))
	for _, list := range []client.ObjectList{&infrav1.AzureClusterList{}, &infrav1.AzureMachineList{}, &clusterv1.ClusterList{}} {
		if err := c.List(ctx, list, client.InNamespace("default")); err != nil {
			t.Fatal(err)
		}
		if meta.LenList(list) != 0 {
			t.Fatalf("clusterctl move left %T objects in the source", list)
		}
	}
	if !az.hasVM(keptVM) {
		t.Fatalf("VM %s did not survive the move: the source's manager deleted it when clusterctl removed its objects", keptVM)
	}

	// The target: Cluster API's part there reports the infrastructure as
	// its Cluster controller would, once the AzureCluster says so.
	dc := dst.c
	cluster := &clusterv1.Cluster{}
	if err := dc.Get(ctx, client.ObjectKeyFromObject(capiPart.cluster), cluster); err != nil {
		t.Fatal(err)
	}
	if ptr.Deref(cluster.Spec.Paused, false) {
		t.Fatal("clusterctl move left the target's Cluster paused")
	}
	target := newCAPIPart(t, ctx, dc, cluster)
	ac := &infrav1.AzureCluster{}
	if err := dc.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: cluster.Spec.InfrastructureRef.Name}, ac); err != nil {
		t.Fatal(err)
	}
	refused := func(reason string) {
		if reason == controllers.ResourceNotOwnedReason || reason == controllers.VMNameConflictReason {
			t.Fatalf("the moved cluster refuses its own resources: %s", reason)
		}
	}
	dst.until(t, 3*time.Minute, func() string {
		msg := clusterReady(ctx, dc, ac)
		if cond := meta.FindStatusCondition(ac.Status.Conditions, clusterv1.ReadyCondition); cond != nil {
			refused(cond.Reason)
		}
		return msg
	})
	target.infrastructureProvisioned()
	kept := &infrav1.AzureMachine{}
	if err := dc.Get(ctx, client.ObjectKeyFromObject(am), kept); err != nil {
		t.Fatal(err)
	}
	dst.until(t, 3*time.Minute, func() string {
		msg := machineReady(ctx, dc, kept)
		if cond := meta.FindStatusCondition(kept.Status.Conditions, clusterv1.ReadyCondition); cond != nil {
			refused(cond.Reason)
		}
		return msg
	})
	if vmOf(kept) != keptVM {
		t.Fatalf("the kept machine's VM is now %s, was %s", vmOf(kept), keptVM)
	}
	// The machine whose deletion the move interrupted: clusterctl makes it
	// again without its deletionTimestamp, and Azure finishes deleting its
	// VM. It must fail (for a MachineHealthCheck, or the user, to delete
	// again), never make a VM with its stale bootstrap data.
	interrupted := &infrav1.AzureMachine{}
	if err := dc.Get(ctx, client.ObjectKeyFromObject(leaving), interrupted); err != nil {
		t.Fatalf("clusterctl move did not carry the machine being deleted: %v", err)
	}
	dst.until(t, 2*time.Minute, func() string {
		if err := dc.Get(ctx, client.ObjectKeyFromObject(interrupted), interrupted); err != nil {
			return err.Error()
		}
		cond := meta.FindStatusCondition(interrupted.Status.Conditions, clusterv1.ReadyCondition)
		if cond == nil || cond.Reason != controllers.VMDeletedReason || !strings.Contains(cond.Message, "was being deleted when this machine was moved") {
			return fmt.Sprintf("the machine whose deletion was interrupted: %+v", cond)
		}
		return ""
	})
	az.emu.SetFaults(arm.FaultConfig{})
	src.until(t, time.Minute, func() string {
		if az.hasVM(leavingVM) {
			return "Azure is still deleting VM " + leavingVM
		}
		return ""
	})
	if az.hasVM(leavingVM) {
		t.Fatalf("VM %s was made again", leavingVM)
	}

	// Deleted from the target: the machines (as Cluster API deletes them
	// before the cluster's infrastructure), then the AzureCluster.
	for _, m := range []*infrav1.AzureMachine{interrupted, kept} {
		if err := dc.Delete(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	dst.until(t, 3*time.Minute, func() string {
		l := &infrav1.AzureMachineList{}
		if err := dc.List(ctx, l, client.InNamespace(cluster.Namespace)); err != nil {
			return err.Error()
		}
		if len(l.Items) > 0 {
			return fmt.Sprintf("%d AzureMachines are still being deleted: %+v", len(l.Items), meta.FindStatusCondition(l.Items[0].Status.Conditions, clusterv1.ReadyCondition))
		}
		return ""
	})
	if err := dc.Delete(ctx, ac); err != nil {
		t.Fatal(err)
	}
	dst.until(t, 3*time.Minute, func() string {
		if err := dc.Get(ctx, client.ObjectKeyFromObject(ac), ac); err == nil {
			return fmt.Sprintf("the AzureCluster is still being deleted: %+v", meta.FindStatusCondition(ac.Status.Conditions, clusterv1.ReadyCondition))
		} else if !apierrors.IsNotFound(err) {
			return err.Error()
		}
		return ""
	})
	team.unchanged(t, ctx, az)
}

// clusterReady is "" once the AzureCluster is provisioned and Ready.
func clusterReady(ctx context.Context, c client.Client, ac *infrav1.AzureCluster) string {
	if err := c.Get(ctx, client.ObjectKeyFromObject(ac), ac); err != nil {
		return err.Error()
	}
	if !ptr.Deref(ac.Status.Initialization.Provisioned, false) || !meta.IsStatusConditionTrue(ac.Status.Conditions, clusterv1.ReadyCondition) {
		return fmt.Sprintf("AzureCluster not Ready: %+v", ac.Status.Conditions)
	}
	return ""
}

// machineReady is "" once the AzureMachine is provisioned and Ready.
func machineReady(ctx context.Context, c client.Client, am *infrav1.AzureMachine) string {
	if err := c.Get(ctx, client.ObjectKeyFromObject(am), am); err != nil {
		return err.Error()
	}
	if !ptr.Deref(am.Status.Initialization.Provisioned, false) || !meta.IsStatusConditionTrue(am.Status.Conditions, clusterv1.ReadyCondition) {
		return fmt.Sprintf("AzureMachine %s not Ready: %+v", am.Name, am.Status.Conditions)
	}
	return ""
}

func apiutilGVK(o client.Object) (schema.GroupVersionKind, error) {
	if u, ok := o.(*unstructured.Unstructured); ok {
		return u.GroupVersionKind(), nil
	}
	gvks, _, err := scheme.New().ObjectKinds(o)
	if err != nil {
		return schema.GroupVersionKind{}, err
	}
	return gvks[0], nil
}

// injectCA plays cert-manager's cainjector for the webhook configurations
// whose inject-ca-from names the Certificate, and stands in for the
// cluster network: no Pod runs here, so the API server is sent to the
// manager on 127.0.0.1 by URL instead of by the Service (the Service and
// its selector are checked by TestComponentsCarryTheGeneratedManifests).
func injectCA(t *testing.T, ctx context.Context, c client.Client, caPEM []byte, port int) {
	t.Helper()
	wantFrom := release.Namespace + "/" + release.Certificate
	url := func(svc *admissionregistrationv1.ServiceReference) *string {
		if svc == nil || svc.Name != release.WebhookService || svc.Namespace != release.Namespace {
			t.Fatalf("a webhook calls %+v, not the components' Service", svc)
		}
		return ptr.To(fmt.Sprintf("https://127.0.0.1:%d%s", port, ptr.Deref(svc.Path, "/")))
	}
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := c.Get(ctx, client.ObjectKey{Name: release.MutatingWebhooks}, mwc); err != nil {
		t.Fatal(err)
	}
	if mwc.Annotations["cert-manager.io/inject-ca-from"] != wantFrom {
		t.Fatalf("%s asks for the CA of %q", mwc.Name, mwc.Annotations["cert-manager.io/inject-ca-from"])
	}
	for i := range mwc.Webhooks {
		cc := &mwc.Webhooks[i].ClientConfig
		cc.URL, cc.Service, cc.CABundle = url(cc.Service), nil, caPEM
	}
	if err := c.Update(ctx, mwc); err != nil {
		t.Fatal(err)
	}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := c.Get(ctx, client.ObjectKey{Name: release.ValidatingWebhooks}, vwc); err != nil {
		t.Fatal(err)
	}
	if vwc.Annotations["cert-manager.io/inject-ca-from"] != wantFrom {
		t.Fatalf("%s asks for the CA of %q", vwc.Name, vwc.Annotations["cert-manager.io/inject-ca-from"])
	}
	for i := range vwc.Webhooks {
		cc := &vwc.Webhooks[i].ClientConfig
		cc.URL, cc.Service, cc.CABundle = url(cc.Service), nil, caPEM
	}
	if err := c.Update(ctx, vwc); err != nil {
		t.Fatal(err)
	}
}

// capiPart plays what Cluster API's controllers (not running here: no
// kubelet would run their Deployments) do around winkube's objects: owner
// references, the MachineDeployment's MachineSet and Machines, the
// bootstrap provider's data Secrets, and the Cluster's and Machines'
// status.
type capiPart struct {
	t        *testing.T
	ctx      context.Context
	c        client.Client
	cluster  *clusterv1.Cluster
	ms       *clusterv1.MachineSet
	machines []*clusterv1.Machine
}

func newCAPIPart(t *testing.T, ctx context.Context, c client.Client, cluster *clusterv1.Cluster) *capiPart {
	return &capiPart{t: t, ctx: ctx, c: c, cluster: cluster}
}

func ownerRef(gvk schema.GroupVersionKind, o client.Object) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: o.GetName(), UID: o.GetUID()}
}

func (p *capiPart) own(o client.Object, owner client.Object) {
	p.t.Helper()
	gvk, err := apiutilGVK(owner)
	if err != nil {
		p.t.Fatal(err)
	}
	patch := client.MergeFrom(o.DeepCopyObject().(client.Object))
	o.SetOwnerReferences(append(o.GetOwnerReferences(), ownerRef(gvk, owner)))
	if err := p.c.Patch(p.ctx, o, patch); err != nil {
		p.t.Fatalf("owner reference on %s: %v", o.GetName(), err)
	}
}

// patchClusterStatus changes the Cluster's status as Cluster API's Cluster
// controller would.
func (p *capiPart) patchClusterStatus(change func(*clusterv1.Cluster)) {
	p.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := p.c.Get(p.ctx, client.ObjectKeyFromObject(p.cluster), p.cluster); err != nil {
			return err
		}
		change(p.cluster)
		return p.c.Status().Update(p.ctx, p.cluster)
	})
	if err != nil {
		p.t.Fatal(err)
	}
}

// infrastructureProvisioned is the Cluster controller's answer to a
// provisioned AzureCluster.
func (p *capiPart) infrastructureProvisioned() {
	p.patchClusterStatus(func(c *clusterv1.Cluster) { c.Status.Initialization.InfrastructureProvisioned = ptr.To(true) })
}

// provisioned is what Cluster API reports once the control plane is
// initialized and each Machine's node has joined; clusterctl move checks
// it before moving anything.
func (p *capiPart) provisioned() {
	p.t.Helper()
	p.patchClusterStatus(func(c *clusterv1.Cluster) {
		c.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
		meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: clusterv1.ClusterControlPlaneInitializedCondition, Status: metav1.ConditionTrue,
			Reason: clusterv1.ClusterControlPlaneInitializedReason, ObservedGeneration: c.Generation})
	})
	for _, m := range p.machines {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := p.c.Get(p.ctx, client.ObjectKeyFromObject(m), m); err != nil {
				return err
			}
			m.Status.NodeRef = clusterv1.MachineNodeReference{Name: m.Name}
			return p.c.Status().Update(p.ctx, m)
		})
		if err != nil {
			p.t.Fatal(err)
		}
	}
}

// deleteMachine is a user's kubectl delete machine, and the machine
// controller's part in it: the Machine waits on its finalizer while its
// AzureMachine is deleted.
func (p *capiPart) deleteMachine(am *infrav1.AzureMachine) {
	p.t.Helper()
	for _, m := range p.machines {
		if m.Name == am.Name {
			if err := p.c.Delete(p.ctx, m); err != nil {
				p.t.Fatal(err)
			}
		}
	}
	if err := p.c.Delete(p.ctx, am); err != nil {
		p.t.Fatal(err)
	}
}

// windowsMachine creates, for the Windows MachineDeployment, what its
// MachineSet controller and the kubeadm bootstrap provider would: the
// MachineSet (the first time), a Machine with its bootstrap data, and the
// AzureMachine cloned from the template.
func (p *capiPart) windowsMachine(tmpl *infrav1.AzureMachineTemplate) *infrav1.AzureMachine {
	p.t.Helper()
	mds := &clusterv1.MachineDeploymentList{}
	if err := p.c.List(p.ctx, mds, client.InNamespace(p.cluster.Namespace)); err != nil {
		p.t.Fatal(err)
	}
	var md *clusterv1.MachineDeployment
	for i := range mds.Items {
		if mds.Items[i].Spec.Template.Spec.InfrastructureRef.Name == tmpl.Name {
			md = &mds.Items[i]
		}
	}
	if md == nil {
		p.t.Fatalf("no MachineDeployment uses %s", tmpl.Name)
	}
	labels := map[string]string{clusterv1.ClusterNameLabel: p.cluster.Name, clusterv1.MachineDeploymentNameLabel: md.Name}
	if p.ms == nil {
		p.own(md, p.cluster)
		p.ms = &clusterv1.MachineSet{
			ObjectMeta: metav1.ObjectMeta{Name: md.Name + "-7xk2p", Namespace: md.Namespace, Labels: labels},
			Spec: clusterv1.MachineSetSpec{
				ClusterName: p.cluster.Name, Replicas: ptr.To[int32](1),
				Selector: metav1.LabelSelector{MatchLabels: labels}, Template: md.Spec.Template,
			},
		}
		p.ms.Spec.Template.Labels = labels
		p.ms.OwnerReferences = []metav1.OwnerReference{ownerRef(clusterv1.GroupVersion.WithKind("MachineDeployment"), md)}
		if err := p.c.Create(p.ctx, p.ms); err != nil {
			p.t.Fatal(err)
		}
	}
	name := p.ms.Name + []string{"-q9z8w", "-k4m2t", "-b7r5d"}[len(p.machines)]
	m := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: md.Namespace, Labels: labels, Finalizers: []string{clusterv1.MachineFinalizer},
			OwnerReferences: []metav1.OwnerReference{ownerRef(clusterv1.GroupVersion.WithKind("MachineSet"), p.ms)}},
		Spec: md.Spec.Template.Spec,
	}
	m.Spec.InfrastructureRef = clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "AzureMachine", Name: name}
	m.Spec.Bootstrap.DataSecretName = ptr.To(name + "-bootstrap")
	m.Spec.Bootstrap.ConfigRef = clusterv1.ContractVersionedObjectReference{}
	if err := p.c.Create(p.ctx, m); err != nil {
		p.t.Fatal(err)
	}
	p.machines = append(p.machines, m)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-bootstrap", Namespace: md.Namespace, Labels: map[string]string{clusterv1.ClusterNameLabel: p.cluster.Name},
			OwnerReferences: []metav1.OwnerReference{ownerRef(clusterv1.GroupVersion.WithKind("Machine"), m)}},
		Type: clusterv1.ClusterSecretType,
		Data: map[string][]byte{"value": []byte("<powershell>kubeadm join</powershell>"), "format": []byte("cloud-config")},
	}
	if err := p.c.Create(p.ctx, secret); err != nil {
		p.t.Fatal(err)
	}
	am := &infrav1.AzureMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: md.Namespace, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{ownerRef(clusterv1.GroupVersion.WithKind("Machine"), m)}},
		Spec: tmpl.Spec.Template.Spec,
	}
	if err := p.c.Create(p.ctx, am); err != nil {
		p.t.Fatalf("creating the Windows AzureMachine through winkube's webhooks: %v", err)
	}
	return am
}

// A Cluster API manager as its release names it: kustomize's namePrefix and
// namespace (core/config/default/kustomization.yaml and
// controlplane/kubeadm/config/default/kustomization.yaml, cluster-api
// v1.14.2) on the ServiceAccount "manager".
type capiManager struct{ prefix, namespace string }

var (
	capiCore         = capiManager{"capi-", "capi-system"}
	capiControlPlane = capiManager{"capi-kubeadm-control-plane-", "capi-kubeadm-control-plane-system"}
)

func (m capiManager) user() string {
	return "system:serviceaccount:" + m.namespace + ":" + m.prefix + "manager"
}

// capiManagerRole is the part of a Cluster API release that gives its
// manager the rights of other providers: the aggregated ClusterRole as the
// module ships it (<config>/config/rbac/aggregated_role.yaml) and the
// binding of its ServiceAccount to it (manager_role_aggregation_patch.yaml
// points manager-rolebinding there). Its own manager-role is left out: it
// grants only Cluster API's groups and infrastructure.cluster.x-k8s.io,
// none of winkube's kinds.
func capiManagerRole(t *testing.T, capiDir, config string, m capiManager) []any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(capiDir, config, "config", "rbac", "aggregated_role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(data, role); err != nil {
		t.Fatal(err)
	}
	if role.AggregationRule == nil || len(role.AggregationRule.ClusterRoleSelectors) == 0 {
		t.Fatalf("%s/config/rbac/aggregated_role.yaml has no aggregation rule", config)
	}
	role.Name = m.prefix + role.Name
	return []any{
		role,
		&corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}, ObjectMeta: metav1.ObjectMeta{Namespace: m.namespace, Name: m.prefix + "manager"}},
		&rbacv1.ClusterRoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRoleBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: m.prefix + "manager-rolebinding"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: m.namespace, Name: m.prefix + "manager"}},
		},
	}
}

// clusterAPIMayUseWinkubeKinds runs the real kube-controller-manager's
// ClusterRole aggregation against the management plane, as a management
// cluster's controller-manager does, and asks the API server's RBAC
// whether Cluster API's core and kubeadm control plane managers may read
// and write every winkube kind: they create AzureMachines from templates,
// read AzureClusters and list and delete AzureMachinePoolMachines, and
// their own roles name only infrastructure.cluster.x-k8s.io.
func clusterAPIMayUseWinkubeKinds(t *testing.T, ctx context.Context, p *plane) {
	t.Helper()
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kcm.kubeconfig")
	kubeconfigFor(t, p.env.Config, kubeconfig, "")
	kcmCtx, stop := context.WithCancel(ctx)
	defer stop()
	var kcmLog testenv.SyncBuffer
	kcm := exec.CommandContext(kcmCtx, filepath.Join(bin, "kube-controller-manager"), "--kubeconfig="+kubeconfig,
		"--controllers=clusterrole-aggregation-controller", "--leader-elect=false", "--secure-port=0")
	kcm.Stdout, kcm.Stderr = &kcmLog, &kcmLog
	if err := kcm.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stop(); _ = kcm.Wait() }()

	crds, err := release.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(p.env.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []capiManager{capiCore, capiControlPlane} {
		// The aggregation is asynchronous: wait until the aggregated role
		// holds winkube's rule.
		name := m.prefix + "aggregated-manager-role"
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			r, err := cs.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, rule := range r.Rules {
				if slices.Contains(rule.APIGroups, infrav1.GroupVersion.Group) {
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			log := kcmLog.String()
			t.Errorf("ClusterRole %s gathered no rule for %s from the components (kube-controller-manager's log ends: %s)", name, infrav1.GroupVersion.Group, log[max(0, len(log)-2000):])
			continue
		}
		for _, crd := range crds {
			for _, verb := range []string{"get", "list", "watch", "create", "update", "patch", "delete"} {
				sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
					User: m.user(), Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + m.namespace, "system:authenticated"},
					ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: verb, Group: infrav1.GroupVersion.Group, Resource: crd.Spec.Names.Plural},
				}}, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if !sar.Status.Allowed {
					t.Errorf("%s may not %s %s.%s: Cluster API cannot work with winkube's objects", m.user(), verb, crd.Spec.Names.Plural, infrav1.GroupVersion.Group)
				}
			}
		}
	}
}
