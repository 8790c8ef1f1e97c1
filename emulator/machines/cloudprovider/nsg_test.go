package cloudprovider

import (
	"crypto/md5" //nolint:gosec // the rule name's hash
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func svcWith(name string, ports []corev1.ServicePort, mutate func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: map[string]string{}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: ports}}
	if mutate != nil {
		mutate(s)
	}
	return s
}

func tcpPort(port, nodePort int32) corev1.ServicePort {
	return corev1.ServicePort{Protocol: corev1.ProtocolTCP, Port: port, NodePort: nodePort}
}

var nodes = []netip.Addr{netip.MustParseAddr("10.1.0.5"), netip.MustParseAddr("10.1.0.6")}

// change is a Service's reconciliation with the two nodes as its
// destinations and managed addresses.
func change(s *corev1.Service, want bool, retain map[string][]int32) nsgChange {
	return nsgChange{svc: s, want: want, dsts: nodes, retain: retain, managed: nodes}
}

func name(proto string, srcs []string, ports ...int32) string {
	return allowRuleName(proto, "IPv4", srcs, ports)
}

// TestAllowRuleName: k8s-azure-lb_allow_IPv4_ and the MD5 of protocol,
// sorted sources and sorted ports, as cloud-provider-azure v1.36.5 names
// them (securitygroup.GenerateAllowSecurityRuleName).
func TestAllowRuleName(t *testing.T) {
	want := fmt.Sprintf("k8s-azure-lb_allow_IPv4_%x", md5.Sum([]byte("Tcp_10.0.0.0/8,192.0.2.0/24_30443,8080"))) //nolint:gosec
	if got := allowRuleName("Tcp", "IPv4", []string{"192.0.2.0/24", "10.0.0.0/8"}, []int32{8080, 30443}); got != want {
		t.Errorf("name %s, want %s", got, want)
	}
}

