package cli

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/localworld"
	"github.com/winkube/winkube/internal/scheme"
	"github.com/winkube/winkube/internal/testenv"
)

// TestLogsRunCommandRefusesAnAzureClustersOwnCloud: whoever may edit an
// AzureCluster points its Custom azureEnvironment at a server of theirs,
// which the user's CLI trusts (the local world's CA signed it). 'winkube
// logs --via run-command' acting as the cluster's identity refuses, naming
// --custom-cloud, and the server sees no connection: not the identity's
// client secret, nor a token.
func TestLogsRunCommandRefusesAnAzureClustersOwnCloud(t *testing.T) {
	ctx := context.Background()
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	env, err := testenv.Start(testenv.Options{Scheme: scheme.New(), CRDDirectoryPaths: []string{
		filepath.Join(root, "config", "crd"), filepath.Join(root, "config", "capi", "core-v1beta2"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	emu, login, creds := emulatorWithEntra(t, nil)

	cert, err := emu.ServerCertificate("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	evil := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path+" "+string(body))
		mu.Unlock()
		http.Error(w, "recorded", http.StatusBadRequest)
	}))
	evil.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	evil.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			seen = append(seen, "connection")
			mu.Unlock()
		}
	}
	evil.StartTLS()
	t.Cleanup(evil.Close)

	ns := "default"
	for _, obj := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sp"}, Data: map[string][]byte{infrav1.ClientSecretKey: []byte(creds["AZURE_CLIENT_SECRET"])}},
		&infrav1.AzureClusterIdentity{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "id"}, Spec: infrav1.AzureClusterIdentitySpec{
			Type: infrav1.ServicePrincipal, TenantID: creds["AZURE_TENANT_ID"], ClientID: creds["AZURE_CLIENT_ID"], ClientSecret: corev1.SecretReference{Name: "sp", Namespace: ns},
			AllowedNamespaces: &infrav1.AllowedNamespaces{}}},
		&clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo"}, Spec: clusterv1.ClusterSpec{
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "AzureCluster", Name: "demo"}}},
		&infrav1.AzureCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo"}, Spec: infrav1.AzureClusterSpec{
			ResourceGroup: "logs-rg", SubscriptionID: logsSubscription, Location: "westeurope", IdentityRef: &infrav1.IdentityReference{Name: "id"},
			AzureEnvironment: &infrav1.AzureEnvironment{Name: infrav1.AzureCustomCloud, ResourceManagerEndpoint: evil.URL, ActiveDirectoryAuthorityHost: evil.URL}}},
		&infrav1.AzureMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "win-broken", Labels: map[string]string{clusterv1.ClusterNameLabel: "demo"}},
			Spec: infrav1.AzureMachineSpec{AzureVMSpec: infrav1.AzureVMSpec{VMSize: "Standard_D2s_v3", OSDisk: infrav1.OSDisk{OSType: infrav1.Windows}}}},
		&clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo-md-win-7d8f9-xk2p4", Labels: map[string]string{clusterv1.ClusterNameLabel: "demo"}},
			Spec: clusterv1.MachineSpec{ClusterName: "demo", Bootstrap: clusterv1.Bootstrap{DataSecretName: ptr.To("data")},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "AzureMachine", Name: "win-broken"}}},
	} {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatalf("%T %s: %v", obj, obj.GetName(), err)
		}
	}
	state := t.TempDir()
	if err := os.WriteFile(filepath.Join(state, localworld.ManagementKubeconfig), env.Environment.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := localworld.WriteARMEndpoint(filepath.Join(state, localworld.ARMEndpointFile), localworld.ARMEndpoint{
		ResourceManager: emu.URL(), Authority: login.URL(), CACertPEM: string(emu.CACertPEM())}); err != nil {
		t.Fatal(err)
	}

	_, _, err = winkube(ctx, "logs", "--state-dir", state, "win-broken", "--via", "run-command", "--write-to", filepath.Join(t.TempDir(), "x"))
	mu.Lock()
	got := append([]string(nil), seen...)
	mu.Unlock()
	if len(got) > 0 {
		t.Fatalf("winkube logs reached the AzureCluster's own server as the identity: %q", got)
	}
	if err == nil || !strings.Contains(err.Error(), evil.URL) || !strings.Contains(err.Error(), "--custom-cloud") {
		t.Fatalf("winkube logs: %v; want a refusal naming the endpoint and --custom-cloud", err)
	}
	// A --custom-cloud that is not one says how to write it.
	if _, _, err := winkube(ctx, "logs", "--state-dir", state, "win-broken", "--via", "run-command", "--custom-cloud", "arm="+evil.URL,
		"--write-to", filepath.Join(t.TempDir(), "y")); err == nil || !strings.Contains(err.Error(), "name=NAME") {
		t.Errorf("a --custom-cloud without a name: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) > 0 {
		t.Fatal(fmt.Sprint("the server was reached: ", seen))
	}
}
