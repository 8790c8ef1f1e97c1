package cli

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/emulator/machines/vmagent"
	"github.com/winkube/winkube/emulator/machines/vmdisk"
	"github.com/winkube/winkube/emulator/machines/vmshell"
	"github.com/winkube/winkube/internal/azure/azuretest"
	"github.com/winkube/winkube/internal/azure/credentials"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/networkinterfaces"
	"github.com/winkube/winkube/internal/azure/resourcegroups"
	"github.com/winkube/winkube/internal/azure/virtualmachines"
	"github.com/winkube/winkube/internal/azure/vmimages"
	"github.com/winkube/winkube/internal/azure/vnets"
	"github.com/winkube/winkube/internal/images"
	"github.com/winkube/winkube/internal/localworld"
	"github.com/winkube/winkube/internal/nodelogs"
	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/testenv"
)

const logsSubscription = "00000000-0000-4000-8000-00000000a135"

// TestLogsOfAMachineThatNeverJoined: a Windows VM whose cloudbase-init
// failed has no node and no address; 'winkube logs --state-dir DIR
// MACHINE' finds it by its Machine name, SSH cannot reach it, and the logs
// come through the emulator's Run Command, answered by the VM's guest
// agent and simulated shell over its disk, as the cluster's identity. The
// index says so, and which commands the machine refused.
func TestLogsOfAMachineThatNeverJoined(t *testing.T) {
	ctx := context.Background()
	env, ns := logsEnv(t)

	// The VM's disk: cloudbase-init ran and failed, nothing else started.
	disk := vmdisk.Disk{Root: t.TempDir(), Windows: true, User: vmagent.WindowsUser}
	vmdisk.NewLogs(disk).Write(vmdisk.Boot, "cloudbaseinit.plugins.common.userdata: preKubeadmCommands failed: exit status 1")
	guest := &arm.RecordingRuntime{Answer: func(_ string, c arm.Command) (arm.CommandResult, error) {
		res := vmagent.Run(ctx, &vmshell.Machine{Hostname: "win-broken", Disk: disk}, c.Script, c.Parameters)
		return arm.CommandResult{Stdout: res.Stdout, Stderr: res.Stderr, ExitCode: res.ExitCode}, nil
	}}
	cfg, tenant, clientID, secret := azureWithGuest(t, guest)
	windowsVM(t, ctx, cfg, "logs-rg", "win-broken", guest)

	// The management cluster: the cluster, its identity, and a Machine
	// whose AzureMachine is provisioned with no node.
	state := logsManagement(t, ctx, env, ns, cfg, tenant, clientID, secret, nil)

	archive := filepath.Join(t.TempDir(), "win-broken.tar.gz")
	start := time.Now()
	out, errOut, err := winkube(ctx, "logs", "--state-dir", state, "demo-md-win-7d8f9-xk2p4", "--write-to", archive)
	t.Logf("winkube logs in %s:\n%s%s", time.Since(start).Round(time.Millisecond), errOut, out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errOut, "SSH could not reach it") || !strings.Contains(errOut, "through Azure's Run Command instead") {
		t.Errorf("the fallback is not said on stderr:\n%s", errOut)
	}
	files := readArchive(t, archive)
	if !strings.Contains(files["cloudbase-init.log"], "preKubeadmCommands failed") {
		t.Errorf("cloudbase-init.log: %q", files["cloudbase-init.log"])
	}
	var idx nodelogs.Index
	if err := json.Unmarshal([]byte(files[nodelogs.IndexFile]), &idx); err != nil {
		t.Fatalf("%v\n%s", err, files[nodelogs.IndexFile])
	}
	if idx.Transport != "Run Command" || !strings.Contains(idx.WhyRunCommand, "SSH could not reach it") || idx.Limit != 4096 ||
		idx.Machine.Object != "AzureMachine/win-broken" || idx.Machine.OS != "Windows" || !strings.Contains(idx.Machine.Azure, "VM win-broken in resource group logs-rg") {
		t.Errorf("index: %+v", idx)
	}
	items := map[string]nodelogs.IndexItem{}
	for _, it := range idx.Items {
		items[it.File] = it
	}
	if it := items["cloudbase-init.log"]; it.Error != "" || it.Bytes == 0 || it.Transport != "Run Command" {
		t.Errorf("cloudbase-init.log: %+v", it)
	}
	if it := items["services.log"]; !strings.Contains(it.Error, `cannot run "Get-Service"`) {
		t.Errorf("Get-Service is refused by the machine, and the index says so: %+v", it)
	}
	if it := items["kubelet.log"]; !strings.Contains(it.Error, "Cannot find path") {
		t.Errorf("a kubelet that never ran has no log: %+v", it)
	}
	if idx.Collected == 0 || idx.Failed == 0 || idx.Collected+idx.Failed != len(nodelogs.Plan(true)) {
		t.Errorf("collected %d, failed %d of %d", idx.Collected, idx.Failed, len(nodelogs.Plan(true)))
	}

	// Asked for Run Command, by the AzureMachine's name: no SSH tried.
	dir := filepath.Join(t.TempDir(), "again")
	if _, errOut, err := winkube(ctx, "logs", "--state-dir", state, "win-broken", "--via", "run-command", "--write-to", dir); err != nil || strings.Contains(errOut, "SSH") {
		t.Fatalf("--via run-command: %v\n%s", err, errOut)
	}
	var again nodelogs.Index
	if b, err := os.ReadFile(filepath.Join(dir, nodelogs.IndexFile)); err != nil || json.Unmarshal(b, &again) != nil || again.WhyRunCommand != "--via run-command" {
		t.Errorf("index of --via run-command: %v %+v", err, again)
	}

	// Bad input says what to change.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"logs", "--state-dir", state, "nope", "--via", "run-command"}, "'kubectl get machines,azuremachines -n " + ns + "' lists them"},
		{[]string{"logs", "--state-dir", state, "nope"}, "a machine that never joined has no node"},
		{[]string{"logs", "--state-dir", state, "win-broken", "--via", "ssh"}, "no private address yet"},
		{[]string{"logs", "--state-dir", state, "win-broken", "--via", "rdp"}, "want auto, ssh or run-command"},
		{[]string{"logs", "--state-dir", state, "win-broken", "--cluster", "other", "--via", "run-command"}, "not of other"},
	} {
		if _, _, err := winkube(ctx, append(c.args, "--write-to", filepath.Join(t.TempDir(), "x"))...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("winkube %s: %v, want %q", strings.Join(c.args, " "), err, c.want)
		}
	}
}

