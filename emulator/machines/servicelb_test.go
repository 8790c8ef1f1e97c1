package machines_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/winkube/winkube/emulator/machines"
	"github.com/winkube/winkube/emulator/machines/cloudprovider"
	"github.com/winkube/winkube/emulator/machines/startneeds"
	"github.com/winkube/winkube/internal/azure/loadbalancers"
	"github.com/winkube/winkube/internal/azure/publicips"
	"github.com/winkube/winkube/internal/azurejson"
	"github.com/winkube/winkube/internal/poll"
)

// cloudConfig is the azure.json winkube writes for the cluster in a's
// resource group, as the node named node has it at the path the
// cloud-controller-manager reads by default.
func (a *azure) cloudConfig(t *testing.T, node string, change func(*azurejson.Config)) func(node, path string) ([]byte, error) {
	t.Helper()
	cfg := azurejson.New(azurejson.Network{SubscriptionID: subscriptID, ResourceGroup: a.rg, Location: a.location, VnetName: a.rg + "-vnet",
		VnetResourceGroup: a.rg, SubnetName: "node", SecurityGroupName: a.rg + "-nsg", RouteTableName: a.rg + "-rt"},
		azurejson.Credentials{TenantID: "6f7a1e2b-5c3d-4e8f-9a0b-1c2d3e4f5a6b"})
	if change != nil {
		change(&cfg)
	}
	data, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return func(n, path string) ([]byte, error) {
		if n != node || path != cloudprovider.DefaultCloudConfig {
			return nil, fmt.Errorf("open %s on %s: %w", path, n, fs.ErrNotExist)
		}
		return data, nil
	}
}

// privateIP maps a node's InternalIP (its machine's host address) to its
// VNet address, as the machine runtime does.
func privateIP(ip string) (string, bool) {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return "", false
	}
	return hn.Private(a)
}

func ccmImages(image string) bool {
	return (&startneeds.Checker{Components: startneeds.Catalog()}).HasEffect("linux", image, startneeds.EffectCloudController)
}

// runCCM creates a Running, Ready cloud-controller-manager pod on node
// with args, removed when the test ends.
func runCCM(t *testing.T, ctx context.Context, cs kubernetes.Interface, name, node string, args ...string) {
	t.Helper()
	pod, err := cs.CoreV1().Pods("kube-system").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "cloud-controller-manager",
			Image: "mcr.microsoft.com/oss/v2/kubernetes/azure-cloud-controller-manager:v1.36.0", Command: []string{"cloud-controller-manager"}, Args: args}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if _, err := cs.CoreV1().Pods("kube-system").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Pods("kube-system").Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
}

// addNode registers a node whose InternalIP is the host address of the VNet
// address private, as a simulated kubelet reports it.
func addNode(t *testing.T, ctx context.Context, cs kubernetes.Interface, name, private string, labels map[string]string) {
	t.Helper()
	host, err := hn.HostAddress(private)
	if err != nil {
		t.Fatal(err)
	}
	n, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: host.String()}, {Type: corev1.NodeHostName, Address: name}}
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// warnings are the Warning events of a Service, for failure messages.
func warnings(ctx context.Context, cs kubernetes.Interface, s *corev1.Service) string {
	list, err := cs.CoreV1().Events(s.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return ""
	}
	out := ""
	for _, e := range list.Items {
		if e.InvolvedObject.UID == s.UID && e.Type == corev1.EventTypeWarning {
			out += "; " + e.Reason + ": " + e.Message
		}
	}
	return out
}

func frontendOf(s *corev1.Service) string {
	return ("a" + strings.ReplaceAll(string(s.UID), "-", ""))[:32]
}

func last(id *string) string {
	if id == nil {
		return ""
	}
	return (*id)[strings.LastIndex(*id, "/")+1:]
}

// lbView is a load balancer as ARM returns it, by part name.
type lbView struct {
	lb        *armnetwork.LoadBalancer
	frontends map[string]*armnetwork.FrontendIPConfigurationPropertiesFormat
	probes    map[string]*armnetwork.ProbePropertiesFormat
	rules     map[string]*armnetwork.LoadBalancingRulePropertiesFormat
	pools     map[string]*armnetwork.BackendAddressPoolPropertiesFormat
}