func TestNSGRulesForServices(t *testing.T) {
	ssh := SecurityRule{Name: "allow_ssh", Priority: 500, Protocol: "Tcp", Access: "Allow", Direction: "Inbound",
		SourcePrefix: "*", SourcePortRange: "*", DestinationPrefix: "*", DestinationPortRange: "22"}
	// Someone else's rule in the managed range but without the prefix, and
	// one with the prefix outside the range: neither is the provider's.
	foreign := SecurityRule{Name: "custom", Priority: 501, Protocol: "Tcp", Access: "Deny", Direction: "Inbound",
		SourcePrefix: "*", DestinationPrefixes: []string{"10.1.0.5", "10.1.0.6"}, DestinationPortRange: "30080"}
	outside := SecurityRule{Name: "k8s-azure-lb_mine", Priority: 300, Protocol: "Tcp", Access: "Allow", Direction: "Inbound",
		SourcePrefix: "*", DestinationPrefix: "10.9.9.9", DestinationPortRanges: []string{"30080"}}
	dsts := []string{"10.1.0.5", "10.1.0.6"}
	web := svcWith("web", []corev1.ServicePort{tcpPort(80, 30080), tcpPort(443, 30443), {Protocol: corev1.ProtocolUDP, Port: 53, NodePort: 30053}}, nil)

	cases := []struct {
		name   string
		rules  []SecurityRule
		change nsgChange
		want   []SecurityRule
		err    bool
	}{{
		name:   "a public Service: from the Internet to the nodes' node ports, per protocol, first free priorities from 500",
		rules:  []SecurityRule{ssh, foreign, outside},
		change: change(web, true, nil),
		want: []SecurityRule{outside, ssh, foreign,
			{Name: name("Tcp", []string{"Internet"}, 30080, 30443), Priority: 502, Protocol: "Tcp", Access: "Allow", Direction: "Inbound", SourcePrefix: "Internet", SourcePortRange: "*", DestinationPrefixes: dsts, DestinationPortRanges: []string{"30080", "30443"}},
			{Name: name("Udp", []string{"Internet"}, 30053), Priority: 503, Protocol: "Udp", Access: "Allow", Direction: "Inbound", SourcePrefix: "Internet", SourcePortRange: "*", DestinationPrefixes: dsts, DestinationPortRanges: []string{"30053"}},
		},
	}, {
		name: "loadBalancerSourceRanges replace the Internet",
		change: change(svcWith("r", []corev1.ServicePort{tcpPort(80, 30080)}, func(s *corev1.Service) {
			s.Spec.LoadBalancerSourceRanges = []string{"198.51.100.0/24", "192.0.2.0/24", "192.0.2.128/25"}
		}), true, nil),
		want: []SecurityRule{{Name: name("Tcp", []string{"192.0.2.0/24", "198.51.100.0/24"}, 30080), Priority: 500, Protocol: "Tcp", Access: "Allow", Direction: "Inbound",
			SourcePrefixes: []string{"198.51.100.0/24", "192.0.2.0/24"}, SourcePortRange: "*", DestinationPrefixes: dsts, DestinationPortRanges: []string{"30080"}}},
	}, {
		name: "a source range of 0.0.0.0/0 is the Internet's rule under that range",
		change: change(svcWith("r", []corev1.ServicePort{tcpPort(80, 30080)}, func(s *corev1.Service) {
			s.Spec.LoadBalancerSourceRanges = []string{"0.0.0.0/0"}
		}), true, nil),
		want: []SecurityRule{{Name: name("Tcp", []string{"0.0.0.0/0"}, 30080), Priority: 500, Protocol: "Tcp", Access: "Allow", Direction: "Inbound",
			SourcePrefix: "0.0.0.0/0", SourcePortRange: "*", DestinationPrefixes: dsts, DestinationPortRanges: []string{"30080"}}},
	}, {
		name: "allowed service tags replace the Internet",
		change: change(svcWith("t", []corev1.ServicePort{tcpPort(80, 30080)}, func(s *corev1.Service) {
			s.Annotations[annoAllowedTags] = "AzureFrontDoor.Backend, AzureCloud"
		}), true, nil),
		want: []SecurityRule{
			{Name: name("Tcp", []string{"AzureFrontDoor.Backend"}, 30080), Priority: 500, Protocol: "Tcp", Access: "Allow", Direction: "Inbound", SourcePrefix: "AzureFrontDoor.Backend", SourcePortRange: "*", DestinationPrefixes: dsts, DestinationPortRanges: []string{"30080"}},
			{Name: name("Tcp", []string{"AzureCloud"}, 30080), Priority: 501, Protocol: "Tcp", Access: "Allow", Direction: "Inbound", SourcePrefix: "AzureCloud", SourcePortRange: "*", DestinationPrefixes: dsts, DestinationPortRanges: []string{"30080"}},
		},
	}, {
		name: "an internal Service gets no rule: the VNet reaches it through AllowVnetInBound",
		change: change(svcWith("i", []corev1.ServicePort{tcpPort(80, 30080)}, func(s *corev1.Service) {
			s.Annotations[InternalAnnotation] = "true"
		}), true, nil),
	}, {
		name: "deny all except the source ranges: a deny rule from the end",
		change: change(svcWith("d", []corev1.ServicePort{tcpPort(80, 30080)}, func(s *corev1.Service) {
			s.Spec.LoadBalancerSourceRanges = []string{"192.0.2.0/24"}
			s.Annotations[annoDenyAll] = "true"
		}), true, nil),
		want: []SecurityRule{
			{Name: name("Tcp", []string{"192.0.2.0/24"}, 30080), Priority: 500, Protocol: "Tcp", Access: "Allow", Direction: "Inbound", SourcePrefix: "192.0.2.0/24", SourcePortRange: "*", DestinationPrefixes: dsts, DestinationPortRanges: []string{"30080"}},
			{Name: "k8s-azure-lb_deny-all_IPv4", Priority: 4095, Protocol: "*", Access: "Deny", Direction: "Inbound", SourcePrefix: "*", SourcePortRange: "*", DestinationPrefixes: dsts, DestinationPortRange: "*"},
		},
	}, {
		name: "azure-disable-load-balancer-nsg-rule writes nothing",
		change: change(svcWith("n", []corev1.ServicePort{tcpPort(80, 30080)}, func(s *corev1.Service) {
			s.Annotations[annoNoNSGRule] = "true"
		}), true, nil),
	}, {
		name: "source ranges and the allowed-ip-ranges annotation together are refused",
		change: change(svcWith("b", []corev1.ServicePort{tcpPort(80, 30080)}, func(s *corev1.Service) {
			s.Spec.LoadBalancerSourceRanges = []string{"192.0.2.0/24"}
			s.Annotations[annoAllowedIPs] = "198.51.100.0/24"
		}), true, nil),
		err: true,
	}, {
		// The emptied rule's priority stays taken until the NSG is written,
		// as in cloud-provider-azure's RuleHelper.
		name: "a port that changed: the old port's rule goes, the new one comes at the next free priority",
		rules: []SecurityRule{ssh, {Name: name("Tcp", []string{"Internet"}, 30080), Priority: 501, Protocol: "Tcp", Access: "Allow", Direction: "Inbound",
			SourcePrefix: "Internet", SourcePortRange: "*", DestinationPrefixes: dsts, DestinationPortRanges: []string{"30080"}}},
		change: change(svcWith("web", []corev1.ServicePort{tcpPort(8080, 30081)}, nil), true, nil),
		want: []SecurityRule{ssh, {Name: name("Tcp", []string{"Internet"}, 30081), Priority: 502, Protocol: "Tcp", Access: "Allow", Direction: "Inbound",
			SourcePrefix: "Internet", SourcePortRange: "*", DestinationPrefixes: dsts, DestinationPortRanges: []string{"30081"}}},
	}, {
		name: "a deleted Service: its rules go, another Service's stay",
		rules: []SecurityRule{ssh,
			{Name: name("Tcp", []string{"Internet"}, 30080), Priority: 501, Protocol: "Tcp", Access: "Allow", Direction: "Inbound", SourcePrefix: "Internet", SourcePortRange: "*", DestinationPrefixes: dsts, DestinationPortRanges: []string{"30080"}},
			{Name: name("Tcp", []string{"Internet"}, 30443), Priority: 502, Protocol: "Tcp", Access: "Allow", Direction: "Inbound", SourcePrefix: "Internet", SourcePortRange: "*", DestinationPrefixes: dsts, DestinationPortRanges: []string{"30443"}},
		},
		change: change(svcWith("web", []corev1.ServicePort{tcpPort(80, 30080)}, nil), false, map[string][]int32{"Tcp": {30443}}),
		want: []SecurityRule{ssh,
			{Name: name("Tcp", []string{"Internet"}, 30443), Priority: 502, Protocol: "Tcp", Access: "Allow", Direction: "Inbound", SourcePrefix: "Internet", SourcePortRange: "*", DestinationPrefixes: dsts, DestinationPortRanges: []string{"30443"}},
		},
	}, {
		name: "a node that is gone leaves the rules' destinations",
		rules: []SecurityRule{{Name: name("Tcp", []string{"Internet"}, 30443), Priority: 500, Protocol: "Tcp", Access: "Allow", Direction: "Inbound",
			SourcePrefix: "Internet", SourcePortRange: "*", DestinationPrefixes: []string{"10.1.0.5", "10.1.0.6", "10.1.0.99"}, DestinationPortRanges: []string{"30443"}}},
		change: nsgChange{svc: svcWith("other", []corev1.ServicePort{tcpPort(80, 30080)}, nil), want: false, managed: nodes, retain: map[string][]int32{"Tcp": {30443}}},
		want: []SecurityRule{{Name: name("Tcp", []string{"Internet"}, 30443), Priority: 500, Protocol: "Tcp", Access: "Allow", Direction: "Inbound",
			SourcePrefix: "Internet", SourcePortRange: "*", DestinationPrefixes: dsts, DestinationPortRanges: []string{"30443"}}},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sg := &SecurityGroup{Rules: c.rules}
			got, changed, err := reconcileRules(sg, c.change)
			if c.err {
				var se *specError
				if !errors.As(err, &se) {
					t.Fatalf("error %v, want the Service's configuration refused", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(norm(got), norm(c.want)) {
				t.Errorf("rules:\n%s\nwant:\n%s", dump(got), dump(c.want))
			}
			if changed != (snapshot(c.rules) != snapshot(c.want)) {
				t.Errorf("changed %v", changed)
			}
			// Running it again changes nothing.
			if _, again, err := reconcileRules(&SecurityGroup{Rules: got}, c.change); err != nil || again {
				t.Errorf("a second reconciliation changed the rules (%v, %v)", again, err)
			}
		})
	}
}

func norm(rs []SecurityRule) []SecurityRule {
	if len(rs) == 0 {
		return nil
	}
	return rs
}

func dump(rs []SecurityRule) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "  %+v\n", r)
	}
	return b.String()
}
