package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/winkube/winkube/api/v1alpha1"
	"github.com/winkube/winkube/internal/azure/endpoint"
)

const subscription = "00000000-0000-0000-0000-0000000000c1"

type fixture struct {
	t       testing.TB
	ctx     context.Context
	ns      string
	cluster *clusterv1.Cluster
	ac      *infrav1.AzureCluster
}

// newCluster creates a Cluster and its AzureCluster, as Cluster API would
// (owner reference, cluster-name label), in a namespace of its own.
func newCluster(t testing.TB, name string, mutate ...func(*infrav1.AzureClusterSpec)) *fixture {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: name + "-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	ownNamespace(t, ns.Name)
	f := &fixture{t: t, ctx: ctx, ns: ns.Name}
	f.cluster = capiCluster(name, ns.Name)
	if err := env.Client.Create(ctx, f.cluster); err != nil {
		t.Fatal(err)
	}
	// When the test ends its Cluster is paused, so that no later test's
	// controllers (all watch every namespace) build what it left in their
	// own emulators, and count those calls as theirs.
	t.Cleanup(func() {
		c := &clusterv1.Cluster{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(f.cluster), c); err != nil {
			return
		}
		patch := client.MergeFrom(c.DeepCopy())
		c.Spec.Paused = ptr.To(true)
		if err := env.Client.Patch(context.Background(), c, patch); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("pausing cluster %s: %v", name, err)
		}
	})
	f.ac = &infrav1.AzureCluster{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ns.Name, Labels: map[string]string{clusterv1.ClusterNameLabel: name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster", Name: name, UID: f.cluster.UID}},
		},
		Spec: infrav1.AzureClusterSpec{SubscriptionID: subscription, Location: "westeurope", ResourceGroup: ns.Name},
	}
	for _, m := range mutate {
		m(&f.ac.Spec)
	}
	if err := env.Client.Create(ctx, f.ac); err != nil {
		t.Fatal(err)
	}
	return f
}

// provisionedCluster is how most tests begin once their controllers run on
// the suite's emulator: a Cluster (newCluster) whose AzureCluster winkube
// has provisioned, and the test's view of that emulator.
func provisionedCluster(t *testing.T, name string) (*fixture, *azure) {
	t.Helper()
	az := newAzure(t, armCfg)
	f := newCluster(t, name)
	f.waitClusterProvisioned(time.Minute)
	return f, az
}

// capiCluster is a Cluster whose infrastructure is the AzureCluster of its
// name.
func capiCluster(name, ns string) *clusterv1.Cluster {
	return &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: clusterv1.ClusterSpec{
			ClusterNetwork: clusterv1.ClusterNetwork{
				Pods:     clusterv1.NetworkRanges{CIDRBlocks: []string{"192.168.0.0/16"}},
				Services: clusterv1.NetworkRanges{CIDRBlocks: []string{"10.96.0.0/12"}},
			},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "AzureCluster", Name: name},
		},
	}
}

// waitClusterProvisioned waits for the AzureCluster, then plays Cluster
// API's part: it marks the Cluster's infrastructure provisioned.
func (f *fixture) waitClusterProvisioned(timeout time.Duration) {
	f.t.Helper()
	env.Until(f.t, timeout, func(r client.Reader) string {
		if err := r.Get(f.ctx, client.ObjectKeyFromObject(f.ac), f.ac); err != nil {
			return err.Error()
		}
		if !ptr.Deref(f.ac.Status.Initialization.Provisioned, false) {
			return fmt.Sprintf("AzureCluster not provisioned: %+v", f.ac.Status.Conditions)
		}
		return ""
	})
	patch := client.MergeFrom(f.cluster.DeepCopy())
	f.cluster.Status.Initialization.InfrastructureProvisioned = ptr.To(true)
	if err := env.Client.Status().Patch(f.ctx, f.cluster, patch); err != nil {
		f.t.Fatal(err)
	}
}

// newMachine creates a Machine with its bootstrap data and its AzureMachine.
func (f *fixture) newMachine(name string, controlPlane, windows bool, failureDomain string) *infrav1.AzureMachine {
	f.t.Helper()
	return f.newMachineWith(name, controlPlane, windows, failureDomain, nil, nil)
}

// newMachineWith is newMachine with the Machine's extra labels (a
// MachineDeployment's) and a change to the AzureMachine's spec.
func (f *fixture) newMachineWith(name string, controlPlane, windows bool, failureDomain string, extra map[string]string, mutate func(*infrav1.AzureMachineSpec)) *infrav1.AzureMachine {
	f.t.Helper()
	return f.newMachineVia(env.Client, name, controlPlane, windows, failureDomain, extra, mutate)
}