// backends are the pool's addresses as name=ip, sorted.
func (v lbView) backends(pool string) []string {
	var out []string
	if p := v.pools[pool]; p != nil {
		for _, a := range p.LoadBalancerBackendAddresses {
			out = append(out, *a.Name+"="+*a.Properties.IPAddress)
		}
	}
	slices.Sort(out)
	return out
}

func view(lb *armnetwork.LoadBalancer) lbView {
	v := lbView{lb: lb, frontends: map[string]*armnetwork.FrontendIPConfigurationPropertiesFormat{}, probes: map[string]*armnetwork.ProbePropertiesFormat{},
		rules: map[string]*armnetwork.LoadBalancingRulePropertiesFormat{}, pools: map[string]*armnetwork.BackendAddressPoolPropertiesFormat{}}
	for _, f := range lb.Properties.FrontendIPConfigurations {
		v.frontends[*f.Name] = f.Properties
	}
	for _, p := range lb.Properties.Probes {
		v.probes[*p.Name] = p.Properties
	}
	for _, r := range lb.Properties.LoadBalancingRules {
		v.rules[*r.Name] = r.Properties
	}
	for _, p := range lb.Properties.BackendAddressPools {
		v.pools[*p.Name] = p.Properties
	}
	return v
}

// TestServiceLoadBalancer: the cloud controller programs Azure's load
// balancer as cloud-provider-azure does, through the emulator with the
// Azure SDK: the load balancer named after --cluster-name, a public IP and
// frontend per Service, a rule and a probe per port, the worker nodes'
// VNet addresses in its pool; Service changes, node churn and deletion
// take their parts away, and the load balancer goes with its last Service.
func TestServiceLoadBalancer(t *testing.T) {
	ctx := context.Background()
	a := newAzure(t, ctx, "svclb-rg")
	cs := kubernetes.NewForConfigOrDie(env.Config)
	c := cloudprovider.Start(cloudprovider.Config{Client: cs, Log: logr.Discard(), Images: ccmImages,
		Connect: machines.ARMNetwork(connectARM(&armCfg)), ReadNodeFile: a.cloudConfig(t, "svclb-cp", nil), PrivateIP: privateIP})
	t.Cleanup(c.Stop)
	lbs, err := loadbalancers.New(subscriptID, armCfg)
	if err != nil {
		t.Fatal(err)
	}
	pips, err := publicips.New(subscriptID, armCfg)
	if err != nil {
		t.Fatal(err)
	}
	vnetID := "/subscriptions/" + subscriptID + "/resourceGroups/svclb-rg/providers/Microsoft.Network/virtualNetworks/svclb-rg-vnet"

	// kubeadm labels the control plane for exclusion; workers join plain.
	addNode(t, ctx, cs, "svclb-cp", "10.1.200.4", map[string]string{"node-role.kubernetes.io/control-plane": "", cloudprovider.ExcludeLabel: ""})
	addNode(t, ctx, cs, "svclb-w1", "10.1.200.5", map[string]string{"kubernetes.io/os": "linux"})
	addNode(t, ctx, cs, "svclb-w2", "10.1.200.6", map[string]string{"kubernetes.io/os": "windows"})
	runCCM(t, ctx, cs, "cloud-controller-manager-svclb", "svclb-cp", "--cloud-provider=azure", "--cloud-config=/etc/kubernetes/azure.json", "--cluster-name=svclb")
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "svclb"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svcs := cs.CoreV1().Services("svclb")

	// lbState polls the load balancer until check passes.
	lbState := func(name string, check func(v lbView) string) lbView {
		t.Helper()
		var v lbView
		poll.Until(t, time.Minute, func() string {
			lb, err := lbs.Get(ctx, "svclb-rg", name)
			if err != nil {
				return err.Error()
			}
			if lb == nil {
				return "load balancer " + name + " does not exist"
			}
			v = view(lb)
			return check(v)
		})
		return v
	}
	ingress := func(name string) (*corev1.Service, string) {
		t.Helper()
		var s *corev1.Service
		poll.Until(t, time.Minute, func() string {
			if s, err = svcs.Get(ctx, name, metav1.GetOptions{}); err != nil {
				return err.Error()
			}
			if len(s.Status.LoadBalancer.Ingress) == 0 {
				return "Service " + name + " is still <pending>" + warnings(ctx, cs, s)
			}
			return ""
		})
		return s, s.Status.LoadBalancer.Ingress[0].IP
	}
	gone := func(what string, exists func() (bool, error)) {
		t.Helper()
		poll.Until(t, time.Minute, func() string {
			ok, err := exists()
			if err != nil {
				return err.Error()
			}
			if ok {
				return what + " still exists"
			}
			return ""
		})
	}
	pipExists := func(name string) func() (bool, error) {
		return func() (bool, error) { p, err := pips.Get(ctx, "svclb-rg", name); return p != nil, err }
	}
	events := func(s *corev1.Service, reason, contains string) string {
		list, err := cs.CoreV1().Events("svclb").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err.Error()
		}
		for _, e := range list.Items {
			if e.InvolvedObject.UID == s.UID && e.Reason == reason && strings.Contains(e.Message, contains) {
				return ""
			}
		}
		return fmt.Sprintf("no %s event with %q for Service %s", reason, contains, s.Name)
	}

	// A Service with client-IP affinity and the default traffic policy.
	if _, err := svcs.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeLoadBalancer, SessionAffinity: corev1.ServiceAffinityClientIP, Selector: map[string]string{"app": "web"},
		Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	web, ip := ingress("web")
	fe := frontendOf(web)
	np := web.Spec.Ports[0].NodePort
	pip, err := pips.Get(ctx, "svclb-rg", "svclb-"+fe)
	if err != nil || pip == nil {
		t.Fatalf("public IP svclb-%s: %v %v", fe, pip, err)
	}
	if *pip.Properties.IPAddress != ip || pip.Tags["k8s-azure-service"] == nil || *pip.Tags["k8s-azure-service"] != "svclb/web" {
		t.Errorf("public IP %s has address %s tags %v; the Service's external IP is %s", *pip.Name, *pip.Properties.IPAddress, pip.Tags, ip)
	}
	rule := fe + "-TCP-80"
	lbState("svclb", func(v lbView) string {
		if v.lb.SKU == nil || *v.lb.SKU.Name != armnetwork.LoadBalancerSKUNameStandard || *v.lb.Location != "westeurope" {
			return "load balancer is not a Standard one in westeurope"
		}
		f := v.frontends[fe]
		if f == nil || f.PublicIPAddress == nil || !strings.EqualFold(*f.PublicIPAddress.ID, *pip.ID) {
			return "frontend " + fe + " does not use the Service's public IP"
		}
		r, p := v.rules[rule], v.probes[rule]
		if r == nil || p == nil {
			return "rule or probe " + rule + " missing"
		}
		if *r.Protocol != armnetwork.TransportProtocolTCP || *r.FrontendPort != 80 || *r.BackendPort != np || *r.EnableFloatingIP ||
			*r.LoadDistribution != armnetwork.LoadDistributionSourceIP || *r.IdleTimeoutInMinutes != 4 || !*r.EnableTCPReset ||
			last(r.FrontendIPConfiguration.ID) != fe || last(r.BackendAddressPool.ID) != "svclb" || last(r.Probe.ID) != rule {
			return fmt.Sprintf("rule %s: %+v", rule, *r)
		}
		if *p.Protocol != armnetwork.ProbeProtocolTCP || *p.Port != np || *p.IntervalInSeconds != 5 || *p.ProbeThreshold != 2 {
			return fmt.Sprintf("probe %s: %+v", rule, *p)
		}
		pool := v.pools["svclb"]
		if pool == nil || pool.VirtualNetwork == nil || !strings.EqualFold(*pool.VirtualNetwork.ID, vnetID) {
			return "backend pool svclb is not an IP-based pool in the cluster's VNet"
		}
		if b := v.backends("svclb"); !slices.Equal(b, []string{"svclb-w1=10.1.200.5", "svclb-w2=10.1.200.6"}) {
			return fmt.Sprintf("backends %v, want the two workers' VNet addresses (not the control plane)", b)
		}
		return ""
	})
	poll.Until(t, 10*time.Second, func() string { return events(web, "EnsuredLoadBalancer", "") })

	// externalTrafficPolicy Local: one HTTP probe of kube-proxy's health
	// check node port serves every rule.
	if _, err := svcs.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "local"}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal, Selector: map[string]string{"app": "local"},
		Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}, {Name: "https", Protocol: corev1.ProtocolTCP, Port: 443}},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	local, _ := ingress("local")
	lfe := frontendOf(local)
	hc := local.Spec.HealthCheckNodePort
	probe := fmt.Sprintf("%s-TCP-%d", lfe, hc)
	lbState("svclb", func(v lbView) string {
		p := v.probes[probe]
		if p == nil || *p.Protocol != armnetwork.ProbeProtocolHTTP || *p.Port != hc || p.RequestPath == nil || *p.RequestPath != "/healthz" {
			return fmt.Sprintf("probe %s is not an HTTP probe of port %d /healthz", probe, hc)
		}
		for i, port := range []int32{80, 443} {
			r := v.rules[fmt.Sprintf("%s-TCP-%d", lfe, port)]
			if r == nil || last(r.Probe.ID) != probe || *r.BackendPort != local.Spec.Ports[i].NodePort || *r.LoadDistribution != armnetwork.LoadDistributionDefault {
				return fmt.Sprintf("rule for port %d does not forward to its node port with probe %s", port, probe)
			}
			if v.probes[fmt.Sprintf("%s-TCP-%d", lfe, port)] != nil {
				return "a Local Service got a TCP probe of its node port"
			}
		}
		if v.frontends[fe] == nil {
			return "the first Service's frontend went"
		}
		return ""
	})

	// An internal Service: the internal load balancer, a private frontend
	// in the cloud config's subnet, no public IP.
	if _, err := svcs.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "internal", Annotations: map[string]string{cloudprovider.InternalAnnotation: "true"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 8443}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	in, inIP := ingress("internal")
	ife := frontendOf(in)
	lbState("svclb-internal", func(v lbView) string {
		f := v.frontends[ife]
		if f == nil || f.Subnet == nil || !strings.HasSuffix(*f.Subnet.ID, "/subnets/node") || f.PrivateIPAddress == nil || *f.PrivateIPAddress != inIP {
			return fmt.Sprintf("internal frontend %s is not in subnet node with the Service's address %s", ife, inIP)
		}
		if b := v.backends("svclb"); len(b) != 2 {
			return fmt.Sprintf("internal backends %v", b)
		}
		return ""
	})
	if p, err := pips.Get(ctx, "svclb-rg", "svclb-"+ife); err != nil || p != nil {
		t.Errorf("an internal Service got a public IP: %v %v", p, err)
	}
	if err := svcs.Delete(ctx, "internal", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	gone("load balancer svclb-internal", func() (bool, error) { lb, err := lbs.Get(ctx, "svclb-rg", "svclb-internal"); return lb != nil, err })

	// Ports change: the new port's rule and probe come, the old ones go.
	web, err = svcs.Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	web.Spec.Ports = []corev1.ServicePort{{Name: "alt", Protocol: corev1.ProtocolTCP, Port: 8080}}
	if web, err = svcs.Update(ctx, web, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	lbState("svclb", func(v lbView) string {
		r := v.rules[fe+"-TCP-8080"]
		if r == nil || v.probes[fe+"-TCP-8080"] == nil || *r.BackendPort != web.Spec.Ports[0].NodePort {
			return "no rule and probe for port 8080"
		}
		if v.rules[rule] != nil || v.probes[rule] != nil {
			return "the removed port's rule or probe is still there"
		}
		return ""
	})

	// Nodes come and go; an excluded one leaves the pool.
	addNode(t, ctx, cs, "svclb-w3", "10.1.200.7", nil)
	lbState("svclb", func(v lbView) string {
		if b := v.backends("svclb"); !slices.Equal(b, []string{"svclb-w1=10.1.200.5", "svclb-w2=10.1.200.6", "svclb-w3=10.1.200.7"}) {
			return fmt.Sprintf("backends %v after a node joined", b)
		}
		return ""
	})
	if err := cs.CoreV1().Nodes().Delete(ctx, "svclb-w2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	w1, err := cs.CoreV1().Nodes().Get(ctx, "svclb-w1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w1.Labels[cloudprovider.ExcludeLabel] = "true"
	if _, err := cs.CoreV1().Nodes().Update(ctx, w1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	lbState("svclb", func(v lbView) string {
		if b := v.backends("svclb"); !slices.Equal(b, []string{"svclb-w3=10.1.200.7"}) {
			return fmt.Sprintf("backends %v after a node left and another was excluded", b)
		}
		return ""
	})
	poll.Until(t, 10*time.Second, func() string { return events(web, "UpdatedLoadBalancer", "new hosts") })

	// A Service the cloud provider cannot program stays pending with a
	// Warning saying what to change.
	bad, err := svcs.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "no-node-ports"}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeLoadBalancer, AllocateLoadBalancerNodePorts: ptr.To(false),
		Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 80}},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, func() string { return events(bad, "SyncLoadBalancerFailed", "allocateLoadBalancerNodePorts") })
	if s, _ := svcs.Get(ctx, bad.Name, metav1.GetOptions{}); s == nil || len(s.Status.LoadBalancer.Ingress) > 0 {
		t.Errorf("a Service that could not be programmed got an address")
	}
	if err := svcs.Delete(ctx, bad.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	gone("Service no-node-ports", func() (bool, error) { _, err := svcs.Get(ctx, bad.Name, metav1.GetOptions{}); return err == nil, nil })

	// Type changed away from LoadBalancer: its parts and public IP go, its
	// status is cleared, its finalizer comes off.
	local, err = svcs.Get(ctx, "local", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	local.Spec.Type, local.Spec.ExternalTrafficPolicy, local.Spec.HealthCheckNodePort = corev1.ServiceTypeClusterIP, "", 0
	for i := range local.Spec.Ports {
		local.Spec.Ports[i].NodePort = 0
	}
	if _, err := svcs.Update(ctx, local, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	lbState("svclb", func(v lbView) string {
		if v.frontends[lfe] != nil || v.probes[probe] != nil || v.rules[lfe+"-TCP-80"] != nil || v.rules[lfe+"-TCP-443"] != nil {
			return "the former LoadBalancer Service's frontend, rules or probe are still there"
		}
		return ""
	})
	gone("public IP of a ClusterIP Service", pipExists("svclb-"+lfe))
	poll.Until(t, time.Minute, func() string {
		s, err := svcs.Get(ctx, "local", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if len(s.Status.LoadBalancer.Ingress) > 0 || len(s.Finalizers) > 0 {
			return fmt.Sprintf("ClusterIP Service keeps ingress %v finalizers %v", s.Status.LoadBalancer.Ingress, s.Finalizers)
		}
		return events(s, "DeletedLoadBalancer", "")
	})

	// The last Service goes: so do its public IP and the load balancer.
	if err := svcs.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	gone("load balancer svclb", func() (bool, error) { lb, err := lbs.Get(ctx, "svclb-rg", "svclb"); return lb != nil, err })
	gone("public IP of the deleted Service", pipExists("svclb-"+fe))
	gone("Service web", func() (bool, error) { _, err := svcs.Get(ctx, "web", metav1.GetOptions{}); return err == nil, nil })
}

// TestServiceLoadBalancerSaysWhatToChange: a cloud config the simulated
// controller cannot program by (a NIC-based backend pool, cloud-provider-
// azure's default) leaves the Service pending with a Warning naming the
// setting, and nothing in Azure.
func TestServiceLoadBalancerSaysWhatToChange(t *testing.T) {
	ctx := context.Background()
	a := newAzure(t, ctx, "svcnic-rg")
	cs := kubernetes.NewForConfigOrDie(env.Config)
	nicBased := func(c *azurejson.Config) { c.LoadBalancerBackendPoolConfigurationType = "" }
	c := cloudprovider.Start(cloudprovider.Config{Client: cs, Log: logr.Discard(), Images: ccmImages,
		Connect: machines.ARMNetwork(connectARM(&armCfg)), ReadNodeFile: a.cloudConfig(t, "svcnic-cp", nicBased), PrivateIP: privateIP})
	t.Cleanup(c.Stop)
	runCCM(t, ctx, cs, "cloud-controller-manager-svcnic", "svcnic-cp", "--cloud-provider=azure", "--cluster-name=svcnic")
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "svcnic"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svcs := cs.CoreV1().Services("svcnic")
	s, err := svcs.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 80}},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, func() string {
		list, err := cs.CoreV1().Events("svcnic").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err.Error()
		}
		for _, e := range list.Items {
			if e.InvolvedObject.UID == s.UID && e.Type == corev1.EventTypeWarning && e.Reason == "SyncLoadBalancerFailed" &&
				strings.Contains(e.Message, `"loadBalancerBackendPoolConfigurationType": "nodeIP"`) {
				return ""
			}
		}
		return "no Warning naming loadBalancerBackendPoolConfigurationType"
	})
	if cur, _ := svcs.Get(ctx, "web", metav1.GetOptions{}); cur == nil || len(cur.Status.LoadBalancer.Ingress) > 0 {
		t.Error("the Service got an address")
	}
	lbs, err := loadbalancers.New(subscriptID, armCfg)
	if err != nil {
		t.Fatal(err)
	}
	if lb, err := lbs.Get(ctx, "svcnic-rg", "svcnic"); err != nil || lb != nil {
		t.Errorf("a load balancer was made: %v %v", lb, err)
	}
	// Deleted, the Service is not held: nothing was made for it.
	if err := svcs.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, func() string {
		if _, err := svcs.Get(ctx, "web", metav1.GetOptions{}); err == nil {
			return "Service web is held"
		}
		return ""
	})
}

