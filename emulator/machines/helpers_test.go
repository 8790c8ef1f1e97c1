package machines_test

import (
	"bytes"
	"context"
	"errors"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	azarm "github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/winkube/winkube/emulator/machines"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/bootstrap/kubeadm/reconcilers/kubeadmconfig"
	bootstrapsetup "sigs.k8s.io/cluster-api/bootstrap/kubeadm/setup"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/loadbalancers"
	"github.com/winkube/winkube/internal/azure/natgateways"
	"github.com/winkube/winkube/internal/azure/networkinterfaces"
	"github.com/winkube/winkube/internal/azure/publicips"
	"github.com/winkube/winkube/internal/azure/resourcegroups"
	"github.com/winkube/winkube/internal/azure/securitygroups"
	"github.com/winkube/winkube/internal/azure/virtualmachines"
	"github.com/winkube/winkube/internal/azure/vnets"
	"github.com/winkube/winkube/internal/poll"
	"github.com/winkube/winkube/internal/testenv"
)

// startBootstrapProvider runs Cluster API's kubeadm bootstrap controller
// (with the cluster cache it needs to create join tokens in workload
// clusters) in a manager until the test ends.
func startBootstrapProvider(t *testing.T) {
	t.Helper()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Client: bootstrapsetup.ManagerClientOptions(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	secrets, err := bootstrapsetup.CreateSecretCachingClient(mgr)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := clustercache.SetupWithManager(ctx, mgr, clustercache.Options{
		SecretClient: secrets,
		Cache:        bootstrapsetup.ClusterCacheCacheOptions(),
		Client:       bootstrapsetup.ClusterCacheClientOptions("machines-test", 20, 30),
	}, controller.Options{MaxConcurrentReconciles: 2, SkipNameValidation: ptr.To(true)})
	if err != nil {
		t.Fatal(err)
	}
	r := &kubeadmconfig.Reconciler{Client: mgr.GetClient(), SecretCachingClient: secrets, APIReader: mgr.GetAPIReader(), ClusterCache: cc, TokenTTL: 15 * time.Minute}
	if err := r.SetupWithManager(ctx, mgr, controller.Options{MaxConcurrentReconciles: 2, SkipNameValidation: ptr.To(true)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cancel)
	testenv.RunManager(t, mgr)
}

// azure is a resource group with a VNet of two subnets, as a cluster has,
// and a third, private one. As winkube's clusters do, the node subnet goes
// out through a NAT gateway and control-plane VMs through the API server
// load balancer's outbound rule (apiServerLB); the private subnet has no
// way to the internet until a test attaches the NAT gateway (attachNAT).
type azure struct {
	rg, location  string
	cpSubnet      string
	nodeSubnet    string
	privateSubnet string
	natGateway    string
	vnet          vnets.Spec
	// apiPool is the API server load balancer's backend pool, which the
	// control-plane NICs join.
	apiPool string
	// vms are the VMs the test asked for, deleted when it fails (leftovers).
	vms []string
}

func newAzure(t *testing.T, ctx context.Context, rg string) *azure {
	t.Helper()
	a := &azure{rg: rg, location: "westeurope"}
	t.Cleanup(func() { a.leftovers(t, ctx) })
	rgs, err := resourcegroups.New(subscriptID, armCfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := rgs.Reconcile(ctx, resourcegroups.Spec{Name: rg, Location: a.location}); err != nil {
		t.Fatal(err)
	}
	// The node subnet's NSG, which azure.json names (cloudConfig): the
	// cloud-controller-manager's rules let load-balanced traffic reach the
	// workers through it.
	sgs, err := securitygroups.New(subscriptID, armCfg)
	if err != nil {
		t.Fatal(err)
	}
	nsg := securitygroups.Spec{ResourceGroup: rg, Name: rg + "-nsg", Location: a.location}
	until(t, ctx, func(tok string) (string, bool, error) { return sgs.Reconcile(ctx, nsg, tok) })
	// The control-plane subnet's, opening the API server and SSH as a
	// cluster's does: a Standard load balancer's backend with no NSG
	// takes no connection.
	cpNSG := securitygroups.Spec{ResourceGroup: rg, Name: rg + "-cp-nsg", Location: a.location, Rules: []securitygroups.Rule{
		{Name: "allow_apiserver", Protocol: "Tcp", Direction: "Inbound", Priority: 2200, DestinationPorts: "6443", Access: "Allow"},
		{Name: "allow_ssh", Protocol: "Tcp", Direction: "Inbound", Priority: 2201, DestinationPorts: "22", Access: "Allow"},
	}}
	until(t, ctx, func(tok string) (string, bool, error) { return sgs.Reconcile(ctx, cpNSG, tok) })
	vn, err := vnets.New(subscriptID, armCfg)
	if err != nil {
		t.Fatal(err)
	}
	nsgID := "/subscriptions/" + subscriptID + "/resourceGroups/" + rg + "/providers/Microsoft.Network/networkSecurityGroups/" + nsg.Name
	// The node subnet's NAT gateway, as winkube's AzureCluster controller
	// makes it: the emulator gives a VM no other way to the registries its
	// images come from.
	a.publicIP(t, ctx, rg+"-natgw-ip")
	nats, err := natgateways.New(subscriptID, armCfg)
	if err != nil {
		t.Fatal(err)
	}
	nat := natgateways.Spec{ResourceGroup: rg, Name: rg + "-natgw", Location: a.location,
		PublicIPID: "/subscriptions/" + subscriptID + "/resourceGroups/" + rg + "/providers/Microsoft.Network/publicIPAddresses/" + rg + "-natgw-ip"}
	until(t, ctx, func(tok string) (string, bool, error) { return nats.Reconcile(ctx, nat, tok) })
	a.natGateway = "/subscriptions/" + subscriptID + "/resourceGroups/" + rg + "/providers/Microsoft.Network/natGateways/" + nat.Name
	a.vnet = vnets.Spec{ResourceGroup: rg, Name: rg + "-vnet", Location: a.location, CIDRs: []string{"10.0.0.0/8"},
		Subnets: []vnets.Subnet{
			{Name: "cp", CIDRs: []string{"10.0.0.0/16"}, NSGID: nsgID[:len(nsgID)-len("-nsg")] + "-cp-nsg"},
			{Name: "node", CIDRs: []string{"10.1.0.0/16"}, NSGID: nsgID, NatGatewayID: a.natGateway},
			{Name: "private", CIDRs: []string{"10.2.0.0/16"}, NSGID: nsgID},
		}}
	until(t, ctx, func(tok string) (string, bool, error) { return vn.Reconcile(ctx, a.vnet, tok) })
	base := "/subscriptions/" + subscriptID + "/resourceGroups/" + rg + "/providers/Microsoft.Network/virtualNetworks/" + rg + "-vnet/subnets/"
	a.cpSubnet, a.nodeSubnet, a.privateSubnet = base+"cp", base+"node", base+"private"
	return a
}

// attachNAT attaches the NAT gateway to a subnet ("private").
func (a *azure) attachNAT(t *testing.T, ctx context.Context, subnet string) {
	t.Helper()
	vn, err := vnets.New(subscriptID, armCfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range a.vnet.Subnets {
		if a.vnet.Subnets[i].Name == subnet {
			a.vnet.Subnets[i].NatGatewayID = a.natGateway
		}
	}
	until(t, ctx, func(tok string) (string, bool, error) { return vn.Reconcile(ctx, a.vnet, tok) })
}

// until drives a non-blocking ARM operation to its end, resuming it from
// the token each step returns.
func until(t *testing.T, ctx context.Context, step func(tok string) (string, bool, error)) {
	t.Helper()
	tok := ""
	poll.Until(t, 2*time.Minute, func() string {
		next, done, err := step(tok)
		if err != nil {
			t.Fatal(err)
		}
		if done {
			return ""
		}
		tok = next
		return "ARM operation under way"
	})
}

// publicIP creates the API server's public IP and returns its address.
func (a *azure) publicIP(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	s, err := publicips.New(subscriptID, armCfg)
	if err != nil {
		t.Fatal(err)
	}
	until(t, ctx, func(tok string) (string, bool, error) {
		return s.Reconcile(ctx, publicips.Spec{ResourceGroup: a.rg, Name: name, Location: a.location}, tok)
	})
	ip, err := s.Get(ctx, a.rg, name)
	if err != nil || ip == nil {
		t.Fatalf("public IP %s: %v", name, err)
	}
	return *ip.Properties.IPAddress
}

// apiServerLB creates the API server's public IP and load balancer (a
// rule and a TCP probe on 6443, as winkube's AzureCluster controller makes
// it) and returns the endpoint's address; control-plane VMs created after
// it join its backend pool.
func (a *azure) apiServerLB(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	addr := a.publicIP(t, ctx, name+"-apiserver")
	lbs, err := loadbalancers.New(subscriptID, armCfg)
	if err != nil {
		t.Fatal(err)
	}
	spec := loadbalancers.Spec{ResourceGroup: a.rg, Name: name + "-public-lb", Location: a.location, SubscriptionID: subscriptID, Port: 6443,
		PublicIPID: "/subscriptions/" + subscriptID + "/resourceGroups/" + a.rg + "/providers/Microsoft.Network/publicIPAddresses/" + name + "-apiserver"}
	until(t, ctx, func(tok string) (string, bool, error) { return lbs.Reconcile(ctx, spec, tok) })
	a.apiPool = spec.BackendPoolID()
	return addr
}

// vm creates a NIC and a VM booting customData, and waits until ARM
// reports it provisioned (the machine runtime then boots it).
func (a *azure) vm(t *testing.T, ctx context.Context, spec virtualmachines.Spec, subnet string) {
	t.Helper()
	nics, err := networkinterfaces.New(subscriptID, armCfg)
	if err != nil {
		t.Fatal(err)
	}
	nic := networkinterfaces.Spec{ResourceGroup: a.rg, Name: spec.Name + "-nic", Location: a.location, SubnetID: subnet}
	if subnet == a.cpSubnet && a.apiPool != "" {
		nic.BackendPoolIDs = []string{a.apiPool}
	}
	until(t, ctx, func(tok string) (string, bool, error) { return nics.Reconcile(ctx, nic, tok) })
	spec.ResourceGroup, spec.Location = a.rg, a.location
	spec.NICID = "/subscriptions/" + subscriptID + "/resourceGroups/" + a.rg + "/providers/Microsoft.Network/networkInterfaces/" + nic.Name
	spec.Size, spec.AdminUsername = "Standard_D2s_v3", "capi"
	if spec.Windows {
		spec.AdminPassword = "Aa1!" + strings.Repeat("x", 12)
	}
	vms, err := virtualmachines.New(subscriptID, armCfg)
	if err != nil {
		t.Fatal(err)
	}
	a.vms = append(a.vms, spec.Name)
	until(t, ctx, func(tok string) (string, bool, error) {
		vm, next, err := vms.Reconcile(ctx, spec, tok)
		return next, vm != nil, err
	})
}

// leftovers deletes the VMs of a test that failed before it deleted them
// itself. They would keep running, and keep their addresses: the next
// test's control plane, given the same address, could not listen on it, and
// one test's failure became two (CI's fresh-clone run). A VM already gone
// ends its delete at once.
func (a *azure) leftovers(t *testing.T, ctx context.Context) {
	if !t.Failed() || len(a.vms) == 0 {
		return
	}
	vms, err := virtualmachines.New(subscriptID, armCfg)
	if err != nil {
		t.Logf("leftover VMs %v not deleted: %v", a.vms, err)
		return
	}
	for _, name := range a.vms {
		tok := ""
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(poll.Interval) {
			next, done, err := vms.Delete(ctx, a.rg, name, tok)
			if err != nil || done || time.Now().After(deadline) {
				if err != nil || !done {
					t.Logf("leftover VM %s not deleted: %v", name, err)
				}
				break
			}
			tok = next
		}
	}
}

func (a *azure) deleteVM(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	vms, err := virtualmachines.New(subscriptID, armCfg)
	if err != nil {
		t.Fatal(err)
	}
	until(t, ctx, func(tok string) (string, bool, error) { return vms.Delete(ctx, a.rg, name, tok) })
}

// bootstrapData creates a Machine owning a KubeadmConfig and returns the
// custom data Cluster API's bootstrap controller writes for it.
func bootstrapData(t *testing.T, ctx context.Context, cluster *clusterv1.Cluster, name string, controlPlane bool, spec bootstrapv1.KubeadmConfigSpec) []byte {
	t.Helper()
	labels := map[string]string{clusterv1.ClusterNameLabel: cluster.Name}
	if controlPlane {
		labels[clusterv1.MachineControlPlaneLabel] = ""
	}
	m := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: cluster.Namespace, Labels: labels},
		Spec: clusterv1.MachineSpec{
			ClusterName: cluster.Name, Version: k8sVersion,
			Bootstrap:         clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KubeadmConfig", Name: name}},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.winkube.dev", Kind: "AzureMachine", Name: name},
		},
	}
	if err := env.Client.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	cfg := &bootstrapv1.KubeadmConfig{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: cluster.Namespace, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: m.Name, UID: m.UID}}},
		Spec: spec,
	}
	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	var data []byte
	poll.Until(t, 2*time.Minute, func() string {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(cfg), cfg); err != nil {
			return err.Error()
		}
		if cfg.Status.DataSecretName == "" {
			return "no bootstrap data yet for " + name
		}
		s := &corev1.Secret{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: cfg.Status.DataSecretName}, s); err != nil {
			return err.Error()
		}
		data = s.Data["value"]
		return ""
	})
	return data
}

