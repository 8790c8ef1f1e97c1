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
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/crypto/ssh"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	clusterctl "sigs.k8s.io/cluster-api/cmd/clusterctl/client"
	clusterctllog "sigs.k8s.io/cluster-api/cmd/clusterctl/log"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/emulator/entra"
	"github.com/winkube/winkube/internal/flavors"
	"github.com/winkube/winkube/internal/poll"
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

// capiVersion is the Cluster API module winkube is built with, as go.mod
// pins it.
func capiVersion(t *testing.T, root string) string {
	t.Helper()
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "sigs.k8s.io/cluster-api")
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
func localCAPIRelease(t *testing.T, root, repo, label, file, namespace, version string, crdDirs ...string) string {
	t.Helper()
	objs := []any{map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": namespace}}}
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
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// forbidden returns the manager's log lines about requests RBAC refused.
func (l *lockedBuffer) forbidden() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(l.b.String(), "\n") {
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
// emulator, an AzureCluster and a Windows AzureMachine Ready, and clusterctl
// move's object graph.
func TestClusterctlInstallsWinkube(t *testing.T) {
	start := time.Now()
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	s := scheme.New()
	if err := clusterctlv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	env, err := testenv.Start(testenv.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := env.Client
	dir := t.TempDir()
	adminKubeconfig := filepath.Join(dir, "admin.kubeconfig")
	kubeconfigFor(t, env.Config, adminKubeconfig, "")

	// Local repositories: Cluster API's providers at the version winkube is
	// built with, cert-manager, and winkube's own release as `make release`
	// writes it.
	repo := filepath.Join(dir, "repository")
	capi := capiVersion(t, root)
	coreURL := localCAPIRelease(t, root, repo, "cluster-api", "core-components.yaml", "capi-system", capi, "core-v1beta2", "addons-v1beta2")
	bootstrapURL := localCAPIRelease(t, root, repo, "bootstrap-kubeadm", "bootstrap-components.yaml", "capi-kubeadm-bootstrap-system", capi, "bootstrap-kubeadm-v1beta2")
	controlPlaneURL := localCAPIRelease(t, root, repo, "control-plane-kubeadm", "control-plane-components.yaml", "capi-kubeadm-control-plane-system", capi, "controlplane-kubeadm-v1beta2")
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
	kubeconfig := clusterctl.Kubeconfig{Path: adminKubeconfig}

	// clusterctl init --infrastructure winkube:v0.1.0
	installed, err := cc.Init(ctx, clusterctl.InitOptions{Kubeconfig: kubeconfig, InfrastructureProviders: []string{release.ProviderName + ":" + e2eVersion}})
	if err != nil {
		t.Fatalf("clusterctl init: %v", err)
	}
	var names []string
	for _, comp := range installed {
		names = append(names, comp.ManifestLabel()+"@"+comp.Version())
	}
	sort.Strings(names)
	if want := "bootstrap-kubeadm@" + capi + " cluster-api@" + capi + " control-plane-kubeadm@" + capi + " infrastructure-winkube@" + e2eVersion; strings.Join(names, " ") != want {
		t.Fatalf("clusterctl init installed %v, want %s", names, want)
	}
	t.Logf("clusterctl init: %s", time.Since(start).Round(time.Millisecond))
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
	deployment := &appsv1.Deployment{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: release.Namespace, Name: release.Deployment}, deployment); err != nil {
		t.Fatal(err)
	}
	if img := deployment.Spec.Template.Spec.Containers[0].Image; img != image {
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
	sa := "system:serviceaccount:" + release.Namespace + ":" + release.ServiceAccount
	saKubeconfig := filepath.Join(dir, "manager.kubeconfig")
	kubeconfigFor(t, env.Config, saKubeconfig, sa, "system:serviceaccounts", "system:serviceaccounts:"+release.Namespace, "system:authenticated")
	saRest := rest.CopyConfig(env.Config)
	saRest.Impersonate = rest.ImpersonationConfig{UserName: sa, Groups: []string{"system:serviceaccounts", "system:authenticated"}}
	saClient, err := client.New(saRest, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := saClient.List(ctx, &corev1.PodList{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the API server does not enforce RBAC on the ServiceAccount (listing Pods: %v)", err)
	}

	// cert-manager's part: the Certificate's Secret, and its CA in the
	// webhook configurations that ask for it.
	certObj := &unstructured.Unstructured{}
	certObj.SetAPIVersion("cert-manager.io/v1")
	certObj.SetKind("Certificate")
	if err := c.Get(ctx, client.ObjectKey{Namespace: release.Namespace, Name: release.Certificate}, certObj); err != nil {
		t.Fatalf("the components' Certificate: %v", err)
	}
	dnsNames, _, _ := unstructured.NestedStringSlice(certObj.Object, "spec", "dnsNames")
	secretName, _, _ := unstructured.NestedString(certObj.Object, "spec", "secretName")
	caPEM, certPEM, keyPEM := servingCert(t, dnsNames)
	if err := c.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: release.Namespace, Name: secretName},
		Type:       corev1.SecretTypeTLS, Data: map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM, "ca.crt": caPEM},
	}); err != nil {
		t.Fatal(err)
	}
	// The kubelet would mount that Secret where the Deployment says.
	certDir := filepath.Join(dir, "serving-certs")
	_ = os.MkdirAll(certDir, 0o700)
	_ = os.WriteFile(filepath.Join(certDir, "tls.crt"), certPEM, 0o600)
	_ = os.WriteFile(filepath.Join(certDir, "tls.key"), keyPEM, 0o600)
	webhookPort := freePort(t)
	injectCA(t, ctx, c, caPEM, webhookPort)

	// The manager with the Deployment's own arguments, as the ServiceAccount.
	// Its own credential (the cluster names no identity) is a service
	// principal of the emulator's Entra ID, from the environment.
	directory, err := entra.New(entra.Options{})
	if err != nil {
		t.Fatal(err)
	}
	emu, err := arm.New(arm.Options{Directory: directory, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := emu.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer emu.Close()
	entraCert, err := emu.ServerCertificate("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	login, err := entra.Serve(directory, "127.0.0.1:0", entraCert)
	if err != nil {
		t.Fatal(err)
	}
	defer login.Close()
	sp, spSecret, err := directory.CreateServicePrincipal("00000000-0000-4000-8000-0000000c1c7e", "clusterctl-e2e")
	if err != nil {
		t.Fatal(err)
	}
	if err := directory.AssignRole(sp.ObjectID, "Contributor", "/"); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AZURE_TENANT_ID", sp.TenantID)
	t.Setenv("AZURE_CLIENT_ID", sp.ClientID)
	t.Setenv("AZURE_CLIENT_SECRET", spSecret)
	armCA := filepath.Join(dir, "arm-ca.pem")
	_ = os.WriteFile(armCA, emu.CACertPEM(), 0o600)
	healthPort := freePort(t)
	args := []string{"manager"}
	for _, a := range deployment.Spec.Template.Spec.Containers[0].Args {
		switch {
		case strings.HasPrefix(a, "--metrics-bind-address="), strings.HasPrefix(a, "--health-probe-bind-address="),
			strings.HasPrefix(a, "--webhook-port="), strings.HasPrefix(a, "--webhook-cert-dir="):
			// This process's own ports and the mounted Secret's folder.
		default:
			args = append(args, a)
		}
	}
	args = append(args, "--kubeconfig", saKubeconfig, "--leader-election-namespace", release.Namespace,
		"--metrics-bind-address", "0", "--health-probe-bind-address", "127.0.0.1:"+strconv.Itoa(healthPort),
		"--webhook-port", strconv.Itoa(webhookPort), "--webhook-cert-dir", certDir,
		"--arm-endpoint", emu.URL(), "--arm-ca-file", armCA, "--entra-endpoint", login.URL(), "--requeue", "100ms")
	// Its own process, the binary the image carries, as the Pod would run it.
	managerLog := &lockedBuffer{}
	manager := exec.Command(winkubeBinary(t), args...)
	manager.Stdout, manager.Stderr = managerLog, managerLog
	if err := manager.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- manager.Wait() }()
	defer func() {
		_ = manager.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("winkube manager did not exit cleanly on SIGTERM: %v", err)
			}
		case <-time.After(time.Minute):
			_ = manager.Process.Kill()
			t.Error("winkube manager did not stop on SIGTERM")
		}
	}()
	poll.Until(t, 2*time.Minute, func() string {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", healthPort))
		if err != nil {
			return "manager not ready: " + err.Error()
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Sprintf("manager readyz %d", resp.StatusCode)
		}
		return ""
	})

	// kubectl apply of the rendered cluster, through winkube's webhooks.
	objs := tmpl.Objs()
	for i := range objs {
		o := objs[i].DeepCopy()
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
	// A request the shipped RBAC refuses fails the test at once, naming it.
	untilReady := func(cond func() string) {
		t.Helper()
		poll.Until(t, 3*time.Minute, func() string {
			if f := managerLog.forbidden(); f != "" {
				t.Fatalf("the components' RBAC refuses the manager a request:\n%s", f)
			}
			return cond()
		})
	}
	untilReady(func() string {
		if err := c.Get(ctx, client.ObjectKeyFromObject(ac), ac); err != nil {
			return err.Error()
		}
		if !ptr.Deref(ac.Status.Initialization.Provisioned, false) || !meta.IsStatusConditionTrue(ac.Status.Conditions, clusterv1.ReadyCondition) {
			return fmt.Sprintf("AzureCluster not Ready: %+v", ac.Status.Conditions)
		}
		return ""
	})
	patch := client.MergeFrom(cluster.DeepCopy())
	cluster.Status.Initialization.InfrastructureProvisioned = ptr.To(true)
	if err := c.Status().Patch(ctx, cluster, patch); err != nil {
		t.Fatal(err)
	}
	am := capiPart.windowsMachine(windowsTemplate)
	untilReady(func() string {
		if err := c.Get(ctx, client.ObjectKeyFromObject(am), am); err != nil {
			return err.Error()
		}
		if !ptr.Deref(am.Status.Initialization.Provisioned, false) || !meta.IsStatusConditionTrue(am.Status.Conditions, clusterv1.ReadyCondition) {
			return fmt.Sprintf("Windows AzureMachine not Ready: %+v", am.Status.Conditions)
		}
		return ""
	})
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
// references, the MachineDeployment's MachineSet and Machine, and the
// bootstrap provider's data Secret.
type capiPart struct {
	t       *testing.T
	ctx     context.Context
	c       client.Client
	cluster *clusterv1.Cluster
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

// windowsMachine creates, for the Windows MachineDeployment, what its
// MachineSet controller and the kubeadm bootstrap provider would: the
// MachineSet, a Machine with its bootstrap data, and the AzureMachine
// cloned from the template.
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
	p.own(md, p.cluster)
	labels := map[string]string{clusterv1.ClusterNameLabel: p.cluster.Name, clusterv1.MachineDeploymentNameLabel: md.Name}
	ms := &clusterv1.MachineSet{
		ObjectMeta: metav1.ObjectMeta{Name: md.Name + "-7xk2p", Namespace: md.Namespace, Labels: labels},
		Spec: clusterv1.MachineSetSpec{
			ClusterName: p.cluster.Name, Replicas: ptr.To[int32](1),
			Selector: metav1.LabelSelector{MatchLabels: labels}, Template: md.Spec.Template,
		},
	}
	ms.Spec.Template.Labels = labels
	ms.OwnerReferences = []metav1.OwnerReference{ownerRef(clusterv1.GroupVersion.WithKind("MachineDeployment"), md)}
	if err := p.c.Create(p.ctx, ms); err != nil {
		p.t.Fatal(err)
	}
	name := ms.Name + "-q9z8w"
	m := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: md.Namespace, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{ownerRef(clusterv1.GroupVersion.WithKind("MachineSet"), ms)}},
		Spec: md.Spec.Template.Spec,
	}
	m.Spec.InfrastructureRef = clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "AzureMachine", Name: name}
	m.Spec.Bootstrap.DataSecretName = ptr.To(name + "-bootstrap")
	m.Spec.Bootstrap.ConfigRef = clusterv1.ContractVersionedObjectReference{}
	if err := p.c.Create(p.ctx, m); err != nil {
		p.t.Fatal(err)
	}
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
