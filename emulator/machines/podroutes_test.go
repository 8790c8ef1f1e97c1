package machines_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/winkube/winkube/emulator/arm"
	"github.com/winkube/winkube/internal/azure/endpoint"
	"github.com/winkube/winkube/internal/azure/networkinterfaces"
	"github.com/winkube/winkube/internal/azure/routetables"
	"github.com/winkube/winkube/internal/azure/vnets"
	"github.com/winkube/winkube/internal/poll"
)

// servePod listens where the local world serves pod IP podIP of the
// world's cluster, accepting and closing connections, and returns
// podIP:port.
func (w *rightsWorld) servePod(t *testing.T, podIP string) string {
	t.Helper()
	host, err := hn.HostAddress("pod/" + w.endpoint + "/" + podIP)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return net.JoinHostPort(podIP, fmt.Sprint(ln.Addr().(*net.TCPAddr).Port))
}

// service creates a Service without a selector and the EndpointSlice
// that sends its port 443 to target (a pod of node), and returns the
// Service's ClusterIP:443.
func (w *rightsWorld) service(t *testing.T, ctx context.Context, name, node, target string) string {
	t.Helper()
	ip, portStr, err := net.SplitHostPort(target)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(portStr)
	if err != nil {
		t.Fatal(err)
	}
	port := int32(n)
	svc, err := w.cs.CoreV1().Services(w.ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Protocol: corev1.ProtocolTCP, Port: 443}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}, NodeName: &node, Conditions: discoveryv1.EndpointConditions{Ready: to.Ptr(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: to.Ptr("https"), Protocol: to.Ptr(corev1.ProtocolTCP), Port: &port}}}
	if _, err := w.cs.DiscoveryV1().EndpointSlices(w.ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort(svc.Spec.ClusterIP, "443")
}

// kubeProxy runs kube-proxy, with the rights kubeadm's add-on gives it,
// on node.
func (w *rightsWorld) kubeProxy(t *testing.T, ctx context.Context, node string) {
	t.Helper()
	w.role(t, ctx, "kube-proxy",
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"services", "nodes"}, Verbs: listWatch},
		rbacv1.PolicyRule{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"servicecidrs"}, Verbs: listWatch},
		rbacv1.PolicyRule{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: listWatch})
	p := w.pod(t, ctx, "kube-proxy-"+node, node, "kube-proxy", corev1.Container{Name: "kube-proxy", Image: "registry.k8s.io/kube-proxy:v1.36.3"})
	if err := rt.StartComponents(node, p, "kube-proxy"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.StopComponents(node, p) })
}

// dialOutcome is what a connection from node to addr came to: "" when it
// connected, else its error.
func dialOutcome(ctx context.Context, node, addr string) string {
	c, err := rt.DialFromNode(ctx, node, addr)
	if err != nil {
		return err.Error()
	}
	c.Close()
	return ""
}

// TestServiceTrafficToAnOutOfSyncNode: issue 47's leftover. Felix on node
// b cannot list a kind its syncer lists, so b programs no pod routes; a
// connection that node a's kube-proxy forwards from a Service's ClusterIP
// to b's pod is lost as a direct one is, and carried once b's Felix syncs.
// (Before, kube-proxy's forwarding went to the pod whatever b's routes.)
func TestServiceTrafficToAnOutOfSyncNode(t *testing.T) {
	ctx := context.Background()
	w := newRightsWorld(t, ctx, "felixsvc")
	a, b := "felixsvc-a", "felixsvc-b"
	w.role(t, ctx, "calico-node-a", felixRules("")...)
	w.role(t, ctx, "calico-node-b", felixRules("networksets")...)
	fa := w.felix(t, ctx, "calico-node-a", a, "calico-node-a")
	w.felix(t, ctx, "calico-node-b", b, "calico-node-b")
	w.kubeProxy(t, ctx, a)
	target := w.servePod(t, "192.168.2.10")
	vip := w.service(t, ctx, "webhook", b, target)

	poll.Until(t, time.Minute, func() string {
		if _, ok, msg := rt.ExecProbe(a, fa, "calico-node", []string{"-felix-ready"}); !ok {
			return "node a's Felix not in sync yet: " + msg
		}
		got := dialOutcome(ctx, a, vip)
		if got == "" {
			return "node a's kube-proxy carried a connection to node b's pod while b's Felix is not in sync"
		}
		if !strings.Contains(got, "no route to host") || !strings.Contains(got, "node "+b+" has no routes") || !strings.Contains(got, "networksets") {
			return "waiting for kube-proxy to program the Service: " + got
		}
		return ""
	})
	t.Logf("out of sync: %s", dialOutcome(ctx, a, vip))

	w.role(t, ctx, "calico-node-b", felixRules("")...)
	poll.Until(t, time.Minute, func() string {
		if got := dialOutcome(ctx, a, vip); got != "" {
			return "node a does not reach node b's pod through the Service: " + got
		}
		return ""
	})
}