// TestServiceLoadBalancerResumesAfterRestart: the controller keeps no state
// of its own. A Service deleted while no controller runs is held by its
// finalizer; the next controller finds its parts in Azure, removes them and
// lets it go. A controller stopped between creating a public IP and the
// load balancer (its public IP exists, nothing else) finishes the job.
func TestServiceLoadBalancerResumesAfterRestart(t *testing.T) {
	ctx := context.Background()
	a := newAzure(t, ctx, "svcrst-rg")
	cs := kubernetes.NewForConfigOrDie(env.Config)
	start := func() *cloudprovider.Controller {
		return cloudprovider.Start(cloudprovider.Config{Client: cs, Log: logr.Discard(), Images: ccmImages,
			Connect: machines.ARMNetwork(connectARM(&armCfg)), ReadNodeFile: a.cloudConfig(t, "svcrst-cp", nil), PrivateIP: privateIP})
	}
	addNode(t, ctx, cs, "svcrst-w1", "10.1.202.5", nil)
	runCCM(t, ctx, cs, "cloud-controller-manager-svcrst", "svcrst-cp", "--cloud-provider=azure", "--cluster-name=svcrst")
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "svcrst"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svcs := cs.CoreV1().Services("svcrst")
	lbs, err := loadbalancers.New(subscriptID, armCfg)
	if err != nil {
		t.Fatal(err)
	}
	pips, err := publicips.New(subscriptID, armCfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := svcs.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Finalizers: []string{"service.kubernetes.io/load-balancer-cleanup"}}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 80}},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// As if a controller had stopped right after creating the public IP.
	fe := frontendOf(s)
	a.publicIP(t, ctx, "svcrst-"+fe)
	c := start()
	poll.Until(t, time.Minute, func() string {
		cur, err := svcs.Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		lb, err := lbs.Get(ctx, "svcrst-rg", "svcrst")
		if err != nil || lb == nil || len(lb.Properties.LoadBalancingRules) != 1 || len(cur.Status.LoadBalancer.Ingress) == 0 {
			return fmt.Sprintf("load balancer not made (%v) or Service pending%s", err, warnings(ctx, cs, cur))
		}
		pip, err := pips.Get(ctx, "svcrst-rg", "svcrst-"+fe)
		if err != nil || pip == nil || *pip.Properties.IPAddress != cur.Status.LoadBalancer.Ingress[0].IP {
			return "the Service's address is not its public IP's"
		}
		return ""
	})
	c.Stop()

	// Deleted and a node joined while no controller runs.
	if err := svcs.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	addNode(t, ctx, cs, "svcrst-w2", "10.1.202.6", nil)
	if cur, err := svcs.Get(ctx, "web", metav1.GetOptions{}); err != nil || cur.DeletionTimestamp == nil {
		t.Fatalf("the Service is not held by its finalizer: %v", err)
	}
	c = start()
	t.Cleanup(c.Stop)
	poll.Until(t, time.Minute, func() string {
		if _, err := svcs.Get(ctx, "web", metav1.GetOptions{}); err == nil {
			return "Service web still held"
		}
		if lb, err := lbs.Get(ctx, "svcrst-rg", "svcrst"); err != nil || lb != nil {
			return "load balancer svcrst still there"
		}
		if pip, err := pips.Get(ctx, "svcrst-rg", "svcrst-"+fe); err != nil || pip != nil {
			return "public IP still there"
		}
		return ""
	})
}

