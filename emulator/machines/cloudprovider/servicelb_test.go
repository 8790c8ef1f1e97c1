package cloudprovider

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// TestNames: cloud-provider-azure's names for a Service's resources.
func TestNames(t *testing.T) {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{UID: types.UID("0c6f2a8e-1b7d-4f3a-9e5c-2d4b6a8f0e1c")}}
	if got, want := frontendName(s), "a0c6f2a8e1b7d4f3a9e5c2d4b6a8f0e1"; got != want {
		t.Errorf("frontend %q, want %q (a + UID without dashes, 32 characters)", got, want)
	}
	if got, want := publicIPName("mixed", s), "mixed-a0c6f2a8e1b7d4f3a9e5c2d4b6a8f0e1"; got != want {
		t.Errorf("public IP %q, want %q", got, want)
	}
	if got := publicIPName(strings.Repeat("c", 70), s); len(got) != 75 {
		t.Errorf("public IP name of a long cluster name has %d characters, want 75", len(got))
	}
	if got, want := ruleName(s, corev1.ProtocolUDP, 53), "a0c6f2a8e1b7d4f3a9e5c2d4b6a8f0e1-UDP-53"; got != want {
		t.Errorf("rule %q, want %q", got, want)
	}
}

// TestSettings: the flags and cloud config the controller acts by, and
// what it refuses with what to change.
func TestSettings(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{NodeName: "cp-0"}}
	cfg := `{"subscriptionId":"s","resourceGroup":"rg","location":"westeurope","vnetName":"v","loadBalancerSku":"Standard","loadBalancerBackendPoolConfigurationType":"nodeIP"}`
	read := func(files map[string]string) func(node, path string) ([]byte, error) {
		return func(node, path string) ([]byte, error) {
			if v, ok := files[node+":"+path]; ok {
				return []byte(v), nil
			}
			return nil, errors.New("no such file or directory")
		}
	}
	st, err := settings(pod, corev1.Container{}, read(map[string]string{"cp-0:/etc/kubernetes/azure.json": cfg}))
	if err != nil || st.ClusterName != "kubernetes" || st.problem() != "" || !st.runsServiceController() {
		t.Fatalf("defaults: %+v %v %q", st, err, st.problem())
	}
	if r := st.lbRef(true); r.Name != "kubernetes-internal" || r.ResourceGroup != "rg" || r.SubscriptionID != "s" {
		t.Errorf("internal load balancer %+v", r)
	}
	c := corev1.Container{Command: []string{"cloud-controller-manager", "--cluster-name", "mixed"}, Args: []string{"--cloud-config=/etc/cfg.json", "--controllers=*,-service"}}
	st, err = settings(pod, c, read(map[string]string{"cp-0:/etc/cfg.json": strings.Replace(cfg, `"nodeIP"`, `""`, 1)}))
	if err != nil || st.ClusterName != "mixed" || st.lbRef(false).Name != "mixed" || st.runsServiceController() {
		t.Fatalf("flags: %+v %v", st, err)
	}
	if p := st.problem(); !strings.Contains(p, `"loadBalancerBackendPoolConfigurationType": "nodeIP"`) {
		t.Errorf("a NIC-based pool config is not refused with what to change: %q", p)
	}
	if _, err := settings(pod, c, read(nil)); err == nil || !strings.Contains(err.Error(), "/etc/cfg.json") {
		t.Errorf("a missing cloud config: %v", err)
	}
}

// TestBackendsLeaveNodesOut: the nodes the service controller and
// cloud-provider-azure keep out of the backend pool.
func TestBackendsLeaveNodesOut(t *testing.T) {
	node := func(name string, labels map[string]string, taints ...corev1.Taint) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: corev1.NodeSpec{Taints: taints},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.1.0." + name}}}}
	}
	c := &Controller{}
	in := map[string]bool{}
	for _, n := range []*corev1.Node{
		node("4", nil),
		node("5", map[string]string{ExcludeLabel: "false"}),
		node("6", map[string]string{ExcludeLabel: ""}),
		node("7", map[string]string{"node-role.kubernetes.io/control-plane": ""}),
		node("8", map[string]string{ManagedLabel: "false"}),
		node("9", map[string]string{ResourceGroupLabel: "other-rg"}),
		node("10", nil, corev1.Taint{Key: ToBeDeletedTaint, Effect: corev1.TaintEffectNoSchedule}),
		node("11", map[string]string{ResourceGroupLabel: "RG"}),
	} {
		ok := included(n) && !isControlPlane(n)
		in[n.Name] = ok
	}
	if !in["4"] || !in["5"] || in["6"] || in["7"] {
		t.Errorf("label rules: %v", in)
	}
	st := Settings{ClusterName: "k", Config: AzureConfig{ResourceGroup: "rg"}}
	var names []string
	c.nodes = newIndexer(t, node("4", nil), node("8", map[string]string{ManagedLabel: "false"}), node("9", map[string]string{ResourceGroupLabel: "other-rg"}),
		node("10", nil, corev1.Taint{Key: ToBeDeletedTaint, Effect: corev1.TaintEffectNoSchedule}), node("11", map[string]string{ResourceGroupLabel: "RG"}),
		node("6", map[string]string{ExcludeLabel: ""}))
	for _, a := range c.backends(st) {
		names = append(names, a.Name)
	}
	if strings.Join(names, ",") != "11,4" {
		t.Errorf("backends %v, want nodes 11 and 4 (by address)", names)
	}
}

func newIndexer(t *testing.T, nodes ...*corev1.Node) cache.Indexer {
	i := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, n := range nodes {
		if err := i.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	return i
}

// TestUnsupportedServices: what the simulation refuses says what to change.
func TestUnsupportedServices(t *testing.T) {
	st := Settings{ClusterName: "k"}
	for want, s := range map[string]*corev1.Service{
		"spec.loadBalancerIP":           {Spec: corev1.ServiceSpec{LoadBalancerIP: "20.1.2.3"}},
		"azure-pip-name":                {ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"service.beta.kubernetes.io/azure-pip-name": "mine"}}},
		"IPv6":                          {Spec: corev1.ServiceSpec{IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}}},
		"SCTP":                          {Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolSCTP, Port: 9, NodePort: 30009}}}},
		"allocateLoadBalancerNodePorts": {Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 80}}}},
	} {
		_, err := build(s, st, Frontend{Name: "a1"})
		var se *specError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v", want, err)
		}
	}
	// UDP rules go without a probe; TCP ones get their node port's.
	w, err := build(&corev1.Service{Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolUDP, Port: 53, NodePort: 30053}, {Protocol: corev1.ProtocolTCP, Port: 53, NodePort: 30054}}}}, st, Frontend{Name: "a1"})
	if err != nil || len(w.rules) != 2 || w.rules[0].Probe != "" || w.rules[0].Protocol != "Udp" || w.rules[0].TCPReset || len(w.probes) != 1 || w.probes[0].Port != 30054 || w.rules[1].Probe != w.probes[0].Name {
		t.Errorf("UDP and TCP on port 53: %+v %v", w, err)
	}
}
