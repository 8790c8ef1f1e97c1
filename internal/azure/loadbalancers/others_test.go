package loadbalancers_test

import (
	"context"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/internal/azure/azuretest"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/loadbalancers"
)

// A frontend, pool, probe and rule someone added to the API server's load
// balancer (a second service on it), and their tag, survive winkube's
// reconcile.
func TestReconcileKeepsWhatOthersAdded(t *testing.T) {
	ctx := context.Background()
	cfg := azuretest.Start(t, "rg")
	svc, err := loadbalancers.New(azuretest.Subscription, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ipID := func(name string) string { return azuretest.PublicIP(t, cfg, "rg", name) }
	spec := loadbalancers.Spec{ResourceGroup: "rg", Name: "api-lb", Location: azuretest.Location, SubscriptionID: azuretest.Subscription,
		PublicIPID: ipID("api-ip"), Port: 6443, Tags: map[string]*string{"winkube.dev_cluster_c": to.Ptr("owned")}}
	reconcile := func() {
		t.Helper()
		if err := azuretest.Drive(t, func(tok string) (string, bool, error) { return svc.Reconcile(ctx, spec, tok) }); err != nil {
			t.Fatal(err)
		}
	}
	reconcile()

	other := ipID("ingress-ip")
	c, _ := endpoint.NewClient(cfg, azuretest.Subscription, armnetwork.NewLoadBalancersClient)
	cur, err := c.Get(ctx, "rg", "api-lb", nil)
	if err != nil {
		t.Fatal(err)
	}
	lb := cur.LoadBalancer
	lbp := lb.Properties
	sub := spec.ID()
	lbp.FrontendIPConfigurations = append(lbp.FrontendIPConfigurations, &armnetwork.FrontendIPConfiguration{Name: to.Ptr("ingress"),
		Properties: &armnetwork.FrontendIPConfigurationPropertiesFormat{PublicIPAddress: &armnetwork.PublicIPAddress{ID: to.Ptr(other)}}})
	lbp.BackendAddressPools = append(lbp.BackendAddressPools, &armnetwork.BackendAddressPool{Name: to.Ptr("ingress")})
	lbp.Probes = append(lbp.Probes, &armnetwork.Probe{Name: to.Ptr("ingress"), Properties: &armnetwork.ProbePropertiesFormat{
		Protocol: to.Ptr(armnetwork.ProbeProtocolTCP), Port: to.Ptr[int32](443)}})
	lbp.LoadBalancingRules = append(lbp.LoadBalancingRules, &armnetwork.LoadBalancingRule{Name: to.Ptr("ingress"), Properties: &armnetwork.LoadBalancingRulePropertiesFormat{
		Protocol: to.Ptr(armnetwork.TransportProtocolTCP), FrontendPort: to.Ptr[int32](443), BackendPort: to.Ptr[int32](443), DisableOutboundSnat: to.Ptr(true),
		FrontendIPConfiguration: &armnetwork.SubResource{ID: to.Ptr(sub + "/frontendIPConfigurations/ingress")},
		BackendAddressPool:      &armnetwork.SubResource{ID: to.Ptr(sub + "/backendAddressPools/ingress")},
		Probe:                   &armnetwork.SubResource{ID: to.Ptr(sub + "/probes/ingress")}}})
	lb.Tags["cost-center"] = to.Ptr("42")
	p, err := c.BeginCreateOrUpdate(ctx, "rg", "api-lb", lb, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.PollUntilDone(ctx, nil); err != nil {
		t.Fatal(err)
	}

	reconcile()
	got, err := svc.Get(ctx, "rg", "api-lb")
	if err != nil {
		t.Fatal(err)
	}
	gp := got.Properties
	if len(gp.FrontendIPConfigurations) != 2 || len(gp.BackendAddressPools) != 2 || len(gp.Probes) != 2 || len(gp.LoadBalancingRules) != 2 {
		t.Errorf("after the reconcile: %d frontends, %d pools, %d probes, %d rules; want winkube's and the ones someone added",
			len(gp.FrontendIPConfigurations), len(gp.BackendAddressPools), len(gp.Probes), len(gp.LoadBalancingRules))
	}
	if got.Tags["cost-center"] == nil {
		t.Errorf("the tag someone set was dropped: %v", got.Tags)
	}
}