// TestServiceLoadBalancerReportsAzure: what Azure refuses reaches the
// Service as a Warning with Azure's code and message, the Service stays
// pending, and it goes cleanly when deleted.
func TestServiceLoadBalancerReportsAzure(t *testing.T) {
	ctx := context.Background()
	a := newAzure(t, ctx, "svcbad-rg")
	cs := kubernetes.NewForConfigOrDie(env.Config)
	noVNet := func(c *azurejson.Config) { c.VnetName = "no-such-vnet" }
	c := cloudprovider.Start(cloudprovider.Config{Client: cs, Log: logr.Discard(), Images: ccmImages,
		Connect: machines.ARMNetwork(connectARM(&armCfg)), ReadNodeFile: a.cloudConfig(t, "svcbad-cp", noVNet), PrivateIP: privateIP})
	t.Cleanup(c.Stop)
	addNode(t, ctx, cs, "svcbad-w1", "10.1.203.5", nil)
	runCCM(t, ctx, cs, "cloud-controller-manager-svcbad", "svcbad-cp", "--cloud-provider=azure", "--cluster-name=svcbad")
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "svcbad"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svcs := cs.CoreV1().Services("svcbad")
	s, err := svcs.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 80}},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, func() string {
		w := warnings(ctx, cs, s)
		if !strings.Contains(w, "SyncLoadBalancerFailed: Error syncing load balancer: putting load balancer svcbad: Azure answered") || !strings.Contains(w, "no-such-vnet") {
			return "no Warning with Azure's answer naming the missing virtual network" + w
		}
		return ""
	})
	t.Logf("the Service's events say%s", warnings(ctx, cs, s))
	if cur, _ := svcs.Get(ctx, "web", metav1.GetOptions{}); cur == nil || len(cur.Status.LoadBalancer.Ingress) > 0 {
		t.Error("the Service got an address")
	}
	if err := svcs.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	pips, err := publicips.New(subscriptID, armCfg)
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, func() string {
		if _, err := svcs.Get(ctx, "web", metav1.GetOptions{}); err == nil {
			return "Service web is held"
		}
		if p, err := pips.Get(ctx, "svcbad-rg", "svcbad-"+frontendOf(s)); err != nil || p != nil {
			return "its public IP is left"
		}
		return ""
	})
}
