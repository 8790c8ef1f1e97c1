package release_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clusterctl "sigs.k8s.io/cluster-api/cmd/clusterctl/client"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/emulator/entra"
	"github.com/winkube/winkube/internal/azure/credentials"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/release"
	"github.com/winkube/winkube/internal/testenv"
)

// azureWorld is the emulated Azure every management plane of a test talks
// to, with a service principal of its Entra ID as the managers' own
// credential (from the environment, as a Deployment would get it).
type azureWorld struct {
	emu    *arm.Server
	login  *entra.Server
	caFile string
	// cfg reaches ARM as that principal, for what the test itself reads
	// and what it plays the user for.
	cfg endpoint.Config
}

func newAzureWorld(t *testing.T, dir string) *azureWorld {
	t.Helper()
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
	t.Cleanup(func() { _ = emu.Close() })
	entraCert, err := emu.ServerCertificate("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	login, err := entra.Serve(directory, "127.0.0.1:0", entraCert)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = login.Close() })
	sp, spSecret, err := directory.CreateServicePrincipal("00000000-0000-4000-8000-0000000c1c7e", "clusterctl-e2e")
	if err != nil {
		t.Fatal(err)
	}
	if err := directory.AssignRole(sp.ObjectID, "Contributor", "/"); err != nil {
		t.Fatal(err)
	}
	// The flavors' machines get system-assigned identities, whose roles
	// the manager assigns.
	if err := directory.AssignRole(sp.ObjectID, "User Access Administrator", "/"); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AZURE_TENANT_ID", sp.TenantID)
	t.Setenv("AZURE_CLIENT_ID", sp.ClientID)
	t.Setenv("AZURE_CLIENT_SECRET", spSecret)
	// The generated clusters have no identityRef: the credentials Secret
	// also enables the manager's credential for their namespace.
	t.Setenv("WINKUBE_MANAGER_CREDENTIAL_NAMESPACES", "default")
	caFile := filepath.Join(dir, "arm-ca.pem")
	if err := os.WriteFile(caFile, emu.CACertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := endpoint.Config{ResourceManagerEndpoint: emu.URL(), AuthorityHost: login.URL(), CACertPEM: emu.CACertPEM()}
	transport, err := cfg.Shared()
	if err != nil {
		t.Fatal(err)
	}
	cred, err := credentials.New(credentials.Spec{Kind: credentials.ClientSecret, TenantID: sp.TenantID, ClientID: sp.ClientID, Secret: spSecret,
		AuthorityHost: login.URL(), Transport: transport.Transport})
	if err != nil {
		t.Fatal(err)
	}
	cfg = transport
	cfg.Credential = cred
	return &azureWorld{emu: emu, login: login, caFile: caFile, cfg: cfg}
}

// plane is a management cluster: an API server (envtest) into which
// clusterctl init installed Cluster API's providers and winkube, and, once
// started, winkube's manager running in its own process with the
// Deployment's arguments as the components' ServiceAccount.
type plane struct {
	name       string
	env        *testenv.Env
	c          client.Client
	kubeconfig clusterctl.Kubeconfig
	installed  []clusterctl.Components
	log        *lockedBuffer
}

// newPlane starts an API server and runs clusterctl init --infrastructure
// winkube against it.
func newPlane(t *testing.T, ctx context.Context, cc clusterctl.Client, s *runtime.Scheme, dir, name string) *plane {
	t.Helper()
	env, err := testenv.Start(testenv.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	p := &plane{name: name, env: env, c: env.Client, log: &lockedBuffer{}}
	path := filepath.Join(dir, name+".kubeconfig")
	kubeconfigFor(t, env.Config, path, "")
	p.kubeconfig = clusterctl.Kubeconfig{Path: path}
	start := time.Now()
	p.installed, err = cc.Init(ctx, clusterctl.InitOptions{Kubeconfig: p.kubeconfig, InfrastructureProviders: []string{release.ProviderName + ":" + e2eVersion}})
	if err != nil {
		t.Fatalf("clusterctl init (%s): %v", name, err)
	}
	t.Logf("clusterctl init (%s): %s", name, time.Since(start).Round(time.Millisecond))
	return p
}

// deployment is the manager's Deployment as clusterctl installed it.
func (p *plane) deployment(t *testing.T, ctx context.Context) *appsv1.Deployment {
	t.Helper()
	d := &appsv1.Deployment{}
	if err := p.c.Get(ctx, client.ObjectKey{Namespace: release.Namespace, Name: release.Deployment}, d); err != nil {
		t.Fatal(err)
	}
	return d
}

// startManager plays cert-manager (the Certificate's Secret, its CA in the
// webhook configurations) and the kubelet (the manager's process, with the
// Deployment's arguments and the ServiceAccount's rights), and waits for the
// manager to be ready. It is stopped, and must exit cleanly, when the test
// ends.
func (p *plane) startManager(t *testing.T, ctx context.Context, az *azureWorld, dir string) {
	t.Helper()
	dir = filepath.Join(dir, p.name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	sa := "system:serviceaccount:" + release.Namespace + ":" + release.ServiceAccount
	saKubeconfig := filepath.Join(dir, "manager.kubeconfig")
	kubeconfigFor(t, p.env.Config, saKubeconfig, sa, "system:serviceaccounts", "system:serviceaccounts:"+release.Namespace, "system:authenticated")

	certObj := &unstructured.Unstructured{}
	certObj.SetAPIVersion("cert-manager.io/v1")
	certObj.SetKind("Certificate")
	if err := p.c.Get(ctx, client.ObjectKey{Namespace: release.Namespace, Name: release.Certificate}, certObj); err != nil {
		t.Fatalf("the components' Certificate: %v", err)
	}
	dnsNames, _, _ := unstructured.NestedStringSlice(certObj.Object, "spec", "dnsNames")
	secretName, _, _ := unstructured.NestedString(certObj.Object, "spec", "secretName")
	caPEM, certPEM, keyPEM := servingCert(t, dnsNames)
	if err := p.c.Create(ctx, &corev1.Secret{
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
	injectCA(t, ctx, p.c, caPEM, webhookPort)

	healthPort := freePort(t)
	args := []string{"manager"}
	for _, a := range p.deployment(t, ctx).Spec.Template.Spec.Containers[0].Args {
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
		"--arm-endpoint", az.emu.URL(), "--arm-ca-file", az.caFile, "--entra-endpoint", az.login.URL(), "--requeue", "100ms")
	// Its own process, the binary the image carries, as the Pod would run it.
	manager := exec.Command(winkubeBinary(t), args...)
	manager.Stdout, manager.Stderr = p.log, p.log
	if err := manager.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- manager.Wait() }()
	t.Cleanup(func() {
		_ = manager.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("winkube manager (%s) did not exit cleanly on SIGTERM: %v", p.name, err)
			}
		case <-time.After(time.Minute):
			_ = manager.Process.Kill()
			t.Errorf("winkube manager (%s) did not stop on SIGTERM", p.name)
		}
	})
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
}

// until polls cond like poll.Until, and fails the test at once, naming it,
// when the shipped RBAC refuses the manager a request.
func (p *plane) until(t *testing.T, timeout time.Duration, cond func() string) {
	t.Helper()
	poll.Until(t, timeout, func() string {
		if f := p.log.forbidden(); f != "" {
			t.Fatalf("the components' RBAC refuses the manager (%s) a request:\n%s", p.name, f)
		}
		return cond()
	})
}

// hasVM reports whether Azure holds the VM (also while deleting it).
func (az *azureWorld) hasVM(name string) bool {
	for _, id := range az.emu.ResourceIDs() {
		if strings.HasSuffix(strings.ToLower(id), "/virtualmachines/"+strings.ToLower(name)) {
			return true
		}
	}
	return false
}

// teamNetwork is what a platform team brings: a resource group of its own
// with an NSG and a VNet holding the team's subnet. A cluster may add
// subnets to that VNet, and must leave the rest as the team made it.
type teamNetwork struct {
	rg, vnet string
	vnets    *armnetwork.VirtualNetworksClient
	// before is every resource ID Azure held once the team's network
	// existed, and view the VNet as the team made it.
	before []string
	view   string
}

func newTeamNetwork(t *testing.T, ctx context.Context, az *azureWorld) *teamNetwork {
	t.Helper()
	tn := &teamNetwork{rg: "platform-network", vnet: "shared-vnet"}
	opts, err := az.cfg.ClientOptions()
	if err != nil {
		t.Fatal(err)
	}
	groups, _ := armresources.NewResourceGroupsClient(e2eSubscription, az.cfg.Credential, opts)
	nsgs, _ := armnetwork.NewSecurityGroupsClient(e2eSubscription, az.cfg.Credential, opts)
	tn.vnets, _ = armnetwork.NewVirtualNetworksClient(e2eSubscription, az.cfg.Credential, opts)
	owner := map[string]*string{"team": to.Ptr("platform")}
	if _, err := groups.CreateOrUpdate(ctx, tn.rg, armresources.ResourceGroup{Location: to.Ptr("westeurope"), Tags: owner}, nil); err != nil {
		t.Fatal(err)
	}
	np, err := nsgs.BeginCreateOrUpdate(ctx, tn.rg, "platform-nsg", armnetwork.SecurityGroup{Location: to.Ptr("westeurope"), Tags: owner}, nil)
	if err != nil {
		t.Fatal(err)
	}
	nsg, err := np.PollUntilDone(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	vp, err := tn.vnets.BeginCreateOrUpdate(ctx, tn.rg, tn.vnet, armnetwork.VirtualNetwork{
		Location: to.Ptr("westeurope"), Tags: owner,
		Properties: &armnetwork.VirtualNetworkPropertiesFormat{
			// The address space winkube's default subnets fit in.
			AddressSpace: &armnetwork.AddressSpace{AddressPrefixes: []*string{to.Ptr("10.0.0.0/12")}},
			Subnets: []*armnetwork.Subnet{{Name: to.Ptr("platform-subnet"), Properties: &armnetwork.SubnetPropertiesFormat{
				AddressPrefix: to.Ptr("10.15.0.0/24"), NetworkSecurityGroup: &armnetwork.SecurityGroup{ID: nsg.ID},
			}}},
		},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := vp.PollUntilDone(ctx, nil); err != nil {
		t.Fatal(err)
	}
	tn.before = az.emu.ResourceIDs()
	tn.view = tn.read(t, ctx)
	return tn
}

// read is the team's VNet without what Azure changes on every write to it
// (its ETag) and without the cluster's subnets.
func (tn *teamNetwork) read(t *testing.T, ctx context.Context) string {
	t.Helper()
	v, err := tn.vnets.Get(ctx, tn.rg, tn.vnet, nil)
	if err != nil {
		t.Fatal(err)
	}
	v.Etag = nil
	var teams []*armnetwork.Subnet
	for _, sn := range v.Properties.Subnets {
		if *sn.Name == "platform-subnet" {
			sn.Etag = nil
			teams = append(teams, sn)
		}
	}
	v.Properties.Subnets = teams
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// use points the rendered AzureCluster at the team's VNet.
func (tn *teamNetwork) use(t *testing.T, ac *unstructured.Unstructured) {
	t.Helper()
	if err := unstructured.SetNestedField(ac.Object, tn.rg, "spec", "networkSpec", "vnet", "resourceGroup"); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(ac.Object, tn.vnet, "spec", "networkSpec", "vnet", "name"); err != nil {
		t.Fatal(err)
	}
}

// unchanged fails the test unless Azure holds exactly what it held before
// the cluster, and the team's VNet is as the team made it.
func (tn *teamNetwork) unchanged(t *testing.T, ctx context.Context, az *azureWorld) {
	t.Helper()
	if now := az.emu.ResourceIDs(); strings.Join(now, "\n") != strings.Join(tn.before, "\n") {
		t.Errorf("Azure holds, after the cluster's deletion:\n%s\nbefore the cluster it held:\n%s", strings.Join(now, "\n"), strings.Join(tn.before, "\n"))
	}
	if now := tn.read(t, ctx); now != tn.view {
		t.Errorf("the team's VNet changed:\n%s\nwas:\n%s", now, tn.view)
	}
}