// workloadConfig reads the cluster's admin kubeconfig as Cluster API keeps it.
func workloadConfig(t *testing.T, ctx context.Context, cluster *clusterv1.Cluster) *rest.Config {
	t.Helper()
	s := &corev1.Secret{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: cluster.Name + "-kubeconfig"}, s); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data["value"])
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// applyYAML creates every object of a YAML stream, as a
// ClusterResourceSet applies its ConfigMaps.
func applyYAML(t *testing.T, ctx context.Context, c client.Client, stream string) {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader([]byte(stream)), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return
			}
			t.Fatal(err)
		}
		if len(u.Object) == 0 {
			continue
		}
		// A custom resource waits for its definition to be served, as a
		// ClusterResourceSet retries it.
		poll.Until(t, 30*time.Second, func() string {
			err := c.Create(ctx, u.DeepCopy())
			if meta.IsNoMatchError(err) {
				return err.Error()
			}
			if err != nil {
				t.Fatalf("create %s %s: %v", u.GetKind(), u.GetName(), err)
			}
			return ""
		})
	}
}

// allowInbound adds an inbound allow rule to the node subnet's NSG.
func (a *azure) allowInbound(t *testing.T, ctx context.Context, name string, priority int32, source, ports string) {
	t.Helper()
	rules, err := endpoint.NewClient(armCfg, subscriptID, armnetwork.NewSecurityRulesClient)
	if err != nil {
		t.Fatal(err)
	}
	p, err := rules.BeginCreateOrUpdate(ctx, a.rg, a.rg+"-nsg", name, armnetwork.SecurityRule{Properties: &armnetwork.SecurityRulePropertiesFormat{
		Priority: to.Ptr(priority), Access: to.Ptr(armnetwork.SecurityRuleAccessAllow), Direction: to.Ptr(armnetwork.SecurityRuleDirectionInbound),
		Protocol: to.Ptr(armnetwork.SecurityRuleProtocolTCP), SourceAddressPrefix: to.Ptr(source), SourcePortRange: to.Ptr("*"),
		DestinationAddressPrefix: to.Ptr("*"), DestinationPortRange: to.Ptr(ports)}}, nil)
	if err == nil {
		_, err = p.PollUntilDone(ctx, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// connectARM reaches ARM as the configuration (filled in once the
// emulator runs) says.
func connectARM(cfg *endpoint.Config) machines.ARMConnection {
	return func() (azcore.TokenCredential, *azarm.ClientOptions, error) {
		opts, err := cfg.ClientOptions()
		return cfg.Credential, opts, err
	}
}
