package loadbalancers_test

import (
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/internal/azure/azuretest"
	"github.com/winkube/winkube/internal/azure/loadbalancers"
)

func TestParameters(t *testing.T) {
	spec := loadbalancers.Spec{ResourceGroup: "rg", Name: "api-lb", Location: "westeurope", SubscriptionID: "s", PublicIPID: "/ip/api", Port: 6443}
	made, err := spec.Parameters(nil)
	if err != nil || made == nil {
		t.Fatalf("a missing load balancer is not created: %v", err)
	}
	probe := made.Properties.Probes[0].Properties
	if *probe.Protocol != armnetwork.ProbeProtocolHTTPS || *probe.RequestPath != "/readyz" || *probe.IntervalInSeconds != 5 || *made.Properties.LoadBalancingRules[0].Properties.DisableOutboundSnat != true ||
		len(made.Properties.OutboundRules) != 1 || *made.Properties.OutboundRules[0].Properties.Protocol != armnetwork.LoadBalancerOutboundRuleProtocolAll {
		t.Fatalf("the API server's load balancer probes %s %v and has outbound rules %v", *probe.Protocol, probe.RequestPath, made.Properties.OutboundRules)
	}
	provisioned := func(port int32, ip string) *armnetwork.LoadBalancer {
		lb := *made
		props := *made.Properties
		props.ProvisioningState = to.Ptr(armnetwork.ProvisioningStateSucceeded)
		fe := *props.FrontendIPConfigurations[0]
		feProps := *fe.Properties
		feProps.PublicIPAddress = &armnetwork.PublicIPAddress{ID: to.Ptr(ip)}
		fe.Properties = &feProps
		props.FrontendIPConfigurations = []*armnetwork.FrontendIPConfiguration{&fe}
		rule := *props.LoadBalancingRules[0]
		ruleProps := *rule.Properties
		ruleProps.FrontendPort = to.Ptr(port)
		rule.Properties = &ruleProps
		props.LoadBalancingRules = []*armnetwork.LoadBalancingRule{&rule}
		props.InboundNatRules = []*armnetwork.InboundNatRule{{Name: to.Ptr("cp-0")}}
		lb.Properties = &props
		return &lb
	}
	for _, tc := range []struct {
		name     string
		existing *armnetwork.LoadBalancer
		write    bool
	}{
		{"as wanted: no write", provisioned(6443, "/ip/api"), false},
		{"another port: written, keeping its NAT rules", provisioned(443, "/ip/api"), true},
		{"another frontend IP: written, keeping its NAT rules", provisioned(6443, "/ip/other"), true},
		{"as an earlier winkube made it (TCP probe, the rule's SNAT, no outbound rule)", func() *armnetwork.LoadBalancer {
			lb := provisioned(6443, "/ip/api")
			props := *lb.Properties
			props.Probes = []*armnetwork.Probe{{Name: to.Ptr("apiserver"), Properties: &armnetwork.ProbePropertiesFormat{Protocol: to.Ptr(armnetwork.ProbeProtocolTCP), Port: to.Ptr[int32](6443)}}}
			props.OutboundRules = nil
			lb.Properties = &props
			return lb
		}(), true},
		{"probed every 15 s, as an earlier winkube made it: written, keeping its NAT rules", func() *armnetwork.LoadBalancer {
			lb := provisioned(6443, "/ip/api")
			props := *lb.Properties
			pr := *props.Probes[0]
			prProps := *pr.Properties
			prProps.IntervalInSeconds = to.Ptr[int32](15)
			pr.Properties = &prProps
			props.Probes = []*armnetwork.Probe{&pr}
			lb.Properties = &props
			return lb
		}(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, err := spec.Parameters(tc.existing)
			if !azuretest.Writes(t, body, err, tc.write) {
				return
			}
			if len(body.Properties.InboundNatRules) != 1 || *body.Properties.LoadBalancingRules[0].Properties.FrontendPort != 6443 ||
				*body.Properties.FrontendIPConfigurations[0].Properties.PublicIPAddress.ID != "/ip/api" ||
				len(body.Properties.Probes) != 1 || *body.Properties.Probes[0].Properties.IntervalInSeconds != 5 {
				t.Fatalf("body %+v", body.Properties)
			}
		})
	}
}
