package async_test

import (
	"context"
	"errors"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/internal/azure/azuretest"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/publicips"
	"github.com/winkube/winkube/internal/azure/tags"
)

// The generic reconciler, through a service built on it, against the
// emulator: it writes a resource once and then only reads it; it refuses,
// without writing, a resource of the same name that is not the cluster's;
// deleting what is gone is done.
func TestReconcileWritesOnlyWhatDiffersAndOnlyWhatIsOwned(t *testing.T) {
	srv, cfg := azuretest.StartServer(t, "rg")
	ctx := context.Background()
	svc, err := publicips.New(azuretest.Subscription, cfg)
	if err != nil {
		t.Fatal(err)
	}
	owned := tags.Build(tags.Owner{Cluster: "demo", Namespace: "team-a"}, "apiserver", nil)
	spec := publicips.Spec{ResourceGroup: "rg", Name: "demo-api", Location: azuretest.Location, DNSLabel: "demo-1a2b3c4d", Tags: owned}
	step := func(tok string) (string, bool, error) { return svc.Reconcile(ctx, spec, tok) }
	if err := azuretest.Drive(t, step); err != nil {
		t.Fatal(err)
	}
	puts := srv.Counters()["PUT publicIPAddresses"]
	if puts != 1 {
		t.Fatalf("%d PUTs to make one address", puts)
	}
	for range 3 {
		if _, done, err := svc.Reconcile(ctx, spec, ""); err != nil || !done {
			t.Fatalf("a reconcile of an address as wanted: done %v, %v", done, err)
		}
	}
	if n := srv.Counters()["PUT publicIPAddresses"]; n != puts {
		t.Fatalf("an address as wanted was written again (%d PUTs)", n)
	}

	// Someone else's address of the name the cluster wants.
	ips, err := endpoint.NewClient(cfg, azuretest.Subscription, armnetwork.NewPublicIPAddressesClient)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ips.BeginCreateOrUpdate(ctx, "rg", "theirs", armnetwork.PublicIPAddress{Location: to.Ptr(azuretest.Location),
		Tags: map[string]*string{"owner": to.Ptr("someone")}, SKU: &armnetwork.PublicIPAddressSKU{Name: to.Ptr(armnetwork.PublicIPAddressSKUNameStandard)},
		Properties: &armnetwork.PublicIPAddressPropertiesFormat{PublicIPAllocationMethod: to.Ptr(armnetwork.IPAllocationMethodStatic)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.PollUntilDone(ctx, nil); err != nil {
		t.Fatal(err)
	}
	before := srv.Counters()["PUT publicIPAddresses"]
	theirs := spec
	theirs.Name = "theirs"
	_, _, err = svc.Reconcile(ctx, theirs, "")
	var notOwned *tags.NotOwnedError
	if !errors.As(err, &notOwned) {
		t.Fatalf("someone else's address: %v, want a NotOwnedError", err)
	}
	if srv.Counters()["PUT publicIPAddresses"] != before {
		t.Fatal("someone else's address was written")
	}

	if err := azuretest.Drive(t, func(tok string) (string, bool, error) { return svc.Delete(ctx, "rg", "demo-api", tok) }); err != nil {
		t.Fatal(err)
	}
	if _, done, err := svc.Delete(ctx, "rg", "demo-api", ""); err != nil || !done {
		t.Fatalf("deleting an address already gone: done %v, %v", done, err)
	}
}
