// Package azuretest starts the ARM emulator for the tests of the Azure
// service packages: the real SDK, over HTTPS, against Azure's REST
// contract as the emulator serves it.
package azuretest

import (
	"context"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/internal/azure/endpoint"
)

const (
	Subscription = "00000000-0000-0000-0000-0000000000b1"
	Location     = "westeurope"
	token        = "azuretest"
)

// Start serves an emulator for the test, with a resource group rg, and
// returns the configuration the services take.
func Start(t testing.TB, rg string) endpoint.Config {
	t.Helper()
	_, cfg := StartServer(t, rg)
	return cfg
}

// StartServer is Start, also returning the emulator (for its request
// counters).
func StartServer(t testing.TB, rg string) (*arm.Server, endpoint.Config) {
	t.Helper()
	srv, err := arm.New(arm.Options{Token: token, PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	cfg := endpoint.Config{ResourceManagerEndpoint: srv.URL(), CACertPEM: srv.CACertPEM(), Credential: endpoint.StaticToken(token),
		Retry: &policy.RetryOptions{MaxRetries: 3, RetryDelay: 5 * time.Millisecond}}
	groups, err := endpoint.NewClient(cfg, Subscription, armresources.NewResourceGroupsClient)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := groups.CreateOrUpdate(context.Background(), rg, armresources.ResourceGroup{Location: to.Ptr(Location)}, nil); err != nil {
		t.Fatal(err)
	}
	return srv, cfg
}

// Drive runs a non-blocking reconcile step until it is done.
func Drive(t testing.TB, step func(token string) (string, bool, error)) error {
	t.Helper()
	token, stepErr := "", error(nil)
	// The step's own error ends the wait too; kept apart from the wait's,
	// so that a step failing with a timeout of its own is returned, not
	// taken for the operation never ending.
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		next, done, err := step(token)
		token, stepErr = next, err
		return done || err != nil, nil
	})
	if err != nil {
		t.Fatal("the operation did not end")
	}
	return stepErr
}

// Writes fails the test unless a spec's Parameters answered without an
// error and with a body exactly when write says; it reports whether there
// is a body to look at.
func Writes[R any](t testing.TB, body *R, err error, write bool) bool {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if (body != nil) != write {
		t.Fatalf("Parameters writes %v, want %v: %+v", body != nil, write, body)
	}
	return body != nil
}

// PublicIP creates a static Standard public IP in group rg and returns its
// ARM ID.
func PublicIP(t testing.TB, cfg endpoint.Config, rg, name string) string {
	t.Helper()
	ips, err := endpoint.NewClient(cfg, Subscription, armnetwork.NewPublicIPAddressesClient)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ips.BeginCreateOrUpdate(context.Background(), rg, name, armnetwork.PublicIPAddress{Location: to.Ptr(Location),
		SKU:        &armnetwork.PublicIPAddressSKU{Name: to.Ptr(armnetwork.PublicIPAddressSKUNameStandard)},
		Properties: &armnetwork.PublicIPAddressPropertiesFormat{PublicIPAllocationMethod: to.Ptr(armnetwork.IPAllocationMethodStatic)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.PollUntilDone(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return *r.ID
}
