package scalesets_test

import (
	"context"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/msi/armmsi"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/internal/azure/azuretest"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/scalesets"
	"github.com/winkube/winkube/internal/azure/virtualmachines"
)

// othersAdd is what Azure Policy and an operator add to a pool's scale set
// (a monitoring extension with the user-assigned identity it runs as, a
// scale-in and a repair policy, a cost tag), through the SDK's PATCH.
func othersAdd(t *testing.T, ctx context.Context, cfg endpoint.Config, rg, name string) (uai string) {
	t.Helper()
	ids, err := endpoint.NewClient(cfg, azuretest.Subscription, armmsi.NewUserAssignedIdentitiesClient)
	if err != nil {
		t.Fatal(err)
	}
	id, err := ids.CreateOrUpdate(ctx, rg, "ama", armmsi.Identity{Location: to.Ptr(azuretest.Location)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sets, err := endpoint.NewClient(cfg, azuretest.Subscription, armcompute.NewVirtualMachineScaleSetsClient)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := sets.Get(ctx, rg, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	tg := map[string]*string{"cost-center": to.Ptr("42")}
	for k, v := range cur.Tags {
		tg[k] = v
	}
	p, err := sets.BeginUpdate(ctx, rg, name, armcompute.VirtualMachineScaleSetUpdate{
		Tags: tg,
		Identity: &armcompute.VirtualMachineScaleSetIdentity{Type: to.Ptr(armcompute.ResourceIdentityTypeUserAssigned),
			UserAssignedIdentities: map[string]*armcompute.UserAssignedIdentitiesValue{*id.ID: {}}},
		Properties: &armcompute.VirtualMachineScaleSetUpdateProperties{
			ScaleInPolicy:          &armcompute.ScaleInPolicy{Rules: []*armcompute.VirtualMachineScaleSetScaleInRules{to.Ptr(armcompute.VirtualMachineScaleSetScaleInRulesOldestVM)}},
			AutomaticRepairsPolicy: &armcompute.AutomaticRepairsPolicy{Enabled: to.Ptr(true), GracePeriod: to.Ptr("PT30M")},
			VirtualMachineProfile: &armcompute.VirtualMachineScaleSetUpdateVMProfile{ExtensionProfile: &armcompute.VirtualMachineScaleSetExtensionProfile{
				Extensions: []*armcompute.VirtualMachineScaleSetExtension{{Name: to.Ptr("AzureMonitorWindowsAgent"), Properties: &armcompute.VirtualMachineScaleSetExtensionProperties{
					Publisher: to.Ptr("Microsoft.Azure.Monitor"), Type: to.Ptr("AzureMonitorWindowsAgent"), TypeHandlerVersion: to.Ptr("1.0")}}},
			}},
		},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.PollUntilDone(ctx, nil); err != nil {
		t.Fatal(err)
	}
	return *id.ID
}

// survives fails the test unless the scale set still has what othersAdd
// added.
func survives(t *testing.T, set *armcompute.VirtualMachineScaleSet, uai string) {
	t.Helper()
	if set.Tags["cost-center"] == nil {
		t.Errorf("the tag someone else set is gone: %v", set.Tags)
	}
	if set.Identity == nil || set.Identity.UserAssignedIdentities[uai] == nil {
		t.Errorf("the identity Azure Policy attached is gone: %+v", set.Identity)
	}
	p := set.Properties
	if p.ScaleInPolicy == nil || len(p.ScaleInPolicy.Rules) == 0 || p.AutomaticRepairsPolicy == nil || p.AutomaticRepairsPolicy.Enabled == nil || !*p.AutomaticRepairsPolicy.Enabled {
		t.Errorf("the scale-in or repair policy is gone: %+v %+v", p.ScaleInPolicy, p.AutomaticRepairsPolicy)
	}
	if p.VirtualMachineProfile.ExtensionProfile == nil || len(p.VirtualMachineProfile.ExtensionProfile.Extensions) != 1 {
		t.Errorf("the monitoring extension Azure Policy added is gone: %+v", p.VirtualMachineProfile.ExtensionProfile)
	}
}

// A capacity change is a PATCH of the capacity: what others added to the
// scale set survives it; so does a write of the model (an additionalTags
// edit), which also removes the tag winkube wrote and the pool dropped.
func TestWritesKeepWhatOthersAdded(t *testing.T) {
	ctx := context.Background()
	srv, cfg := azuretest.StartServer(t, "rg")
	svc, err := scalesets.New(azuretest.Subscription, cfg)
	if err != nil {
		t.Fatal(err)
	}
	spec := scalesets.Spec{ResourceGroup: "rg", Name: "pool", Location: azuretest.Location, Size: "Standard_D2s_v3", Capacity: 1,
		ComputerNamePrefix: "pool", Image: virtualmachines.Image{Publisher: "cncf-upstream", Offer: "capi", SKU: "ubuntu-2204-gen1", Version: "latest"},
		OSDiskSizeGB: 128, StorageAccountType: "Premium_LRS", CustomData: []byte("join"), AdminUsername: "capi", SSHPublicKey: "ssh-ed25519 AAAA test",
		SubnetID: "/subscriptions/" + azuretest.Subscription + "/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v/subnets/node",
		Tags:     map[string]*string{"team": to.Ptr("a"), "env": to.Ptr("dev")}}
	vnets, err := endpoint.NewClient(cfg, azuretest.Subscription, armnetwork.NewVirtualNetworksClient)
	if err != nil {
		t.Fatal(err)
	}
	vp, err := vnets.BeginCreateOrUpdate(ctx, "rg", "v", armnetwork.VirtualNetwork{Location: to.Ptr(azuretest.Location), Properties: &armnetwork.VirtualNetworkPropertiesFormat{
		AddressSpace: &armnetwork.AddressSpace{AddressPrefixes: []*string{to.Ptr("10.0.0.0/16")}},
		Subnets:      []*armnetwork.Subnet{{Name: to.Ptr("node"), Properties: &armnetwork.SubnetPropertiesFormat{AddressPrefix: to.Ptr("10.0.1.0/24")}}},
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := vp.PollUntilDone(ctx, nil); err != nil {
		t.Fatal(err)
	}
	reconcile := func() {
		t.Helper()
		if err := azuretest.Drive(t, func(tok string) (string, bool, error) { return svc.Reconcile(ctx, spec, tok) }); err != nil {
			t.Fatal(err)
		}
	}
	reconcile()
	uai := othersAdd(t, ctx, cfg, "rg", "pool")

	spec.Capacity = 2
	srv.ResetCounters()
	reconcile()
	if puts := srv.Counters()["PUT virtualMachineScaleSets"]; puts != 0 {
		t.Errorf("a capacity change wrote the model (%d PUTs): %v", puts, srv.Counters())
	}
	set, err := svc.Get(ctx, "rg", "pool")
	if err != nil {
		t.Fatal(err)
	}
	if *set.SKU.Capacity != 2 {
		t.Fatalf("capacity %d, want 2", *set.SKU.Capacity)
	}
	survives(t, set, uai)

	// The pool drops env (which winkube wrote) and changes team.
	spec.LastAppliedTags = map[string]string{"team": "a", "env": "dev"}
	spec.Tags = map[string]*string{"team": to.Ptr("b")}
	reconcile()
	if srv.Counters()["PUT virtualMachineScaleSets"] == 0 {
		t.Errorf("the model was not written: %v", srv.Counters())
	}
	if set, err = svc.Get(ctx, "rg", "pool"); err != nil {
		t.Fatal(err)
	}
	survives(t, set, uai)
	if set.Tags["env"] != nil || set.Tags["team"] == nil || *set.Tags["team"] != "b" {
		t.Errorf("tags %v: want team=b and no env", set.Tags)
	}
}