// TestHostGWPodTrafficTakesTheSubnetsRoutes: issue 54 finding 5 in the
// data plane. With flannel's host-gw backend a node sends packets for
// another node's pods unencapsulated, so Azure delivers them only by a
// route of the sending node's subnet to the pod's node. Node a is a
// control-plane machine (in the control-plane subnet), node b a worker
// serving a webhook pod. What a's API server reaches, through a webhook
// Service's ClusterIP (a's kube-proxy) or at the pod's IP, it reaches as
// the machine does (its egress dials as the node does, controlplane.go).
// With the node route table on the worker subnet only (what winkube
// attached before), the API server cannot reach the webhook: no route;
// with it on the control-plane subnet too, it can, once the worker's NIC
// forwards (enableIPForwarding, which the host-gw flavor sets); a route to
// the wrong node is no route either; and VXLAN needs no route at all.
func TestHostGWPodTrafficTakesTheSubnetsRoutes(t *testing.T) {
	ctx := context.Background()
	az := newAzure(t, ctx, "hostgw-rg")
	rg := az.rg
	tables, err := routetables.New(subscriptID, armCfg)
	if err != nil {
		t.Fatal(err)
	}
	until(t, ctx, func(tok string) (string, bool, error) {
		return tables.Reconcile(ctx, routetables.Spec{ResourceGroup: rg, Name: "node-routetable", Location: az.location}, tok)
	})
	tableID := "/subscriptions/" + subscriptID + "/resourceGroups/" + rg + "/providers/Microsoft.Network/routeTables/node-routetable"
	attach := func(subnets ...string) {
		vn, err := vnets.New(subscriptID, armCfg)
		if err != nil {
			t.Fatal(err)
		}
		for i := range az.vnet.Subnets {
			az.vnet.Subnets[i].RouteTableID = ""
			for _, s := range subnets {
				if az.vnet.Subnets[i].Name == s {
					az.vnet.Subnets[i].RouteTableID = tableID
				}
			}
		}
		until(t, ctx, func(tok string) (string, bool, error) { return vn.Reconcile(ctx, az.vnet, tok) })
	}
	attach("node")
	nics, err := networkinterfaces.New(subscriptID, armCfg)
	if err != nil {
		t.Fatal(err)
	}
	nicOf := func(name, subnet string, forwarding bool) (id, ip string) {
		spec := networkinterfaces.Spec{ResourceGroup: rg, Name: name, Location: az.location, SubnetID: subnet, IPForwarding: forwarding}
		until(t, ctx, func(tok string) (string, bool, error) { return nics.Reconcile(ctx, spec, tok) })
		got, err := nics.Get(ctx, rg, name)
		if err != nil || got == nil {
			t.Fatalf("NIC %s: %v", name, err)
		}
		return *got.ID, *got.Properties.IPConfigurations[0].Properties.PrivateIPAddress
	}

	w := newRightsWorld(t, ctx, "hostgw")
	a, b := "hostgw-a", "hostgw-b"
	nicA, ipA := nicOf("hostgw-a-nic", az.cpSubnet, true)
	// The worker's NIC does not forward yet.
	_, ipB := nicOf("hostgw-b-nic", az.nodeSubnet, false)
	rt.SetNodeNIC(a, ipA, func(d netip.Addr) (arm.Hop, error) { return emu.NextHop(nicA, d) })
	rt.SetNodeNIC(b, ipB, nil)

	// flanneld on node a, reading its backend from net-conf.json.
	flannel := func(backend string) {
		conf := fmt.Sprintf(`{"Network": "192.168.0.0/16", "Backend": {"Type": %q}}`, backend)
		cms := w.cs.CoreV1().ConfigMaps(w.ns)
		cm, err := cms.Get(ctx, "kube-flannel-cfg", metav1.GetOptions{})
		if err != nil {
			_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-flannel-cfg"}, Data: map[string]string{"net-conf.json": conf}}, metav1.CreateOptions{})
		} else {
			cm.Data = map[string]string{"net-conf.json": conf}
			_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kube-flannel-" + backend}, Spec: corev1.PodSpec{NodeName: a, HostNetwork: true,
			Containers: []corev1.Container{{Name: "kube-flannel", Image: "docker.io/flannel/flannel:v0.25.6",
				VolumeMounts: []corev1.VolumeMount{{Name: "flannel-cfg", MountPath: "/etc/kube-flannel/"}}}},
			Volumes: []corev1.Volume{{Name: "flannel-cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "kube-flannel-cfg"}}}}}}}
		p, err = w.cs.CoreV1().Pods(w.ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := rt.StartComponents(a, p); err != nil {
			t.Fatal(err)
		}
	}
	flannel("host-gw")
	w.kubeProxy(t, ctx, a)
	webhook := w.servePod(t, "192.168.2.10")
	vip := w.service(t, ctx, "webhook", b, webhook)
	routes, err := endpoint.NewClient(armCfg, subscriptID, armnetwork.NewRoutesClient)
	if err != nil {
		t.Fatal(err)
	}
	route := func(nextHop string) {
		p, err := routes.BeginCreateOrUpdate(ctx, rg, "node-routetable", "hostgw-b", armnetwork.Route{Properties: &armnetwork.RoutePropertiesFormat{
			AddressPrefix: to.Ptr("192.168.2.0/24"), NextHopType: to.Ptr(armnetwork.RouteNextHopTypeVirtualAppliance), NextHopIPAddress: to.Ptr(nextHop)}}, nil)
		if err == nil {
			_, err = p.PollUntilDone(ctx, nil)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// What the cloud provider's route controller writes for node b.
	route(ipB)

	// Both ways the API server goes fail for the reason Azure has.
	poll.Until(t, time.Minute, func() string {
		got := dialOutcome(ctx, a, vip)
		if !strings.Contains(got, "no route to host") || !strings.Contains(got, "subnet cp has no route table") {
			return "waiting for the webhook Service to be lost for want of a route: " + got
		}
		return ""
	})
	if got := dialOutcome(ctx, a, webhook); !strings.Contains(got, "no route to host") || !strings.Contains(got, "subnet cp has no route table") || !strings.Contains(got, "None") {
		t.Errorf("the control plane reached the webhook pod at its IP without a route table on its subnet: %q", got)
	}
	t.Logf("route table on the worker subnet only: %s", dialOutcome(ctx, a, vip))

	// The node route table on the control-plane subnet too: the packets
	// reach the worker's NIC, which drops them until it forwards.
	attach("cp", "node")
	if got := dialOutcome(ctx, a, webhook); !strings.Contains(got, "no route to host") || !strings.Contains(got, "hostgw-b-nic (10.1.0.") || !strings.Contains(got, "IP forwarding") {
		t.Errorf("the worker's NIC took packets for its pod without IP forwarding: %q", got)
	}
	ifaces, err := endpoint.NewClient(armCfg, subscriptID, armnetwork.NewInterfacesClient)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := ifaces.Get(ctx, rg, "hostgw-b-nic", nil)
	if err != nil {
		t.Fatal(err)
	}
	cur.Properties.EnableIPForwarding = to.Ptr(true)
	if p, err := ifaces.BeginCreateOrUpdate(ctx, rg, "hostgw-b-nic", cur.Interface, nil); err != nil {
		t.Fatal(err)
	} else if _, err := p.PollUntilDone(ctx, nil); err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{vip, webhook} {
		if got := dialOutcome(ctx, a, addr); got != "" {
			t.Errorf("with the route table on the control-plane subnet, the API server does not reach the webhook at %s: %s", addr, got)
		}
	}

	// A route to another address is no route to the pod's node.
	route(ipA)
	if got := dialOutcome(ctx, a, webhook); !strings.Contains(got, "no route to host") || !strings.Contains(got, "has no route sending 192.168.2.10") {
		t.Errorf("a route to the wrong node carried the connection: %q", got)
	}

	// VXLAN: the packets go between the nodes' own addresses, and the
	// VNet needs no route for pods, whatever the route tables say.
	attach("node")
	flannel("vxlan")
	for _, addr := range []string{vip, webhook} {
		if got := dialOutcome(ctx, a, addr); got != "" {
			t.Errorf("with VXLAN, the control plane does not reach the webhook at %s without a route: %s", addr, got)
		}
	}
}
