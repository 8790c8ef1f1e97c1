package arm

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	azruntime "github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources"

	"github.com/winkube/winkube/internal/azure/endpoint"
)

// A handler that panics while it holds the store's lock is answered with
// ARM's 500 InternalServerError, and the store is not left locked: the
// next request, through the real SDK, is served.
func TestHandlerPanicDoesNotWedgeTheStore(t *testing.T) {
	const sub = "00000000-0000-0000-0000-00000000000a"
	srv, err := New(Options{Token: "t", PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	// A route table named "boom" makes its kind's PUT hook, which runs
	// under the lock, panic: a stand-in for any bug in a handler.
	k := kinds[strings.ToLower(kindRouteTable)]
	orig := k.put
	k.put = func(s *Server, r, old *resource) *armError {
		if r.id.Name() == "boom" {
			panic("a handler bug")
		}
		if orig == nil {
			return nil
		}
		return orig(s, r, old)
	}
	t.Cleanup(func() { k.put = orig })

	cfg := endpoint.Config{ResourceManagerEndpoint: srv.URL(), CACertPEM: srv.CACertPEM(), Credential: endpoint.StaticToken("t"),
		Retry: &policy.RetryOptions{MaxRetries: -1}}
	opts, err := cfg.ClientOptions()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	groups, _ := armresources.NewResourceGroupsClient(sub, cfg.Credential, opts)
	if _, err := groups.CreateOrUpdate(ctx, "rg", armresources.ResourceGroup{Location: to.Ptr("westeurope")}, nil); err != nil {
		t.Fatal(err)
	}
	tables, _ := armnetwork.NewRouteTablesClient(sub, cfg.Credential, opts)
	_, err = tables.BeginCreateOrUpdate(ctx, "rg", "boom", armnetwork.RouteTable{Location: to.Ptr("westeurope")}, nil)
	var re *azcore.ResponseError
	if !errors.As(err, &re) || re.StatusCode != http.StatusInternalServerError || re.ErrorCode != "InternalServerError" {
		t.Fatalf("the panicking PUT: %v, want 500 InternalServerError", err)
	}
	// Were the lock still held, this would wait until ctx expires.
	p, err := tables.BeginCreateOrUpdate(ctx, "rg", "fine", armnetwork.RouteTable{Location: to.Ptr("westeurope")}, nil)
	if err != nil {
		t.Fatalf("the request after the panic: %v", err)
	}
	if _, err := p.PollUntilDone(ctx, &azruntime.PollUntilDoneOptions{Frequency: 10 * time.Millisecond}); err != nil {
		t.Fatalf("the request after the panic: %v", err)
	}
	if _, err := groups.Get(ctx, "rg", nil); err != nil {
		t.Fatalf("a read after the panic: %v", err)
	}
}