// logsEnv is a management cluster's API server with winkube's and Cluster
// API's CRDs (the package's shared one) and a namespace of the test's own
// in it.
func logsEnv(t *testing.T) (*testenv.Env, string) {
	t.Helper()
	env := managementEnv(t)
	return env, testNamespace(t, env)
}

// logsManagement creates, in the management cluster, the cluster "demo"
// (in the cloud env names, the world's when nil), its identity acting as
// the service principal, and a Machine whose AzureMachine "win-broken" has
// no node; and the state a local world leaves for commands beside it,
// whose Azure is cfg's.
func logsManagement(t *testing.T, ctx context.Context, env *testenv.Env, ns string, cfg endpoint.Config, tenant, clientID, secret string, azEnv *infrav1.AzureEnvironment) (state string) {
	t.Helper()
	for _, obj := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sp"}, Data: map[string][]byte{infrav1.ClientSecretKey: []byte(secret)}},
		&infrav1.AzureClusterIdentity{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "id"}, Spec: infrav1.AzureClusterIdentitySpec{
			Type: infrav1.ServicePrincipal, TenantID: tenant, ClientID: clientID, ClientSecret: corev1.SecretReference{Name: "sp", Namespace: ns},
			AllowedNamespaces: &infrav1.AllowedNamespaces{}}},
		&clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo"}, Spec: clusterv1.ClusterSpec{
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "AzureCluster", Name: "demo"}}},
		&infrav1.AzureCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo"}, Spec: infrav1.AzureClusterSpec{
			ResourceGroup: "logs-rg", SubscriptionID: logsSubscription, Location: "westeurope", IdentityRef: &infrav1.IdentityReference{Name: "id"}, AzureEnvironment: azEnv}},
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
	state = t.TempDir()
	if err := os.WriteFile(filepath.Join(state, localworld.ManagementKubeconfig), kubeconfigIn(t, env, ns), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := localworld.WriteARMEndpoint(filepath.Join(state, localworld.ARMEndpointFile), localworld.ARMEndpoint{
		ResourceManager: cfg.ResourceManagerEndpoint, Authority: cfg.AuthorityHost, CACertPEM: string(cfg.CACertPEM)}); err != nil {
		t.Fatal(err)
	}
	return state
}

