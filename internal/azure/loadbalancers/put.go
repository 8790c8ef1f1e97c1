package loadbalancers

import (
	"context"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/internal/azure/async"
)

// Put creates or replaces a load balancer as given. Unlike Reconcile, which
// owns the whole API-server load balancer, Put serves a caller that shares
// one with others (Azure's cloud provider keeps a frontend, rules and probes
// per Service on the cluster's load balancer): the caller reads the load
// balancer, changes its own parts and puts back the rest as it found it.
func (s *Service) Put(ctx context.Context, rg, name string, lb armnetwork.LoadBalancer, token string) (string, bool, error) {
	return async.Step(ctx, token, func(ctx context.Context, tok string) (async.Poller, error) {
		return s.kind.Put(ctx, async.Ref{ResourceGroup: rg, Name: name}, lb, tok)
	})
}
