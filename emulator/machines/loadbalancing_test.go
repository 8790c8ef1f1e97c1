package machines_test

import (
	"context"
	"io"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	"github.com/winkube/winkube/emulator/machines/hostnet"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/poll"
)

// serveOn answers every connection to addr with text until the test ends
// or stop is called.
func serveOn(t *testing.T, addr, text string) (stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, text)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return func() { ln.Close() }
}

// answer is what a connection to addr reads ("" when it is reset or
// closed without an answer).
func answer(addr string) string {
	c, err := hostnet.Dial(addr)
	if err != nil {
		return ""
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, _ := io.ReadAll(c)
	return string(b)
}

// loadBalancing: a load balancer put through ARM with the Azure SDK (an
// IP-based backend pool holding a node's VNet address, a TCP probe, a rule)
// carries connections from its public IP to a listener on the node's host
// address; the node leaves the rotation when its probe port stops
// answering, though the application still would, and comes back with it.
func (m *mixed) loadBalancing(t *testing.T, ctx context.Context, node string) {
	t.Helper()
	var host string
	for _, n := range rt.Nodes() {
		if n.NodeName == node {
			host = n.Host.String()
		}
	}
	if host == "" {
		t.Fatalf("node %s has no host address", node)
	}
	private, ok := hn.Private(netipMust(t, host))
	if !ok {
		t.Fatalf("node %s's host address %s stands for no VNet address", node, host)
	}
	const appPort, healthPort, frontPort = 18181, 18182, 8080
	serveOn(t, net.JoinHostPort(host, "18181"), "hello from "+node)
	stopHealth := serveOn(t, net.JoinHostPort(host, "18182"), "")

	// The node's subnet has an NSG (as CAPZ's node subnet does): the
	// Internet reaches the application only through a rule allowing it.
	m.azure.allowInbound(t, ctx, "allow-web", 200, "Internet", strconv.Itoa(appPort))
	pip := m.azure.publicIP(t, ctx, "mixed-web")
	lbs, err := endpoint.NewClient(armCfg, subscriptID, armnetwork.NewLoadBalancersClient)
	if err != nil {
		t.Fatal(err)
	}
	rg := m.azure.rg
	lbID := "/subscriptions/" + subscriptID + "/resourceGroups/" + rg + "/providers/Microsoft.Network/loadBalancers/mixed-web"
	vnetID := "/subscriptions/" + subscriptID + "/resourceGroups/" + rg + "/providers/Microsoft.Network/virtualNetworks/" + rg + "-vnet"
	poller, err := lbs.BeginCreateOrUpdate(ctx, rg, "mixed-web", armnetwork.LoadBalancer{
		Location: to.Ptr(m.azure.location),
		SKU:      &armnetwork.LoadBalancerSKU{Name: to.Ptr(armnetwork.LoadBalancerSKUNameStandard)},
		Properties: &armnetwork.LoadBalancerPropertiesFormat{
			FrontendIPConfigurations: []*armnetwork.FrontendIPConfiguration{{Name: to.Ptr("web"), Properties: &armnetwork.FrontendIPConfigurationPropertiesFormat{
				PublicIPAddress: &armnetwork.PublicIPAddress{ID: to.Ptr("/subscriptions/" + subscriptID + "/resourceGroups/" + rg + "/providers/Microsoft.Network/publicIPAddresses/mixed-web")}}}},
			BackendAddressPools: []*armnetwork.BackendAddressPool{{Name: to.Ptr("nodes"), Properties: &armnetwork.BackendAddressPoolPropertiesFormat{
				LoadBalancerBackendAddresses: []*armnetwork.LoadBalancerBackendAddress{{Name: to.Ptr(node), Properties: &armnetwork.LoadBalancerBackendAddressPropertiesFormat{
					IPAddress: to.Ptr(private), VirtualNetwork: &armnetwork.SubResource{ID: to.Ptr(vnetID)}}}},
			}}},
			Probes: []*armnetwork.Probe{{Name: to.Ptr("health"), Properties: &armnetwork.ProbePropertiesFormat{
				Protocol: to.Ptr(armnetwork.ProbeProtocolTCP), Port: to.Ptr[int32](healthPort), IntervalInSeconds: to.Ptr[int32](5), ProbeThreshold: to.Ptr[int32](1)}}},
			LoadBalancingRules: []*armnetwork.LoadBalancingRule{{Name: to.Ptr("web"), Properties: &armnetwork.LoadBalancingRulePropertiesFormat{
				Protocol: to.Ptr(armnetwork.TransportProtocolTCP), FrontendPort: to.Ptr[int32](frontPort), BackendPort: to.Ptr[int32](appPort),
				EnableFloatingIP:        to.Ptr(false),
				FrontendIPConfiguration: &armnetwork.SubResource{ID: to.Ptr(lbID + "/frontendIPConfigurations/web")},
				BackendAddressPool:      &armnetwork.SubResource{ID: to.Ptr(lbID + "/backendAddressPools/nodes")},
				Probe:                   &armnetwork.SubResource{ID: to.Ptr(lbID + "/probes/health")},
			}}},
		},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := poller.PollUntilDone(ctx, nil); err != nil {
		t.Fatal(err)
	}
	front := net.JoinHostPort(pip, "8080")
	poll.Until(t, time.Minute, func() string {
		if got := answer(front); got != "hello from "+node {
			return "the load balancer's frontend " + front + " answers " + got
		}
		return ""
	})
	// The probe port goes quiet: the node is taken out, and the frontend,
	// with no backend left, answers nothing.
	stopHealth()
	poll.Until(t, time.Minute, func() string {
		if got := answer(front); got != "" {
			return "with its probe failing, the node still answers through the load balancer: " + got
		}
		return ""
	})
	if got := answer(net.JoinHostPort(host, "18181")); got != "hello from "+node {
		t.Fatalf("the application itself stopped answering (%q): the probe, not the application, must have taken the node out", got)
	}
	serveOn(t, net.JoinHostPort(host, "18182"), "")
	poll.Until(t, time.Minute, func() string {
		if got := answer(front); got != "hello from "+node {
			return "the node is not back in rotation: " + got
		}
		return ""
	})
	del, err := lbs.BeginDelete(ctx, rg, "mixed-web", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := del.PollUntilDone(ctx, nil); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, func() string {
		if c, err := net.DialTimeout("tcp", front, time.Second); err == nil {
			c.Close()
			return "a deleted load balancer's frontend still listens"
		}
		return ""
	})
}

func netipMust(t *testing.T, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatalf("address %q: %v", s, err)
	}
	return a
}