// azureWithGuest starts an emulator whose machines' VM agent is guest, its
// Entra ID, a service principal with Contributor, and returns the endpoint
// acting as it.
func azureWithGuest(t *testing.T, guest *arm.RecordingRuntime) (cfg endpoint.Config, tenant, clientID, secret string) {
	t.Helper()
	emu, login, env := emulatorWithEntra(t, guest)
	tenant, clientID, secret = env["AZURE_TENANT_ID"], env["AZURE_CLIENT_ID"], env["AZURE_CLIENT_SECRET"]
	cfg = endpoint.Config{ResourceManagerEndpoint: emu.URL(), AuthorityHost: login.URL(), CACertPEM: emu.CACertPEM()}
	shared, err := cfg.Shared()
	if err != nil {
		t.Fatal(err)
	}
	cred, err := credentials.New(credentials.Spec{Kind: credentials.ClientSecret, TenantID: tenant, ClientID: clientID, Secret: secret,
		AuthorityHost: login.URL(), Transport: shared.Transport})
	if err != nil {
		t.Fatal(err)
	}
	shared.Credential = cred
	return shared, tenant, clientID, secret
}

// windowsVM creates a Windows VM with its network, as an AzureMachine's,
// and waits until it runs.
func windowsVM(t *testing.T, ctx context.Context, cfg endpoint.Config, rg, name string, guest *arm.RecordingRuntime) {
	t.Helper()
	until := func(step func(tok string) (string, bool, error)) {
		if err := azuretest.Drive(t, step); err != nil {
			t.Fatal(err)
		}
	}
	groups, err := resourcegroups.New(logsSubscription, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := groups.Reconcile(ctx, resourcegroups.Spec{Name: rg, Location: "westeurope"}); err != nil {
		t.Fatal(err)
	}
	vn, err := vnets.New(logsSubscription, cfg)
	if err != nil {
		t.Fatal(err)
	}
	until(func(tok string) (string, bool, error) {
		return vn.Reconcile(ctx, vnets.Spec{ResourceGroup: rg, Name: "vnet", Location: "westeurope", CIDRs: []string{"10.0.0.0/8"},
			Subnets: []vnets.Subnet{{Name: "node", CIDRs: []string{"10.1.0.0/16"}}}}, tok)
	})
	nics, err := networkinterfaces.New(logsSubscription, cfg)
	if err != nil {
		t.Fatal(err)
	}
	base := "/subscriptions/" + logsSubscription + "/resourceGroups/" + rg + "/providers/Microsoft.Network/"
	until(func(tok string) (string, bool, error) {
		return nics.Reconcile(ctx, networkinterfaces.Spec{ResourceGroup: rg, Name: name + "-nic", Location: "westeurope", SubnetID: base + "virtualNetworks/vnet/subnets/node"}, tok)
	})
	lister, err := vmimages.New(logsSubscription, cfg)
	if err != nil {
		t.Fatal(err)
	}
	img, err := images.NewResolver(lister, time.Hour).Resolve(ctx, nil, images.Request{OS: infrav1.Windows, KubernetesVersion: "v1.31.1", Location: "westeurope"})
	if err != nil {
		t.Fatal(err)
	}
	spec := virtualmachines.Spec{ResourceGroup: rg, Name: name, ComputerName: name, Location: "westeurope", Size: "Standard_D2s_v3", Windows: true,
		AdminUsername: "capi", AdminPassword: "Aa1!" + strings.Repeat("x", 12), NICID: base + "networkInterfaces/" + name + "-nic"}
	if g := img.ComputeGallery; g != nil {
		spec.Image = virtualmachines.Image{CommunityGalleryImageID: "/CommunityGalleries/" + g.Gallery + "/Images/" + g.Name + "/Versions/" + g.Version}
	} else {
		mp := img.Marketplace
		spec.Image = virtualmachines.Image{Publisher: mp.Publisher, Offer: mp.Offer, SKU: mp.SKU, Version: mp.Version}
	}
	vms, err := virtualmachines.New(logsSubscription, cfg)
	if err != nil {
		t.Fatal(err)
	}
	until(func(tok string) (string, bool, error) {
		vm, next, err := vms.Reconcile(ctx, spec, tok)
		return next, vm != nil, err
	})
	poll.Until(t, time.Minute, func() string {
		if len(guest.Running()) == 0 {
			return "the VM has not booted"
		}
		return ""
	})
}

func readArchive(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		out[filepath.Base(h.Name)] = string(b)
	}
}