// newMachineVia is newMachineWith with the objects created by c (a
// tenant's client).
func (f *fixture) newMachineVia(c client.Client, name string, controlPlane, windows bool, failureDomain string, extra map[string]string, mutate func(*infrav1.AzureMachineSpec)) *infrav1.AzureMachine {
	f.t.Helper()
	data := "#cloud-config\nruncmd: [kubeadm join " + name + "]\n"
	if windows {
		data = "<powershell>kubeadm join " + name + "</powershell>"
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-bootstrap", Namespace: f.ns}, Data: map[string][]byte{"value": []byte(data)}}
	labels := map[string]string{clusterv1.ClusterNameLabel: f.cluster.Name}
	if controlPlane {
		labels[clusterv1.MachineControlPlaneLabel] = ""
	}
	for k, v := range extra {
		labels[k] = v
	}
	m := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns, Labels: labels},
		Spec: clusterv1.MachineSpec{
			ClusterName: f.cluster.Name, Version: "v1.36.3", FailureDomain: failureDomain,
			Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To(secret.Name)},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "AzureMachine", Name: name},
		},
	}
	for _, o := range []client.Object{secret, m} {
		if err := c.Create(f.ctx, o); err != nil {
			f.t.Fatal(err)
		}
	}
	am := &infrav1.AzureMachine{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: f.ns, Labels: map[string]string{clusterv1.ClusterNameLabel: f.cluster.Name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: name, UID: m.UID}},
		},
		Spec: infrav1.AzureMachineSpec{AzureVMSpec: infrav1.AzureVMSpec{VMSize: "Standard_D2s_v3"}},
	}
	if windows {
		am.Spec.OSDisk.OSType = infrav1.Windows
	}
	if mutate != nil {
		mutate(&am.Spec)
	}
	if err := c.Create(f.ctx, am); err != nil {
		f.t.Fatal(err)
	}
	return am
}

func (f *fixture) waitMachinesProvisioned(timeout time.Duration, names ...string) map[string]*infrav1.AzureMachine {
	f.t.Helper()
	out := map[string]*infrav1.AzureMachine{}
	env.Until(f.t, timeout, func(r client.Reader) string {
		for _, n := range names {
			am := &infrav1.AzureMachine{}
			if err := r.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: n}, am); err != nil {
				return err.Error()
			}
			if !ptr.Deref(am.Status.Initialization.Provisioned, false) {
				return fmt.Sprintf("AzureMachine %s not provisioned: %+v", n, am.Status.Conditions)
			}
			out[n] = am
		}
		return ""
	})
	return out
}

// deleteAndWait deletes objects and waits until the API server no longer has them.
func (f *fixture) deleteAndWait(timeout time.Duration, objs ...client.Object) {
	f.t.Helper()
	for _, o := range objs {
		if err := env.Client.Delete(f.ctx, o); err != nil && !apierrors.IsNotFound(err) {
			f.t.Fatal(err)
		}
	}
	env.Until(f.t, timeout, func(r client.Reader) string {
		for _, o := range objs {
			if err := r.Get(f.ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
				return fmt.Sprintf("%T %s still there: %v", o, o.GetName(), err)
			}
		}
		return ""
	})
}

// azure reads the emulator through the SDK.
type azure struct {
	t       testing.TB
	groups  *armresources.ResourceGroupsClient
	res     *armresources.Client
	vms     *armcompute.VirtualMachinesClient
	disks   *armcompute.DisksClient
	nics    *armnetwork.InterfacesClient
	lbs     *armnetwork.LoadBalancersClient
	pips    *armnetwork.PublicIPAddressesClient
	vmss    *armcompute.VirtualMachineScaleSetsClient
	vmssVMs *armcompute.VirtualMachineScaleSetVMsClient
}

func newAzure(t testing.TB, cfg endpoint.Config) *azure {
	opts, err := cfg.ClientOptions()
	if err != nil {
		t.Fatal(err)
	}
	a := &azure{t: t}
	a.groups, _ = armresources.NewResourceGroupsClient(subscription, cfg.Credential, opts)
	a.res, _ = armresources.NewClient(subscription, cfg.Credential, opts)
	a.vms, _ = armcompute.NewVirtualMachinesClient(subscription, cfg.Credential, opts)
	a.disks, _ = armcompute.NewDisksClient(subscription, cfg.Credential, opts)
	a.nics, _ = armnetwork.NewInterfacesClient(subscription, cfg.Credential, opts)
	a.lbs, _ = armnetwork.NewLoadBalancersClient(subscription, cfg.Credential, opts)
	a.pips, _ = armnetwork.NewPublicIPAddressesClient(subscription, cfg.Credential, opts)
	a.vmss, _ = armcompute.NewVirtualMachineScaleSetsClient(subscription, cfg.Credential, opts)
	a.vmssVMs, _ = armcompute.NewVirtualMachineScaleSetVMsClient(subscription, cfg.Credential, opts)
	return a
}

// inventory counts the resources of a group by type.
func (a *azure) inventory(rg string) map[string][]string {
	out := map[string][]string{}
	p := a.res.NewListByResourceGroupPager(rg, nil)
	for p.More() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			a.t.Fatal(err)
		}
		for _, r := range page.Value {
			typ := (*r.Type)[strings.LastIndex(*r.Type, "/")+1:]
			out[typ] = append(out[typ], *r.Name)
		}
	}
	return out
}

func (f *fixture) countProvisioned(names []string) int {
	n := 0
	for _, name := range names {
		am := &infrav1.AzureMachine{}
		if env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: name}, am) == nil && ptr.Deref(am.Status.Initialization.Provisioned, false) {
			n++
		}
	}
	return n
}
